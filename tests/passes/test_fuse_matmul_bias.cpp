// fuse_matmul_bias: MatMul -> Add(bias) [-> activation] -> Gemm / FusedMatMul; op counts, names,
// attributes, each guard's near-miss, and outputs equal to the unfused graph on random inputs.
#include <algorithm>
#include <random>

#include "passes/fuse_matmul_bias.h"
#include "passes/pattern.h"
#include "passes/pipeline.h"
#include "passes/verify.h"
#include "pass_test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

Tensor random_floats(std::vector<int64_t> dims, uint64_t seed, DType t = DType::Float32) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(static_cast<size_t>(checked_numel(dims)));
  for (float& x : v) x = u(rng);
  Tensor f = Tensor::from_float(v, dims);
  if (t == DType::Float32) return f;
  Tensor d(t, dims);
  for (int64_t i = 0; i < d.numel(); ++i) d.data<double>()[i] = v[static_cast<size_t>(i)];
  return d;
}

using Result = PipelineOutcome;

Result fuse(std::unique_ptr<Graph> g, bool portable = false) {
  return run_through_pipeline(std::move(g), "fuse_matmul_bias", portable);
}

void expect_equivalent(const Result& r, uint64_t seed = 11) {
  fusec::test::expect_same_numbers(*r.original, *r.optimized, seed);
}

void expect_unchanged(const Result& r) { fusec::test::expect_unchanged(*r.original, *r.optimized); }

/// The near-miss whose text mentions `needle` (in what or reason), or nullptr.
const NearMiss* near_miss(const Result& r, const std::string& needle) {
  return find_near_miss(r.opt.near_misses, "fuse_matmul_bias", needle);
}

/// A [a_dims] x W[K,N] -> Add(bias) [-> act] graph; returns the builder's graph.
struct Spec {
  std::vector<int64_t> a_dims = {2, 5, 8};
  int64_t n = 6;
  std::vector<int64_t> bias_dims = {6};  // empty: no Add
  bool bias_const = true, w_const = true;
  std::string act;  // "" or an op type
  std::vector<NamedAttribute> act_attrs;
  DType dtype = DType::Float32;
  int64_t opset = 20;
};

std::unique_ptr<Graph> build(const Spec& s, const std::function<void(GraphBuilder&, Value*)>& extra = nullptr) {
  GraphBuilder b(s.opset);
  Value* a = b.input("A", s.dtype, shape_of(s.a_dims));
  const int64_t k = s.a_dims.back();
  Value* w = s.w_const ? b.initializer("W", random_floats({k, s.n}, 1, s.dtype)) : b.input("W", s.dtype, {k, s.n});
  Value* y = b.node("MatMul", {a, w}, {}, "mm");
  if (!s.bias_dims.empty()) {
    Value* bias = s.bias_const ? b.initializer("bias", random_floats(s.bias_dims, 2, s.dtype))
                               : b.input("bias", s.dtype, shape_of(s.bias_dims));
    y = b.node("Add", {y, bias}, {}, "add");
  }
  if (!s.act.empty()) y = b.node(s.act, {y}, s.act_attrs, "act");
  b.output(y);
  if (extra) extra(b, y);
  return b.build();
}

}  // namespace

// A[2,5,8] x W + bias[6]: A is 3-D, so no Gemm: FusedMatMul named after the MatMul.
TEST(FuseMatMulBias, NdBiasBecomesFusedMatMul) {
  Result r = fuse(build({}));
  EXPECT_EQ(r.optimized->nodes().size(), 1u);
  const Node* f = find_op(*r.optimized, "FusedMatMul");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->domain, "ai.fusec");
  EXPECT_EQ(f->name, "mm");
  EXPECT_EQ(f->fused_from, (std::vector<std::string>{"mm", "add"}));
  ASSERT_EQ(f->inputs.size(), 3u);
  EXPECT_EQ(f->inputs[2]->name, "bias");
  EXPECT_EQ(f->outputs[0]->name, "add_out");
  EXPECT_FALSE(f->has_attr("activation"));
  EXPECT_EQ(r.optimized->opsets.count("ai.fusec"), 1u);
  ASSERT_EQ(r.opt.rewrites.size(), 1u);
  EXPECT_EQ(r.opt.rewrites[0].result, "mm");
  expect_equivalent(r);
}

// A 2-D product with a bias and nothing after it is a standard Gemm, also under --portable.
TEST(FuseMatMulBias, TwoDBiasBecomesGemm) {
  for (bool portable : {false, true}) {
    SCOPED_TRACE(portable);
    Spec s;
    s.a_dims = {5, 8};
    Result r = fuse(build(s), portable);
    EXPECT_EQ(r.optimized->nodes().size(), 1u);
    const Node* f = find_op(*r.optimized, "Gemm");
    ASSERT_TRUE(f);
    EXPECT_EQ(f->domain, "");
    EXPECT_EQ(f->name, "mm");
    EXPECT_EQ(f->fused_from, (std::vector<std::string>{"mm", "add"}));
    EXPECT_EQ(r.optimized->opsets.count("ai.fusec"), 0u);
    expect_equivalent(r);
  }
}

// Every activation FusedMatMul knows, with its parameters; 2-D and 3-D A; W constant or computed.
TEST(FuseMatMulBias, ActivationsJoin) {
  struct Case {
    std::string op;
    std::vector<NamedAttribute> attrs;
    std::string activation;
    std::vector<float> params;
  };
  const std::vector<Case> cases = {
      {"Relu", {}, "Relu", {}},
      {"LeakyRelu", {attr("alpha", 0.2f)}, "LeakyRelu", {0.2f}},
      {"Sigmoid", {}, "Sigmoid", {}},
      {"Tanh", {}, "Tanh", {}},
      {"HardSigmoid", {attr("alpha", 0.3f), attr("beta", 0.4f)}, "HardSigmoid", {0.3f, 0.4f}},
      {"HardSwish", {}, "HardSwish", {}},
      {"Gelu", {}, "Gelu", {}},
      {"Gelu", {attr("approximate", std::string("tanh"))}, "GeluTanh", {}},
  };
  for (const Case& c : cases)
    for (bool two_d : {true, false})
      for (bool w_const : {true, false}) {
        SCOPED_TRACE(c.activation + (two_d ? " 2-D" : " 3-D") + (w_const ? " const W" : " computed W"));
        Spec s;
        if (two_d) s.a_dims = {5, 8};
        s.act = c.op;
        s.act_attrs = c.attrs;
        s.w_const = w_const;
        Result r = fuse(build(s));
        EXPECT_EQ(r.optimized->nodes().size(), 1u);
        const Node* f = find_op(*r.optimized, "FusedMatMul");
        ASSERT_TRUE(f);
        EXPECT_EQ(f->attr_string("activation", ""), c.activation);
        EXPECT_EQ(f->attr_floats("activation_params"), c.params);
        EXPECT_EQ(f->fused_from, (std::vector<std::string>{"mm", "add", "act"}));
        EXPECT_EQ(f->outputs[0]->name, "act_out");
        expect_equivalent(r);
      }
}

// Clip with constant bounds (ReLU6) and without bounds.
TEST(FuseMatMulBias, ClipActivation) {
  Spec s;
  s.act = "Clip";
  auto g = build(s);
  // Re-wire the Clip to take constant bounds 0 and 6.
  Node* clip = nullptr;
  for (const auto& n : g->nodes())
    if (n->op_type == "Clip") clip = n.get();
  ASSERT_TRUE(clip);
  clip->inputs.push_back(g->add_initializer("lo", floats({0.0f}, {})));
  clip->inputs.push_back(g->add_initializer("hi", floats({0.5f}, {})));
  clip->inputs[1]->consumers.push_back(clip);
  clip->inputs[2]->consumers.push_back(clip);
  Result r = fuse(std::move(g));
  const Node* f = find_op(*r.optimized, "FusedMatMul");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->attr_string("activation", ""), "Clip");
  EXPECT_EQ(f->attr_floats("activation_params"), (std::vector<float>{0.0f, 0.5f}));
  expect_equivalent(r);
}

// MatMul -> activation with no bias: FusedMatMul with two inputs.
TEST(FuseMatMulBias, ActivationWithoutBias) {
  for (const char* act : {"Relu", "Gelu"}) {
    SCOPED_TRACE(act);
    Spec s;
    s.bias_dims = {};
    s.act = act;
    Result r = fuse(build(s));
    EXPECT_EQ(r.optimized->nodes().size(), 1u);
    const Node* f = find_op(*r.optimized, "FusedMatMul");
    ASSERT_TRUE(f);
    EXPECT_EQ(f->inputs.size(), 2u);
    EXPECT_EQ(f->attr_string("activation", ""), act);
    EXPECT_EQ(f->fused_from, (std::vector<std::string>{"mm", "act"}));
    expect_equivalent(r);
  }
}

// A [1,1,N] bias is the same vector: FusedMatMul gets it as a fresh 1-D initializer.
TEST(FuseMatMulBias, LeadingOnesBiasIsReshaped) {
  Spec s;
  s.bias_dims = {1, 1, 6};
  Result r = fuse(build(s));
  const Node* f = find_op(*r.optimized, "FusedMatMul");
  ASSERT_TRUE(f);
  ASSERT_EQ(f->inputs.size(), 3u);
  EXPECT_EQ(f->inputs[2]->name, "mm.bias");
  EXPECT_EQ(f->inputs[2]->initializer->dims(), (std::vector<int64_t>{6}));
  EXPECT_EQ(r.optimized->find_value("bias"), nullptr);  // the original, now unread, is gone
  expect_equivalent(r);
}

// The bias may come first: Add(bias, MatMul).
TEST(FuseMatMulBias, BiasOnTheLeft) {
  GraphBuilder b(17);
  Value* a = b.input("A", DType::Float32, {4, 8});
  Value* y = b.node("MatMul", {a, b.initializer("W", random_floats({8, 3}, 1))}, {}, "mm");
  y = b.node("Add", {b.initializer("bias", random_floats({3}, 2)), y}, {}, "add");
  b.output(y);
  Result r = fuse(b.build());
  EXPECT_EQ(count_any_domain(*r.optimized, "Gemm"), 1);
  EXPECT_EQ(r.optimized->nodes().size(), 1u);
  expect_equivalent(r);
}

// Under --portable: a 2-D product still folds its bias into Gemm; the activation stays, with a
// near-miss. An N-D product (or an activation without bias) is left alone with a near-miss.
TEST(FuseMatMulBias, PortableKeepsStandardOps) {
  {
    Spec s;
    s.a_dims = {5, 8};
    s.act = "Relu";
    Result r = fuse(build(s), true);
    EXPECT_EQ(count_any_domain(*r.optimized, "Gemm"), 1);
    EXPECT_EQ(count_any_domain(*r.optimized, "Relu"), 1);
    EXPECT_EQ(r.optimized->nodes().size(), 2u);
    const NearMiss* m = near_miss(r, "Relu 'act'");
    ASSERT_TRUE(m);
    EXPECT_NE(m->reason.find("--portable"), std::string::npos);
    expect_equivalent(r);
  }
  {
    Spec s;
    s.act = "Relu";
    Result r = fuse(build(s), true);
    expect_unchanged(r);
    const NearMiss* m = near_miss(r, "--portable");
    ASSERT_TRUE(m);
    EXPECT_NE(m->reason.find("A is 3-D"), std::string::npos) << m->reason;
  }
  {
    Spec s;
    s.a_dims = {5, 8};
    s.bias_dims = {};
    s.act = "Relu";
    Result r = fuse(build(s), true);
    expect_unchanged(r);
    ASSERT_TRUE(near_miss(r, "--portable"));
  }
}

// ---- guards: graph unchanged, near-miss with the reason ----

TEST(FuseMatMulBias, ProductWithTwoReadersIsANearMiss) {
  Result r = fuse(build({}, [](GraphBuilder& b, Value*) {
    Node* mm = nullptr;
    for (const auto& n : b.graph().nodes())
      if (n->op_type == "MatMul") mm = n.get();
    b.output(b.node("Relu", {mm->outputs[0]}, {}, "other"));
  }));
  expect_unchanged(r);
  const NearMiss* m = near_miss(r, "MatMul 'mm'");
  ASSERT_TRUE(m);
  EXPECT_NE(m->reason.find("2 consumers"), std::string::npos) << m->reason;
}

TEST(FuseMatMulBias, ProductAsGraphOutputIsANearMiss) {
  Result r = fuse(build({}, [](GraphBuilder& b, Value*) {
    for (const auto& n : b.graph().nodes())
      if (n->op_type == "MatMul") b.output(n->outputs[0]);
  }));
  expect_unchanged(r);
  const NearMiss* m = near_miss(r, "MatMul 'mm'");
  ASSERT_TRUE(m);
  EXPECT_NE(m->reason.find("graph output"), std::string::npos) << m->reason;
}

TEST(FuseMatMulBias, NonConstantBiasIsANearMiss) {
  Spec s;
  s.bias_const = false;
  Result r = fuse(build(s));
  expect_unchanged(r);
  const NearMiss* m = near_miss(r, "Add 'add'");
  ASSERT_TRUE(m);
  EXPECT_NE(m->reason.find("not a constant"), std::string::npos) << m->reason;
}

TEST(FuseMatMulBias, BiasAlongOtherAxesIsANearMiss) {
  for (std::vector<int64_t> dims :
       {std::vector<int64_t>{5, 6}, std::vector<int64_t>{5, 1}, std::vector<int64_t>{1, 2, 5, 6}}) {
    SCOPED_TRACE(dims_str(dims));
    Spec s;
    s.bias_dims = dims;
    Result r = fuse(build(s));
    expect_unchanged(r);
    const NearMiss* m = near_miss(r, "bias shape");
    ASSERT_TRUE(m);
  }
}

TEST(FuseMatMulBias, Float64IsANearMiss) {
  Spec s;
  s.dtype = DType::Float64;
  Result r = fuse(build(s));
  expect_unchanged(r);
  ASSERT_TRUE(near_miss(r, "float64"));
}

TEST(FuseMatMulBias, ComputedClipBoundIsANearMiss) {
  GraphBuilder b(17);
  Value* a = b.input("A", DType::Float32, {4, 8});
  Value* hi = b.input("hi", DType::Float32, {});
  Value* y = b.node("MatMul", {a, b.initializer("W", random_floats({8, 3}, 1))}, {}, "mm");
  y = b.node("Clip", {y, b.initializer("lo", floats({0}, {})), hi}, {}, "clip");
  b.output(y);
  Result r = fuse(b.build());
  expect_unchanged(r);
  const NearMiss* m = near_miss(r, "Clip 'clip'");
  ASSERT_TRUE(m);
  EXPECT_NE(m->reason.find("'hi' is not a constant"), std::string::npos) << m->reason;
}

// PRelu reads as the activations do everywhere (activation_op.h): one slope is LeakyRelu; a slope
// per channel, or a product that is the slope rather than X, stays apart.
TEST(FuseMatMulBias, PReluWithOneSlopeIsLeakyRelu) {
  for (int form = 0; form < 3; ++form) {
    SCOPED_TRACE(form == 0 ? "one slope" : form == 1 ? "a slope per channel" : "the product is the slope");
    GraphBuilder b(17);
    Value* a = b.input("A", DType::Float32, {4, 8});
    Value* y = b.node("MatMul", {a, b.initializer("W", random_floats({8, 3}, 1))}, {}, "mm");
    Value* slope =
        b.initializer("slope", form == 1 ? floats({0.1f, 0.2f, 0.3f}, {3}) : floats({0.25f, 0.25f, 0.25f}, {3}));
    if (form == 2)
      y = b.node("PRelu", {b.input("X", DType::Float32, {4, 3}), y}, {}, "prelu");
    else
      y = b.node("PRelu", {y, slope}, {}, "prelu");
    b.output(y);
    Result r = fuse(b.build());
    if (form == 0) {
      const Node* f = find_op(*r.optimized, "FusedMatMul");
      ASSERT_TRUE(f);
      EXPECT_EQ(f->attr_string("activation", ""), "LeakyRelu");
      EXPECT_EQ(f->attr_floats("activation_params"), (std::vector<float>{0.25f}));
      expect_equivalent(r);
      continue;
    }
    expect_unchanged(r);
    if (form == 1) {
      const NearMiss* m = near_miss(r, "PRelu 'prelu'");
      ASSERT_TRUE(m);
      EXPECT_NE(m->reason.find("slope varies"), std::string::npos) << m->reason;
    }
  }
}

// The bias sum read twice: the bias still fuses, the activation does not (near-miss).
TEST(FuseMatMulBias, SharedBiasSumKeepsTheActivationApart) {
  Spec s;
  s.act = "Relu";
  Result r = fuse(build(s, [](GraphBuilder& b, Value*) {
    for (const auto& n : b.graph().nodes())
      if (n->op_type == "Add") b.output(b.node("Neg", {n->outputs[0]}, {}, "neg"));
  }));
  EXPECT_EQ(count_any_domain(*r.optimized, "FusedMatMul"), 1);
  EXPECT_EQ(count_any_domain(*r.optimized, "Relu"), 1);
  const Node* f = find_op(*r.optimized, "FusedMatMul");
  ASSERT_TRUE(f);
  EXPECT_FALSE(f->has_attr("activation"));
  const NearMiss* m = near_miss(r, "Relu 'act'");
  ASSERT_TRUE(m);
  EXPECT_NE(m->reason.find("2 consumers"), std::string::npos) << m->reason;
  expect_equivalent(r);
}

// A MatMul followed by something else is no pattern at all: no near-miss.
TEST(FuseMatMulBias, OtherReadersAreNoPattern) {
  Spec s;
  s.bias_dims = {};
  s.act = "Softmax";
  s.opset = 17;
  Result r = fuse(build(s));
  expect_unchanged(r);
  EXPECT_TRUE(r.opt.near_misses.empty());
}

TEST(FuseMatMulBias, Idempotent) {
  Spec s;
  s.act = "Relu";
  Result r = fuse(build(s));
  ASSERT_EQ(count_any_domain(*r.optimized, "FusedMatMul"), 1);
  auto before = r.optimized->clone();
  PassContext ctx;
  FuseMatMulBiasPass pass;
  EXPECT_FALSE(pass.run(*r.optimized, ctx));
  EXPECT_EQ(graph_difference(*before, *r.optimized), "");
}

// A FusedMatMul without activation (an earlier sweep's, say) takes in an activation that is now
// its only reader.
TEST(FuseMatMulBias, BareFusedMatMulTakesItsActivation) {
  GraphBuilder b(17);
  Value* a = b.input("A", DType::Float32, {2, 4, 8});
  Value* y = b.node_n("FusedMatMul",
                      {a, b.initializer("W", random_floats({8, 3}, 1)), b.initializer("bias", random_floats({3}, 2))},
                      1, {}, "mm", "ai.fusec")[0];
  b.output(b.node("LeakyRelu", {y}, {attr("alpha", 0.3f)}, "act"));
  Result r = fuse(b.build());
  EXPECT_EQ(r.optimized->nodes().size(), 1u);
  const Node* f = find_op(*r.optimized, "FusedMatMul");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->name, "mm");
  EXPECT_EQ(f->attr_string("activation", ""), "LeakyRelu");
  EXPECT_EQ(f->attr_floats("activation_params"), (std::vector<float>{0.3f}));
  EXPECT_EQ(f->fused_from, (std::vector<std::string>{"mm", "act"}));
  EXPECT_EQ(f->outputs[0]->name, "act_out");
  expect_equivalent(r);
}

namespace {

/// The tests' Gemm weight B for K = 8, N = 6: [8, 6], or [6, 8] where `gemm_attrs` set transB.
std::vector<int64_t> gemm_b_dims(const std::vector<NamedAttribute>& gemm_attrs) {
  for (const auto& at : gemm_attrs)
    if (at.name == "transB") return {6, 8};
  return {8, 6};
}

/// The model's own Gemm (GPT-2's Conv1D, a classifier head) -> Gelu(tanh), as both exporters write
/// it: A[5,8], B [8,6] or, with transB, [6,8], C [6] or `c_dims`.
std::unique_ptr<Graph> gemm_then_gelu(std::vector<NamedAttribute> gemm_attrs, bool b_const = true,
                                      std::vector<int64_t> c_dims = {6}) {
  GraphBuilder b(20);
  Value* a = b.input("A", DType::Float32, {5, 8});
  const std::vector<int64_t> bd = gemm_b_dims(gemm_attrs);
  Value* w = b_const ? b.initializer("B", random_floats(bd, 1)) : b.input("B", DType::Float32, shape_of(bd));
  std::vector<Value*> ins = {a, w};
  if (!c_dims.empty()) ins.push_back(b.initializer("C", random_floats(c_dims, 2)));
  Value* y = b.node("Gemm", ins, std::move(gemm_attrs), "fc");
  b.output(b.node("Gelu", {y}, {attr("approximate", std::string("tanh"))}, "gelu"));
  return b.build();
}

}  // namespace

TEST(FuseMatMulBias, TheModelsGemmTakesItsActivation) {
  for (bool trans_b : {false, true}) {
    SCOPED_TRACE(trans_b ? "transB" : "B as [K,N]");
    std::vector<NamedAttribute> attrs;
    if (trans_b) attrs.push_back(attr("transB", int64_t{1}));
    attrs.push_back(attr("alpha", 1.0f));
    Result r = fuse(gemm_then_gelu(attrs));
    ASSERT_EQ(r.optimized->nodes().size(), 1u);
    const Node* f = find_op(*r.optimized, "FusedMatMul");
    ASSERT_TRUE(f);
    EXPECT_EQ(f->name, "fc");
    EXPECT_EQ(f->attr_string("activation", ""), "GeluTanh");
    EXPECT_FALSE(f->has_attr("transB"));
    EXPECT_FALSE(f->has_attr("alpha"));
    EXPECT_EQ(f->fused_from, (std::vector<std::string>{"fc", "gelu"}));
    expect_equivalent(r);
  }
  // No C: no bias input.
  Result r = fuse(gemm_then_gelu({}, true, {}));
  const Node* f = find_op(*r.optimized, "FusedMatMul");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->inputs.size(), 2u);
  expect_equivalent(r);
}

// Transposing B writes a new constant, held to the cap that bounds folded constants: an LLM's
// weight is not copied into memory by the optimizer.
TEST(FuseMatMulBias, ATransposedBOverTheFoldCapIsANearMiss) {
  PassOptions opts;
  opts.fold_size_cap = 6 * 8 * 4 - 1;  // one byte short of B [6,8] float32
  Outcome o = run_one_pass<FuseMatMulBiasPass>(gemm_then_gelu({attr("transB", int64_t{1})}), opts);
  EXPECT_FALSE(o.changed);
  EXPECT_TRUE(find_near_miss(o.ctx.near_misses, "fuse_matmul_bias", "over the fold cap"));
  opts.fold_size_cap = 6 * 8 * 4;
  EXPECT_TRUE(run_one_pass<FuseMatMulBiasPass>(gemm_then_gelu({attr("transB", int64_t{1})}), opts).changed);
}

// GPT-2's Conv1D: the 2-D Gemm, the view back to [B, S, N], then the activation.
TEST(FuseMatMulBias, AnActivationAfterAReshapeOfTheProductJoinsIt) {
  GraphBuilder b(20);
  Value* a = b.input("A", DType::Float32, {10, 8});
  Value* y = b.node("Gemm", {a, b.initializer("B", random_floats({8, 6}, 1)), b.initializer("C", random_floats({6}, 2))},
                    {}, "fc");
  y = b.node("Reshape", {y, b.initializer("shape", Tensor::from_int64({2, 5, 6}, {3}))}, {}, "view");
  y = b.node("Gelu", {y}, {attr("approximate", std::string("tanh"))}, "gelu");
  b.output(b.node("Add", {y, b.input("R", DType::Float32, {2, 5, 6})}, {}, "after"));
  Result r = fuse(b.build());
  const Node* f = find_op(*r.optimized, "FusedMatMul");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->attr_string("activation", ""), "GeluTanh");
  EXPECT_EQ(f->fused_from, (std::vector<std::string>{"fc", "gelu"}));
  const Node* v = find_op(*r.optimized, "Reshape");
  ASSERT_TRUE(v);
  EXPECT_EQ(v->input(0), f->outputs[0]);
  EXPECT_EQ(v->outputs[0]->name, "gelu_out") << "the Reshape writes what the activation wrote";
  EXPECT_EQ(r.optimized->nodes().size(), 3u);
  expect_equivalent(r);
}

TEST(FuseMatMulBias, AGemmFusedMatMulCannotExpressIsANearMiss) {
  struct Case {
    std::vector<NamedAttribute> attrs;
    bool b_const;
    std::vector<int64_t> c_dims;
    const char* why;
  };
  const Case cases[] = {{{attr("alpha", 2.0f)}, true, {6}, "alpha is not 1"},
                        {{attr("beta", 0.5f)}, true, {6}, "beta is not 1"},
                        {{attr("transA", int64_t{1})}, true, {6}, "transposes A"},
                        {{attr("transB", int64_t{1})}, false, {6}, "which is not a constant"},
                        {{}, true, {5, 6}, "broadcasts along more than the last axis"}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.why);
    auto g = c.attrs.size() && c.attrs[0].name == "transA" ? nullptr : gemm_then_gelu(c.attrs, c.b_const, c.c_dims);
    if (!g) {  // A^T: A is [8,5]
      GraphBuilder b(20);
      Value* a = b.input("A", DType::Float32, {8, 5});
      Value* y = b.node("Gemm", {a, b.initializer("B", random_floats({8, 6}, 1)), b.initializer("C", random_floats({6}, 2))},
                        c.attrs, "fc");
      b.output(b.node("Gelu", {y}, {attr("approximate", std::string("tanh"))}, "gelu"));
      g = b.build();
    }
    Result r = fuse(std::move(g));
    expect_unchanged(r);
    EXPECT_TRUE(near_miss(r, c.why)) << c.why;
  }
}

namespace {

/// A[2,5,8] x W + bias -> SkipLayerNorm with a residual input R (as fuse_skip_layernorm writes a
/// post-LN block's Add + LayerNorm): `swap` puts the product as skip instead of X, `sum_out` also
/// returns the sum S as a graph output read by a Relu, `act` puts an activation on the product.
std::unique_ptr<Graph> residual_block(bool swap = false, bool sum_out = false, const std::string& act = "",
                                      std::vector<int64_t> r_dims = {2, 5, 6}, int64_t opset = 20) {
  GraphBuilder b(opset);
  b.graph().opsets["ai.fusec"] = 1;
  Value* a = b.input("A", DType::Float32, {2, 5, 8});
  Value* r = b.input("R", DType::Float32, shape_of(r_dims));
  Value* y = b.node("MatMul", {a, b.initializer("W", random_floats({8, 6}, 1))}, {}, "mm");
  y = b.node("Add", {y, b.initializer("bias", random_floats({6}, 2))}, {}, "add");
  if (!act.empty()) y = b.node(act, {y}, {}, "act");
  std::vector<Value*> ins = {swap ? r : y, swap ? y : r, b.initializer("gamma", random_floats({6}, 3)),
                             b.initializer("beta", random_floats({6}, 4))};
  auto outs = b.node_n("SkipLayerNorm", ins, sum_out ? 2 : 1, {attr("epsilon", 1e-3f)}, "sln", "ai.fusec");
  b.output(outs[0]);
  if (sum_out) b.output(b.node("Relu", {outs[1]}, {}, "after_sum"));
  return b.build();
}

}  // namespace

// t = A·W + b; S = t + R; Y = LN(S)  ->  S = FusedMatMul(A, W, b, Z = R); Y = LayerNormalization(S).
TEST(FuseMatMulBias, SkipLayerNormResidualMovesIntoTheProduct) {
  for (bool swap : {false, true})
    for (bool sum_out : {false, true}) {
      SCOPED_TRACE(std::string(swap ? "product as skip" : "product as X") + (sum_out ? ", S read" : ""));
      Result r = fuse(residual_block(swap, sum_out));
      EXPECT_EQ(count_any_domain(*r.optimized, "SkipLayerNorm"), 0);
      const Node* f = find_op(*r.optimized, "FusedMatMul");
      ASSERT_TRUE(f);
      ASSERT_EQ(f->inputs.size(), 4u);
      EXPECT_EQ(f->inputs[3]->name, "R");
      const Node* ln = find_op(*r.optimized, "LayerNormalization");
      ASSERT_TRUE(ln);
      EXPECT_EQ(ln->domain, "");
      EXPECT_EQ(ln->name, "sln");
      EXPECT_EQ(ln->inputs[0], f->outputs[0]);
      EXPECT_FLOAT_EQ(ln->attr_float("epsilon", 0), 1e-3f);
      if (sum_out) EXPECT_EQ(find_op(*r.optimized, "Relu")->inputs[0], f->outputs[0]) << "S is the product's output";
      expect_equivalent(r);
    }
}

// A decoder's bias-free projection: t = A·W; S = t + R; Y = RMSNorm(S)  ->
// S = FusedMatMul(A, W, "", Z = R); Y = SimplifiedLayerNorm(S).
TEST(FuseMatMulBias, SkipRmsNormResidualMovesIntoABiasFreeProduct) {
  for (bool batched_weight : {false, true}) {
    SCOPED_TRACE(batched_weight ? "batched weight" : "2-D weight");
    GraphBuilder b(20);
    b.graph().opsets["ai.fusec"] = 1;
    Value* a = b.input("A", DType::Float32, {2, 5, 8});
    Value* r = b.input("R", DType::Float32, {2, 5, 6});
    Value* w = b.initializer("W", random_floats(batched_weight ? std::vector<int64_t>{2, 8, 6} : std::vector<int64_t>{8, 6}, 1));
    Value* t = b.node("MatMul", {a, w}, {}, "o_proj");
    auto outs = b.node_n("SkipSimplifiedLayerNorm", {r, t, b.initializer("gamma", random_floats({6}, 3))}, 2,
                         {attr("epsilon", 1e-3f)}, "sln", "ai.fusec");
    b.output(outs[0]);
    b.output(b.node("Relu", {outs[1]}, {}, "after_sum"));
    Result res = fuse(b.build());
    expect_equivalent(res);
    if (batched_weight) {  // a batched product's residual would not run in the GEMM: left alone
      EXPECT_EQ(count_any_domain(*res.optimized, "SkipSimplifiedLayerNorm"), 1);
      continue;
    }
    EXPECT_EQ(count_any_domain(*res.optimized, "SkipSimplifiedLayerNorm"), 0);
    const Node* f = find_op(*res.optimized, "FusedMatMul");
    ASSERT_TRUE(f);
    ASSERT_EQ(f->inputs.size(), 4u);
    EXPECT_EQ(f->inputs[2], nullptr);
    EXPECT_EQ(f->inputs[3]->name, "R");
    const Node* ln = find_op(*res.optimized, "SimplifiedLayerNorm");
    ASSERT_TRUE(ln);
    EXPECT_EQ(ln->domain, "ai.fusec");
    EXPECT_EQ(ln->inputs.size(), 2u);
    EXPECT_EQ(ln->inputs[0], f->outputs[0]);
    EXPECT_EQ(find_op(*res.optimized, "Relu")->inputs[0], f->outputs[0]) << "S is the product's output";
  }
}

TEST(FuseMatMulBias, SkipLayerNormResidualGuards) {
  // A broadcast residual is not C's shape: near-miss, SkipLayerNorm stays.
  Result bcast = fuse(residual_block(false, false, "", {5, 6}));
  EXPECT_EQ(count_any_domain(*bcast.optimized, "SkipLayerNorm"), 1);
  EXPECT_TRUE(near_miss(bcast, "does not have the product's shape"));
  expect_equivalent(bcast);
  // act(A·W + b) + R is not act(A·W + b + R): left alone.
  Result act = fuse(residual_block(false, false, "Relu"));
  EXPECT_EQ(count_any_domain(*act.optimized, "SkipLayerNorm"), 1);
  EXPECT_EQ(find_op(*act.optimized, "FusedMatMul")->inputs.size(), 3u);
  // Below opset 17 there is no standard LayerNormalization to write.
  Result old = fuse(residual_block(false, false, "", {2, 5, 6}, 16));
  EXPECT_EQ(count_any_domain(*old.optimized, "SkipLayerNorm"), 1);
}

// ---- Residual Adds no norm reads ---------------------------------------------------------------

namespace {

/// x[2,4,3,8]·W[8,6] + b, then S = t + R; `nchw`: both summands permuted (0,3,1,2) first, R given
/// as NHWC and permuted too (`r_permuted`) or given as NCHW as it is.
std::unique_ptr<Graph> residual_add_graph(bool nchw, bool r_permuted, bool swap, std::vector<int64_t> r_dims = {}) {
  GraphBuilder b(20);
  Value* x = b.input("x", DType::Float32, {2, 4, 3, 8});
  if (r_dims.empty()) r_dims = nchw && !r_permuted ? std::vector<int64_t>{2, 6, 4, 3} : std::vector<int64_t>{2, 4, 3, 6};
  Value* r = b.input("R", DType::Float32, shape_of(r_dims));
  Value* t = b.node("MatMul", {x, b.initializer("W", random_floats({8, 6}, 1))}, {}, "fc2");
  t = b.node("Add", {t, b.initializer("bias", random_floats({6}, 2))}, {}, "fc2_bias");
  const std::vector<NamedAttribute> to_nchw = {attr("perm", std::vector<int64_t>{0, 3, 1, 2})};
  if (nchw) {
    t = b.node("Transpose", {t}, to_nchw, "t_nchw");
    if (r_permuted) {
      r = b.node("Transpose", {r}, to_nchw, "r_nchw");
      b.output(b.node("Relu", {r}, {}, "r_other_reader"));  // the block input's other reader
    }
  }
  b.output(b.node("Add", {swap ? r : t, swap ? t : r}, {}, "residual"));
  return b.build();
}

}  // namespace

// S = (A·W + b) + R -> S = FusedMatMul(A, W, b, Z = R): no pass of its own for the sum.
TEST(FuseMatMulBias, ResidualAddMovesIntoTheProduct) {
  for (bool swap : {false, true}) {
    SCOPED_TRACE(swap ? "residual first" : "product first");
    Result r = fuse(residual_add_graph(false, false, swap));
    EXPECT_EQ(count_any_domain(*r.optimized, "Add"), 0);
    const Node* f = find_op(*r.optimized, "FusedMatMul");
    ASSERT_TRUE(f);
    ASSERT_EQ(f->inputs.size(), 4u);
    EXPECT_EQ(f->inputs[3]->name, "R");
    EXPECT_EQ(f->outputs[0]->name, r.original->outputs[0]->name);
    EXPECT_EQ(f->fused_from, (std::vector<std::string>{"fc2", "fc2_bias", "residual"}));
    expect_equivalent(r);
  }
}

// Add(Transpose_p(t), Transpose_p(s)) -> Transpose_p(FusedMatMul(.., Z = s)); with a residual that
// is not permuted the same way, Z is the residual transposed back.
TEST(FuseMatMulBias, ResidualAddMovesIntoTheProductThroughACommonTranspose) {
  for (bool r_permuted : {true, false})
    for (bool swap : {false, true}) {
      SCOPED_TRACE(std::string(r_permuted ? "R permuted too" : "R as it is") + (swap ? ", residual first" : ""));
      Result r = fuse(residual_add_graph(true, r_permuted, swap));
      EXPECT_EQ(count_any_domain(*r.optimized, "Add"), 0);
      const Node* f = find_op(*r.optimized, "FusedMatMul");
      ASSERT_TRUE(f);
      ASSERT_EQ(f->inputs.size(), 4u);
      if (r_permuted) {
        EXPECT_EQ(f->inputs[3]->name, "R") << "the residual read before its permutation";
      } else {
        const Node* back = f->inputs[3]->producer;
        ASSERT_TRUE(back && back->op_type == "Transpose");
        EXPECT_EQ(back->attr_ints("perm"), (std::vector<int64_t>{0, 2, 3, 1}));
        EXPECT_EQ(back->inputs[0]->name, "R");
      }
      const Node* moved = node_named(*r.optimized, "t_nchw");
      ASSERT_TRUE(moved);
      EXPECT_EQ(moved->inputs[0], f->outputs[0]);
      EXPECT_EQ(moved->outputs[0]->name, "residual_out") << "the sum keeps its name";
      expect_equivalent(r);
    }
}

TEST(FuseMatMulBias, ResidualAddGuards) {
  // A residual that broadcasts is not the product's shape: near-miss, the Add stays.
  Result bcast = fuse(residual_add_graph(false, false, false, {4, 3, 6}));
  EXPECT_EQ(count_any_domain(*bcast.optimized, "Add"), 1);
  EXPECT_TRUE(near_miss(bcast, "does not have the product's shape"));
  expect_equivalent(bcast);
  // --portable writes no FusedMatMul.
  Result portable = fuse(residual_add_graph(false, false, false), true);
  EXPECT_EQ(count_any_domain(*portable.optimized, "Add"), 2);
  EXPECT_TRUE(near_miss(portable, "--portable"));
  // The product read elsewhere too: its value must stay A·W + b.
  GraphBuilder b(20);
  Value* x = b.input("x", DType::Float32, {5, 8});
  Value* rr = b.input("R", DType::Float32, {5, 6});
  Value* t = b.node("MatMul", {x, b.initializer("W", random_floats({8, 6}, 1))}, {}, "fc");
  b.output(b.node("Add", {t, rr}, {}, "residual"));
  b.output(b.node("Relu", {t}, {}, "other"));
  Result shared = fuse(b.build());
  EXPECT_EQ(count_any_domain(*shared.optimized, "Add"), 1);
  EXPECT_TRUE(near_miss(shared, "read elsewhere"));
  expect_equivalent(shared);
}

// The batch left open under one name: the product and the residual are the same shape for every
// binding, so the sum moves into the GEMM; an unnamed open dim matches nothing.
TEST(FuseMatMulBias, AResidualOverAnOpenBatchMovesIntoTheProduct) {
  for (bool named : {true, false}) {
    SCOPED_TRACE(named ? "named batch" : "unnamed batch");
    const Dim n = named ? Dim::sym("N") : Dim();
    GraphBuilder b(20);
    Value* x = b.input("x", DType::Float32, {n, 4, 8});
    Value* rr = b.input("R", DType::Float32, {n, 4, 6});
    Value* t = b.node("MatMul", {x, b.initializer("W", random_floats({8, 6}, 1))}, {}, "fc");
    b.output(b.node("Add", {t, rr}, {}, "residual"));
    Result r = fuse(b.build());
    EXPECT_EQ(count_any_domain(*r.optimized, "Add"), named ? 0 : 1);
    if (!named) EXPECT_TRUE(near_miss(r, "does not have the product's shape"));
    bind_open_dims(*r.original);
    bind_open_dims(*r.optimized);
    expect_equivalent(r);
  }
}

// ---- A residual through a view of the product (GPT-2's Conv1D) ---------------------------------

namespace {

/// GPT-2's Conv1D before a residual sum: Gemm(A[10,8], B, C[6]) viewed as [2,5,6], then a
/// SkipLayerNorm (`norm`, its sum S read by a Relu) or a plain Add (a graph output) with R[2,5,6].
/// `gemm_attrs` are the Gemm's (transB: B is given [6,8]).
std::unique_ptr<Graph> conv1d_residual(bool norm, std::vector<NamedAttribute> gemm_attrs = {}) {
  GraphBuilder b(20);
  b.graph().opsets["ai.fusec"] = 1;
  Value* a = b.input("A", DType::Float32, {10, 8});
  Value* r = b.input("R", DType::Float32, {2, 5, 6});
  Value* w = b.initializer("B", random_floats(gemm_b_dims(gemm_attrs), 1));
  Value* t = b.node("Gemm", {a, w, b.initializer("C", random_floats({6}, 2))}, std::move(gemm_attrs), "c_proj");
  Value* u = b.node("Reshape", {t, b.initializer("shape", Tensor::from_int64({2, 5, 6}, {3}))}, {}, "view");
  if (!norm) {
    b.output(b.node("Add", {r, u}, {}, "residual"));
    return b.build();
  }
  auto outs =
      b.node_n("SkipLayerNorm",
               {u, r, b.initializer("gamma", random_floats({6}, 3)), b.initializer("beta", random_floats({6}, 4))}, 2,
               {attr("epsilon", 1e-3f)}, "sln", "ai.fusec");
  b.output(outs[0]);
  b.output(b.node("Relu", {outs[1]}, {}, "after_sum"));
  return b.build();
}

/// The FusedMatMul's residual operand: R viewed as the product's [10, 6].
void expect_residual_viewed_as_product(const Node* f) {
  ASSERT_TRUE(f);
  ASSERT_EQ(f->inputs.size(), 4u);
  const Node* back = f->inputs[3]->producer;
  ASSERT_TRUE(back && back->op_type == "Reshape");
  EXPECT_EQ(back->inputs[0]->name, "R");
  const Tensor* target = constant_of(back->inputs[1]);
  ASSERT_TRUE(target);
  EXPECT_EQ(std::vector<int64_t>(target->data<int64_t>(), target->data<int64_t>() + target->numel()),
            (std::vector<int64_t>{10, 6}));
}

}  // namespace

// t = Gemm(A, B, C); S = View(t) + R; Y = LN(S)  ->  S = View(FusedMatMul(A, B, C, Z = View⁻¹(R))); Y = LN(S).
TEST(FuseMatMulBias, SkipLayerNormResidualMovesIntoAViewedGemm) {
  for (bool trans_b : {false, true}) {
    SCOPED_TRACE(trans_b ? "transB" : "B as [K, N]");
    std::vector<NamedAttribute> attrs;
    if (trans_b) attrs.push_back(attr("transB", int64_t{1}));
    Result r = fuse(conv1d_residual(true, attrs));
    EXPECT_EQ(count_any_domain(*r.optimized, "SkipLayerNorm"), 0);
    EXPECT_EQ(count_any_domain(*r.optimized, "Gemm"), 0);
    const Node* f = find_op(*r.optimized, "FusedMatMul");
    expect_residual_viewed_as_product(f);
    EXPECT_TRUE(f->attrs.empty()) << "Gemm's attributes are not FusedMatMul's";
    const Node* view = node_named(*r.optimized, "view");
    ASSERT_TRUE(view);
    EXPECT_EQ(view->inputs[0], f->outputs[0]);
    const Node* ln = find_op(*r.optimized, "LayerNormalization");
    ASSERT_TRUE(ln);
    EXPECT_EQ(ln->inputs[0], view->outputs[0]);
    EXPECT_EQ(find_op(*r.optimized, "Relu")->inputs[0], view->outputs[0]) << "S is the viewed product";
    expect_equivalent(r);
  }
}

// S = View(Gemm(A, B, C)) + R (no norm after it)  ->  S = View(FusedMatMul(A, B, C, Z = View⁻¹(R))).
TEST(FuseMatMulBias, ResidualAddMovesIntoAViewedGemm) {
  Result r = fuse(conv1d_residual(false));
  EXPECT_EQ(count_any_domain(*r.optimized, "Add"), 0);
  const Node* f = find_op(*r.optimized, "FusedMatMul");
  expect_residual_viewed_as_product(f);
  EXPECT_EQ(f->fused_from, (std::vector<std::string>{"c_proj", "residual"}));
  const Node* view = node_named(*r.optimized, "view");
  ASSERT_TRUE(view);
  EXPECT_EQ(view->inputs[0], f->outputs[0]);
  EXPECT_EQ(view->outputs[0]->name, r.original->outputs[0]->name) << "the view writes the sum";
  expect_equivalent(r);
}

TEST(FuseMatMulBias, AViewedGemmFusedMatMulCannotExpressKeepsItsResidual) {
  for (bool norm : {true, false}) {
    SCOPED_TRACE(norm ? "SkipLayerNorm" : "Add");
    Result r = fuse(conv1d_residual(norm, {attr("alpha", 0.5f)}));
    EXPECT_EQ(count_any_domain(*r.optimized, norm ? "SkipLayerNorm" : "Add"), 1);
    EXPECT_TRUE(near_miss(r, "alpha is not 1"));
    EXPECT_EQ(count_any_domain(*r.optimized, "Reshape"), 1) << "no view of the residual is left behind";
    expect_equivalent(r);
  }
}
