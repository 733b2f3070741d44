// BatchNormalization, InstanceNormalization, GroupNormalization, LayerNormalization (ai.onnx and
// ai.fusec), RMSNormalization, MeanVarianceNormalization and LRN on the CPU reference.
#include <cmath>

#include "ir/half.h"
#include "test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

/// One node over graph inputs fed with `ins`; returns its `n_out` outputs.
std::vector<Tensor> run_op(const std::string& op, const std::vector<Tensor>& ins, std::vector<NamedAttribute> attrs,
                           size_t n_out = 1, int64_t opset = 17, const std::string& domain = "") {
  GraphBuilder b(opset);
  std::vector<Value*> vs;
  for (size_t i = 0; i < ins.size(); ++i)
    vs.push_back(b.input("in" + std::to_string(i), ins[i].dtype(), shape_of(ins[i].dims())));
  for (Value* v : b.node_n(op, vs, n_out, std::move(attrs), "", domain)) b.output(v);
  auto g = b.build();
  return run_cpu(*g, ins);
}

}  // namespace

TEST(CpuBatchNorm, InferenceByHand) {
  // C=2: channel 0 mean 1 var 4 scale 2 bias 0.5; channel 1 mean 0 var 0 (eps 1) scale 1 bias -1.
  const Tensor x = floats({1, 3, 5, 0, 2, -2}, {1, 2, 3});
  auto y = run_op("BatchNormalization",
                  {x, floats({2, 1}, {2}), floats({0.5f, -1}, {2}), floats({1, 0}, {2}), floats({4 - 1e-5f, 0}, {2})},
                  {attr("epsilon", 1.0f)}, 1, 15);
  const float s0 = 2 / std::sqrt(4.f + 1 - 1e-5f);
  expect_close(y[0], floats({0.5f, 2 * s0 + 0.5f, 4 * s0 + 0.5f, -1, 1, -3}, {1, 2, 3}), 1e-5, 1e-5);
}

TEST(CpuBatchNorm, TrainingModeUpdatesRunningStats) {
  // One channel, values {0, 2}: batch mean 1, var 1.
  auto out = run_op("BatchNormalization",
                    {floats({0, 2}, {2, 1}), floats({1}, {1}), floats({0}, {1}), floats({5}, {1}), floats({3}, {1})},
                    {attr("epsilon", 0.0f), attr("momentum", 0.75f), attr("training_mode", int64_t{1})}, 3, 15);
  expect_close(out[0], floats({-1, 1}, {2, 1}));
  expect_close(out[1], floats({5 * 0.75f + 0.25f}, {1}));
  expect_close(out[2], floats({3 * 0.75f + 0.25f}, {1}));
}

TEST(CpuBatchNorm, WrongParameterSizeIsAnError) {
  const Tensor p3 = floats({1, 1, 1}, {3});
  EXPECT_THROW(run_op("BatchNormalization", {floats({1, 2, 3, 4}, {1, 2, 2}), p3, p3, p3, p3}, {}, 1, 15), Error);
}

TEST(CpuInstanceNorm, PerInstanceAndChannel) {
  // Each (n, c) row {1, 2, 3}: mean 2, var 2/3.
  const Tensor x = floats({1, 2, 3, 1, 2, 3}, {1, 2, 3});
  auto y = run_op("InstanceNormalization", {x, floats({1, 2}, {2}), floats({0, 1}, {2})}, {attr("epsilon", 0.0f)});
  const float k = 1 / std::sqrt(2.f / 3);
  expect_close(y[0], floats({-k, 0, k, 1 - 2 * k, 1, 1 + 2 * k}, {1, 2, 3}));
}

TEST(CpuLayerNorm, LastAxisWithStatistics) {
  const Tensor x = floats({1, 2, 3, 4, -4, 0, 4, 0}, {2, 4});
  auto out = run_op("LayerNormalization", {x, floats({1, 1, 2, 2}, {4}), floats({0, 0, 0, 1}, {4})},
                    {attr("epsilon", 0.0f)}, 3);
  const float i0 = 1 / std::sqrt(1.25f), i1 = 1 / std::sqrt(8.f);
  expect_close(out[0], floats({-1.5f * i0, -0.5f * i0, 1 * i0, 3 * i0 + 1, -4 * i1, 0, 8 * i1, 1}, {2, 4}));
  expect_close(out[1], floats({2.5f, 0}, {2, 1}));
  expect_close(out[2], floats({i0, i1}, {2, 1}));
}

TEST(CpuLayerNorm, AxisOneNormalizesTrailingDims) {
  const Tensor x = floats({0, 2, 0, 2, 5, 5, 7, 7}, {2, 2, 2});
  auto out = run_op("LayerNormalization", {x, floats({1, 1, 1, 1}, {2, 2})},
                    {attr("axis", int64_t{1}), attr("epsilon", 0.0f)});
  expect_close(out[0], floats({-1, 1, -1, 1, -1, -1, 1, 1}, {2, 2, 2}));
}

TEST(CpuLayerNorm, FusecDomainBelowOpset17) {
  const Tensor x = floats({1, 3}, {1, 2});
  auto out = run_op("LayerNormalization", {x, floats({1, 1}, {2})}, {attr("epsilon", 0.0f)}, 1, 13, "ai.fusec");
  expect_close(out[0], floats({-1, 1}, {1, 2}));
}

TEST(CpuLayerNorm, BadAxisIsAnError) {
  EXPECT_THROW(run_op("LayerNormalization", {floats({1, 3}, {1, 2}), floats({1, 1}, {2})}, {attr("axis", int64_t{2})}),
               Error);
}

TEST(CpuMeanVarianceNorm, AcrossChosenAxes) {
  // axes {1}: each column of [2 rows] normalized: (x - mean) / (std + 1e-9).
  const Tensor x = floats({1, 10, 3, 30}, {1, 2, 2});
  auto y = run_op("MeanVarianceNormalization", {x}, {attr("axes", std::vector<int64_t>{1})}, 1, 13);
  expect_close(y[0], floats({-1, -1, 1, 1}, {1, 2, 2}), 1e-5, 1e-6);
}

TEST(CpuLrn, WindowOverChannels) {
  // C=3, size 3: channel c sums squares of c-1..c+1 within range.
  const Tensor x = floats({1, 2, 3}, {1, 3, 1});
  auto y = run_op("LRN", {x}, {attr("size", int64_t{3}), attr("alpha", 3.0f), attr("beta", 1.0f), attr("bias", 1.0f)});
  // alpha/size = 1: denominators 1 + {5, 14, 13}.
  expect_close(y[0], floats({1 / 6.f, 2 / 15.f, 3 / 14.f}, {1, 3, 1}));
}

TEST(CpuRmsNorm, TrailingDimsWithABroadcastScale) {
  // axis 1 over [1, 2, 2]: one row {1, 2, 3, 4}, mean square 7.5; scale [1, 2] -> {2, -1} per column.
  const Tensor x = floats({1, 2, 3, 4}, {1, 2, 2});
  auto y = run_op("RMSNormalization", {x, floats({2, -1}, {1, 2})}, {attr("axis", int64_t{1}), attr("epsilon", 0.0f)},
                  1, 23);
  const float k = 1 / std::sqrt(7.5f);
  expect_close(y[0], floats({2 * k, -2 * k, 6 * k, -4 * k}, {1, 2, 2}));
}

TEST(CpuRmsNorm, ScaleTypeIsTheOutputType) {
  // X float32, scale float16: Y is float16 (V), each row of the last axis normalized.
  Tensor scale(DType::Float16, {2});
  scale.data<uint16_t>()[0] = float_to_half(1.0f);
  scale.data<uint16_t>()[1] = float_to_half(0.5f);
  auto y = run_op("RMSNormalization", {floats({3, 4, 0, 2}, {2, 2}), scale}, {attr("epsilon", 0.0f)}, 1, 23);
  ASSERT_EQ(y[0].dtype(), DType::Float16);
  const float a = 1 / std::sqrt(12.5f), b = 1 / std::sqrt(2.f);
  const std::vector<float> want = {3 * a, 2 * a, 0, 1 * b};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(y[0].as_double(i), want[i], 1e-3) << i;
}

TEST(CpuGroupNorm, PerGroupAtOpset18AndPerChannelAt21) {
  // N 1, C 4, 2 groups of 2 channels x 2 values: group 0 {1, 3, 5, 7} (mean 4, var 5), group 1
  // {0, 0, 2, 2} (mean 1, var 1).
  const Tensor x = floats({1, 3, 5, 7, 0, 0, 2, 2}, {1, 4, 2});
  const float a = 1 / std::sqrt(5.f);
  const std::vector<float> n = {-3 * a, -a, a, 3 * a, -1, -1, 1, 1};
  auto g18 = run_op("GroupNormalization", {x, floats({2, 1}, {2}), floats({0, 10}, {2})},
                    {attr("num_groups", int64_t{2}), attr("epsilon", 0.0f)}, 1, 18);
  expect_close(g18[0],
               floats({2 * n[0], 2 * n[1], 2 * n[2], 2 * n[3], n[4] + 10, n[5] + 10, n[6] + 10, n[7] + 10}, {1, 4, 2}));
  auto g21 = run_op("GroupNormalization", {x, floats({1, 2, 3, 4}, {4}), floats({0, 1, 0, 1}, {4})},
                    {attr("num_groups", int64_t{2}), attr("epsilon", 0.0f)}, 1, 21);
  expect_close(g21[0], floats({n[0], n[1], 2 * n[2] + 1, 2 * n[3] + 1, 3 * n[4], 3 * n[5], 4 * n[6] + 1, 4 * n[7] + 1},
                              {1, 4, 2}));
}

TEST(CpuGroupNorm, OneGroupPerChannelIsInstanceNorm) {
  const Tensor x = uniform_floats({2, 3, 5}, 7), s = floats({1, 2, 3}, {3}), b = floats({0, -1, 1}, {3});
  auto g = run_op("GroupNormalization", {x, s, b}, {attr("num_groups", int64_t{3})}, 1, 21);
  auto i = run_op("InstanceNormalization", {x, s, b}, {});
  expect_close(g[0], i[0]);
}

TEST(CpuGroupNorm, GroupsThatDoNotDivideTheChannelsAreAnError) {
  EXPECT_THROW(
      run_op("GroupNormalization", {uniform_floats({1, 6, 2}, 3), floats({1, 1, 1, 1}, {4}), floats({0, 0, 0, 0}, {4})},
             {attr("num_groups", int64_t{4})}, 1, 21),
      Error);
  EXPECT_THROW(run_op("GroupNormalization",
                      {uniform_floats({1, 6, 2}, 3), floats({1, 1, 1, 1, 1, 1}, {6}), floats({0, 0, 0, 0, 0, 0}, {6})},
                      {attr("num_groups", int64_t{3})}, 1, 18),
               Error);
}

TEST(CpuRmsNorm, ScaleMayVaryAlongTheRows) {
  // Scale broadcasts to X, not only to the normalized dims: [2, 1] scales row r by scale[r].
  auto y = run_op("RMSNormalization", {floats({3, 4, 1, 1}, {2, 2}), floats({2, 10}, {2, 1})}, {attr("epsilon", 0.0f)},
                  1, 23);
  const float a = 1 / std::sqrt(12.5f);
  expect_close(y[0], floats({6 * a, 8 * a, 10, 10}, {2, 2}));
}
