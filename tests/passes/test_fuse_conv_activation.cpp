// fuse_conv_activation: Conv [-> Add(residual)] [-> activation] -> ai.fusec FusedConv. Each
// positive case checks the fused node (name, output value, attributes) and numbers against the
// unfused graph; each guard has a near-miss case that leaves the graph unchanged.
#include <cfloat>
#include <cmath>
#include <limits>
#include <random>

#include "backend/cpu/cpu_backend.h"
#include "ir/half.h"

#include "passes/fuse_conv_activation.h"
#include "passes/pattern.h"
#include "passes/pipeline.h"
#include "passes/verify.h"
#include "pass_test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

Tensor random_tensor(std::vector<int64_t> dims, uint64_t seed, float lo = -1, float hi = 1, DType dt = DType::Float32) {
  Tensor f(DType::Float32, dims);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  for (int64_t i = 0; i < f.numel(); ++i) f.data<float>()[i] = u(rng);
  if (dt == DType::Float32) return f;
  Tensor t(dt, dims);
  for (int64_t i = 0; i < f.numel(); ++i) t.data<double>()[i] = f.data<float>()[i];  // Float64 only
  return t;
}

struct ConvSpec {
  int64_t n = 2, c = 4, m = 6, group = 1;
  std::vector<int64_t> spatial = {5, 5}, kernel = {3, 3};
  bool bias = true;
  DType dtype = DType::Float32;
};

std::vector<int64_t> out_dims(const ConvSpec& s) {
  std::vector<int64_t> d = {s.n, s.m};
  for (auto x : s.spatial) d.push_back(x);
  return d;
}

Value* add_input(GraphBuilder& b, const std::string& name, const ConvSpec& s) {
  std::vector<int64_t> dims = {s.n, s.c};
  for (auto d : s.spatial) dims.push_back(d);
  return b.input(name, s.dtype, shape_of(dims));
}

/// Conv with 'same' padding (so its output has x's spatial dims) and random weights.
Value* add_conv(GraphBuilder& b, Value* x, const ConvSpec& s, const std::string& name, uint64_t seed) {
  std::vector<int64_t> wd = {s.m, s.c / s.group};
  for (auto k : s.kernel) wd.push_back(k);
  std::vector<Value*> ins = {x, b.initializer(name + ".W", random_tensor(wd, seed, -1, 1, s.dtype))};
  if (s.bias) ins.push_back(b.initializer(name + ".B", random_tensor({s.m}, seed + 1, -1, 1, s.dtype)));
  std::vector<int64_t> pads;
  for (auto k : s.kernel) pads.push_back(k / 2);
  for (auto k : s.kernel) pads.push_back(k / 2);
  return b.node("Conv", ins, {attr("group", s.group), attr("kernel_shape", s.kernel), attr("pads", pads)}, name);
}

Outcome fuse(std::unique_ptr<Graph> g, bool portable = false) {
  PassOptions opts;
  opts.portable = portable;
  return run_one_pass<FuseConvActivationPass>(std::move(g), opts);
}

void expect_same_numbers(const Outcome& f, uint64_t seed = 11) {
  fusec::test::expect_same_numbers(*f.original, *f.optimized, seed);
}

void expect_near_miss(const Outcome& f, const std::string& reason) {
  fusec::test::expect_near_miss(f, "fuse_conv_activation", reason);
}

const Node* expect_one_fused(const Outcome& f, const std::string& name = "c1") {
  EXPECT_TRUE(f.changed);
  EXPECT_EQ(count_any_domain(*f.optimized, "Conv"), 0);
  EXPECT_EQ(count_any_domain(*f.optimized, "FusedConv"), 1);
  const Node* n = node_named(*f.optimized, name);
  EXPECT_NE(n, nullptr);
  if (!n) return nullptr;
  EXPECT_EQ(n->op_type, "FusedConv");
  EXPECT_EQ(n->domain, "ai.fusec");
  EXPECT_EQ(n->outputs[0]->name, f.original->outputs[0]->name);
  EXPECT_EQ(f.optimized->opset("ai.fusec"), 1);
  return n;
}

/// Conv -> op(attrs, extra inputs) as the graph output.
std::unique_ptr<Graph> conv_act_graph(const ConvSpec& s, const std::string& op, std::vector<NamedAttribute> attrs = {},
                                      int64_t opset = 17, std::vector<Tensor> extra = {}) {
  GraphBuilder b(opset);
  Value* y = add_conv(b, add_input(b, "x", s), s, "c1", 1);
  std::vector<Value*> ins = {y};
  for (size_t i = 0; i < extra.size(); ++i)
    ins.push_back(extra[i].defined() ? b.initializer("p" + std::to_string(i), extra[i]) : nullptr);
  b.output(b.node(op, ins, std::move(attrs), "act1"));
  return b.build();
}

void expect_activation(std::unique_ptr<Graph> g, const std::string& act, std::vector<float> params) {
  Outcome f = fuse(std::move(g));
  const Node* n = expect_one_fused(f);
  if (!n) return;
  EXPECT_EQ(n->attr_string("activation", ""), act);
  EXPECT_EQ(n->attr_floats("activation_params"), params);
  EXPECT_EQ(n->fused_from, (std::vector<std::string>{"c1", "act1"}));
  expect_same_numbers(f);
}

}  // namespace

// ---- Conv -> activation ----------------------------------------------------------------------

TEST(FuseConvActivation, Relu) { expect_activation(conv_act_graph({}, "Relu"), "Relu", {}); }

TEST(FuseConvActivation, ClipBoundsFromInputs) {
  // ReLU6 (opset >= 11: bounds are inputs).
  expect_activation(conv_act_graph({}, "Clip", {}, 13, {floats({0}, {}), floats({6}, {})}), "Clip", {0, 6});
  // Only min given: max is +FLT_MAX.
  expect_activation(conv_act_graph({}, "Clip", {}, 13, {floats({-0.5f}, {})}), "Clip", {-0.5f, FLT_MAX});
  // Only max given (min left out): min is -FLT_MAX.
  expect_activation(conv_act_graph({}, "Clip", {}, 13, {Tensor(), floats({0.25f}, {})}), "Clip", {-FLT_MAX, 0.25f});
}

TEST(FuseConvActivation, ClipBoundsFromAttributes) {
  expect_activation(conv_act_graph({}, "Clip", {attr("min", 0.0f), attr("max", 6.0f)}, 10), "Clip", {0, 6});
  expect_activation(conv_act_graph({}, "Clip", {attr("max", 0.5f)}, 10), "Clip", {-FLT_MAX, 0.5f});
}

TEST(FuseConvActivation, ParameterizedActivations) {
  expect_activation(conv_act_graph({}, "LeakyRelu", {attr("alpha", 0.2f)}), "LeakyRelu", {0.2f});
  expect_activation(conv_act_graph({}, "LeakyRelu"), "LeakyRelu", {0.01f});
  expect_activation(conv_act_graph({}, "HardSigmoid", {attr("alpha", 0.3f), attr("beta", 0.4f)}), "HardSigmoid",
                    {0.3f, 0.4f});
  expect_activation(conv_act_graph({}, "PRelu", {}, 17, {floats({0.1f}, {1})}), "LeakyRelu", {0.1f});
}

TEST(FuseConvActivation, PlainActivations) {
  expect_activation(conv_act_graph({}, "Sigmoid"), "Sigmoid", {});
  expect_activation(conv_act_graph({}, "Tanh"), "Tanh", {});
  expect_activation(conv_act_graph({}, "HardSwish", {}, 14), "HardSwish", {});
}

TEST(FuseConvActivation, Gelu) {
  expect_activation(conv_act_graph({}, "Gelu", {}, 20), "Gelu", {});
  expect_activation(conv_act_graph({}, "Gelu", {attr("approximate", std::string("tanh"))}, 20), "GeluTanh", {});
}

TEST(FuseConvActivation, Float16) {
  GraphBuilder b;
  Value* x = b.input("x", DType::Float16, shape_of({2, 4, 5, 5}));
  Tensor wf = random_tensor({6, 4, 3, 3}, 1), w(DType::Float16, {6, 4, 3, 3});
  for (int64_t i = 0; i < w.numel(); ++i) w.data<uint16_t>()[i] = float_to_half(wf.data<float>()[i]);
  Value* y = b.node("Conv", {x, b.initializer("W", w)}, {attr("kernel_shape", std::vector<int64_t>{3, 3})}, "c1");
  y = b.node("Add", {y, b.input("r", DType::Float16, shape_of({2, 6, 3, 3}))}, {}, "add1");
  b.output(b.node("Relu", {y}, {}, "relu1"));
  Outcome f = fuse(b.build());
  expect_one_fused(f);
  EXPECT_TRUE(verify_equivalence(*f.original, *f.optimized, 2, 9, {1e-2, 1e-2}).ok);
}

TEST(FuseConvActivation, SiLUBothOperandOrders) {
  for (bool sig_first : {false, true}) {
    SCOPED_TRACE(sig_first);
    ConvSpec s;
    GraphBuilder b;
    Value* y = add_conv(b, add_input(b, "x", s), s, "c1", 1);
    Value* sg = b.node("Sigmoid", {y}, {}, "sig1");
    b.output(b.node("Mul", sig_first ? std::vector<Value*>{sg, y} : std::vector<Value*>{y, sg}, {}, "mul1"));
    Outcome f = fuse(b.build());
    const Node* n = expect_one_fused(f);
    ASSERT_NE(n, nullptr);
    EXPECT_EQ(n->attr_string("activation", ""), "SiLU");
    EXPECT_EQ(n->fused_from, (std::vector<std::string>{"c1", "sig1", "mul1"}));
    EXPECT_EQ(f.optimized->nodes().size(), 1u);
    expect_same_numbers(f);
  }
}

TEST(FuseConvActivation, ConvVariants) {
  ConvSpec depthwise;
  depthwise.c = depthwise.m = depthwise.group = 6;
  ConvSpec grouped;
  grouped.group = 2;
  ConvSpec no_bias;
  no_bias.bias = false;
  ConvSpec one_d;
  one_d.spatial = {9}, one_d.kernel = {3};
  ConvSpec three_d;
  three_d.spatial = {3, 4, 5}, three_d.kernel = {1, 3, 3};
  for (const ConvSpec& s : {depthwise, grouped, no_bias, one_d, three_d})
    expect_activation(conv_act_graph(s, "Relu"), "Relu", {});
}

// A NaN or an infinity in x reaches the same outputs, as the same values, with the activation fused
// as without it: fusing must not turn a NaN into a number (ReLU's max, HardSigmoid's saturation).
TEST(FuseConvActivation, NonFiniteValuesComeOutAsTheUnfusedGraphGivesThem) {
  struct Case {
    std::string op;
    std::vector<NamedAttribute> attrs;
    int64_t opset;
    std::vector<Tensor> extra;
  };
  const std::vector<Case> cases = {
      {"Relu", {}, 17, {}},
      {"LeakyRelu", {attr("alpha", 0.2f)}, 17, {}},
      {"Clip", {}, 17, {floats({-0.5f}, {}), floats({0.5f}, {})}},
      {"HardSigmoid", {attr("alpha", 0.3f), attr("beta", 0.4f)}, 17, {}},
      {"HardSwish", {}, 17, {}},
      {"Sigmoid", {}, 17, {}},
      {"Tanh", {}, 17, {}},
      {"Gelu", {}, 20, {}},
  };
  ConvSpec s;
  s.spatial = {7, 7};
  Tensor x = random_tensor({s.n, s.c, 7, 7}, 5);
  float* xp = x.data<float>();
  xp[10] = std::numeric_limits<float>::quiet_NaN();            // image 0
  xp[s.c * 49 + 30] = std::numeric_limits<float>::infinity();  // image 1
  xp[s.c * 49 + 2 * 49 + 3] = -std::numeric_limits<float>::infinity();
  for (const Case& c : cases) {
    SCOPED_TRACE(c.op);
    Outcome f = fuse(conv_act_graph(s, c.op, c.attrs, c.opset, c.extra));
    expect_one_fused(f);
    const Tensor want = cpu::CpuBackend().compile(*f.original)->run({x})[0];
    const Tensor got = cpu::CpuBackend().compile(*f.optimized)->run({x})[0];
    ASSERT_EQ(got.numel(), want.numel());
    int64_t non_finite = 0;
    for (int64_t i = 0; i < want.numel(); ++i) {
      const float w = want.data<float>()[i], g = got.data<float>()[i];
      non_finite += !std::isfinite(w);
      if (std::isnan(w)) {
        EXPECT_TRUE(std::isnan(g)) << "element " << i << " is " << g << ", unfused NaN";
      } else if (std::isinf(w)) {
        EXPECT_EQ(g, w) << "element " << i;
      } else {
        EXPECT_NEAR(g, w, 1e-5 + 1e-5 * std::fabs(w)) << "element " << i;
      }
    }
    EXPECT_GT(non_finite, 0) << "the input's NaN must reach some output";
  }
}

// ---- Conv -> Add(residual) [-> activation] ---------------------------------------------------

TEST(FuseConvActivation, ResidualAddRelu) {
  ConvSpec s;
  GraphBuilder b;
  Value* y = add_conv(b, add_input(b, "x", s), s, "c1", 1);
  Value* r = b.input("r", DType::Float32, shape_of(out_dims(s)));
  y = b.node("Add", {r, y}, {}, "add1");  // the residual may be either operand
  b.output(b.node("Relu", {y}, {}, "relu1"));
  Outcome f = fuse(b.build());
  const Node* n = expect_one_fused(f);
  ASSERT_NE(n, nullptr);
  ASSERT_EQ(n->inputs.size(), 4u);
  EXPECT_EQ(n->inputs[3]->name, "r");
  EXPECT_EQ(n->attr_string("activation", ""), "Relu");
  EXPECT_EQ(n->fused_from, (std::vector<std::string>{"c1", "add1", "relu1"}));
  expect_same_numbers(f);
}

TEST(FuseConvActivation, ResidualAddWithoutActivationOrBias) {
  ConvSpec s;
  s.bias = false;
  GraphBuilder b;
  Value* x = add_input(b, "x", s);
  Value* r = b.node("Relu", {b.input("r", DType::Float32, shape_of(out_dims(s)))}, {}, "pre");
  b.output(b.node("Add", {add_conv(b, x, s, "c1", 1), r}, {}, "add1"));
  Outcome f = fuse(b.build());
  const Node* n = node_named(*f.optimized, "c1");
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(n->op_type, "FusedConv");
  ASSERT_EQ(n->inputs.size(), 4u);
  EXPECT_EQ(n->inputs[2], nullptr);  // still no bias
  EXPECT_EQ(n->attr_string("activation", ""), "");
  EXPECT_EQ(n->outputs[0]->name, f.original->outputs[0]->name);
  expect_same_numbers(f);
}

TEST(FuseConvActivation, ResidualAddThenSiLU) {
  ConvSpec s;
  GraphBuilder b;
  Value* y = add_conv(b, add_input(b, "x", s), s, "c1", 1);
  Value* a = b.node("Add", {y, b.input("r", DType::Float32, shape_of(out_dims(s)))}, {}, "add1");
  b.output(b.node("Mul", {a, b.node("Sigmoid", {a}, {}, "sig1")}, {}, "mul1"));
  Outcome f = fuse(b.build());
  const Node* n = expect_one_fused(f);
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(n->attr_string("activation", ""), "SiLU");
  EXPECT_EQ(f.optimized->nodes().size(), 1u);
  expect_same_numbers(f);
}

TEST(FuseConvActivation, AddOutputReadTwiceKeepsTheActivationApart) {
  // The Add's sum is also read elsewhere: Conv + Add fuse, the Relu stays (and says why).
  ConvSpec s;
  GraphBuilder b;
  Value* y = add_conv(b, add_input(b, "x", s), s, "c1", 1);
  Value* a = b.node("Add", {y, b.input("r", DType::Float32, shape_of(out_dims(s)))}, {}, "add1");
  b.output(b.node("Relu", {a}, {}, "relu1"));
  b.output(b.node("Neg", {a}, {}, "neg1"));
  Outcome f = fuse(b.build());
  EXPECT_EQ(count_any_domain(*f.optimized, "FusedConv"), 1);
  EXPECT_EQ(count_any_domain(*f.optimized, "Relu"), 1);
  EXPECT_EQ(node_named(*f.optimized, "c1")->attr_string("activation", ""), "");
  ASSERT_EQ(f.ctx.near_misses.size(), 1u);
  EXPECT_NE(f.ctx.near_misses[0].reason.find("has 2 consumers"), std::string::npos);
  expect_same_numbers(f);
}

TEST(FuseConvActivation, ProjectionShortcutFusesIntoLaterConv) {
  // Add(Conv a, Conv b) -> Relu: the conv later in order (c_proj) takes the Add; c_main stays.
  ConvSpec s;
  GraphBuilder b;
  Value* x = add_input(b, "x", s);
  Value* main = add_conv(b, x, s, "c_main", 1);
  Value* proj = add_conv(b, x, s, "c_proj", 2);
  b.output(b.node("Relu", {b.node("Add", {main, proj}, {}, "add1")}, {}, "relu1"));
  Outcome f = fuse(b.build());
  EXPECT_EQ(count_any_domain(*f.optimized, "FusedConv"), 1);
  EXPECT_EQ(count_any_domain(*f.optimized, "Conv"), 1);
  const Node* n = node_named(*f.optimized, "c_proj");
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(n->op_type, "FusedConv");
  EXPECT_EQ(n->inputs[3]->producer, node_named(*f.optimized, "c_main"));
  EXPECT_EQ(node_named(*f.optimized, "c_main")->op_type, "Conv");
  expect_same_numbers(f);
}

TEST(FuseConvActivation, ConvBatchNormAddReluIsOneFusedConvInThePipeline) {
  ConvSpec s;
  GraphBuilder b;
  Value* x = add_input(b, "x", s);
  Value* y = add_conv(b, x, s, "c1", 1);
  y = b.node("BatchNormalization",
             {y, b.initializer("sc", random_tensor({6}, 3, 0.5f, 1.5f)), b.initializer("bb", random_tensor({6}, 4)),
              b.initializer("mu", random_tensor({6}, 5)), b.initializer("var", random_tensor({6}, 6, 0.1f, 2))},
             {attr("epsilon", 1e-3f)}, "bn1");
  y = b.node("Add", {y, b.input("r", DType::Float32, shape_of(out_dims(s)))}, {}, "add1");
  b.output(b.node("Relu", {y}, {}, "relu1"));
  auto g = b.build();
  infer_shapes(*g);
  auto before = g->clone();
  PipelineOptions po;
  po.only = {"fold_batchnorm", "fuse_conv_activation"};
  optimize_graph(*g, po);
  ASSERT_EQ(g->nodes().size(), 1u);
  const Node* n = node_named(*g, "c1");
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(n->op_type, "FusedConv");
  EXPECT_EQ(n->fused_from, (std::vector<std::string>{"c1", "bn1", "add1", "relu1"}));
  EXPECT_TRUE(verify_equivalence(*before, *g, 2, 5, {1e-4, 1e-5}).ok);
}

TEST(FuseConvActivation, Idempotent) {
  Outcome f = fuse(conv_act_graph({}, "Relu"));
  auto again = f.optimized->clone();
  FuseConvActivationPass pass;
  PassContext ctx;
  EXPECT_FALSE(pass.run(*again, ctx));
  EXPECT_EQ(graph_difference(*f.optimized, *again), "");
}

// ---- Near-misses -----------------------------------------------------------------------------

TEST(FuseConvActivationNearMiss, SecondConsumerOutsideThePattern) {
  ConvSpec s;
  GraphBuilder b;
  Value* y = add_conv(b, add_input(b, "x", s), s, "c1", 1);
  b.output(b.node("Relu", {y}, {}, "relu1"));
  b.output(b.node("Neg", {y}, {}, "neg1"));
  expect_near_miss(fuse(b.build()), "has 2 consumers");
}

TEST(FuseConvActivationNearMiss, SiLUSigmoidEscapes) {
  ConvSpec s;
  GraphBuilder b;
  Value* y = add_conv(b, add_input(b, "x", s), s, "c1", 1);
  Value* sg = b.node("Sigmoid", {y}, {}, "sig1");
  b.output(b.node("Mul", {y, sg}, {}, "mul1"));
  b.output(sg);
  expect_near_miss(fuse(b.build()), "Sigmoid output");
}

TEST(FuseConvActivationNearMiss, ConvOutputIsGraphOutput) {
  ConvSpec s;
  GraphBuilder b;
  Value* y = add_conv(b, add_input(b, "x", s), s, "c1", 1);
  b.output(b.node("Relu", {y}, {}, "relu1"));
  b.output(y);
  expect_near_miss(fuse(b.build()), "is a graph output");
}

TEST(FuseConvActivationNearMiss, ClipBoundNotConstant) {
  ConvSpec s;
  GraphBuilder b(13);
  Value* y = add_conv(b, add_input(b, "x", s), s, "c1", 1);
  Value* lo = b.input("lo", DType::Float32, shape_of({}));
  b.output(b.node("Clip", {y, lo, b.initializer("hi", floats({6}, {}))}, {}, "clip1"));
  expect_near_miss(fuse(b.build()), "Clip's min 'lo' is not a constant");
}

TEST(FuseConvActivationNearMiss, PReluPerChannel) {
  expect_near_miss(fuse(conv_act_graph({}, "PRelu", {}, 17, {random_tensor({6, 1, 1}, 9)})), "PRelu slope varies");
}

TEST(FuseConvActivationNearMiss, ResidualBroadcasts) {
  ConvSpec s;
  GraphBuilder b;
  Value* y = add_conv(b, add_input(b, "x", s), s, "c1", 1);
  Value* r = b.input("r", DType::Float32, shape_of({1, 6, 1, 1}));
  b.output(b.node("Relu", {b.node("Add", {y, r}, {}, "add1")}, {}, "relu1"));
  expect_near_miss(fuse(b.build()), "no broadcasting");
}

TEST(FuseConvActivationNearMiss, Float64) {
  ConvSpec s;
  s.dtype = DType::Float64;
  expect_near_miss(fuse(conv_act_graph(s, "Relu")), "not float64");
}

TEST(FuseConvActivationNearMiss, Portable) {
  Outcome f = fuse(conv_act_graph({}, "Relu"), /*portable=*/true);
  expect_near_miss(f, "--portable");
  EXPECT_EQ(f.optimized->opset("ai.fusec"), 0);
}

namespace {

/// A depthwise conv whose image becomes tokens before its activation (SegFormer's Mix-FFN):
/// Conv [2,6,3,4] -> Reshape [2,6,12] -> Transpose(0,2,1) -> `act` -> y [2,12,6].
struct TokensThenActivation {
  GraphBuilder b{20};  // Gelu is an ai.onnx op from opset 20
  Value *flat, *tokens, *y;
  explicit TokensThenActivation(const std::string& act) {
    ConvSpec s;
    s.c = s.m = s.group = 6;
    s.spatial = {3, 4};
    Value* conv = add_conv(b, add_input(b, "x", s), s, "c1", 3);
    flat = b.node("Reshape", {conv, b.initializer("flat", Tensor::from_int64({2, 6, 12}, {3}))}, {}, "flatten");
    tokens = b.node("Transpose", {flat}, {attr("perm", std::vector<int64_t>{0, 2, 1})}, "to_tokens");
    std::vector<Value*> ins = {tokens};
    if (act == "PRelu") ins.push_back(b.initializer("slope", random_tensor({6}, 4, 0, 0.5)));
    y = b.node(act, ins, {}, "act");
    b.output(y);
  }
};

}  // namespace

TEST(FuseConvActivation, AnActivationAfterTheConvsImageBecameTokensMovesInFrontAndFuses) {
  TokensThenActivation t("Gelu");
  Outcome f = run_one_pass<FuseConvActivationPass>(t.b.build());
  ASSERT_TRUE(f.changed);
  const Node* c = node_named(*f.optimized, "c1");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->op_type, "FusedConv");
  EXPECT_EQ(c->attr_string("activation", ""), "Gelu");
  EXPECT_EQ(count(*f.optimized, "Gelu"), 0);
  // The graph's output is still 'act''s value, now written by the Transpose.
  ASSERT_EQ(f.optimized->outputs.size(), 1u);
  EXPECT_EQ(f.optimized->outputs[0]->name, t.y->name);
  EXPECT_EQ(f.optimized->outputs[0]->producer->op_type, "Transpose");
  expect_same_numbers(f);
}

TEST(FuseConvActivationNearMiss, APReluAfterTheTokensOrAMovedValueWithAnotherReaderStaysWhereItIs) {
  {
    TokensThenActivation t("PRelu");  // its slope is laid out for the tokens, not the image
    Outcome f = run_one_pass<FuseConvActivationPass>(t.b.build());
    EXPECT_FALSE(f.changed);
    expect_unchanged(*f.original, *f.optimized);
  }
  {
    TokensThenActivation t("Relu");
    t.b.output(t.flat);  // the flattened image is a result too: the Relu must not move above it
    Outcome f = run_one_pass<FuseConvActivationPass>(t.b.build());
    EXPECT_FALSE(f.changed);
    expect_unchanged(*f.original, *f.optimized);
  }
}
