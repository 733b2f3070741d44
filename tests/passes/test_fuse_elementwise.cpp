// fuse_elementwise: regions of elementwise float ops -> one FusedElementwise; op counts, names,
// programs, near-misses, and outputs equal to the unfused graph on random inputs.
#include <algorithm>
#include <random>

#include "ir/half.h"
#include "passes/fuse_elementwise.h"
#include "passes/pipeline.h"
#include "passes/verify.h"
#include "pass_test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

using Result = PipelineOutcome;

Result fuse(std::unique_ptr<Graph> g, bool portable = false) {
  return run_through_pipeline(std::move(g), "fuse_elementwise", portable);
}

void expect_equivalent(const Result& r, uint64_t seed = 7) {
  fusec::test::expect_same_numbers(*r.original, *r.optimized, seed);
}

void expect_unchanged(const Result& r) { fusec::test::expect_unchanged(*r.original, *r.optimized); }

/// The near-miss whose text mentions `needle` (in what or reason), or nullptr.
const NearMiss* near_miss(const Result& r, const std::string& needle) {
  return find_near_miss(r.opt.near_misses, "fuse_elementwise", needle);
}

}  // namespace

// (x[N,C] + b[C]) * s -> Relu: the bias (a [C] constant) stays an input and broadcasts; the scalar
// s becomes a literal. The fused node takes the last node's name and output.
TEST(FuseElementwise, ChainWithBroadcastBias) {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {Dim::sym("N"), 16});
  Value* bias = b.initializer("b", Tensor::from_float(std::vector<float>(16, 0.25f), {16}));
  Value* s = b.initializer("s", floats({0.5f}, {}));
  Value* a = b.node("Add", {x, bias}, {}, "add");
  Value* m = b.node("Mul", {a, s}, {}, "mul");
  Value* y = b.node("Relu", {m}, {}, "relu");
  b.output(y);
  auto g = b.build();
  g->inputs[0]->type.shape = Shape{8, 16};
  Result r = fuse(std::move(g));

  EXPECT_EQ(count_any_domain(*r.optimized, "FusedElementwise"), 1);
  EXPECT_EQ(r.optimized->nodes().size(), 1u);
  const Node* f = find_op(*r.optimized, "FusedElementwise");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->domain, "ai.fusec");
  EXPECT_EQ(f->name, "relu");
  EXPECT_EQ(f->outputs[0]->name, y->name);
  EXPECT_EQ(f->fused_from, (std::vector<std::string>{"add", "mul", "relu"}));
  ASSERT_EQ(f->inputs.size(), 2u);
  EXPECT_EQ(f->inputs[0]->name, "x");
  EXPECT_EQ(f->inputs[1]->name, "b");
  EXPECT_EQ(f->attr_string("program", ""), "r0 = add i0 i1; r1 = mul r0 0.5; r2 = relu r1");
  EXPECT_EQ(r.optimized->find_value("s"), nullptr);  // the literal's initializer is gone
  EXPECT_EQ(r.optimized->opsets.count("ai.fusec"), 1u);
  ASSERT_EQ(r.opt.rewrites.size(), 1u);
  EXPECT_EQ(r.opt.rewrites[0].result, "relu");
  EXPECT_EQ(r.opt.rewrites[0].replaced, (std::vector<std::string>{"add", "mul", "relu"}));
  expect_equivalent(r);
}

// A non-constant broadcast operand (b is a graph input) and a symbolic batch dim.
TEST(FuseElementwise, ChainWithBroadcastInputAndSymbolicBatch) {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {Dim::sym("N"), 4, 6});
  Value* c = b.input("c", DType::Float32, {4, 1});
  Value* y = b.node("Sub", {x, c}, {}, "sub");
  y = b.node("Exp", {y}, {}, "exp");
  y = b.node("Div", {y, c}, {}, "div");
  b.output(y);
  Result r = fuse(b.build());
  EXPECT_EQ(count_any_domain(*r.optimized, "FusedElementwise"), 1);
  EXPECT_EQ(r.optimized->nodes().size(), 1u);
  const Node* f = find_op(*r.optimized, "FusedElementwise");
  EXPECT_EQ(f->attr_string("program", ""), "r0 = sub i0 i1; r1 = exp r0; r2 = div r1 i1");
  ASSERT_TRUE(r.optimized->outputs[0]->type.shape);
  EXPECT_EQ(shape_str(*r.optimized->outputs[0]->type.shape), "Nx4x6");
  r.original->inputs[0]->type.shape = Shape{3, 4, 6};
  r.optimized->inputs[0]->type.shape = Shape{3, 4, 6};
  infer_shapes(*r.original);
  infer_shapes(*r.optimized);
  expect_equivalent(r);
}

// A diamond: a = x + y feeds both Exp and Neg, which meet again in Mul. The shared producer joins
// once both its readers are in; x is read twice by the region but is one input.
TEST(FuseElementwise, Diamond) {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {5, 7});
  Value* y = b.input("y", DType::Float32, {5, 7});
  Value* a = b.node("Add", {x, y}, {}, "a");
  Value* e = b.node("Exp", {a}, {}, "e");
  Value* n = b.node("Neg", {a}, {}, "n");
  Value* m = b.node("Mul", {e, n}, {}, "m");
  Value* z = b.node("Mul", {m, x}, {}, "z");
  b.output(z);
  Result r = fuse(b.build());
  EXPECT_EQ(r.optimized->nodes().size(), 1u);
  const Node* f = find_op(*r.optimized, "FusedElementwise");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->name, "z");
  EXPECT_EQ(f->inputs.size(), 2u);
  EXPECT_EQ(f->fused_from.size(), 5u);
  EXPECT_EQ(f->fused_from.front(), "a");
  EXPECT_EQ(f->fused_from.back(), "z");
  expect_equivalent(r);
}

// x * sigmoid(x) (SiLU): the region's input feeds two of its nodes.
TEST(FuseElementwise, SiluReadsItsInputTwice) {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {2, 9});
  Value* s = b.node("Sigmoid", {x}, {}, "sig");
  b.output(b.node("Mul", {x, s}, {}, "silu"));
  Result r = fuse(b.build());
  const Node* f = find_op(*r.optimized, "FusedElementwise");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->attr_string("program", ""), "r0 = sigmoid i0; r1 = mul i0 r0");
  expect_equivalent(r);
}

// An intermediate that is also a graph output splits the region: a stays, the rest fuses, and a
// near-miss says why.
TEST(FuseElementwise, IntermediateGraphOutputSplitsTheRegion) {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {4, 4});
  Value* y = b.input("y", DType::Float32, {4, 4});
  Value* a = b.node("Add", {x, y}, {}, "a");
  Value* t = b.node("Tanh", {a}, {}, "t");
  Value* z = b.node("Mul", {t, y}, {}, "z");
  b.output(z);
  b.output(a);
  Result r = fuse(b.build());
  EXPECT_EQ(count_any_domain(*r.optimized, "FusedElementwise"), 1);
  EXPECT_EQ(count_any_domain(*r.optimized, "Add"), 1);
  const Node* f = find_op(*r.optimized, "FusedElementwise");
  EXPECT_EQ(f->fused_from, (std::vector<std::string>{"t", "z"}));
  EXPECT_EQ(f->inputs[0]->name, a->name);
  const NearMiss* m = near_miss(r, "Add 'a'");
  ASSERT_TRUE(m);
  EXPECT_NE(m->reason.find("graph output"), std::string::npos) << m->reason;
  expect_equivalent(r);
}

// An intermediate read by a node outside the region (a Flatten) splits it the same way.
TEST(FuseElementwise, IntermediateWithOutsideReaderSplitsTheRegion) {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {3, 4});
  Value* a = b.node("Mul", {x, x}, {}, "sq");
  Value* s = b.node("Sqrt", {a}, {}, "root");
  Value* z = b.node("Add", {s, x}, {}, "z");
  b.output(z);
  b.output(b.node("Flatten", {a}, {}, "flat"));
  Result r = fuse(b.build());
  EXPECT_EQ(count_any_domain(*r.optimized, "FusedElementwise"), 1);
  EXPECT_EQ(count_any_domain(*r.optimized, "Mul"), 1);
  const NearMiss* m = near_miss(r, "Mul 'sq'");
  ASSERT_TRUE(m);
  EXPECT_NE(m->reason.find("Flatten 'flat'"), std::string::npos) << m->reason;
  expect_equivalent(r);
}

// Non-float data: nothing fuses, and the near-miss names the type.
TEST(FuseElementwise, IntegerChainIsANearMiss) {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Int32, {6});
  Value* y = b.node("Add", {x, x}, {}, "iadd");
  b.output(b.node("Mul", {y, x}, {}, "imul"));
  Result r = fuse(b.build());
  expect_unchanged(r);
  const NearMiss* m = near_miss(r, "Add 'iadd'");
  ASSERT_TRUE(m);
  EXPECT_NE(m->reason.find("int32"), std::string::npos) << m->reason;
}

TEST(FuseElementwise, Float64IsANearMiss) {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float64, {6});
  b.output(b.node("Exp", {b.node("Neg", {x}, {}, "n")}, {}, "e"));
  Result r = fuse(b.build());
  expect_unchanged(r);
  ASSERT_TRUE(near_miss(r, "float64"));
}

// --portable writes no ai.fusec op: one near-miss per region, graph unchanged.
TEST(FuseElementwise, PortableLeavesRegionsWithANearMiss) {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {4});
  Value* y = b.node("Relu", {b.node("Neg", {x}, {}, "n")}, {}, "r");
  b.output(y);
  Result r = fuse(b.build(), /*portable=*/true);
  expect_unchanged(r);
  const NearMiss* m = near_miss(r, "--portable");
  ASSERT_TRUE(m);
  EXPECT_NE(m->what.find("2 elementwise ops ending at Relu 'r'"), std::string::npos) << m->what;
}

// A lone elementwise op is already one kernel; a region stops at ops outside the set and at a
// change of shape (b's Exp is [C], the region is [N,C]); all-constant nodes are left to folding.
TEST(FuseElementwise, LeavesSingleOpsAndStopsAtOtherOpsAndShapes) {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {3, 5});
  Value* c = b.input("c", DType::Float32, {5});
  Value* k = b.initializer("k", Tensor::from_float({1, 2, 3, 4, 5}, {5}));
  Value* kk = b.node("Mul", {k, k}, {}, "const_mul");  // constant: folding's job
  Value* e = b.node("Exp", {c}, {}, "exp_c");          // shape [5]
  Value* a = b.node("Add", {x, e}, {}, "add");
  Value* f = b.node("Flatten", {a}, {}, "flat");  // not elementwise
  Value* r = b.node("Relu", {f}, {}, "relu");     // alone after Flatten
  Value* z = b.node("Mul", {a, kk}, {}, "scale");
  b.output(r);
  b.output(z);
  Result res = fuse(b.build());
  expect_unchanged(res);
  EXPECT_TRUE(res.opt.rewrites.empty());
}

// A scalar constant that gives the output its rank (x[3] * c[1,1] is [1,3]) stays an input.
TEST(FuseElementwise, RankGivingScalarStaysAnInput) {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {3});
  Value* c = b.initializer("c", floats({2.0f}, {1, 1}));
  Value* m = b.node("Mul", {x, c}, {}, "m");
  b.output(b.node("Sigmoid", {m}, {}, "s"));
  Result r = fuse(b.build());
  const Node* f = find_op(*r.optimized, "FusedElementwise");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->inputs.size(), 2u);
  EXPECT_EQ(f->attr_string("program", ""), "r0 = mul i0 i1; r1 = sigmoid r0");
  ASSERT_TRUE(r.optimized->outputs[0]->type.shape);
  EXPECT_EQ(shape_str(*r.optimized->outputs[0]->type.shape), "1x3");
  expect_equivalent(r);
}

// Every op of the set in one region (with attributes, Clip bounds, variadic ops, a mixed-type
// Pow exponent and Gelu at opset 20): one node, same numbers as the unfused graph.
TEST(FuseElementwise, EveryOpInOneRegionMatchesNumerically) {
  GraphBuilder b(20);
  Value* x = b.input("x", DType::Float32, {6, 33});
  Value* y = b.input("y", DType::Float32, {33});
  auto one = [&](const std::string& name, float v) { return b.initializer(name, floats({v}, {})); };
  Value* v = b.node("Add", {x, y});
  v = b.node("Sub", {v, one("c1", 0.1f)});
  v = b.node("Mul", {v, one("c2", 1.5f)});
  Value* pos = b.node("Add", {b.node("Abs", {v}), one("c3", 1.0f)});  // >= 1
  v = b.node("Div", {v, pos});
  v = b.node("Add", {v, b.node("Log", {pos})});
  v = b.node("Add", {v, b.node("Sqrt", {pos})});
  v = b.node("Mul", {v, b.node("Reciprocal", {pos})});
  v = b.node("Max", {v, b.node("Neg", {x}), one("c4", -2.0f)});
  v = b.node("Min", {v, one("c5", 2.5f)});
  v = b.node("Sum", {v, b.node("Exp", {b.node("Tanh", {v})}), b.node("Erf", {v})});
  v = b.node("Mean", {v, b.node("Sigmoid", {v})});
  v = b.node("Add", {b.node("Relu", {v}), b.node("Softplus", {v})});
  v = b.node("LeakyRelu", {v}, {attr("alpha", 0.2f)});
  v = b.node("Add", {v, b.node("HardSigmoid", {v}, {attr("alpha", 0.3f), attr("beta", 0.4f)})});
  v = b.node("Add", {v, b.node("HardSwish", {v})});
  v = b.node("Clip", {v, one("lo", -1.5f), one("hi", 3.0f)});
  v = b.node("Add", {b.node("Floor", {v}), b.node("Ceil", {b.node("Mul", {v, one("c6", 3.0f)})})});
  // Past Floor/Ceil: the reference raises to an int exponent in double, a last-bit difference.
  v = b.node("Add", {v, b.node("Pow", {b.node("Abs", {v}), b.initializer("p", Tensor::from_int64({2}, {}))})});
  v = b.node("Gelu", {v});
  v = b.node("Gelu", {v}, {attr("approximate", std::string("tanh"))});
  v = b.node("Clip", {v});
  b.output(v);
  Result r = fuse(b.build());
  EXPECT_EQ(r.optimized->nodes().size(), 1u);
  EXPECT_EQ(count_any_domain(*r.optimized, "FusedElementwise"), 1);
  const Node* f = find_op(*r.optimized, "FusedElementwise");
  EXPECT_EQ(f->inputs.size(), 2u);
  EXPECT_EQ(f->fused_from.size(), r.original->nodes().size());
  for (uint64_t seed : {1, 2, 3}) {
    VerifyResult ver = verify_equivalence(*r.original, *r.optimized, 1, seed, {1e-5, 1e-6});
    EXPECT_TRUE(ver.ok) << "max abs " << ver.outputs[0].max_abs;
  }
}

// Random graphs: chains and diamonds of random ops on random broadcast shapes, against the
// unfused graph.
TEST(FuseElementwise, RandomRegionsMatchTheUnfusedGraph) {
  const char* unary[] = {"Neg", "Abs", "Exp", "Tanh", "Sigmoid", "Relu", "Softplus", "Floor", "Erf", "HardSwish"};
  const char* binary[] = {"Add", "Sub", "Mul", "Max", "Min"};
  std::mt19937 rng(42);
  int fused = 0;
  for (int trial = 0; trial < 20; ++trial) {
    SCOPED_TRACE(trial);
    GraphBuilder b(17);
    std::vector<Value*> pool = {b.input("x", DType::Float32, {4, 1, 9}), b.input("y", DType::Float32, {3, 9}),
                                b.input("z", DType::Float32, {1}),
                                b.initializer("w", Tensor::from_float({0.5f, -1, 2}, {3, 1})),
                                b.initializer("k", floats({0.75f}, {}))};
    std::vector<Value*> made;
    for (int i = 0; i < 8; ++i) {
      Value* p = pool[rng() % pool.size()];
      Value* v;
      if (rng() % 2) {
        v = b.node(unary[rng() % std::size(unary)], {p});
      } else {
        v = b.node(binary[rng() % std::size(binary)], {p, pool[rng() % pool.size()]});
      }
      pool.push_back(v);
      made.push_back(v);
    }
    // One sink reading the two last values (so most of what was made is an intermediate).
    b.output(b.node("Add", {made[made.size() - 1], made[made.size() - 2]}));
    auto g = b.build();
    // Values nothing reads would be dead outputs: expose them, like a real model's extra outputs.
    for (Value* v : made)
      if (v->consumers.empty()) {
        v->is_graph_output = true;
        g->outputs.push_back(v);
      }
    Result r = fuse(std::move(g));
    fused += count_any_domain(*r.optimized, "FusedElementwise");
    VerifyResult ver = verify_equivalence(*r.original, *r.optimized, 2, 9, {1e-5, 1e-6});
    for (const auto& o : ver.outputs) EXPECT_TRUE(o.ok) << o.name << " max abs " << o.max_abs << " " << o.problem;
  }
  EXPECT_GE(fused, 15);  // the generator really makes regions
}

// float16: the fused node reproduces the unfused graph bit for bit (every instruction rounds).
TEST(FuseElementwise, Float16MatchesExactly) {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float16, {7, 40});
  Tensor c(DType::Float16, {40});
  for (int i = 0; i < 40; ++i) c.data<uint16_t>()[i] = float_to_half(0.01f * static_cast<float>(i));
  Tensor h(DType::Float16, {});
  h.data<uint16_t>()[0] = float_to_half(0.3f);
  Value* v = b.node("Mul", {x, b.initializer("c", c)});
  v = b.node("Add", {v, b.initializer("h", h)});
  v = b.node("Sigmoid", {v});
  v = b.node("Mul", {v, x});
  b.output(v);
  Result r = fuse(b.build());
  EXPECT_EQ(count_any_domain(*r.optimized, "FusedElementwise"), 1);
  VerifyResult ver = verify_equivalence(*r.original, *r.optimized, 3, 5, {0, 0});
  EXPECT_TRUE(ver.ok) << "max abs " << ver.outputs[0].max_abs;
}

// Running the pass on its own output changes nothing.
TEST(FuseElementwise, Idempotent) {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {4});
  b.output(b.node("Relu", {b.node("Neg", {x})}));
  Result r = fuse(b.build());
  ASSERT_EQ(count_any_domain(*r.optimized, "FusedElementwise"), 1);
  auto before = r.optimized->clone();
  PassContext ctx;
  FuseElementwisePass pass;
  EXPECT_FALSE(pass.run(*r.optimized, ctx));
  EXPECT_EQ(graph_difference(*before, *r.optimized), "");
}

namespace {

/// An inference BatchNormalization of `x` ([N, C, ...]) with seeded statistics (var > 0), in x's type.
Value* batchnorm(GraphBuilder& b, Value* x, int64_t c, const std::string& name, uint64_t seed, DType t) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  auto param = [&](const char* what, float lo, float hi) {
    std::uniform_real_distribution<float> d(lo, hi);
    Tensor p(t, {c});
    for (int64_t i = 0; i < c; ++i) {
      const float v = d(rng);
      if (t == DType::Float16)
        p.data<uint16_t>()[i] = float_to_half(v);
      else
        p.data<float>()[i] = v;
    }
    return b.initializer(name + "." + what, p);
  };
  return b.node("BatchNormalization",
                {x, param("scale", 0.5f, 1.5f), param("B", -1, 1), param("mean", -1, 1), param("var", 0.1f, 2)},
                {attr("epsilon", 1e-3f)}, name);
}

}  // namespace

// DenseNet's pre-activation: the concat of the features so far -> BatchNormalization -> Relu, which
// no conv before it can take in. BN joins the region as x·s + t with s and t per channel ([C,1,1]
// constants, in place of its four statistics); the concat stays outside.
TEST(FuseElementwise, BatchNormJoinsAsAPerChannelAffineMap) {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {Dim::sym("N"), 5, 4, 3});
  Value* y = b.input("y", DType::Float32, {Dim::sym("N"), 6, 4, 3});
  Value* cat = b.node("Concat", {x, y}, {attr("axis", int64_t{1})}, "cat");
  Value* bn = batchnorm(b, cat, 11, "norm", 3, DType::Float32);
  b.output(b.node("Relu", {bn}, {}, "relu"));
  Result r = fuse(b.build());
  EXPECT_EQ(count_any_domain(*r.optimized, "BatchNormalization"), 0);
  EXPECT_EQ(count_any_domain(*r.optimized, "Concat"), 1);
  const Node* f = find_op(*r.optimized, "FusedElementwise");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->fused_from, (std::vector<std::string>{"norm", "relu"}));
  EXPECT_EQ(f->attr_string("program", ""), "r0 = mul i0 i1; r1 = add r0 i2; r2 = relu r1");
  ASSERT_EQ(f->inputs.size(), 3u);
  EXPECT_EQ(f->inputs[0], cat);
  for (size_t i : {1, 2}) {
    const Tensor* c = f->inputs[i]->initializer.get();
    ASSERT_TRUE(c) << "s and t are constants";
    EXPECT_EQ(c->dims(), (std::vector<int64_t>{11, 1, 1})) << "per channel, broadcast over H and W";
  }
  EXPECT_EQ(r.optimized->find_value("norm.var"), nullptr) << "the statistics are gone";
  for (auto* g : {r.original.get(), r.optimized.get()})
    for (Value* in : g->inputs) (*in->type.shape)[0] = Dim(2);
  infer_shapes(*r.original);
  infer_shapes(*r.optimized);
  expect_equivalent(r);
}

// In float16 the per-channel s and t are rounded to half once, where the BN kernel computes them
// in float: a half-sized tolerance, as fold_batchnorm's float16 folding has.
TEST(FuseElementwise, BatchNormInFloat16) {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float16, {2, 9, 5});
  Value* y = b.node("Relu", {batchnorm(b, b.node("Neg", {x}, {}, "neg"), 9, "bn", 5, DType::Float16)}, {}, "relu");
  b.output(y);
  Result r = fuse(b.build());
  EXPECT_EQ(r.optimized->nodes().size(), 1u);
  const Node* f = find_op(*r.optimized, "FusedElementwise");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->inputs[1]->type.dtype, DType::Float16);
  EXPECT_EQ(f->inputs[1]->initializer->dims(), (std::vector<int64_t>{9, 1}));
  EXPECT_TRUE(verify_equivalence(*r.original, *r.optimized, 2, 9, {1e-2, 1e-2}).ok);
}

// What stays a BatchNormalization: statistics that are graph inputs, a used statistics output
// (training), and a BN alone (already one kernel).
TEST(FuseElementwise, BatchNormThatIsNotAnAffineMapStays) {
  {
    GraphBuilder b(17);
    Value* x = b.input("x", DType::Float32, {2, 3, 4});
    Value* mean = b.input("mean", DType::Float32, {3});
    Value* one = b.initializer("one", Tensor::from_float({1, 1, 1}, {3}));
    Value* zero = b.initializer("zero", Tensor::from_float({0, 0, 0}, {3}));
    b.output(b.node("Relu", {b.node("BatchNormalization", {x, one, zero, mean, one}, {}, "bn")}, {}, "relu"));
    Result r = fuse(b.build());
    EXPECT_EQ(count_any_domain(*r.optimized, "BatchNormalization"), 1) << "its mean is a graph input";
    EXPECT_EQ(count_any_domain(*r.optimized, "FusedElementwise"), 0);
  }
  {
    GraphBuilder b(17);
    Value* x = b.input("x", DType::Float32, {2, 3, 4});
    b.output(b.node("Relu", {batchnorm(b, b.node("Neg", {x}), 3, "bn", 7, DType::Float32)}));
    auto g = b.build();
    Node* bn = nullptr;
    for (const auto& n : g->nodes())
      if (n->op_type == "BatchNormalization") bn = n.get();
    ASSERT_TRUE(bn);
    bn->set_attr("training_mode", int64_t{1});
    Result r = fuse(std::move(g));
    EXPECT_EQ(count_any_domain(*r.optimized, "BatchNormalization"), 1) << "training mode";
  }
  {
    GraphBuilder b(17);
    Value* x = b.input("x", DType::Float32, {2, 3, 4});
    b.output(batchnorm(b, x, 3, "bn", 9, DType::Float32));
    Result r = fuse(b.build());
    expect_unchanged(r);
  }
}
