// fuse_skip_layernorm: residual Add + LayerNormalization -> SkipLayerNorm, and residual Add +
// SimplifiedLayerNorm -> SkipSimplifiedLayerNorm (with S when the sum is read later); each guard
// leaves the graph alone and says why.
#include "passes/fuse_skip_layernorm.h"

#include "passes/pattern.h"
#include "passes/verify.h"
#include "pass_test_util.h"
#include "test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

Outcome run_pass(std::unique_ptr<Graph> g, PassOptions opts = {}) {
  return run_one_pass<FuseSkipLayerNormPass>(std::move(g), opts);
}

void expect_same_numbers(const Outcome& o) { fusec::test::expect_same_numbers(*o.original, *o.optimized, 5); }

void expect_unchanged(const Outcome& o, const std::string& reason_part) {
  fusec::test::expect_near_miss(o, "", reason_part);
}

struct Net {
  GraphBuilder b{17};
  Value* a = b.input("a", DType::Float32, {2, 4, 8});
  Value* gamma = b.initializer("gamma", floats(ramp(8, 0.9f, 0.03f), {8}));
  Value* beta = b.initializer("beta", floats(ramp(8, -0.1f, 0.02f), {8}));
  /// LayerNormalization(s) with `n_out` outputs.
  std::vector<Value*> ln(Value* s, size_t n_out = 1, bool bias = true, std::vector<NamedAttribute> attrs = {}) {
    attrs.push_back(attr("epsilon", 1e-3f));
    std::vector<Value*> ins = {s, gamma};
    if (bias) ins.push_back(beta);
    return b.node_n("LayerNormalization", ins, n_out, attrs, "ln");
  }
};

}  // namespace

TEST(FuseSkipLayerNorm, ResidualAddAndLayerNormBecomeOne) {
  for (int order = 0; order < 2; ++order)
    for (int bias = 0; bias < 2; ++bias) {
      SCOPED_TRACE("order " + std::to_string(order) + " bias " + std::to_string(bias));
      Net n;
      Value* r = n.b.input("r", DType::Float32, {2, 4, 8});
      Value* s = order ? n.b.node("Add", {r, n.a}, {}, "residual") : n.b.node("Add", {n.a, r}, {}, "residual");
      n.b.output(n.ln(s, 1, bias == 1)[0]);
      Outcome o = run_pass(n.b.build());
      EXPECT_TRUE(o.changed);
      ASSERT_EQ(o.optimized->nodes().size(), 1u);
      const Node* f = find_op(*o.optimized, "SkipLayerNorm");
      ASSERT_TRUE(f);
      EXPECT_EQ(f->domain, "ai.fusec");
      EXPECT_EQ(f->name, "residual");
      EXPECT_EQ(f->fused_from, (std::vector<std::string>{"residual", "ln"}));
      EXPECT_EQ(f->num_present_inputs(), bias ? 4u : 3u);
      EXPECT_FLOAT_EQ(f->attr_float("epsilon", 0), 1e-3f);
      EXPECT_EQ(f->outputs.size(), 1u);
      EXPECT_EQ(o.optimized->opset("ai.fusec"), 1);
      expect_same_numbers(o);
    }
}

TEST(FuseSkipLayerNorm, SumReadLaterIsTheSecondOutput) {
  // Post-LN block: s = a + r; y = LN(s); the next residual reads s too.
  Net n;
  Value* r = n.b.input("r", DType::Float32, {2, 4, 8});
  Value* s = n.b.node("Add", {n.a, r}, {}, "residual");
  Value* y = n.ln(s)[0];
  n.b.output(n.b.node("Add", {y, s}, {}, "next_residual"));
  Outcome o = run_pass(n.b.build());
  const Node* f = find_op(*o.optimized, "SkipLayerNorm");
  ASSERT_TRUE(f);
  ASSERT_EQ(f->outputs.size(), 2u);
  EXPECT_EQ(f->outputs[1]->name, "residual_out");
  EXPECT_EQ(o.optimized->nodes().size(), 2u);
  expect_same_numbers(o);
}

TEST(FuseSkipLayerNorm, ResidualAddAndRmsNormBecomeOne) {
  // A pre-norm decoder block: h = x + attn; y = RMSNorm(h); the next residual reads h as well.
  Net n;
  n.b.graph().opsets["ai.fusec"] = 1;
  Value* r = n.b.input("r", DType::Float32, {2, 4, 8});
  Value* h = n.b.node("Add", {r, n.a}, {}, "residual");
  Value* y = n.b.node_n("SimplifiedLayerNorm", {h, n.gamma}, 1, {attr("epsilon", 1e-3f)}, "rms", "ai.fusec")[0];
  n.b.output(n.b.node("Add", {y, h}, {}, "next_residual"));
  Outcome o = run_pass(n.b.build());
  EXPECT_TRUE(o.changed);
  const Node* f = find_op(*o.optimized, "SkipSimplifiedLayerNorm");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->domain, "ai.fusec");
  EXPECT_EQ(f->fused_from, (std::vector<std::string>{"residual", "rms"}));
  EXPECT_EQ(f->num_present_inputs(), 3u);
  EXPECT_EQ(f->input(2)->name, "gamma");
  EXPECT_FLOAT_EQ(f->attr_float("epsilon", 0), 1e-3f);
  ASSERT_EQ(f->outputs.size(), 2u);
  EXPECT_EQ(f->outputs[1]->name, "residual_out");
  EXPECT_EQ(count(*o.optimized, "SimplifiedLayerNorm", "ai.fusec"), 0);
  expect_same_numbers(o);

  // Under --portable there is no standard op to write.
  Net p;
  p.b.graph().opsets["ai.fusec"] = 1;
  Value* pr = p.b.input("r", DType::Float32, {2, 4, 8});
  Value* ph = p.b.node("Add", {pr, p.a}, {}, "residual");
  p.b.output(p.b.node_n("SimplifiedLayerNorm", {ph, p.gamma}, 1, {}, "rms", "ai.fusec")[0]);
  PassOptions portable;
  portable.portable = true;
  expect_unchanged(run_pass(p.b.build(), portable), "SkipSimplifiedLayerNorm is not standard ONNX");
}

TEST(FuseSkipLayerNorm, SkipMayBroadcastToX) {
  // Embeddings: Gather output + a position table [4, 8] (constant) -> LN.
  Net n;
  Value* pos = n.b.initializer("pos", floats(ramp(32, -0.5f, 0.03f), {4, 8}));
  n.b.output(n.ln(n.b.node("Add", {pos, n.a}, {}, "embed_add"))[0]);
  Outcome o = run_pass(n.b.build());
  const Node* f = find_op(*o.optimized, "SkipLayerNorm");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->input(0)->name, "a");  // X is the operand with the sum's shape
  EXPECT_EQ(f->input(1)->name, "pos");
  expect_same_numbers(o);
}

TEST(FuseSkipLayerNorm, GuardsAreNearMisses) {
  {  // neither operand has the sum's shape
    GraphBuilder b(17);
    Value* a = b.input("a", DType::Float32, {2, 1, 8});
    Value* c = b.input("c", DType::Float32, {1, 4, 8});
    Value* s = b.node("Add", {a, c}, {}, "add");
    b.output(b.node("LayerNormalization", {s, b.initializer("g", floats(std::vector<float>(8, 1.0f), {8}))}, {}, "ln"));
    expect_unchanged(run_pass(b.build()), "neither operand has the sum's shape");
  }
  {  // a MatMul's bias: left for the MatMul fusion
    Net n;
    Value* w = n.b.initializer("w", floats(ramp(64, -0.3f, 0.01f), {8, 8}));
    Value* h = n.b.node("MatMul", {n.a, w}, {}, "fc");
    n.b.output(n.ln(n.b.node("Add", {h, n.b.initializer("fc.bias", floats(ramp(8, 0, 0.1f), {8}))}, {}, "fc_bias"))[0]);
    expect_unchanged(run_pass(n.b.build()), "that is the MatMul's bias");
  }
  {  // the LayerNorm's Mean output is read
    Net n;
    Value* r = n.b.input("r", DType::Float32, {2, 4, 8});
    auto outs = n.ln(n.b.node("Add", {n.a, r}), 3);
    n.b.output(outs[0]);
    n.b.output(outs[1]);
    expect_unchanged(run_pass(n.b.build()), "Mean output is read");
  }
  {  // stash_type other than float32
    Net n;
    Value* r = n.b.input("r", DType::Float32, {2, 4, 8});
    n.b.output(n.ln(n.b.node("Add", {n.a, r}), 1, true, {attr("stash_type", int64_t{11})})[0]);
    expect_unchanged(run_pass(n.b.build()), "stash_type 11");
  }
  {  // --portable
    Net n;
    Value* r = n.b.input("r", DType::Float32, {2, 4, 8});
    n.b.output(n.ln(n.b.node("Add", {n.a, r}))[0]);
    PassOptions p;
    p.portable = true;
    expect_unchanged(run_pass(n.b.build(), p), "--portable");
  }
}
