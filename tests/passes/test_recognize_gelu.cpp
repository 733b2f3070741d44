// recognize_gelu: every erf/tanh form exporters write becomes one Gelu with the same numbers;
// each guard leaves the graph alone and says why.
#include "passes/recognize_gelu.h"

#include "passes/pattern.h"
#include "passes/pipeline.h"
#include "passes/verify.h"
#include "pass_test_util.h"
#include "test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

Outcome run_pass(std::unique_ptr<Graph> g, PassOptions opts = {}) {
  return run_one_pass<RecognizeGeluPass>(std::move(g), opts);
}

constexpr double kSqrt2 = 1.4142135623730951;

void expect_same_numbers(const Outcome& o, uint64_t seed = 7) {
  fusec::test::expect_same_numbers(*o.original, *o.optimized, seed);
}

void expect_unchanged(const Outcome& o, const std::string& reason_part) {
  fusec::test::expect_near_miss(o, "recognize_gelu", reason_part);
}

/// How a test writes the erf GELU.
struct ErfForm {
  bool div_by_sqrt2 = true;  // Div(x, √2), else Mul(x, 1/√2)
  bool const_first = false;  // constants as the first operand of Mul/Add
  int product = 0;           // 0: (x·E)·½   1: (E·½)·x   2: (x·½)·E
  bool shape1 = false;       // constants of shape [1] instead of scalars
  bool half_by_div = false;  // ·½ written as Div(·, 2) (products 0 and 2)
  float half = 0.5f;
};

struct Net {
  GraphBuilder b{20};
  Value* x;
  explicit Net(int64_t opset = 20, Shape s = {2, 3, 16}) : b(opset) { x = b.input("x", DType::Float32, std::move(s)); }
  Value* c(const std::string& name, float v, bool shape1 = false) {
    return b.initializer(name, shape1 ? floats({v}, {1}) : Tensor::scalar_float(v));
  }
  Value* bin(const char* op, Value* a, Value* k, bool k_first, const std::string& name) {
    return k_first ? b.node(op, {k, a}, {}, name) : b.node(op, {a, k}, {}, name);
  }
  /// ½·x·E in the given association; returns y.
  Value* product(Value* e, const ErfForm& f) {
    Value* x2 = x;
    switch (f.product) {
      case 0: {
        Value* xe = bin("Mul", e, x2, !f.const_first, "mul_xe");
        return f.half_by_div ? b.node("Div", {xe, c("two", 2.0f * (f.half / 0.5f), f.shape1)}, {}, "half")
                             : bin("Mul", xe, c("half", f.half, f.shape1), f.const_first, "half");
      }
      case 1: {
        Value* eh = bin("Mul", e, c("half", f.half, f.shape1), f.const_first, "mul_eh");
        return bin("Mul", eh, x2, !f.const_first, "mul_x");
      }
      default: {
        Value* xh = f.half_by_div ? b.node("Div", {x2, c("two", 2.0f * (f.half / 0.5f), f.shape1)}, {}, "half")
                                  : bin("Mul", x2, c("half", f.half, f.shape1), f.const_first, "half");
        return bin("Mul", e, xh, f.const_first, "mul_xhe");
      }
    }
  }
  Value* erf_gelu(const ErfForm& f) {
    Value* u = f.div_by_sqrt2
                   ? b.node("Div", {x, c("sqrt2", static_cast<float>(kSqrt2), f.shape1)}, {}, "scale")
                   : bin("Mul", x, c("inv_sqrt2", static_cast<float>(1 / kSqrt2), f.shape1), f.const_first, "scale");
    Value* erf = b.node("Erf", {u}, {}, "erf");
    Value* e = bin("Add", erf, c("one", 1.0f, f.shape1), f.const_first, "plus1");
    return product(e, f);
  }
  /// cube: 0 Pow(x, 3), 1 Mul(Mul(x, x), x), 2 Mul(x, Mul(x, x)).
  Value* tanh_gelu(int cube, bool const_first = false, float cubic = 0.044715f) {
    Value* x3;
    if (cube == 0) {
      x3 = b.node("Pow", {x, c("three", 3.0f)}, {}, "cube");
    } else {
      Value* xx = b.node("Mul", {x, x}, {}, "sq");
      x3 = cube == 1 ? b.node("Mul", {xx, x}, {}, "cube") : b.node("Mul", {x, xx}, {}, "cube");
    }
    Value* p = bin("Mul", x3, c("cubic", cubic), const_first, "cubic_term");
    Value* in = const_first ? b.node("Add", {p, x}, {}, "inner") : b.node("Add", {x, p}, {}, "inner");
    Value* u = bin("Mul", in, c("k", 0.7978845608f), const_first, "scale");
    Value* t = b.node("Tanh", {u}, {}, "tanh");
    Value* e = bin("Add", t, c("one", 1.0f), const_first, "plus1");
    ErfForm f;
    f.const_first = const_first;
    return product(e, f);
  }
};

}  // namespace

TEST(RecognizeGelu, EveryErfFormBecomesOneGelu) {
  for (int div = 0; div < 2; ++div)
    for (int first = 0; first < 2; ++first)
      for (int product = 0; product < 3; ++product)
        for (int shape1 = 0; shape1 < 2; ++shape1)
          for (int half_div = 0; half_div < 2; ++half_div) {
            if (half_div && product == 1) continue;
            ErfForm f{div == 1, first == 1, product, shape1 == 1, half_div == 1};
            SCOPED_TRACE("div " + std::to_string(div) + " const_first " + std::to_string(first) + " product " +
                         std::to_string(product) + " shape1 " + std::to_string(shape1) + " half_div " +
                         std::to_string(half_div));
            Net n;
            n.b.output(n.erf_gelu(f));
            Outcome o = run_pass(n.b.build());
            EXPECT_TRUE(o.changed);
            EXPECT_EQ(o.optimized->nodes().size(), 1u);
            ASSERT_EQ(count(*o.optimized, "Gelu"), 1);
            const Node* gelu = o.optimized->nodes()[0].get();
            EXPECT_EQ(gelu->attr_string("approximate", "none"), "none");
            EXPECT_EQ(gelu->name, "scale");  // the first node it replaced
            EXPECT_EQ(gelu->fused_from.size(), 5u);
            EXPECT_EQ(gelu->outputs[0], o.optimized->outputs[0]);  // the output keeps its name
            ASSERT_EQ(o.ctx.rewrites.size(), 1u);
            expect_same_numbers(o);
          }
}

TEST(RecognizeGelu, EveryTanhFormBecomesOneGelu) {
  for (int cube = 0; cube < 3; ++cube)
    for (int first = 0; first < 2; ++first) {
      SCOPED_TRACE("cube " + std::to_string(cube) + " const_first " + std::to_string(first));
      Net n;
      n.b.output(n.tanh_gelu(cube, first == 1));
      Outcome o = run_pass(n.b.build());
      EXPECT_TRUE(o.changed);
      ASSERT_EQ(o.optimized->nodes().size(), 1u);
      EXPECT_EQ(count(*o.optimized, "Gelu"), 1);
      EXPECT_EQ(o.optimized->nodes()[0]->attr_string("approximate", "none"), "tanh");
      expect_same_numbers(o);
    }
}

TEST(RecognizeGelu, KeepsTheNeighbours) {
  // Sigmoid -> GELU -> Relu: only the GELU nodes go; a second reader of x is fine.
  Net n(20, {4, 8});
  Value* h = n.b.node("Sigmoid", {n.x}, {}, "pre");
  n.x = h;
  Value* y = n.erf_gelu({});
  n.b.output(n.b.node("Relu", {y}, {}, "relu"));
  n.b.output(n.b.node("Neg", {h}, {}, "neg"));
  Outcome o = run_pass(n.b.build());
  EXPECT_EQ(count(*o.optimized, "Gelu"), 1);
  EXPECT_EQ(count(*o.optimized, "Erf"), 0);
  EXPECT_EQ(o.optimized->nodes().size(), 4u);
  expect_same_numbers(o);
}

TEST(RecognizeGelu, HalfPrecisionConstantsRoundedToTheirType) {
  // float16 stores √2 as 1.4140625 (1e-4 off): still GELU; the numbers agree to half precision.
  for (DType t : {DType::Float16, DType::BFloat16}) {
    SCOPED_TRACE(dtype_name(t));
    GraphBuilder b(20);
    Value* x = b.input("x", t, {4, 16});
    auto c = [&](const std::string& name, float v) {
      Value* f = b.initializer(name + ".f32", Tensor::scalar_float(v));
      return b.node("Cast", {f}, {attr("to", static_cast<int64_t>(t))}, name);
    };
    Value* u = b.node("Div", {x, c("sqrt2", 1.41421356f)}, {}, "div");
    Value* e = b.node("Add", {b.node("Erf", {u}, {}, "erf"), c("one", 1.0f)}, {}, "add");
    b.output(b.node("Mul", {b.node("Mul", {x, e}, {}, "mul"), c("half", 0.5f)}, {}, "mul_half"));
    auto g = b.build();
    infer_shapes(*g);
    auto original = g->clone();
    PipelineOptions po;
    po.only = {"constant_folding", "recognize_gelu"};
    optimize_graph(*g, po);
    EXPECT_EQ(g->nodes().size(), 1u);
    EXPECT_EQ(count(*g, "Gelu"), 1);
    EXPECT_TRUE(verify_equivalence(*original, *g, 2, 3, {2e-2, 2e-2}).ok);
  }
}

TEST(RecognizeGelu, WrongConstantIsANearMiss) {
  ErfForm f;
  f.half = 0.6f;
  Net n;
  n.b.output(n.erf_gelu(f));
  expect_unchanged(run_pass(n.b.build()), "constant 0.6 where GELU has 0.5");

  Net t;
  t.b.output(t.tanh_gelu(0, false, 0.05f));
  expect_unchanged(run_pass(t.b.build()), "constant 0.05 where GELU has 0.044715");

  Net s;  // Mul by √2 where the form needs 1/√2
  Value* u = s.b.node("Mul", {s.x, s.c("k", static_cast<float>(kSqrt2))});
  Value* e = s.b.node("Add", {s.b.node("Erf", {u}), s.c("one", 1.0f)});
  s.b.output(s.product(e, {}));
  expect_unchanged(run_pass(s.b.build()), "where GELU has 0.707107");
}

TEST(RecognizeGelu, IntermediateWithAnotherReaderIsANearMiss) {
  Net n;
  Value* y = n.erf_gelu({});
  n.b.output(y);
  Node* erf = nullptr;
  for (Node* node : n.b.graph().node_list())
    if (node->op_type == "Erf") erf = node;
  n.b.output(n.b.node("Neg", {erf->outputs[0]}, {}, "spy"));
  expect_unchanged(run_pass(n.b.build()), "'erf_out' has 2 consumers");

  Net o;  // an intermediate that is a graph output
  o.b.output(o.erf_gelu({}));
  for (Node* node : o.b.graph().node_list())
    if (node->name == "plus1") o.b.output(node->outputs[0]);
  expect_unchanged(run_pass(o.b.build()), "'plus1_out' is a graph output");
}

TEST(RecognizeGelu, BroadcastingConstantIsANearMiss) {
  Net n(20, {16});
  ErfForm f;
  f.shape1 = true;
  // A [1, 1] constant would broadcast x [16] to [1, 16].
  Value* u = n.b.node("Div", {n.x, n.b.initializer("sqrt2", floats({static_cast<float>(kSqrt2)}, {1, 1}))});
  Value* e = n.b.node("Add", {n.b.node("Erf", {u}), n.c("one", 1.0f)});
  n.b.output(n.product(e, f));
  expect_unchanged(run_pass(n.b.build()), "higher rank");
}

TEST(RecognizeGelu, DomainFollowsTheOpset) {
  // Opset 20: standard.
  {
    Net n(20);
    n.b.output(n.erf_gelu({}));
    Outcome o = run_pass(n.b.build());
    EXPECT_EQ(count(*o.optimized, "Gelu", ""), 1);
    EXPECT_EQ(o.optimized->opset(""), 20);
  }
  // Opset 17, nothing whose meaning changes by 20: raised to 20, standard.
  {
    Net n(17);
    n.b.output(n.erf_gelu({}));
    Outcome o = run_pass(n.b.build());
    EXPECT_EQ(count(*o.optimized, "Gelu", ""), 1);
    EXPECT_EQ(o.optimized->opset(""), 20);
    expect_same_numbers(o);
  }
  // Opset 17 with a Cast (its schema changes at 19): ai.fusec Gelu, opset kept.
  auto with_cast = [] {
    auto n = std::make_unique<Net>(17);
    n->x = n->b.node("Cast", {n->x}, {attr("to", int64_t{1})}, "cast");
    n->b.output(n->erf_gelu({}));
    return n->b.build();
  };
  {
    Outcome o = run_pass(with_cast());
    EXPECT_EQ(count(*o.optimized, "Gelu", "ai.fusec"), 1);
    EXPECT_EQ(o.optimized->opset(""), 17);
    EXPECT_EQ(o.optimized->opset("ai.fusec"), 1);
    expect_same_numbers(o);
  }
  // ... and under --portable neither is possible: a near-miss naming the blocker.
  {
    PassOptions p;
    p.portable = true;
    Outcome o = run_pass(with_cast(), p);
    expect_unchanged(o, "cannot be raised");
    EXPECT_NE(o.ctx.near_misses[0].reason.find("Cast 'cast'"), std::string::npos);
  }
}

TEST(RecognizeGelu, FusecGeluBecomesStandardOnceTheOpsetCanRise) {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {3, 5});
  b.output(b.node_n("Gelu", {x}, 1, {attr("approximate", std::string("tanh"))}, "g", "ai.fusec")[0]);
  Outcome o = run_pass(b.build());
  EXPECT_TRUE(o.changed);
  EXPECT_EQ(count(*o.optimized, "Gelu", ""), 1);
  EXPECT_EQ(o.optimized->opset(""), 20);
  expect_same_numbers(o);
}

TEST(RecognizeGelu, ThroughThePipeline) {
  Net n(17);
  n.b.output(n.erf_gelu({}));
  auto g = n.b.build();
  infer_shapes(*g);
  auto original = g->clone();
  PipelineOptions po;
  po.only = {"recognize_gelu"};
  OptimizeResult r = optimize_graph(*g, po);
  EXPECT_EQ(count(*g, "Gelu"), 1);
  EXPECT_EQ(r.per_pass.size() > 0, true);
  EXPECT_TRUE(verify_equivalence(*original, *g, 2, 3, {1e-4, 1e-5}).ok);
}
