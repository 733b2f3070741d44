// fuse_layernorm_gelu: LayerNormalization -> Gelu becomes LayerNormGelu (approximate carried);
// each guard leaves the graph alone and says why.
#include "passes/fuse_layernorm_gelu.h"

#include "passes/pattern.h"
#include "passes/pipeline.h"
#include "passes/verify.h"
#include "pass_test_util.h"
#include "test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

Outcome run_pass(std::unique_ptr<Graph> g, PassOptions opts = {}) {
  return run_one_pass<FuseLayerNormGeluPass>(std::move(g), opts);
}

void expect_same_numbers(const Outcome& o) { fusec::test::expect_same_numbers(*o.original, *o.optimized, 9); }

void expect_unchanged(const Outcome& o, const std::string& reason_part) {
  fusec::test::expect_near_miss(o, "", reason_part);
}

/// x -> LayerNormalization (n_out outputs, domain ln_domain) -> Gelu (gelu_domain, approximate).
struct Net {
  GraphBuilder b;
  Value* x;
  std::vector<Value*> ln_out;
  Value* y;
  Net(int64_t opset, const std::string& ln_domain, const std::string& gelu_domain, const std::string& approximate,
      size_t n_out = 1, bool bias = true)
      : b(opset) {
    x = b.input("x", DType::Float32, {3, 5, 16});
    std::vector<Value*> ins = {x, b.initializer("gamma", floats(ramp(16, 0.8f, 0.02f), {16}))};
    if (bias) ins.push_back(b.initializer("beta", floats(ramp(16, -0.2f, 0.03f), {16})));
    ln_out = b.node_n("LayerNormalization", ins, n_out, {attr("epsilon", 1e-4f)}, "ln", ln_domain);
    y = b.node_n("Gelu", {ln_out[0]}, 1, {attr("approximate", approximate)}, "gelu", gelu_domain)[0];
  }
};

}  // namespace

TEST(FuseLayerNormGelu, StandardOrFusecLayerNormAndGelu) {
  struct Case {
    int64_t opset;
    const char *ln_domain, *gelu_domain, *approximate;
    bool bias;
  };
  for (const Case& c : {Case{20, "", "", "none", true}, Case{20, "", "", "tanh", false},
                        Case{17, "", "ai.fusec", "none", true}, Case{13, "ai.fusec", "ai.fusec", "tanh", true}}) {
    SCOPED_TRACE(std::to_string(c.opset) + " " + c.ln_domain + " " + c.gelu_domain + " " + c.approximate);
    Net n(c.opset, c.ln_domain, c.gelu_domain, c.approximate, 1, c.bias);
    n.b.output(n.y);
    Outcome o = run_pass(n.b.build());
    EXPECT_TRUE(o.changed);
    ASSERT_EQ(o.optimized->nodes().size(), 1u);
    const Node* f = o.optimized->nodes()[0].get();
    EXPECT_EQ(f->op_type, "LayerNormGelu");
    EXPECT_EQ(f->domain, "ai.fusec");
    EXPECT_EQ(f->name, "ln");
    EXPECT_EQ(f->attr_string("approximate", ""), c.approximate);
    EXPECT_FLOAT_EQ(f->attr_float("epsilon", 0), 1e-4f);
    EXPECT_EQ(f->num_present_inputs(), c.bias ? 3u : 2u);
    EXPECT_EQ(f->outputs[0]->name, "gelu_out");
    expect_same_numbers(o);
  }
}

TEST(FuseLayerNormGelu, GuardsAreNearMisses) {
  {  // the LayerNorm output has a second reader
    Net n(20, "", "", "none");
    n.b.output(n.y);
    n.b.output(n.b.node("Neg", {n.ln_out[0]}, {}, "spy"));
    expect_unchanged(run_pass(n.b.build()), "has 2 consumers");
  }
  {  // the LayerNorm output is a graph output
    Net n(20, "", "", "none");
    n.b.output(n.y);
    n.b.output(n.ln_out[0]);
    expect_unchanged(run_pass(n.b.build()), "graph output");
  }
  {  // InvStdDev is read
    Net n(20, "", "", "none", 3);
    n.b.output(n.y);
    n.b.output(n.ln_out[2]);
    expect_unchanged(run_pass(n.b.build()), "InvStdDev output is read");
  }
  {  // --portable
    Net n(20, "", "", "none");
    n.b.output(n.y);
    PassOptions p;
    p.portable = true;
    expect_unchanged(run_pass(n.b.build(), p), "--portable");
  }
}

TEST(FuseLayerNormGelu, MlpBlockThroughThePipeline) {
  // Linear -> LayerNormalization -> erf GELU (decomposed) -> Dropout, at opset 17: the bias Add
  // stays with the MatMul (no SkipLayerNorm), the GELU is recognized, and LN + Gelu fuse.
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {Dim::sym("N"), 16});
  Value* h = b.node("MatMul", {x, b.initializer("w", floats(ramp(256, -0.2f, 0.0015f), {16, 16}))}, {}, "fc");
  h = b.node("Add", {h, b.initializer("fc.bias", floats(ramp(16, -0.1f, 0.01f), {16}))}, {}, "fc.add");
  h = b.node("LayerNormalization",
             {h, b.initializer("g", floats(ramp(16, 0.9f, 0.01f), {16})),
              b.initializer("be", floats(ramp(16, -0.1f, 0.01f), {16}))},
             {attr("axis", int64_t{-1}), attr("epsilon", 1e-5f)}, "ln");
  Value* u = b.node("Div", {h, b.initializer("sqrt2", Tensor::scalar_float(1.4142135f))}, {}, "gelu.div");
  Value* e = b.node("Add", {b.node("Erf", {u}, {}, "gelu.erf"), b.initializer("one", Tensor::scalar_float(1))}, {},
                    "gelu.add");
  Value* m = b.node("Mul", {h, e}, {}, "gelu.mul");
  Value* y = b.node("Mul", {m, b.initializer("half", Tensor::scalar_float(0.5f))}, {}, "gelu.half");
  b.output(b.node("Dropout", {y}, {}, "drop"));
  auto g = b.build();
  std::vector<int64_t> dims = {2, 16};
  g->inputs[0]->type.shape = shape_of(dims);
  infer_shapes(*g);
  auto original = g->clone();
  optimize_graph(*g, PipelineOptions{});
  EXPECT_EQ(count(*g, "LayerNormGelu", "ai.fusec"), 1);
  EXPECT_EQ(count(*g, "SkipLayerNorm", "ai.fusec"), 0);
  EXPECT_EQ(count(*g, "Erf"), 0);
  EXPECT_TRUE(verify_equivalence(*original, *g, 2, 1, {1e-4, 1e-5}).ok);
}
