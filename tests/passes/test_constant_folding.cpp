// constant_folding: a node whose inputs are all constants (or a Shape/Size of a static shape)
// becomes initializers with the CPU kernels' values; what must stay computed stays: a node reading
// a graph input, a graph output, a Constant node (cleanup's), random ops, a quantized weight's
// DequantizeLinear, an output over the size cap (a near-miss), a node whose kernel refuses its
// constants (a near-miss).
#include "passes/constant_folding.h"

#include <limits>

#include "pass_test_util.h"
#include "test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

Outcome run_pass(std::unique_ptr<Graph> g, PassOptions opts = {}) {
  return run_one_pass<ConstantFoldingPass>(std::move(g), opts);
}

void expect_folded_exactly(const Outcome& o) {
  EXPECT_TRUE(o.changed);
  expect_same_numbers(*o.original, *o.optimized, 13, {0, 0});  // bit for bit
}

/// Not folded, and not a near-miss either: nothing to fold here.
void expect_left_alone(const Outcome& o) {
  EXPECT_FALSE(o.changed);
  expect_unchanged(*o.original, *o.optimized);
  EXPECT_TRUE(o.ctx.rewrites.empty());
  EXPECT_TRUE(o.ctx.near_misses.empty());
}

std::vector<std::string> ops(const Graph& g) {
  std::vector<std::string> out;
  for (const auto& n : g.nodes()) out.push_back(n->op_type);
  return out;
}

std::vector<std::string> rewrites(const Outcome& o) {
  std::vector<std::string> out;
  for (const auto& r : o.ctx.rewrites) out.push_back(r.what);
  return out;
}

std::vector<double> values_of(const Tensor& t) {
  std::vector<double> v;
  for (int64_t i = 0; i < t.numel(); ++i) v.push_back(t.as_double(i));
  return v;
}

/// The initializer node `reader` reads at input `i` (fails the test if it is not one).
const Tensor& constant_input(const Graph& g, const std::string& reader, size_t i) {
  const Node* n = node_named(g, reader);
  EXPECT_TRUE(n) << reader;
  const Value* v = n ? n->input(i) : nullptr;
  EXPECT_TRUE(v && v->is_initializer()) << reader << " input " << i << " is not a constant";
  static const Tensor none;
  return v && v->is_initializer() ? *v->initializer : none;
}

Value* ints(GraphBuilder& b, const std::string& name, std::vector<int64_t> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return b.initializer(name, int64s(std::move(v), {n}));
}

}  // namespace

TEST(ConstantFolding, ANodeOfConstantsBecomesItsValue) {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {3});
  Value* sum = b.node(
      "Add", {b.initializer("a", floats({1, 2, 3}, {3})), b.initializer("b", floats({10, 20, 30}, {3}))}, {}, "sum");
  b.output(b.node("Mul", {x, sum}, {}, "mul"));
  const std::string sum_name = sum->name;
  Outcome o = run_pass(b.build());
  expect_folded_exactly(o);
  EXPECT_EQ(ops(*o.optimized), (std::vector<std::string>{"Mul"}));
  const Tensor& t = constant_input(*o.optimized, "mul", 1);
  EXPECT_EQ(node_named(*o.optimized, "mul")->input(1)->name, sum_name);  // the value keeps its name
  EXPECT_EQ(t.dtype(), DType::Float32);
  EXPECT_EQ(t.dims(), (std::vector<int64_t>{3}));
  EXPECT_EQ(values_of(t), (std::vector<double>{11, 22, 33}));
  EXPECT_EQ(o.optimized->initializers().size(), 1u);  // a and b, read by nothing now, are gone
  EXPECT_EQ(rewrites(o), (std::vector<std::string>{"folded Add 'sum'"}));
}

TEST(ConstantFolding, AFoldedValueTakesItsTensorsTypeAtOnce) {
  // The next pass may match on it before shapes are inferred again.
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {2, 3});
  Value* t = b.node("Transpose", {b.initializer("c", floats({1, 2, 3, 4, 5, 6}, {3, 2}))}, {}, "t");
  b.output(b.node("Add", {x, t}, {}, "add"));
  std::unique_ptr<Graph> g = b.build();
  infer_shapes(*g);
  Value* folded = g->find_value(t->name);
  folded->type = {};  // as if inference had not known it
  PassContext ctx;
  EXPECT_TRUE(ConstantFoldingPass().run(*g, ctx));
  ASSERT_TRUE(folded->is_initializer());
  EXPECT_EQ(folded->type.dtype, DType::Float32);
  ASSERT_TRUE(folded->type.shape);
  EXPECT_EQ(*folded->type.shape, shape_of({2, 3}));
  EXPECT_EQ(values_of(*folded->initializer), (std::vector<double>{1, 3, 5, 2, 4, 6}));
}

TEST(ConstantFolding, EveryOutputOfAFoldedNodeBecomesAConstant) {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {2});
  auto halves =
      b.node_n("Split", {b.initializer("c", floats({1, 2, 3, 4}, {4}))}, 2, {attr("axis", int64_t{0})}, "split");
  b.output(b.node("Add", {x, halves[0]}, {}, "add"));
  b.output(b.node("Mul", {x, halves[1]}, {}, "mul"));
  Outcome o = run_pass(b.build());
  expect_folded_exactly(o);
  EXPECT_EQ(ops(*o.optimized), (std::vector<std::string>{"Add", "Mul"}));
  EXPECT_EQ(values_of(constant_input(*o.optimized, "add", 1)), (std::vector<double>{1, 2}));
  EXPECT_EQ(values_of(constant_input(*o.optimized, "mul", 1)), (std::vector<double>{3, 4}));
}

TEST(ConstantFolding, AnAbsentOptionalInputDoesNotStopFolding) {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {4});
  Value* clipped =
      b.node("Clip",
             {b.initializer("c", floats({-2, 0.5f, 3, 9}, {4})), nullptr, b.initializer("hi", Tensor::scalar_float(2))},
             {}, "clip");
  b.output(b.node("Add", {x, clipped}, {}, "add"));
  Outcome o = run_pass(b.build());
  expect_folded_exactly(o);
  EXPECT_EQ(ops(*o.optimized), (std::vector<std::string>{"Add"}));
  EXPECT_EQ(values_of(constant_input(*o.optimized, "add", 1)), (std::vector<double>{-2, 0.5, 2, 2}));
}

TEST(ConstantFolding, AShapeSubgraphOfAStaticInputFoldsInOneSweep) {
  // x [2,3,4] -> Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [12])): a shape computation an
  // exporter writes for a dynamic batch; with the batch bound it is the constant [2, 12].
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {2, 3, 4});
  Value* shape = b.node("Shape", {x}, {}, "shape");
  Value* batch = b.node("Gather", {shape, b.initializer("zero", Tensor::from_int64({0}, {}))}, {}, "batch");
  Value* batch1 = b.node("Unsqueeze", {batch, ints(b, "axes", {0})}, {}, "batch1");
  Value* target = b.node("Concat", {batch1, ints(b, "rest", {12})}, {attr("axis", int64_t{0})}, "target");
  b.output(b.node("Reshape", {x, target}, {}, "reshape"));
  Outcome o = run_pass(b.build());
  expect_folded_exactly(o);
  EXPECT_EQ(ops(*o.optimized), (std::vector<std::string>{"Reshape"}));
  const Tensor& t = constant_input(*o.optimized, "reshape", 1);
  EXPECT_EQ(t.dtype(), DType::Int64);
  EXPECT_EQ(values_of(t), (std::vector<double>{2, 12}));
  EXPECT_EQ(rewrites(o), (std::vector<std::string>{"folded Shape 'shape'", "folded Gather 'batch'",
                                                   "folded Unsqueeze 'batch1'", "folded Concat 'target'"}));
}

TEST(ConstantFolding, SizeOfAStaticInputFolds) {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {2, 3});
  Value* n = b.node("Cast", {b.node("Size", {x}, {}, "size")}, {attr("to", int64_t{1})}, "to_float");
  b.output(b.node("Div", {x, n}, {}, "div"));
  Outcome o = run_pass(b.build());
  expect_folded_exactly(o);
  EXPECT_EQ(ops(*o.optimized), (std::vector<std::string>{"Div"}));
  const Tensor& t = constant_input(*o.optimized, "div", 1);
  EXPECT_EQ(t.dtype(), DType::Float32);
  EXPECT_EQ(values_of(t), (std::vector<double>{6}));
}

TEST(ConstantFolding, ShapeAndSizeOfASymbolicInputStay) {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {Dim::sym("N"), 3});
  // (a Reshape to x's own Shape would take the proved target [0, 3], as the Reshape tests below show)
  b.output(b.node("Relu", {b.node("Cast", {b.node("Shape", {x}, {}, "shape")}, {attr("to", int64_t{1})}, "cast")}, {},
                  "relu"));
  b.output(b.node("Size", {x}, {}, "size_of_x"));
  expect_left_alone(run_pass(b.build()));
}

TEST(ConstantFolding, ANodeReadingAGraphInputStays) {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {3});
  Value* h = b.node("Add", {x, b.initializer("c", floats({1, 2, 3}, {3}))}, {}, "add");
  b.output(b.node("Relu", {h}, {}, "relu"));
  expect_left_alone(run_pass(b.build()));
}

TEST(ConstantFolding, AGraphOutputStaysComputed) {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {3});
  b.output(b.node("Relu", {x}, {}, "relu"));
  b.output(b.node("Add", {b.initializer("a", floats({1, 2, 3}, {3})), b.initializer("b", floats({1, 1, 1}, {3}))}, {},
                  "constant_output"));
  expect_left_alone(run_pass(b.build()));
}

TEST(ConstantFolding, ConstantNodesAreLeftToCleanup) {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {3});
  Value* c = b.node("Constant", {}, {attr("value", floats({1, 2, 3}, {3}))}, "c");
  b.output(b.node("Add", {x, c}, {}, "add"));
  expect_left_alone(run_pass(b.build()));
}

TEST(ConstantFolding, RandomOpsAreNotFolded) {
  // No inputs, or constant ones, but a fresh draw on every run: never a constant.
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {2, 3});
  Value* r =
      b.node("RandomUniform", {}, {attr("shape", std::vector<int64_t>{2, 3}), attr("dtype", int64_t{1})}, "rand");
  Value* like = b.node("RandomNormalLike", {b.initializer("c", floats({1, 2, 3, 4, 5, 6}, {2, 3}))}, {}, "rand_like");
  b.output(b.node("Sum", {x, r, like}, {}, "sum"));
  expect_left_alone(run_pass(b.build()));
}

TEST(ConstantFolding, AQuantizedWeightStaysQuantized) {
  // DequantizeLinear of an int8 initializer (a QDQ model's weight) is left for the runtime: folded,
  // it would be a float32 weight four times the size. What computes its scale still folds.
  GraphBuilder b(13);
  Value* x = b.input("x", DType::Float32, {2, 4});
  Tensor w(DType::Int8, {4, 3});
  for (int64_t i = 0; i < w.numel(); ++i) w.data<int8_t>()[i] = static_cast<int8_t>(i * 7 - 40);
  Value* scale =
      b.node("Mul", {b.initializer("s", floats({0.5f}, {})), b.initializer("t", floats({0.25f}, {}))}, {}, "scale");
  Value* wf = b.node("DequantizeLinear", {b.initializer("w", std::move(w)), scale}, {}, "dq");
  b.output(b.node("MatMul", {x, wf}, {}, "mm"));
  Outcome o = run_pass(b.build());
  EXPECT_TRUE(o.changed);
  EXPECT_EQ(ops(*o.optimized), (std::vector<std::string>{"DequantizeLinear", "MatMul"}));
  expect_same_numbers(*o.original, *o.optimized, 13, {0, 0});
}

TEST(ConstantFolding, AnOutputOverTheSizeCapIsANearMiss) {
  // ConstantOfShape [1024] float32: 4096 bytes.
  auto fill = [] {
    GraphBuilder b(17);
    Value* x = b.input("x", DType::Float32, {1024});
    Value* c = b.node("ConstantOfShape", {b.initializer("n", Tensor::from_int64({1024}, {1}))},
                      {attr("value", floats({0.5f}, {1}))}, "fill");
    b.output(b.node("Add", {x, c}, {}, "add"));
    return b.build();
  };
  PassOptions small;
  small.fold_size_cap = 4095;
  Outcome o = run_pass(fill(), small);
  expect_near_miss(o, "constant_folding", "its output 'fill_out' would be 4096 bytes, over the fold cap of 4095");
  EXPECT_NE(find_near_miss(o.ctx.near_misses, "constant_folding", "ConstantOfShape 'fill' not folded"), nullptr);

  PassOptions exact;
  exact.fold_size_cap = 4096;  // the cap itself is allowed
  Outcome folded = run_pass(fill(), exact);
  expect_folded_exactly(folded);
  const Tensor& t = constant_input(*folded.optimized, "add", 1);
  EXPECT_EQ(t.numel(), 1024);
  EXPECT_EQ(t.as_double(1023), 0.5);
}

TEST(ConstantFolding, AKernelThatRefusesItsConstantsIsANearMiss) {
  // Over 4096 elements, so shape inference leaves the evaluation (and the error) to folding.
  std::vector<int64_t> idx(5000, 0);
  idx[10] = 7000;
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {5000});
  Value* data = b.initializer("data", floats(std::vector<float>(5000, 1.0f), {5000}));
  Value* g = b.node("Gather", {data, b.initializer("idx", Tensor::from_int64(idx, {5000}))}, {}, "gather");
  b.output(b.node("Add", {x, g}, {}, "add"));
  expect_near_miss(run_pass(b.build()), "constant_folding", "evaluating it failed: index 7000 is out of range");
}

// x.shape[-1] // 2 with the batch left open: the dim it picks is static, so it folds, and the
// division after it; the pick of the open batch stays.
TEST(ConstantFolding, TheStaticDimsOfAShapeWithAnOpenBatchFold) {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {Dim::sym("N"), 5, 64});
  Value* sh = b.node("Shape", {x}, {}, "shape");
  Value* last = b.node("Gather", {sh, b.initializer("minus1", int64s({-1}, {}))}, {}, "last");
  Value* half = b.node("Div", {last, b.initializer("two", int64s({2}, {}))}, {}, "half");
  Value* n = b.node("Gather", {sh, b.initializer("zero", int64s({0}, {}))}, {}, "batch");
  b.output(b.node("Mul", {n, half}, {}, "product"));
  Outcome o = run_pass(b.build());
  EXPECT_TRUE(o.changed);
  EXPECT_EQ(ops(*o.optimized), (std::vector<std::string>{"Shape", "Gather", "Mul"}));
  EXPECT_EQ(values_of(constant_input(*o.optimized, "product", 1)), (std::vector<double>{32}));
  EXPECT_EQ(rewrites(o), (std::vector<std::string>{"folded Gather 'last' (static dims of a shape with an open batch)",
                                                   "folded Div 'half'"}));
  bind_open_dims(*o.original);
  bind_open_dims(*o.optimized);
  expect_same_numbers(*o.original, *o.optimized, 3);
  // A Shape that only the folded Gather read goes with it, in the same pass: its read of x would
  // keep x from looking single-use to the fusions that run next (fuse_rotary's head-split sink).
  GraphBuilder c(17);
  Value* y = c.input("y", DType::Float32, {Dim::sym("N"), 5, 64});
  Value* d = c.node("Gather", {c.node("Shape", {y}, {}, "shape"), c.initializer("m1", int64s({-1}, {}))}, {}, "last");
  c.output(c.node("Reshape",
                  {y, c.node("Concat",
                             {c.initializer("m2", int64s({-1}, {1})),
                              c.node("Unsqueeze", {d, c.initializer("ax", int64s({0}, {1}))})},
                             {attr("axis", int64_t{0})}, "target")},
                  {}, "flat"));
  Outcome p = run_pass(c.build());
  EXPECT_EQ(ops(*p.optimized), (std::vector<std::string>{"Reshape"}));
  EXPECT_EQ(p.optimized->inputs[0]->consumers.size(), 1u);
}

// GPT-2's Conv1D with the batch left open: the product's [6·N, 12] goes back to x.size()[:-1] +
// (12,), a target computed from x's Shape. Inference proves the output [N, 6, 12]; the target
// becomes [-1, 6, 12] (N is not the input's first dim, 6·N is), and the Shape -> Slice -> Concat
// behind it goes in the same pass, so x has one reader again.
TEST(ConstantFolding, AReshapeTargetComputedFromAnOpenBatchBecomesAConstant) {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {Dim::sym("N"), 6, 8});
  Value* flat = b.node("Reshape", {x, b.initializer("flat_shape", int64s({-1, 8}, {2}))}, {}, "flat");
  std::vector<float> w(96);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.01f * static_cast<float>(i % 17) - 0.08f;
  Value* prod = b.node("MatMul", {flat, b.initializer("w", floats(w, {8, 12}))}, {}, "mm");
  Value* lead = b.node("Slice",
                       {b.node("Shape", {x}, {}, "shape"), b.initializer("s0", int64s({0}, {1})),
                        b.initializer("s1", int64s({-1}, {1}))},
                       {}, "lead");
  Value* target =
      b.node("Concat", {lead, b.initializer("nf", int64s({12}, {1}))}, {attr("axis", int64_t{0})}, "target");
  b.output(b.node("Reshape", {prod, target}, {}, "back"));
  Outcome o = run_pass(b.build());
  EXPECT_TRUE(o.changed);
  EXPECT_EQ(ops(*o.optimized), (std::vector<std::string>{"Reshape", "MatMul", "Reshape"}));
  EXPECT_EQ(values_of(constant_input(*o.optimized, "back", 1)), (std::vector<double>{-1, 6, 12}));
  EXPECT_EQ(o.optimized->inputs[0]->consumers.size(), 1u);
  EXPECT_EQ(rewrites(o),
            (std::vector<std::string>{"the target of Reshape 'back' is a constant (its output's dims are proved)"}));
  bind_open_dims(*o.original);
  bind_open_dims(*o.optimized);
  expect_same_numbers(*o.original, *o.optimized, 7);
}

// A head split [N, 6, 8] -> [N, 6, 2, 4] keeps the input's open dim by copying it (0), or, under
// allowzero (where 0 means an empty dim), as the one -1; a target whose output has two open dims
// neither of which the input has in place stays computed.
TEST(ConstantFolding, AProvedReshapeTargetCopiesADimInPlaceAndInfersAtMostOne) {
  for (int64_t allowzero : {0, 1}) {
    GraphBuilder b(17);
    Value* x = b.input("x", DType::Float32, {Dim::sym("N"), 6, 8});
    Value* lead = b.node("Slice",
                         {b.node("Shape", {x}, {}, "shape"), b.initializer("s0", int64s({0}, {1})),
                          b.initializer("s1", int64s({2}, {1}))},
                         {}, "lead");
    Value* target =
        b.node("Concat", {lead, b.initializer("hd", int64s({2, 4}, {2}))}, {attr("axis", int64_t{0})}, "target");
    b.output(b.node("Reshape", {x, target}, {attr("allowzero", allowzero)}, "split"));
    Outcome o = run_pass(b.build());
    EXPECT_EQ(ops(*o.optimized), (std::vector<std::string>{"Reshape"})) << allowzero;
    EXPECT_EQ(values_of(constant_input(*o.optimized, "split", 1)),
              (std::vector<double>{allowzero ? -1.0 : 0.0, 6, 2, 4}));
    bind_open_dims(*o.original);
    bind_open_dims(*o.optimized);
    expect_same_numbers(*o.original, *o.optimized, 11);
  }
  GraphBuilder c(17);
  Value* y = c.input("y", DType::Float32, {Dim::sym("N"), Dim::sym("M"), 8});
  Value* sh = c.node("Shape", {y}, {}, "shape");
  Value* m = c.node("Gather", {sh, c.initializer("one", int64s({1}, {1}))}, {}, "m");
  Value* n = c.node("Gather", {sh, c.initializer("zero", int64s({0}, {1}))}, {}, "n");
  Value* swapped =
      c.node("Concat", {m, n, c.initializer("e", int64s({8}, {1}))}, {attr("axis", int64_t{0})}, "swapped");
  c.output(c.node("Reshape", {y, swapped}, {}, "view"));
  Outcome p = run_pass(c.build());
  EXPECT_FALSE(p.changed);
}

// x.shape[-1:] as a Slice of an open-batch Shape (the legacy exporter's scale of
// nn.MultiheadAttention: 1 / sqrt(sqrt(head size)) on both Q and Kᵀ) folds like a Gather of it,
// and the Cast and Sqrt after it with it.
TEST(ConstantFolding, AStaticSliceOfAShapeWithAnOpenBatchFolds) {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {Dim::sym("N"), 5, 64});
  Value* last = b.node("Slice",
                       {b.node("Shape", {x}, {}, "shape"), b.initializer("from", int64s({-1}, {1})),
                        b.initializer("to", int64s({std::numeric_limits<int64_t>::max()}, {1}))},
                       {}, "last");
  Value* root = b.node("Sqrt", {b.node("Cast", {last}, {attr("to", int64_t{1})}, "cast")}, {}, "root");
  b.output(b.node("Div", {x, root}, {}, "div"));
  Outcome o = run_pass(b.build());
  EXPECT_EQ(ops(*o.optimized), (std::vector<std::string>{"Div"}));
  EXPECT_EQ(values_of(constant_input(*o.optimized, "div", 1)), (std::vector<double>{8}));
  EXPECT_EQ(o.optimized->inputs[0]->consumers.size(), 1u);
  bind_open_dims(*o.original);
  bind_open_dims(*o.optimized);
  expect_same_numbers(*o.original, *o.optimized, 5);
}
