// fuse_gated_matmul: the gated MLP's projections and gating -> ai.fusec GatedMatMul with the same
// numbers (SwiGLU written x·Sigmoid(x), a GELU gate inside its FusedMatMul, biases on either side);
// guarded cases are left alone with a near-miss.
#include "passes/fuse_gated_matmul.h"
#include "passes/pattern.h"

#include "pass_test_util.h"
#include "test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

Outcome run_pass(std::unique_ptr<Graph> g, PassOptions opts = {}) {
  return run_one_pass<FuseGatedMatMulPass>(std::move(g), opts);
}

constexpr int64_t B = 2, S = 5, K = 12, N = 20;

struct Mlp {
  bool swap_mul = false;     // Mul(up, act) and Mul(Sigmoid(x), x)
  bool gelu_gate = false;    // FusedMatMul(X, Wg, activation = GeluTanh) as the gate
  bool value_bias = false;   // FusedMatMul(X, Wv, bv) as the value
  bool other_input = false;  // the value projects another input
  bool value_read_elsewhere = false;
  bool computed_weight = false;  // Wv is a graph input
};

/// Llama's MLP before its down projection: SiLU(X·Wg) · (X·Wv) over X [B, S, K].
std::unique_ptr<Graph> mlp(const Mlp& o = {}) {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {B, S, K});
  Value* x2 = o.other_input ? b.input("x2", DType::Float32, {B, S, K}) : x;
  Value* wg = b.initializer("wg", uniform_floats({K, N}, 1));
  Value* wv =
      o.computed_weight ? b.input("wv", DType::Float32, {K, N}) : b.initializer("wv", uniform_floats({K, N}, 2));
  Value* gate;
  if (o.gelu_gate) {
    gate = b.node_n("FusedMatMul", {x, wg}, 1, {attr("activation", std::string("GeluTanh"))}, "gate", "ai.fusec")[0];
  } else {
    Value* g = b.node("MatMul", {x, wg}, {}, "gate");
    Value* s = b.node("Sigmoid", {g}, {}, "sig");
    gate = o.swap_mul ? b.node("Mul", {s, g}, {}, "silu") : b.node("Mul", {g, s}, {}, "silu");
  }
  Value* up = o.value_bias ? b.node_n("FusedMatMul", {x2, wv, b.initializer("bv", uniform_floats({N}, 3))}, 1, {}, "up",
                                      "ai.fusec")[0]
                           : b.node("MatMul", {x2, wv}, {}, "up");
  if (o.value_read_elsewhere) b.output(up);
  b.output(o.swap_mul ? b.node("Mul", {up, gate}, {}, "gating") : b.node("Mul", {gate, up}, {}, "gating"));
  return b.build();
}

}  // namespace

TEST(FuseGatedMatMul, SwiGluBecomesOneGatedMatMulWithTheSameNumbers) {
  for (bool swapped : {false, true}) {
    SCOPED_TRACE(swapped ? "operands swapped" : "exporter order");
    Mlp o;
    o.swap_mul = swapped;
    Outcome r = run_pass(mlp(o));
    EXPECT_TRUE(r.changed);
    ASSERT_EQ(count(*r.optimized, "GatedMatMul", "ai.fusec"), 1);
    for (const char* gone : {"MatMul", "Sigmoid", "Mul"}) EXPECT_EQ(count(*r.optimized, gone), 0) << gone;
    const Node* gm = find_op(*r.optimized, "GatedMatMul");
    EXPECT_EQ(gm->attr_string("activation", ""), "SiLU");
    EXPECT_EQ(gm->input(0)->name, "x");
    // The model's own weights, not a concatenated copy.
    EXPECT_EQ(gm->input(1)->name, "wg");
    EXPECT_EQ(gm->input(2)->name, "wv");
    EXPECT_EQ(gm->name, "gate");
    expect_same_numbers(*r.original, *r.optimized, 7);
  }
}

TEST(FuseGatedMatMul, AnActivatedGateAndABiasedValueFuse) {
  Mlp o;
  o.gelu_gate = true;
  o.value_bias = true;
  Outcome r = run_pass(mlp(o));
  EXPECT_TRUE(r.changed);
  const Node* gm = find_op(*r.optimized, "GatedMatMul");
  ASSERT_NE(gm, nullptr);
  EXPECT_EQ(gm->attr_string("activation", ""), "GeluTanh");
  // No gate bias: input 3 absent, the value's bias at 4.
  ASSERT_EQ(gm->inputs.size(), 5u);
  EXPECT_EQ(gm->input(3), nullptr);
  EXPECT_EQ(gm->input(4)->name, "bv");
  expect_same_numbers(*r.original, *r.optimized, 8);
}

TEST(FuseGatedMatMul, GuardedCasesAreNearMisses) {
  Mlp other;
  other.other_input = true;
  expect_near_miss(run_pass(mlp(other)), "fuse_gated_matmul", "project different inputs");
  Mlp elsewhere;
  elsewhere.value_read_elsewhere = true;
  expect_near_miss(run_pass(mlp(elsewhere)), "fuse_gated_matmul", "read elsewhere");
  Mlp computed;
  computed.computed_weight = true;
  expect_near_miss(run_pass(mlp(computed)), "fuse_gated_matmul", "not a constant");
  Outcome portable = run_pass(mlp(), [] {
    PassOptions p;
    p.portable = true;
    return p;
  }());
  expect_near_miss(portable, "fuse_gated_matmul", "--portable");
}

// Through the whole pipeline, the GatedMatMul is what fuse_elementwise finds: nothing of the gating
// is left for it, and the numbers hold.
TEST(FuseGatedMatMul, ThePipelineLeavesOneNode) {
  auto g = mlp();
  infer_shapes(*g);
  auto original = g->clone();
  OptimizeResult res = optimize_graph(*g, PipelineOptions{});
  EXPECT_EQ(count(*g, "GatedMatMul", "ai.fusec"), 1);
  EXPECT_EQ(g->nodes().size(), 1u);
  expect_same_numbers(*original, *g, 9);
}

// Phi-3's form: one product of a [K, 2N] weight split into the gate's and the value's halves. The
// GatedMatMul takes the weight's halves as two new initializers, gate first whichever output the
// gate is; a split of another axis, or a product read beside its halves, is left alone.
TEST(FuseGatedMatMul, TheHalvesOfOneProductFuse) {
  for (int gate_half : {0, 1})
    for (int variant = 0; variant < 3; ++variant) {  // 0: fuses; 1: split axis 1; 2: the product read too
      SCOPED_TRACE("gate half " + std::to_string(gate_half) + " variant " + std::to_string(variant));
      GraphBuilder b(17);
      Value* x = b.input("x", DType::Float32, {B, S, K});
      Value* w = b.initializer("wgu", uniform_floats({K, 2 * N}, 4));
      Value* p = b.node_n("FusedMatMul", {x, w, b.initializer("bgu", uniform_floats({2 * N}, 5))}, 1, {}, "gate_up",
                          "ai.fusec")[0];
      Value* sizes = b.initializer("sizes", int64s({N, N}, {2}));
      if (variant == 2) b.output(p);
      const int64_t axis = variant == 1 ? 1 : -1;
      Value* pp = p;
      if (variant == 1) {  // a [B, 2S, N]-shaped product, split along S
        pp = b.node("Reshape", {p, b.initializer("shape", int64s({B, 2 * S, N}, {3}))}, {}, "view");
        sizes = b.initializer("sizes_s", int64s({S, S}, {2}));
      }
      std::vector<Value*> halves = b.node_n("Split", {pp, sizes}, 2, {attr("axis", axis)}, "split");
      Value* g = halves[gate_half];
      Value* v = halves[1 - gate_half];
      Value* s = b.node("Sigmoid", {g}, {}, "sig");
      Value* silu = b.node("Mul", {g, s}, {}, "silu");
      b.output(b.node("Mul", {v, silu}, {}, "gating"));
      Outcome r = run_pass(b.build());
      if (variant != 0) {
        EXPECT_FALSE(r.changed);
        EXPECT_EQ(count(*r.optimized, "GatedMatMul", "ai.fusec"), 0);
        continue;
      }
      EXPECT_TRUE(r.changed);
      const Node* gm = find_op(*r.optimized, "GatedMatMul");
      ASSERT_NE(gm, nullptr);
      EXPECT_EQ(count(*r.optimized, "Split"), 0);
      ASSERT_EQ(gm->inputs.size(), 5u);
      EXPECT_EQ(constant_of(gm->input(1))->dims(), (std::vector<int64_t>{K, N}));
      EXPECT_EQ(constant_of(gm->input(4))->dims(), (std::vector<int64_t>{N}));
      expect_same_numbers(*r.original, *r.optimized, 10 + gate_half);
    }
}

// ModernBERT's GeGLU: one product of a [K, 2N] weight cut in halves, an activation node (GELU) on
// the gate's half, where fuse_matmul_bias cannot take it into the product. The dynamo export cuts
// with a Split, the legacy one with two Slices; both fuse, gate first whichever half the gate is.
// Slices that are not the two halves, or a product read beside them, are left alone.
TEST(FuseGatedMatMul, AnActivationNodeOnAHalfFusesWhicheverCutMadeIt) {
  for (bool slices : {false, true})
    for (int gate_half : {0, 1})
      for (int variant = 0; variant < 3; ++variant) {  // 0: fuses; 1: not the halves; 2: the product read too
        if (!slices && variant == 1) continue;
        SCOPED_TRACE(std::string(slices ? "two Slices" : "one Split") + ", gate half " + std::to_string(gate_half) +
                     ", variant " + std::to_string(variant));
        GraphBuilder b(20);
        Value* x = b.input("x", DType::Float32, {B, S, K});
        Value* p = b.node("MatMul", {x, b.initializer("wi", uniform_floats({K, 2 * N}, 12))}, {}, "wi");
        if (variant == 2) b.output(p);
        Value* halves[2];
        if (slices) {
          Value* axes = b.initializer("axes", int64s({-1}, {1}));
          const int64_t from = variant == 1 ? 1 : 0;  // variant 1: [1, N + 1), overlapping the other half
          halves[0] =
              b.node("Slice",
                     {p, b.initializer("s0", int64s({from}, {1})), b.initializer("e0", int64s({from + N}, {1})), axes},
                     {}, "slice0");
          halves[1] = b.node("Slice",
                             {p, b.initializer("s1", int64s({N}, {1})), b.initializer("e1", int64s({INT64_MAX}, {1})),
                              axes},  // INT64_MAX: ONNX's "to the end"
                             {}, "slice1");
        } else {
          std::vector<Value*> h =
              b.node_n("Split", {p}, 2, {attr("axis", int64_t{-1}), attr("num_outputs", int64_t{2})}, "split");
          halves[0] = h[0];
          halves[1] = h[1];
        }
        Value* act = b.node("Gelu", {halves[gate_half]}, {}, "gelu");
        b.output(b.node("Mul", {act, halves[1 - gate_half]}, {}, "gating"));
        Outcome r = run_pass(b.build());
        if (variant != 0) {
          EXPECT_EQ(count(*r.optimized, "GatedMatMul", "ai.fusec"), 0);
          continue;
        }
        EXPECT_TRUE(r.changed);
        const Node* gm = find_op(*r.optimized, "GatedMatMul");
        ASSERT_NE(gm, nullptr);
        EXPECT_EQ(gm->attr_string("activation", ""), "Gelu");
        EXPECT_EQ(r.optimized->nodes().size(), 1u);
        EXPECT_EQ(constant_of(gm->input(1))->dims(), (std::vector<int64_t>{K, N}));
        expect_same_numbers(*r.original, *r.optimized, 20 + gate_half);
      }
}
