// recognize_layernorm: LayerNorm (two-pass, one-pass, the ONNX function body) and RMSNorm
// subgraphs become one node with the same numbers; each guard leaves the graph alone and says why.
#include "passes/recognize_layernorm.h"

#include <filesystem>

#include "importer/onnx_import.h"
#include "importer/tensor_proto.h"
#include "passes/pattern.h"
#include "passes/pipeline.h"
#include "passes/verify.h"
#include "pass_test_util.h"
#include "test_util.h"

using namespace fusec;
using namespace fusec::test;
namespace fs = std::filesystem;

namespace {

Outcome run_pass(std::unique_ptr<Graph> g, PassOptions opts = {}) {
  return run_one_pass<RecognizeLayerNormPass>(std::move(g), opts);
}

void expect_same_numbers(const Outcome& o, uint64_t seed = 11) {
  fusec::test::expect_same_numbers(*o.original, *o.optimized, seed);
}

void expect_unchanged(const Outcome& o, const std::string& reason_part) {
  fusec::test::expect_near_miss(o, "", reason_part);
}

struct LnForm {
  int variance = 0;  // 0: Pow(d, 2)  1: Mul(d, d)  2: one-pass mean(x²) − μ²
  int inverse = 0;   // 0: Div(d, Sqrt)  1: Mul(d, Reciprocal(Sqrt))  2: Mul(d, Pow(σ²+ε, −½))
  bool gamma = true, beta = true;
  std::vector<int64_t> axes = {-1};
  float eps = 1e-5f;
  int64_t keepdims = 1;
};

struct Net {
  GraphBuilder b;
  int64_t opset;
  Value* x;
  int64_t h;  // the last dim: γ and β's length
  Net(int64_t op = 17, Shape s = {2, 4, 8}) : b(op), opset(op), h(s.back().value) {
    x = b.input("x", DType::Float32, std::move(s));
  }
  Value* scalar(const std::string& name, float v) { return b.initializer(name, Tensor::scalar_float(v)); }
  Value* mean(Value* v, const std::vector<int64_t>& axes, int64_t keepdims, const std::string& name) {
    std::vector<NamedAttribute> a = {attr("keepdims", keepdims)};
    if (opset >= 18)
      return b.node("ReduceMean", {v, b.initializer(name + ".axes", int64s(axes, {static_cast<int64_t>(axes.size())}))},
                    a, name);
    a.push_back(attr("axes", axes));
    return b.node("ReduceMean", {v}, a, name);
  }
  /// The normalization without γ/β; returns (x−μ)/√(σ²+ε).
  Value* normalize(const LnForm& f) {
    Value* mu = mean(x, f.axes, f.keepdims, "mean");
    Value* d = b.node("Sub", {x, mu}, {}, "sub");
    Value* var;
    if (f.variance == 2) {
      Value* ms = mean(b.node("Mul", {x, x}, {}, "xx"), f.axes, f.keepdims, "mean_sq");
      var = b.node("Sub", {ms, b.node("Mul", {mu, mu}, {}, "mu2")}, {}, "var");
    } else {
      Value* sq = f.variance == 0 ? b.node("Pow", {d, scalar("two", 2.0f)}, {}, "sq") : b.node("Mul", {d, d}, {}, "sq");
      var = mean(sq, f.axes, f.keepdims, "var");
    }
    Value* ve = b.node("Add", {var, scalar("eps", f.eps)}, {}, "add_eps");
    if (f.inverse == 2)
      return b.node("Mul", {d, b.node("Pow", {ve, scalar("minus_half", -0.5f)}, {}, "rsqrt")}, {}, "norm");
    Value* s = b.node("Sqrt", {ve}, {}, "sqrt");
    if (f.inverse == 1) return b.node("Mul", {b.node("Reciprocal", {s}, {}, "recip"), d}, {}, "norm");
    return b.node("Div", {d, s}, {}, "norm");
  }
  Value* layernorm(const LnForm& f, Value* gamma = nullptr, Value* beta = nullptr) {
    Value* y = normalize(f);
    if (f.gamma)
      y = b.node("Mul", {y, gamma ? gamma : b.initializer("gamma", floats(ramp(h, 0.9f, 0.03f), {h}))}, {}, "scale");
    if (f.beta)
      y = b.node("Add", {beta ? beta : b.initializer("beta", floats(ramp(h, -0.1f, 0.02f), {h})), y}, {}, "shift");
    return y;
  }
  Value* rms(int square, bool recip, bool gamma) {
    Value* sq = square == 0 ? b.node("Pow", {x, scalar("two", 2.0f)}, {}, "sq") : b.node("Mul", {x, x}, {}, "sq");
    Value* ve = b.node("Add", {mean(sq, {-1}, 1, "ms"), scalar("eps", 1e-6f)}, {}, "add_eps");
    Value* s = b.node("Sqrt", {ve}, {}, "sqrt");
    Value* y = recip ? b.node("Mul", {x, b.node("Reciprocal", {s}, {}, "recip")}, {}, "norm")
                     : b.node("Div", {x, s}, {}, "norm");
    if (gamma) y = b.node("Mul", {b.initializer("gamma", floats(ramp(h, 0.9f, 0.03f), {h})), y}, {}, "scale");
    return y;
  }
};

}  // namespace

TEST(RecognizeLayerNorm, EveryFormBecomesOneLayerNormalization) {
  for (int variance = 0; variance < 3; ++variance)
    for (int inverse = 0; inverse < 3; ++inverse)
      for (int affine = 0; affine < 4; ++affine) {
        LnForm f;
        f.variance = variance;
        f.inverse = inverse;
        f.gamma = affine == 0 || affine == 1;
        f.beta = affine == 0 || affine == 2;
        SCOPED_TRACE("variance " + std::to_string(variance) + " inverse " + std::to_string(inverse) + " affine " +
                     std::to_string(affine));
        Net n;
        n.b.output(n.layernorm(f));
        Outcome o = run_pass(n.b.build());
        EXPECT_TRUE(o.changed);
        ASSERT_EQ(o.optimized->nodes().size(), 1u);
        const Node* ln = find_op(*o.optimized, "LayerNormalization");
        ASSERT_TRUE(ln);
        EXPECT_EQ(ln->domain, "");
        EXPECT_EQ(ln->name, "mean");
        EXPECT_EQ(ln->attr_int("axis", 0), 2);
        EXPECT_FLOAT_EQ(ln->attr_float("epsilon", 0), 1e-5f);
        EXPECT_EQ(ln->num_present_inputs(), f.beta ? 3u : 2u);
        EXPECT_EQ(ln->outputs.size(), 1u);
        EXPECT_EQ(ln->outputs[0], o.optimized->outputs[0]);
        EXPECT_EQ(ln->input(1)->type.shape, Shape{8});  // a unit scale when γ is absent
        expect_same_numbers(o);
      }
}

TEST(RecognizeLayerNorm, TrailingAxesAsAttributeOrInput) {
  struct Case {
    int64_t opset;
    std::vector<int64_t> axes;
    int64_t axis;
  };
  for (const Case& c :
       {Case{17, {-2, -1}, 1}, Case{18, {1, 2}, 1}, Case{18, {-1}, 2}, Case{13, {2}, 2}, Case{17, {0, 1, 2}, 0}}) {
    SCOPED_TRACE("opset " + std::to_string(c.opset) + " axes " + std::to_string(c.axes.size()));
    Net n(c.opset);
    LnForm f;
    f.axes = c.axes;
    f.gamma = f.beta = false;
    n.b.output(n.layernorm(f));
    Outcome o = run_pass(n.b.build());
    ASSERT_EQ(o.optimized->nodes().size(), 1u);
    const Node* ln = find_op(*o.optimized, "LayerNormalization");
    ASSERT_TRUE(ln);
    EXPECT_EQ(ln->attr_int("axis", -1), c.axis);
    EXPECT_EQ(o.optimized->opset(""), std::max<int64_t>(c.opset, 17));  // 13 is raised to 17
    expect_same_numbers(o);
  }
}

TEST(RecognizeLayerNorm, ParametersFromGraphInputsAndBroadcastConstants) {
  {  // γ and β are graph inputs
    Net n;
    Value* g = n.b.input("g", DType::Float32, {8});
    Value* bb = n.b.input("b", DType::Float32, {8});
    n.b.output(n.layernorm({}, g, bb));
    Outcome o = run_pass(n.b.build());
    const Node* ln = find_op(*o.optimized, "LayerNormalization");
    ASSERT_TRUE(ln);
    EXPECT_EQ(ln->input(1)->name, "g");
    EXPECT_EQ(ln->input(2)->name, "b");
    expect_same_numbers(o);
  }
  {  // γ of shape [1] and β of shape [1, 1, 8]: written out at the normalized shape [8]
    Net n;
    Value* g = n.b.initializer("g", floats({1.5f}, {1}));
    Value* bb = n.b.initializer("b", floats(ramp(8, -0.2f, 0.05f), {1, 1, 8}));
    n.b.output(n.layernorm({}, g, bb));
    Outcome o = run_pass(n.b.build());
    const Node* ln = find_op(*o.optimized, "LayerNormalization");
    ASSERT_TRUE(ln);
    EXPECT_EQ(ln->input(1)->type.shape, Shape{8});
    EXPECT_EQ(ln->input(2)->type.shape, Shape{8});
    expect_same_numbers(o);
  }
  {  // over two axes, γ [4, 1] broadcasts along the last: expanded to [4, 8]
    Net n;
    LnForm f;
    f.axes = {-2, -1};
    n.b.output(n.layernorm(f, n.b.initializer("g", floats(ramp(4, 0.5f, 0.25f), {4, 1})), nullptr));
    Outcome o = run_pass(n.b.build());
    const Node* ln = find_op(*o.optimized, "LayerNormalization");
    ASSERT_TRUE(ln);
    EXPECT_EQ(ln->input(1)->type.shape, (Shape{4, 8}));
    expect_same_numbers(o);
  }
}

TEST(RecognizeLayerNorm, ResidualAfterTheNormalizationIsNotABias) {
  Net n;
  Value* r = n.b.input("residual", DType::Float32, {2, 4, 8});
  LnForm f;
  f.gamma = f.beta = false;
  n.b.output(n.b.node("Add", {n.layernorm(f), r}, {}, "residual_add"));
  Outcome o = run_pass(n.b.build());
  EXPECT_EQ(count(*o.optimized, "LayerNormalization"), 1);
  EXPECT_EQ(count(*o.optimized, "Add"), 1);
  EXPECT_EQ(find_op(*o.optimized, "LayerNormalization")->num_present_inputs(), 2u);
  expect_same_numbers(o);
}

TEST(RecognizeLayerNorm, MeanAndInvStdDevReadElsewhereBecomeOutputs) {
  Net n;
  LnForm f;
  f.inverse = 1;
  n.b.output(n.layernorm(f));
  Graph& g = n.b.graph();
  n.b.output(g.find_value("mean_out"));
  n.b.output(n.b.node("Neg", {g.find_value("recip_out")}, {}, "uses_inv"));
  Outcome o = run_pass(n.b.build());
  const Node* ln = find_op(*o.optimized, "LayerNormalization");
  ASSERT_TRUE(ln);
  ASSERT_EQ(ln->outputs.size(), 3u);
  EXPECT_EQ(ln->outputs[1]->name, "mean_out");
  EXPECT_EQ(ln->outputs[2]->name, "recip_out");
  EXPECT_EQ(o.optimized->nodes().size(), 2u);
  expect_same_numbers(o);
}

TEST(RecognizeLayerNorm, RmsNormBecomesSimplifiedLayerNorm) {
  for (int square = 0; square < 2; ++square)
    for (int recip = 0; recip < 2; ++recip)
      for (int gamma = 0; gamma < 2; ++gamma) {
        SCOPED_TRACE("square " + std::to_string(square) + " recip " + std::to_string(recip) + " gamma " +
                     std::to_string(gamma));
        Net n;
        n.b.output(n.rms(square, recip == 1, gamma == 1));
        Outcome o = run_pass(n.b.build());
        ASSERT_EQ(o.optimized->nodes().size(), 1u);
        const Node* s = find_op(*o.optimized, "SimplifiedLayerNorm");
        ASSERT_TRUE(s);
        EXPECT_EQ(s->domain, "ai.fusec");
        EXPECT_EQ(s->attr_int("axis", 0), 2);
        EXPECT_FLOAT_EQ(s->attr_float("epsilon", 0), 1e-6f);
        EXPECT_EQ(o.optimized->opset("ai.fusec"), 1);
        expect_same_numbers(o);
      }
  PassOptions p;
  p.portable = true;
  Net n;
  n.b.output(n.rms(0, false, true));
  expect_unchanged(run_pass(n.b.build(), p), "--portable");
}

TEST(RecognizeLayerNorm, PortableRmsNormIsTheStandardOpFromOpset23) {
  PassOptions p;
  p.portable = true;
  Net n(23);
  n.b.output(n.rms(1, false, true));
  Outcome o = run_pass(n.b.build(), p);
  ASSERT_EQ(o.optimized->nodes().size(), 1u);
  const Node* s = find_op(*o.optimized, "RMSNormalization");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->domain, "");
  EXPECT_EQ(s->attr_int("axis", 0), 2);
  EXPECT_FLOAT_EQ(s->attr_float("epsilon", 0), 1e-6f);
  expect_same_numbers(o);
  Net old(18);
  old.b.output(old.rms(1, false, true));
  expect_unchanged(run_pass(old.b.build(), p), "predates RMSNormalization");
}

// torch's exporter writes RMSNormalization at opset 23: it becomes SimplifiedLayerNorm, which the
// later fusions read, where the two compute the same thing; otherwise it stays, and says why.
TEST(RecognizeLayerNorm, StandardRmsNormalizationBecomesSimplifiedLayerNorm) {
  auto build = [](std::vector<int64_t> scale_dims, int64_t axis, int64_t stash) {
    GraphBuilder b(23);
    Value* x = b.input("x", DType::Float32, {2, 4, 8});
    int64_t len = 1;
    for (int64_t d : scale_dims) len *= d;
    Value* g = b.initializer("gamma", floats(ramp(len, 0.9f, 0.03f), scale_dims));
    b.output(b.node("RMSNormalization", {x, g}, {attr("axis", axis), attr("epsilon", 1e-6f), attr("stash_type", stash)},
                    "rms"));
    return b.build();
  };
  for (int64_t axis : {int64_t{-1}, int64_t{1}}) {
    Outcome o = run_pass(build(axis == 1 ? std::vector<int64_t>{1, 4, 8} : std::vector<int64_t>{8}, axis, 1));
    const Node* s = find_op(*o.optimized, "SimplifiedLayerNorm");
    ASSERT_TRUE(s) << "axis " << axis;
    EXPECT_EQ(s->domain, "ai.fusec");
    EXPECT_EQ(s->attr_int("axis", 0), axis == 1 ? 1 : 2);
    EXPECT_FLOAT_EQ(s->attr_float("epsilon", 0), 1e-6f);
    expect_same_numbers(o);
  }
  expect_unchanged(run_pass(build({1, 8}, 1, 1)), "broadcasts within the normalized dims");
  expect_unchanged(run_pass(build({8}, -1, 11)), "stash_type 11");
  PassOptions p;
  p.portable = true;
  Outcome kept = run_pass(build({8}, -1, 1), p);
  EXPECT_TRUE(find_op(*kept.optimized, "RMSNormalization"));
}

TEST(RecognizeLayerNorm, OldOpsetThatCannotRiseGetsFusecLayerNorm) {
  auto build = [] {
    auto n = std::make_unique<Net>(13);
    // Reshape changes meaning at opset 14, so the model cannot be raised to 17.
    n->x = n->b.node("Reshape", {n->x, n->b.initializer("shape", int64s({2, 4, 8}, {3}))}, {}, "reshape");
    n->b.output(n->layernorm({}));
    return n->b.build();
  };
  Outcome o = run_pass(build());
  EXPECT_EQ(count(*o.optimized, "LayerNormalization", "ai.fusec"), 1);
  EXPECT_EQ(o.optimized->opset(""), 13);
  expect_same_numbers(o);
  PassOptions p;
  p.portable = true;
  expect_unchanged(run_pass(build(), p), "cannot be raised");
}

TEST(RecognizeLayerNorm, GuardsAreNearMisses) {
  {  // the middle axis of three: not trailing
    Net n;
    LnForm f;
    f.axes = {1};
    n.b.output(n.layernorm(f, n.b.initializer("g", floats({1.0f}, {1})), n.b.initializer("b", floats({0.0f}, {1}))));
    expect_unchanged(run_pass(n.b.build()), "wrong axis");
  }
  {  // axes 0 and 2: not contiguous
    Net n;
    LnForm f;
    f.axes = {0, 2};
    f.gamma = f.beta = false;
    n.b.output(n.layernorm(f));
    expect_unchanged(run_pass(n.b.build()), "wrong axis");
  }
  {  // keepdims=0 (square input so the broadcasts still type-check)
    Net n(17, {8, 8});
    LnForm f;
    f.keepdims = 0;
    f.gamma = f.beta = false;
    n.b.output(n.layernorm(f));
    expect_unchanged(run_pass(n.b.build()), "keepdims=0");
  }
  {  // ε is a graph input
    Net n;
    Value* mu = n.mean(n.x, {-1}, 1, "mean");
    Value* d = n.b.node("Sub", {n.x, mu});
    Value* var = n.mean(n.b.node("Mul", {d, d}), {-1}, 1, "var");
    Value* eps = n.b.input("eps", DType::Float32, {});
    n.b.output(n.b.node("Div", {d, n.b.node("Sqrt", {n.b.node("Add", {var, eps})})}));
    expect_unchanged(run_pass(n.b.build()), "epsilon 'eps' is not a constant");
  }
  {  // γ varies along a non-normalized axis
    Net n;
    n.b.output(n.layernorm({}, n.b.initializer("g", floats(ramp(4, 1, 1), {4, 1})), nullptr));
    expect_unchanged(run_pass(n.b.build()), "not broadcastable along the normalized axes");
  }
  {  // d has a reader outside the pattern
    Net n;
    n.b.output(n.layernorm({}));
    n.b.output(n.b.node("Neg", {n.b.graph().find_value("sub_out")}, {}, "spy"));
    expect_unchanged(run_pass(n.b.build()), "'sub_out' has 3 consumers");
  }
  {  // σ² is a graph output
    Net n;
    n.b.output(n.layernorm({}));
    n.b.output(n.b.graph().find_value("var_out"));
    expect_unchanged(run_pass(n.b.build()), "'var_out' is a graph output");
  }
  {  // the two ReduceMeans disagree
    Net n;
    Value* mu = n.mean(n.x, {-1}, 1, "mean");
    Value* d = n.b.node("Sub", {n.x, mu});
    Value* var = n.mean(n.b.node("Mul", {d, d}), {-2, -1}, 1, "var");
    n.b.output(n.b.node("Div", {d, n.b.node("Sqrt", {n.b.node("Add", {var, n.scalar("eps", 1e-5f)})})}));
    expect_unchanged(run_pass(n.b.build()), "reduce different axes");
  }
}

TEST(RecognizeLayerNorm, ThroughThePipelineWithCleanup) {
  Net n(17, {Dim::sym("N"), 4, 8});
  n.b.output(n.layernorm({}));
  auto g = n.b.build();
  infer_shapes(*g);
  PipelineOptions po;
  po.only = {"cleanup", "constant_folding", "recognize_layernorm"};
  OptimizeResult r = optimize_graph(*g, po);
  EXPECT_EQ(g->nodes().size(), 1u);
  EXPECT_EQ(count(*g, "LayerNormalization"), 1);
  EXPECT_TRUE(r.near_misses.empty());
}

// The conformance suite's function-body expansions (Flatten, one-pass variance, Reshape back,
// Mean/InvStdDev outputs) collapse into one LayerNormalization and still give the expected outputs.
TEST(RecognizeLayerNorm, OnnxFunctionBodyCollapsesToOneNode) {
  fs::path root = "/usr/share/libonnx-testdata/data/node";
  if (!fs::exists(root)) GTEST_SKIP() << "no ONNX test data at " << root;
  int cases = 0;
  for (const auto& dir : fs::directory_iterator(root)) {
    std::string name = dir.path().filename().string();
    if (name.rfind("test_layer_normalization_", 0) != 0 || name.find("_expanded") == std::string::npos) continue;
    SCOPED_TRACE(name);
    ++cases;
    auto g = import_onnx_file(dir.path() / "model.onnx");
    fs::path set = dir.path() / "test_data_set_0";
    std::vector<Tensor> inputs, expected;
    for (size_t i = 0; fs::exists(set / ("input_" + std::to_string(i) + ".pb")); ++i)
      inputs.push_back(read_tensor_pb(set / ("input_" + std::to_string(i) + ".pb")));
    for (size_t i = 0; fs::exists(set / ("output_" + std::to_string(i) + ".pb")); ++i)
      expected.push_back(read_tensor_pb(set / ("output_" + std::to_string(i) + ".pb")));
    for (size_t i = 0; i < inputs.size(); ++i) g->inputs[i]->type.shape = shape_of(inputs[i].dims());
    infer_shapes(*g);
    optimize_graph(*g, PipelineOptions{});
    EXPECT_EQ(g->nodes().size(), 1u);
    EXPECT_EQ(count(*g, "LayerNormalization"), 1);
    auto got = run_cpu(*g, inputs);
    ASSERT_EQ(got.size(), expected.size());
    for (size_t i = 0; i < got.size(); ++i) expect_close(got[i], expected[i], 1e-4, 1e-5);
  }
  EXPECT_GT(cases, 0);
}
