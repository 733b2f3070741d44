// Channels-last at rank 5 (layout_rule.h's channels_last_rank): a video model's 3-D convs run
// N,D,H,W,C on cuDNN with their epilogues, and what follows them there (the residual Add, an
// unfused BatchNormalization, a Concat, permutes to and from N,D,H,W,C, the pooling head) stays
// there: the only layout changes are the graph's input and a 5-D output. Every result equals the
// CPU reference, at odd sizes, at every precision; strict fp32 stays NCDHW. FUSEC_CHANNELS_LAST_3D=0
// turns rank-5 regions off (an A/B): a video model then plans NCDHW.
#include <string>
#include <utility>
#include <vector>

#include "gpu_test_util.h"
#include "passes/infer_shapes.h"

using namespace fusec;
using namespace fusec::test;

namespace {

std::vector<std::string> relayout_labels(const PlannedRun& r) {
  std::vector<std::string> out;
  for (const auto& [kind, label] : r.steps)
    if (kind == "relayout") out.push_back(label);
  return out;
}

Value* weight(GraphBuilder& b, const std::string& name, std::vector<int64_t> d, uint64_t seed, DType t) {
  return b.initializer(name, random_tensor(t, std::move(d), seed, -0.3, 0.3));
}

/// A 3-D FusedConv of kernel [kt, kh, kw] (padded to keep the size) with its bias, activation and
/// an optional residual, as the optimizer writes r3d_18's conv + BN + ReLU and its blocks' sums.
Value* conv3d(GraphBuilder& b, const std::string& name, Value* x, int64_t cin, int64_t cout, std::vector<int64_t> k,
              const char* act, uint64_t seed, DType t, Value* z = nullptr) {
  std::vector<NamedAttribute> attrs = {
      attr("activation", std::string(act)),
      attr("pads", std::vector<int64_t>{k[0] / 2, k[1] / 2, k[2] / 2, k[0] / 2, k[1] / 2, k[2] / 2})};
  std::vector<Value*> ins = {x, weight(b, name + ".w", {cout, cin, k[0], k[1], k[2]}, seed, t),
                             weight(b, name + ".b", {cout}, seed + 1, t)};
  if (z) ins.push_back(z);
  return b.node_n("FusedConv", ins, 1, attrs, name, "ai.fusec")[0];
}

/// A residual video block at odd sizes (N=2, 16 channels, 5 frames of 9x7), the (2+1)-D and 3-D
/// factorizations side by side, then what a head does with channels-last memory. In `t` (float32,
/// or float16 for a model stored in half precision, whose weights take the host upload path).
std::unique_ptr<Graph> video_block(DType t) {
  GraphBuilder b(18);
  b.graph().opsets["ai.fusec"] = 1;
  Value* x = b.input("x", t, {Dim(2), Dim(8), Dim(5), Dim(9), Dim(7)});
  Value* stem = conv3d(b, "stem", x, 8, 16, {3, 3, 3}, "Relu", 10, t);
  Value* spatial = conv3d(b, "spatial", stem, 16, 16, {1, 3, 3}, "Relu", 12, t);
  Value* block = conv3d(b, "temporal", spatial, 16, 16, {3, 1, 1}, "Relu", 14, t, stem);
  // An unfused BN (5-D, channels-last) and a Relu after it.
  auto param = [&](const std::string& n, uint64_t seed, double lo, double hi) {
    return b.initializer(n, random_tensor(t, {16}, seed, lo, hi));
  };
  Value* bn = b.node("BatchNormalization",
                     {block, param("bn.scale", 16, 0.5, 1.5), param("bn.B", 17, -0.3, 0.3),
                      param("bn.mean", 18, -0.3, 0.3), param("bn.var", 19, 0.2, 2)},
                     {}, "bn");
  Value* act = b.node("Relu", {bn}, {}, "relu");
  // A Concat of two channels-last activations along C, then a 1x1x1 conv.
  Value* side = conv3d(b, "side", act, 16, 8, {1, 1, 1}, "Relu", 20, t);
  Value* cat = b.node("Concat", {act, side}, {attr("axis", int64_t{1})}, "concat");
  // To N,D,H,W,C and back: views of the channels-last memory, with a per-channel scale between.
  Value* last = b.node("Transpose", {cat}, {attr("perm", std::vector<int64_t>{0, 2, 3, 4, 1})}, "to_ndhwc");
  Value* scaled = b.node("Mul", {last, weight(b, "gamma", {24}, 22, t)}, {}, "gamma");
  Value* first = b.node("Transpose", {scaled}, {attr("perm", std::vector<int64_t>{0, 4, 1, 2, 3})}, "to_ncdhw");
  Value* head = conv3d(b, "head", first, 24, 16, {3, 3, 3}, "Relu", 24, t);
  // The head: a mean over frames and pixels ([N, C]) and a sum over frames alone (5-D, read back
  // through the output's relayout).
  Value* all = b.initializer("axes.all", Tensor::from_int64({2, 3, 4}, {3}));
  b.output(b.node("ReduceMean", {head, all}, {attr("keepdims", int64_t{0})}, "pool"));
  Value* frames = b.initializer("axes.frames", Tensor::from_int64({2}, {1}));
  b.output(b.node("ReduceSum", {head, frames}, {attr("keepdims", int64_t{1})}, "frames"));
  auto g = b.build();
  infer_shapes(*g);
  return g;
}

}  // namespace

TEST(GpuLayout3d, VideoBlocksRunChannelsLastBetweenTheirInputAndOutput) {
  FUSEC_REQUIRE_GPU();
  const Tensor x = random_tensor(DType::Float32, {2, 8, 5, 9, 7}, 30);
  for (Precision p : {Precision::FP32, Precision::TF32, Precision::FP16, Precision::BF16}) {
    SCOPED_TRACE(precision_name(p));
    const bool nhwc = p != Precision::FP32;
    auto g = video_block(DType::Float32);
    expect_graph_gpu_matches_cpu(*g, {x}, p);
    const PlannedRun r = plan_and_run(*g, {x}, p);
    const std::vector<std::string> moved = relayout_labels(r);
    if (nhwc) {
      // The input, for the stem; the frame sum, for the graph output. Nothing between.
      ASSERT_EQ(moved.size(), 2u);
      EXPECT_NE(moved[0].find("'x'"), std::string::npos) << moved[0];
    } else {
      EXPECT_TRUE(moved.empty());
    }
    for (const char* conv : {"stem", "spatial", "temporal", "side", "head"})
      EXPECT_EQ(r.kernel_of(conv).find("NHWC") != std::string::npos, nhwc) << conv << ": " << r.kernel_of(conv);
    EXPECT_EQ(r.kernel_of("bn").find("channels-last") != std::string::npos, nhwc) << r.kernel_of("bn");
    for (const char* t : {"to_ndhwc", "to_ncdhw"})
      EXPECT_EQ(r.kernel_of(t) == "view of channels-last memory", nhwc) << t << ": " << r.kernel_of(t);
    EXPECT_EQ(r.kernel_of("pool").find("NHWC") != std::string::npos, nhwc) << r.kernel_of("pool");
  }
}

TEST(GpuLayout3d, AVideoModelStoredInHalfPrecisionMatchesTheReference) {
  FUSEC_REQUIRE_GPU();
  // Float16 weights are permuted to K,T,R,S,C on the host (ConstantUploader's non-float32 path).
  const Tensor x = random_tensor(DType::Float16, {2, 8, 5, 9, 7}, 31);
  auto g = video_block(DType::Float16);
  expect_graph_gpu_matches_cpu(*g, {x}, Precision::FP16);
  const PlannedRun r = plan_and_run(*g, {x}, Precision::FP16);
  EXPECT_NE(r.kernel_of("head").find("NHWC"), std::string::npos) << r.kernel_of("head");
}

TEST(GpuLayout3d, WindowPoolsOverFramesPoolChannelsLast) {
  FUSEC_REQUIRE_GPU();
  // conv -> MaxPool3d -> conv -> AveragePool3d: S3D's pools, at odd sizes, with ceil_mode, dilation,
  // count_include_pad and uneven pads. The max pool reads 24 channels (16-byte vectors), the
  // average pool 20 (not a whole number of vectors at fp16 and bf16: one channel a thread). The
  // pools read the convs' N,D,H,W,C memory where it is.
  struct Case {
    std::vector<int64_t> k, s, pads, dil;
    int64_t ceil, include_pad;
  };
  const Case cases[] = {{{3, 3, 3}, {2, 2, 2}, {1, 1, 1, 1, 1, 1}, {1, 1, 1}, 0, 0},
                        {{2, 3, 3}, {1, 2, 2}, {0, 1, 1, 1, 1, 0}, {1, 1, 1}, 1, 1},
                        {{3, 2, 2}, {1, 1, 1}, {1, 0, 0, 1, 0, 0}, {1, 2, 1}, 0, 1}};
  const Tensor x = random_tensor(DType::Float32, {2, 8, 7, 11, 9}, 32);
  for (const Case& k : cases)
    for (Precision p : {Precision::FP32, Precision::FP16, Precision::BF16}) {
      SCOPED_TRACE(std::string(precision_name(p)) + ", kernel " + std::to_string(k.k[0]) + "x" +
                   std::to_string(k.k[1]) + "x" + std::to_string(k.k[2]));
      const bool nhwc = p != Precision::FP32;
      GraphBuilder b(18);
      b.graph().opsets["ai.fusec"] = 1;
      Value* in = b.input("x", DType::Float32, {Dim(2), Dim(8), Dim(7), Dim(11), Dim(9)});
      Value* a = conv3d(b, "c1", in, 8, 24, {3, 3, 3}, "Relu", 40, DType::Float32);
      std::vector<NamedAttribute> geo = {attr("kernel_shape", k.k), attr("strides", k.s), attr("pads", k.pads),
                                         attr("ceil_mode", k.ceil)};
      std::vector<NamedAttribute> max_attrs = geo;
      max_attrs.push_back(attr("dilations", k.dil));
      Value* m = b.node("MaxPool", {a}, max_attrs, "maxpool");
      Value* c = conv3d(b, "c2", m, 24, 20, {1, 3, 3}, "", 42, DType::Float32);
      std::vector<NamedAttribute> avg_attrs = geo;
      avg_attrs.push_back(attr("count_include_pad", k.include_pad));
      b.output(b.node("AveragePool", {c}, avg_attrs, "avgpool"));
      auto g = b.build();
      infer_shapes(*g);
      expect_graph_gpu_matches_cpu(*g, {x}, p);
      const PlannedRun r = plan_and_run(*g, {x}, p);
      EXPECT_EQ(relayout_labels(r).size(), nhwc ? 2u : 0u) << "the input and the output only";
      for (const char* pool : {"maxpool", "avgpool"})
        EXPECT_EQ(r.kernel_of(pool).find("NHWC") != std::string::npos, nhwc) << pool << ": " << r.kernel_of(pool);
    }
}

TEST(GpuLayout3d, TurnedOffVideoModelsStayNcdhw) {
  FUSEC_REQUIRE_GPU();
  ScopedEnv off("FUSEC_CHANNELS_LAST_3D", "0");
  const Tensor x = random_tensor(DType::Float32, {2, 8, 5, 9, 7}, 33);
  auto g = video_block(DType::Float32);
  expect_graph_gpu_matches_cpu(*g, {x}, Precision::FP16);
  const PlannedRun r = plan_and_run(*g, {x}, Precision::FP16);
  EXPECT_TRUE(relayout_labels(r).empty());
  EXPECT_EQ(r.kernel_of("head").find("NHWC"), std::string::npos) << r.kernel_of("head");
  EXPECT_NE(r.kernel_of("to_ndhwc"), "view of channels-last memory");
}
