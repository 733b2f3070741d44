// BatchNormalization, InstanceNormalization, LayerNormalization (ai.onnx and ai.fusec),
// MeanVarianceNormalization and LRN on the CPU reference.
#include <cmath>

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
