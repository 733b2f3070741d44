// fold_batchnorm: BN / per-channel Mul and Add folded into Conv, BN and bias Add folded into
// Gemm/MatMul. Each positive case checks op counts, names and numbers against the unfolded graph;
// each guard has a near-miss case that leaves the graph unchanged.
#include <random>

#include "ir/half.h"

#include "passes/fold_batchnorm.h"
#include "passes/pattern.h"
#include "passes/pipeline.h"
#include "passes/verify.h"
#include "pass_test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

Tensor random_tensor(std::vector<int64_t> dims, uint64_t seed, float lo = -1, float hi = 1) {
  Tensor t(DType::Float32, std::move(dims));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(rng);
  return t;
}

Tensor to_f16(const Tensor& f) {
  Tensor t(DType::Float16, f.dims());
  for (int64_t i = 0; i < f.numel(); ++i) t.data<uint16_t>()[i] = float_to_half(f.data<float>()[i]);
  return t;
}

struct ConvSpec {
  int64_t n = 2, c = 4, m = 6, group = 1;
  std::vector<int64_t> spatial = {5, 5}, kernel = {3, 3};
  bool bias = true;
};

Value* add_input(GraphBuilder& b, const std::string& name, const ConvSpec& s) {
  std::vector<int64_t> dims = {s.n, s.c};
  for (auto d : s.spatial) dims.push_back(d);
  return b.input(name, DType::Float32, shape_of(dims));
}

/// Conv with 'same' padding and random weights (and bias, per spec).
Value* add_conv(GraphBuilder& b, Value* x, const ConvSpec& s, const std::string& name, uint64_t seed) {
  std::vector<int64_t> wd = {s.m, s.c / s.group};
  for (auto k : s.kernel) wd.push_back(k);
  std::vector<Value*> ins = {x, b.initializer(name + ".W", random_tensor(wd, seed))};
  if (s.bias) ins.push_back(b.initializer(name + ".B", random_tensor({s.m}, seed + 1)));
  std::vector<int64_t> pads;
  for (auto k : s.kernel) pads.push_back(k / 2);
  for (auto k : s.kernel) pads.push_back(k / 2);
  return b.node("Conv", ins, {attr("group", s.group), attr("kernel_shape", s.kernel), attr("pads", pads)}, name);
}

/// BatchNormalization with random inference statistics (var > 0).
Value* add_bn(GraphBuilder& b, Value* x, int64_t ch, const std::string& name, uint64_t seed, float eps = 1e-5f,
              std::vector<NamedAttribute> extra = {}) {
  std::vector<NamedAttribute> attrs = {attr("epsilon", eps)};
  for (auto& a : extra) attrs.push_back(a);
  return b.node("BatchNormalization",
                {x, b.initializer(name + ".scale", random_tensor({ch}, seed, 0.5f, 1.5f)),
                 b.initializer(name + ".bias", random_tensor({ch}, seed + 1)),
                 b.initializer(name + ".mean", random_tensor({ch}, seed + 2)),
                 b.initializer(name + ".var", random_tensor({ch}, seed + 3, 0.1f, 2.0f))},
                attrs, name);
}

Outcome fold(std::unique_ptr<Graph> g) { return run_one_pass<FoldBatchNormPass>(std::move(g)); }

void expect_same_numbers(const Outcome& f, uint64_t seed = 7) {
  fusec::test::expect_same_numbers(*f.original, *f.optimized, seed);
}

void expect_near_miss(const Outcome& f, const std::string& reason) {
  fusec::test::expect_near_miss(f, "fold_batchnorm", reason);
}

std::unique_ptr<Graph> conv_bn_graph(const ConvSpec& s, float eps = 1e-5f) {
  GraphBuilder b;
  Value* y = add_conv(b, add_input(b, "x", s), s, "c1", 1);
  b.output(add_bn(b, y, s.m, "bn1", 10, eps));
  return b.build();
}

void expect_conv_bn_folded(const ConvSpec& s, float eps = 1e-5f) {
  Outcome f = fold(conv_bn_graph(s, eps));
  EXPECT_TRUE(f.changed);
  EXPECT_EQ(count_any_domain(*f.optimized, "BatchNormalization"), 0);
  ASSERT_EQ(count_any_domain(*f.optimized, "Conv"), 1);
  const Node* c = node_named(*f.optimized, "c1");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->outputs[0]->name, f.original->outputs[0]->name);  // the BN's output value survives
  EXPECT_EQ(c->fused_from, (std::vector<std::string>{"c1", "bn1"}));
  ASSERT_NE(c->input(2), nullptr);  // a bias exists afterwards, with or without one before
  ASSERT_EQ(f.ctx.rewrites.size(), 1u);
  EXPECT_EQ(f.ctx.rewrites[0].replaced, (std::vector<std::string>{"c1", "bn1"}));
  expect_same_numbers(f);
}

}  // namespace

// ---- Conv -> BatchNormalization ---------------------------------------------------------------

TEST(FoldBatchNorm, Conv2dWithBias) { expect_conv_bn_folded({}); }

TEST(FoldBatchNorm, ConvWithoutBiasAndOtherEpsilon) {
  ConvSpec s;
  s.bias = false;
  expect_conv_bn_folded(s, 1e-3f);
  expect_conv_bn_folded(s, 0.1f);
}

TEST(FoldBatchNorm, DepthwiseConv) {
  ConvSpec s;
  s.c = s.m = s.group = 6;
  expect_conv_bn_folded(s);
}

TEST(FoldBatchNorm, GroupedConv) {
  ConvSpec s;
  s.c = 4, s.m = 6, s.group = 2;
  expect_conv_bn_folded(s);
  s.bias = false;
  expect_conv_bn_folded(s);
}

TEST(FoldBatchNorm, Conv1dAnd3d) {
  ConvSpec one;
  one.spatial = {9}, one.kernel = {3};
  expect_conv_bn_folded(one);
  ConvSpec three;
  three.spatial = {4, 5, 3}, three.kernel = {3, 1, 3};
  expect_conv_bn_folded(three);
}

TEST(FoldBatchNorm, Float16) {
  GraphBuilder b;
  Value* x = b.input("x", DType::Float16, shape_of({2, 4, 5, 5}));
  Value* y = b.node("Conv", {x, b.initializer("W", to_f16(random_tensor({6, 4, 3, 3}, 1)))},
                    {attr("kernel_shape", std::vector<int64_t>{3, 3})}, "c1");
  b.output(
      b.node("BatchNormalization",
             {y, b.initializer("sc", to_f16(random_tensor({6}, 2, 0.5f, 1.5f))),
              b.initializer("bb", to_f16(random_tensor({6}, 3))), b.initializer("mu", to_f16(random_tensor({6}, 4))),
              b.initializer("var", to_f16(random_tensor({6}, 5, 0.1f, 2)))},
             {}, "bn1"));
  Outcome f = fold(b.build());
  EXPECT_EQ(count_any_domain(*f.optimized, "BatchNormalization"), 0);
  const Node* c = node_named(*f.optimized, "c1");
  EXPECT_EQ(c->input(1)->type.dtype, DType::Float16);
  EXPECT_EQ(c->input(2)->type.dtype, DType::Float16);
  // Half rounding differs (the folded weights are rounded once more), so a half-sized tolerance.
  EXPECT_TRUE(verify_equivalence(*f.original, *f.optimized, 2, 9, {1e-2, 1e-2}).ok);
}

TEST(FoldBatchNorm, SharedWeightIsNotModified) {
  // Two convs read the same W; folding one BN must leave the other conv's weight untouched.
  ConvSpec s;
  GraphBuilder b;
  Value* x = add_input(b, "x", s);
  Value* w = b.initializer("W", random_tensor({6, 4, 3, 3}, 3));
  auto conv = [&](const std::string& name) {
    return b.node("Conv", {x, w}, {attr("kernel_shape", std::vector<int64_t>{3, 3})}, name);
  };
  b.output(add_bn(b, conv("c1"), 6, "bn1", 20));
  b.output(conv("c2"));
  Outcome f = fold(b.build());
  EXPECT_EQ(count_any_domain(*f.optimized, "BatchNormalization"), 0);
  EXPECT_EQ(node_named(*f.optimized, "c2")->input(1)->name, "W");
  EXPECT_NE(node_named(*f.optimized, "c1")->input(1)->name, "W");
  expect_same_numbers(f);
}

TEST(FoldBatchNorm, ChainFoldsInOneSweepAndIsIdempotent) {
  // Conv -> BN -> Mul(per channel) -> Add(per channel): all three folded into c1.
  ConvSpec s;
  GraphBuilder b;
  Value* y = add_bn(b, add_conv(b, add_input(b, "x", s), s, "c1", 1), 6, "bn1", 30);
  y = b.node("Mul", {y, b.initializer("scale", random_tensor({6, 1, 1}, 31))}, {}, "mul1");
  y = b.node("Add", {b.initializer("shift", random_tensor({1, 6, 1, 1}, 32)), y}, {}, "add1");
  b.output(y);
  Outcome f = fold(b.build());
  EXPECT_EQ(f.optimized->nodes().size(), 1u);
  const Node* c = node_named(*f.optimized, "c1");
  EXPECT_EQ(c->fused_from, (std::vector<std::string>{"c1", "bn1", "mul1", "add1"}));
  EXPECT_EQ(c->outputs[0]->name, f.original->outputs[0]->name);
  expect_same_numbers(f);
  FoldBatchNormPass pass;
  PassContext ctx;
  EXPECT_FALSE(pass.run(*f.optimized, ctx));
}

// ---- Conv -> Mul / Add of a per-channel constant ---------------------------------------------

TEST(FoldBatchNorm, ConvMulPerChannelShapes) {
  for (std::vector<int64_t> dims : {std::vector<int64_t>{6, 1, 1}, {1, 6, 1, 1}, {}, {1}, {1, 1, 1}}) {
    SCOPED_TRACE(dims_str(dims));
    ConvSpec s;
    GraphBuilder b;
    Value* y = add_conv(b, add_input(b, "x", s), s, "c1", 1);
    b.output(b.node("Mul", {y, b.initializer("k", random_tensor(dims, 40))}, {}, "mul1"));
    Outcome f = fold(b.build());
    EXPECT_TRUE(f.changed);
    EXPECT_EQ(count_any_domain(*f.optimized, "Mul"), 0);
    expect_same_numbers(f);
  }
}

TEST(FoldBatchNorm, ConvAddCreatesBias) {
  ConvSpec s;
  s.bias = false;
  s.spatial = {7}, s.kernel = {3};
  GraphBuilder b;
  Value* y = add_conv(b, add_input(b, "x", s), s, "c1", 1);
  b.output(b.node("Add", {y, b.initializer("k", random_tensor({6, 1}, 41))}, {}, "add1"));
  Outcome f = fold(b.build());
  EXPECT_EQ(count_any_domain(*f.optimized, "Add"), 0);
  const Node* c = node_named(*f.optimized, "c1");
  ASSERT_NE(c->input(2), nullptr);
  EXPECT_EQ(c->input(1)->name, "c1.W");  // an Add leaves the weight alone
  expect_same_numbers(f);
}

TEST(FoldBatchNorm, ConvAddWithNonConstantWeight) {
  // Only the bias changes for an Add, so the weight need not be constant.
  ConvSpec s;
  GraphBuilder b;
  Value* x = add_input(b, "x", s);
  Value* w = b.input("W", DType::Float32, shape_of({6, 4, 3, 3}));
  Value* y = b.node("Conv", {x, w, b.initializer("B", random_tensor({6}, 2))},
                    {attr("kernel_shape", std::vector<int64_t>{3, 3})}, "c1");
  b.output(b.node("Add", {y, b.initializer("k", random_tensor({1, 6, 1, 1}, 42))}, {}, "add1"));
  Outcome f = fold(b.build());
  EXPECT_EQ(count_any_domain(*f.optimized, "Add"), 0);
  expect_same_numbers(f);
}

// ---- Gemm / MatMul -> BatchNormalization, -> Add --------------------------------------------

std::unique_ptr<Graph> gemm_graph(bool trans_b, bool with_c, float alpha, float beta, const std::string& tail) {
  GraphBuilder b;
  Value* a = b.input("a", DType::Float32, shape_of({3, 5}));
  Value* w = b.initializer("W", random_tensor(trans_b ? std::vector<int64_t>{4, 5} : std::vector<int64_t>{5, 4}, 50));
  std::vector<Value*> ins = {a, w};
  if (with_c) ins.push_back(b.initializer("C", random_tensor({4}, 51)));
  Value* y = b.node("Gemm", ins, {attr("transB", int64_t{trans_b}), attr("alpha", alpha), attr("beta", beta)}, "g1");
  if (tail == "bn")
    y = add_bn(b, y, 4, "bn1", 52, 1e-4f);
  else
    y = b.node("Add", {y, b.initializer("bias", random_tensor({1, 4}, 53))}, {}, "add1");
  b.output(y);
  return b.build();
}

TEST(FoldBatchNorm, GemmBatchNorm) {
  for (bool trans_b : {false, true})
    for (bool with_c : {false, true}) {
      SCOPED_TRACE(std::to_string(trans_b) + std::to_string(with_c));
      Outcome f = fold(gemm_graph(trans_b, with_c, 0.5f, 2.0f, "bn"));
      EXPECT_EQ(count_any_domain(*f.optimized, "BatchNormalization"), 0);
      EXPECT_EQ(count_any_domain(*f.optimized, "Gemm"), 1);
      EXPECT_EQ(node_named(*f.optimized, "g1")->fused_from, (std::vector<std::string>{"g1", "bn1"}));
      expect_same_numbers(f);
    }
}

TEST(FoldBatchNorm, GemmAddIntoC) {
  for (bool with_c : {false, true}) {
    SCOPED_TRACE(with_c);
    Outcome f = fold(gemm_graph(true, with_c, 1.5f, 0.25f, "add"));
    EXPECT_EQ(count_any_domain(*f.optimized, "Add"), 0);
    EXPECT_EQ(node_named(*f.optimized, "g1")->attr_float("beta", 1.0f), 1.0f);
    expect_same_numbers(f);
  }
}

TEST(FoldBatchNorm, MatMulBatchNormBecomesGemm) {
  GraphBuilder b;
  Value* a = b.input("a", DType::Float32, shape_of({3, 5}));
  Value* y = b.node("MatMul", {a, b.initializer("W", random_tensor({5, 4}, 60))}, {}, "m1");
  b.output(add_bn(b, y, 4, "bn1", 61, 1e-3f));
  Outcome f = fold(b.build());
  EXPECT_EQ(count_any_domain(*f.optimized, "MatMul"), 0);
  EXPECT_EQ(count_any_domain(*f.optimized, "BatchNormalization"), 0);
  const Node* g = node_named(*f.optimized, "m1");
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->op_type, "Gemm");
  expect_same_numbers(f);
}

TEST(FoldBatchNorm, MatMulAddBatchNormBecomesOneGemm) {
  GraphBuilder b;
  Value* a = b.input("a", DType::Float32, shape_of({3, 5}));
  Value* y = b.node("MatMul", {a, b.initializer("W", random_tensor({5, 4}, 60))}, {}, "m1");
  y = b.node("Add", {b.initializer("bias", random_tensor({4}, 62)), y}, {}, "add1");
  b.output(add_bn(b, y, 4, "bn1", 63));
  Outcome f = fold(b.build());
  ASSERT_EQ(f.optimized->nodes().size(), 1u);
  const Node* g = node_named(*f.optimized, "m1");
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->op_type, "Gemm");
  EXPECT_EQ(g->fused_from, (std::vector<std::string>{"m1", "add1", "bn1"}));
  EXPECT_EQ(g->outputs[0]->name, f.original->outputs[0]->name);
  expect_same_numbers(f);
}

TEST(FoldBatchNorm, MatMulAddAloneIsLeftToFuseMatMulBias) {
  // Without a BN after it, MatMul + bias (maybe + activation) is fuse_matmul_bias's pattern.
  GraphBuilder b;
  Value* a = b.input("a", DType::Float32, shape_of({3, 5}));
  Value* y = b.node("MatMul", {a, b.initializer("W", random_tensor({5, 4}, 60))}, {}, "m1");
  b.output(b.node("Relu", {b.node("Add", {y, b.initializer("bias", random_tensor({4}, 62))}, {}, "add1")}));
  Outcome f = fold(b.build());
  EXPECT_FALSE(f.changed);
  EXPECT_TRUE(f.ctx.near_misses.empty());
}

TEST(FoldBatchNorm, MatMulNdAddIsNotOurs) {
  // MatMul with 3-D A + bias is FusedMatMul's pattern: no rewrite and no near-miss here.
  GraphBuilder b;
  Value* a = b.input("a", DType::Float32, shape_of({2, 3, 5}));
  Value* y = b.node("MatMul", {a, b.initializer("W", random_tensor({5, 4}, 63))}, {}, "m1");
  b.output(b.node("Add", {y, b.initializer("bias", random_tensor({4}, 64))}, {}, "add1"));
  Outcome f = fold(b.build());
  EXPECT_FALSE(f.changed);
  EXPECT_TRUE(f.ctx.near_misses.empty());
}

TEST(FoldBatchNorm, InThePipeline) {
  ConvSpec s;
  auto g = conv_bn_graph(s);
  infer_shapes(*g);
  auto before = g->clone();
  PipelineOptions po;
  po.only = {"fold_batchnorm"};
  po.pass.portable = true;  // standard ONNX out, so it runs under --portable too
  OptimizeResult r = optimize_graph(*g, po);
  EXPECT_EQ(count_any_domain(*g, "BatchNormalization"), 0);
  EXPECT_EQ(r.rewrites.size(), 1u);
  EXPECT_TRUE(verify_equivalence(*before, *g, 2, 3, {1e-4, 1e-5}).ok);
}

// ---- Near-misses -----------------------------------------------------------------------------

TEST(FoldBatchNormNearMiss, ConvOutputHasSecondConsumer) {
  ConvSpec s;
  GraphBuilder b;
  Value* y = add_conv(b, add_input(b, "x", s), s, "c1", 1);
  b.output(add_bn(b, y, 6, "bn1", 10));
  b.output(b.node("Relu", {y}, {}, "r1"));
  expect_near_miss(fold(b.build()), "has 2 consumers");
}

TEST(FoldBatchNormNearMiss, ConvOutputIsGraphOutput) {
  ConvSpec s;
  GraphBuilder b;
  Value* y = add_conv(b, add_input(b, "x", s), s, "c1", 1);
  b.output(add_bn(b, y, 6, "bn1", 10));
  b.output(y);
  expect_near_miss(fold(b.build()), "is a graph output");
}

TEST(FoldBatchNormNearMiss, BatchNormParamsNotConstant) {
  ConvSpec s;
  GraphBuilder b;
  Value* y = add_conv(b, add_input(b, "x", s), s, "c1", 1);
  Value* mean = b.input("mean", DType::Float32, shape_of({6}));
  b.output(b.node("BatchNormalization",
                  {y, b.initializer("sc", random_tensor({6}, 1)), b.initializer("bb", random_tensor({6}, 2)), mean,
                   b.initializer("var", random_tensor({6}, 3, 0.1f, 1))},
                  {}, "bn1"));
  expect_near_miss(fold(b.build()), "its mean is not constant");
}

TEST(FoldBatchNormNearMiss, TrainingMode) {
  ConvSpec s;
  GraphBuilder b(15);
  Value* y = add_conv(b, add_input(b, "x", s), s, "c1", 1);
  b.output(add_bn(b, y, 6, "bn1", 10, 1e-5f, {attr("training_mode", int64_t{1})}));
  expect_near_miss(fold(b.build()), "training mode");
}

TEST(FoldBatchNormNearMiss, StatisticsOutputsUsed) {
  // Opset 9: the running mean/var outputs exist only in training; using them rules folding out.
  ConvSpec s;
  GraphBuilder b(9);
  Value* y = add_conv(b, add_input(b, "x", s), s, "c1", 1);
  auto outs =
      b.node_n("BatchNormalization",
               {y, b.initializer("sc", random_tensor({6}, 1, 0.5f, 1.5f)), b.initializer("bb", random_tensor({6}, 2)),
                b.initializer("mu", random_tensor({6}, 3)), b.initializer("var", random_tensor({6}, 4, 0.1f, 1))},
               3, {}, "bn1");
  b.output(outs[0]);
  b.output(outs[1]);
  expect_near_miss(fold(b.build()), "is used (training)");
}

TEST(FoldBatchNormNearMiss, WeightNotConstant) {
  ConvSpec s;
  GraphBuilder b;
  Value* x = add_input(b, "x", s);
  Value* w = b.input("W", DType::Float32, shape_of({6, 4, 3, 3}));
  Value* y = b.node("Conv", {x, w}, {attr("kernel_shape", std::vector<int64_t>{3, 3})}, "c1");
  b.output(add_bn(b, y, 6, "bn1", 10));
  expect_near_miss(fold(b.build()), "conv weight 'W' is not a constant");
}

TEST(FoldBatchNormNearMiss, GemmWeightNotConstant) {
  GraphBuilder b;
  Value* a = b.input("a", DType::Float32, shape_of({3, 5}));
  Value* w = b.input("W", DType::Float32, shape_of({5, 4}));
  b.output(add_bn(b, b.node("Gemm", {a, w}, {}, "g1"), 4, "bn1", 10));
  expect_near_miss(fold(b.build()), "weight 'W' is not a constant");
}

TEST(FoldBatchNormNearMiss, NotFloat) {
  GraphBuilder b;
  Value* a = b.input("a", DType::Int32, shape_of({3, 5}));
  Tensor w(DType::Int32, {5, 4}), bias(DType::Int32, {4});
  Value* y = b.node("Gemm", {a, b.initializer("W", w)}, {}, "g1");
  b.output(b.node("Add", {y, b.initializer("bias", bias)}, {}, "add1"));
  expect_near_miss(fold(b.build()), "not a floating-point type");
}

TEST(FoldBatchNormNearMiss, MulConstantNotPerChannel) {
  // [6] right-aligns with the width axis, [1,6,6,6] varies over space, [1,1,6,1] along height,
  // [2,6,1,1] along the batch.
  for (std::vector<int64_t> dims : {std::vector<int64_t>{6}, {1, 6, 6, 6}, {1, 1, 6, 1}, {2, 6, 1, 1}}) {
    SCOPED_TRACE(dims_str(dims));
    ConvSpec s;
    s.m = 6, s.spatial = {6, 6};
    GraphBuilder b;
    Value* y = add_conv(b, add_input(b, "x", s), s, "c1", 1);
    b.output(b.node("Mul", {y, b.initializer("k", random_tensor(dims, 70))}, {}, "mul1"));
    expect_near_miss(fold(b.build()), "is not per-channel");
  }
}

TEST(FoldBatchNormNearMiss, AddConstantGrowsOutput) {
  ConvSpec s;
  GraphBuilder b;
  Value* y = add_conv(b, add_input(b, "x", s), s, "c1", 1);
  b.output(b.node("Add", {y, b.initializer("k", random_tensor({1, 1, 6, 1, 1}, 71))}, {}, "add1"));
  expect_near_miss(fold(b.build()), "more dims than the output");
}

TEST(FoldBatchNormNearMiss, MatMulNdBatchNorm) {
  // BN normalizes axis 1 (the 3 rows of each batch), not the 4 features the weight produces.
  GraphBuilder b;
  Value* a = b.input("a", DType::Float32, shape_of({2, 3, 5}));
  Value* y = b.node("MatMul", {a, b.initializer("W", random_tensor({5, 4}, 80))}, {}, "m1");
  b.output(add_bn(b, y, 3, "bn1", 81));
  expect_near_miss(fold(b.build()), "not the feature axis");
}

TEST(FoldBatchNormNearMiss, GemmCNotConstant) {
  GraphBuilder b;
  Value* a = b.input("a", DType::Float32, shape_of({3, 5}));
  Value* c = b.input("C", DType::Float32, shape_of({4}));
  Value* y = b.node("Gemm", {a, b.initializer("W", random_tensor({5, 4}, 90)), c}, {}, "g1");
  b.output(b.node("Add", {y, b.initializer("bias", random_tensor({4}, 91))}, {}, "add1"));
  expect_near_miss(fold(b.build()), "C 'C' is not a constant");
}

// ---- A per-feature scale after a MatMul, through its bias and a Transpose (layer scale) -------

namespace {

/// x[2,4,3,8]·W[8,6] [+ b[6]] [-> Transpose(0,3,1,2)] -> Mul(c): ConvNeXt's MLP tail and layer scale.
std::unique_ptr<Graph> layer_scale_graph(bool bias, bool transpose, std::vector<int64_t> c_dims,
                                         std::vector<int64_t> bias_dims = {6}) {
  GraphBuilder b;
  Value* x = b.input("x", DType::Float32, shape_of({2, 4, 3, 8}));
  Value* y = b.node("MatMul", {x, b.initializer("W", random_tensor({8, 6}, 80))}, {}, "fc2");
  if (bias) y = b.node("Add", {y, b.initializer("b", random_tensor(bias_dims, 81))}, {}, "fc2_bias");
  if (transpose) y = b.node("Transpose", {y}, {attr("perm", std::vector<int64_t>{0, 3, 1, 2})}, "to_nchw");
  b.output(b.node("Mul", {b.initializer("gamma", random_tensor(c_dims, 82, 0.5f, 2.0f)), y}, {}, "layer_scale"));
  return b.build();
}

}  // namespace

TEST(FoldBatchNorm, MatMulLayerScaleFoldsThroughBiasAndTranspose) {
  for (bool bias : {false, true})
    for (bool transpose : {false, true}) {
      SCOPED_TRACE(std::string(bias ? "bias" : "no bias") + (transpose ? ", transposed" : ""));
      // Per feature: [6,1,1] on the NCHW side of the Transpose, [6] (or [1,1,1,6]) on the product's.
      const std::vector<int64_t> c = transpose ? std::vector<int64_t>{6, 1, 1} : std::vector<int64_t>{1, 1, 1, 6};
      Outcome f = fold(layer_scale_graph(bias, transpose, c));
      EXPECT_TRUE(f.changed);
      EXPECT_EQ(count_any_domain(*f.optimized, "Mul"), 0);
      EXPECT_EQ(count_any_domain(*f.optimized, "MatMul"), 1);
      EXPECT_EQ(count_any_domain(*f.optimized, "Transpose"), transpose ? 1 : 0);
      EXPECT_EQ(f.optimized->outputs[0]->name, f.original->outputs[0]->name);
      EXPECT_NE(node_named(*f.optimized, "fc2")->inputs[1]->name, "W") << "a new weight: W may be shared";
      expect_same_numbers(f);
    }
}

TEST(FoldBatchNormNearMiss, MatMulScaleNotPerFeatureOrSharedProduct) {
  // [1,1,4,1] after the Transpose varies along H; [1,4,1,6] without it along H too.
  expect_near_miss(fold(layer_scale_graph(true, true, {1, 1, 4, 1})), "is not per-feature");
  expect_near_miss(fold(layer_scale_graph(true, false, {1, 4, 1, 6})), "is not per-feature");
  // A bias that varies along H cannot take the scale either.
  expect_near_miss(fold(layer_scale_graph(true, false, {6}, {4, 1, 6})), "the bias");
  // The product read elsewhere too: scaling its weight would change that reader's value.
  GraphBuilder b;
  Value* x = b.input("x", DType::Float32, shape_of({2, 8}));
  Value* y = b.node("MatMul", {x, b.initializer("W", random_tensor({8, 6}, 83))}, {}, "fc");
  b.output(b.node("Mul", {y, b.initializer("gamma", random_tensor({6}, 84))}, {}, "scale"));
  b.output(b.node("Relu", {y}, {}, "other"));
  expect_near_miss(fold(b.build()), "consumers");
}

TEST(FoldBatchNorm, GemmLayerScaleFoldsIntoWeightAndC) {
  // transB and alpha/beta other than 1: the scale reaches B's rows and C, alpha stays.
  for (bool with_c : {true, false}) {
    SCOPED_TRACE(with_c ? "with C" : "no C");
    GraphBuilder b;
    Value* a = b.input("a", DType::Float32, shape_of({3, 5}));
    std::vector<Value*> ins = {a, b.initializer("B", random_tensor({4, 5}, 90))};
    if (with_c) ins.push_back(b.initializer("C", random_tensor({4}, 91)));
    Value* y = b.node("Gemm", ins, {attr("transB", int64_t{1}), attr("alpha", 0.5f), attr("beta", 2.0f)}, "g1");
    b.output(b.node("Mul", {y, b.initializer("gamma", random_tensor({1, 4}, 92, 0.5f, 2.0f))}, {}, "ls"));
    Outcome f = fold(b.build());
    EXPECT_TRUE(f.changed);
    EXPECT_EQ(count_any_domain(*f.optimized, "Mul"), 0);
    EXPECT_EQ(node_named(*f.optimized, "g1")->fused_from, (std::vector<std::string>{"g1", "ls"}));
    expect_same_numbers(f);
  }
  // A scale per row of the output is not per feature.
  GraphBuilder b;
  Value* a = b.input("a", DType::Float32, shape_of({3, 5}));
  Value* y = b.node("Gemm", {a, b.initializer("B", random_tensor({5, 4}, 93))}, {}, "g1");
  b.output(b.node("Mul", {y, b.initializer("gamma", random_tensor({3, 1}, 94))}, {}, "ls"));
  expect_near_miss(fold(b.build()), "is not per-feature");
}

// ---- BatchNorm1d over the tokens of a linear: through a Reshape or a Transpose ----------------

namespace {

/// x[2,4,8]·W[8,6] [+ b[6]] -> Reshape [8,6] (or Transpose (0,2,1)) -> BN(6) [-> Reshape back]:
/// LeViT's linear + BatchNorm1d, and a channels-first BN after a permute.
std::unique_ptr<Graph> token_bn_graph(bool bias, bool transpose, std::vector<int64_t> reshape_to = {-1, 6},
                                      int64_t bn_channels = 6) {
  GraphBuilder b;
  Value* x = b.input("x", DType::Float32, shape_of({2, 4, 8}));
  Value* y = b.node("MatMul", {x, b.initializer("W", random_tensor({8, 6}, 100))}, {}, "fc");
  if (bias) y = b.node("Add", {y, b.initializer("b", random_tensor({6}, 101))}, {}, "fc_bias");
  if (transpose) {
    y = b.node("Transpose", {y}, {attr("perm", std::vector<int64_t>{0, 2, 1})}, "to_ncl");
    b.output(add_bn(b, y, bn_channels, "bn", 102));
  } else {
    Tensor to(DType::Int64, {static_cast<int64_t>(reshape_to.size())});
    for (size_t i = 0; i < reshape_to.size(); ++i) to.data<int64_t>()[i] = reshape_to[i];
    y = b.node("Reshape", {y, b.initializer("flat", std::move(to))}, {}, "flatten");
    y = add_bn(b, y, bn_channels, "bn", 102);
    Tensor back(DType::Int64, {3});
    back.data<int64_t>()[0] = 2, back.data<int64_t>()[1] = 4, back.data<int64_t>()[2] = 6;
    b.output(b.node("Reshape", {y, b.initializer("back", std::move(back))}, {}, "unflatten"));
  }
  return b.build();
}

}  // namespace

TEST(FoldBatchNorm, MatMulTokenBatchNormFoldsThroughReshapeOrTranspose) {
  for (bool bias : {false, true})
    for (bool transpose : {false, true}) {
      SCOPED_TRACE(std::string(bias ? "bias" : "no bias") + (transpose ? ", transposed" : ", reshaped"));
      Outcome f = fold(token_bn_graph(bias, transpose));
      EXPECT_TRUE(f.changed);
      EXPECT_EQ(count_any_domain(*f.optimized, "BatchNormalization"), 0);
      EXPECT_EQ(count_any_domain(*f.optimized, "MatMul"), 1);
      EXPECT_EQ(count_any_domain(*f.optimized, "Add"), 1) << "the shift is a bias, made when there was none";
      EXPECT_EQ(f.optimized->outputs[0]->name, f.original->outputs[0]->name);
      EXPECT_NE(node_named(*f.optimized, "fc")->inputs[1]->name, "W") << "a new weight: W may be shared";
      expect_same_numbers(f);
    }
}

TEST(FoldBatchNormNearMiss, TokenBatchNormOnAnotherAxis) {
  // [2,24]: BN's 24 channels are token x feature, not the weight's 6 columns.
  expect_near_miss(fold(token_bn_graph(true, false, {2, 24}, 24)), "not the product's feature axis");
  // Transpose (0,2,1) moves the features to axis 1; this one keeps the 4 tokens there.
  GraphBuilder b;
  Value* x = b.input("x", DType::Float32, shape_of({2, 4, 8}));
  Value* y = b.node("MatMul", {x, b.initializer("W", random_tensor({8, 6}, 100))}, {}, "fc");
  y = b.node("Transpose", {y}, {attr("perm", std::vector<int64_t>{0, 1, 2})}, "same");
  b.output(add_bn(b, y, 4, "bn", 102));
  expect_near_miss(fold(b.build()), "does not move the product's feature axis");
}
