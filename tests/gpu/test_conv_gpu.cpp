// Conv, FusedConv and ConvTranspose on cuDNN against the CPU reference.
#include "gpu_test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

const Precision kAll[] = {Precision::FP32, Precision::TF32, Precision::FP16, Precision::BF16};

OpCase conv(std::vector<int64_t> x, std::vector<int64_t> w, std::vector<NamedAttribute> attrs, bool bias = true) {
  OpCase c;
  c.op = "Conv";
  c.inputs = {random_tensor(DType::Float32, x, 21), random_tensor(DType::Float32, w, 22)};
  if (bias) c.inputs.push_back(random_tensor(DType::Float32, {w[0]}, 23));
  c.constant = {1, 2};
  c.attrs = std::move(attrs);
  return c;
}

}  // namespace

TEST(GpuConv, ResNetShapes) {
  FUSEC_REQUIRE_GPU();
  for (Precision p : kAll) {
    expect_gpu_matches_cpu(conv({2, 3, 32, 32}, {16, 3, 7, 7}, {attr("strides", std::vector<int64_t>{2, 2}),
                                                                 attr("pads", std::vector<int64_t>{3, 3, 3, 3})}), p);
    expect_gpu_matches_cpu(conv({2, 16, 14, 14}, {32, 16, 1, 1}, {}), p);
    expect_gpu_matches_cpu(conv({2, 16, 15, 13}, {16, 16, 3, 3}, {attr("pads", std::vector<int64_t>{1, 1, 1, 1})}, false), p);
  }
}

TEST(GpuConv, GroupsDilationsAndOneD) {
  FUSEC_REQUIRE_GPU();
  for (Precision p : kAll) {
    expect_gpu_matches_cpu(conv({1, 8, 17, 17}, {8, 1, 3, 3}, {attr("group", int64_t{8}), attr("pads", std::vector<int64_t>{1, 1, 1, 1})}), p);
    expect_gpu_matches_cpu(conv({1, 8, 20, 20}, {4, 4, 3, 3}, {attr("group", int64_t{2}), attr("dilations", std::vector<int64_t>{2, 2})}), p);
    expect_gpu_matches_cpu(conv({3, 4, 50}, {6, 4, 5}, {attr("strides", std::vector<int64_t>{2}), attr("pads", std::vector<int64_t>{2, 2})}), p);
  }
  expect_gpu_matches_cpu(conv({1, 2, 6, 6, 6}, {4, 2, 3, 3, 3}, {}), Precision::FP32);
}

TEST(GpuConv, AsymmetricPaddingFallsBackToTheReference) {
  FUSEC_REQUIRE_GPU();
  expect_gpu_matches_cpu(conv({1, 3, 10, 10}, {4, 3, 3, 3}, {attr("auto_pad", std::string("SAME_UPPER")),
                                                             attr("strides", std::vector<int64_t>{2, 2})}),
                         Precision::FP32, -1, /*require_gpu_kernel=*/false);
}

TEST(GpuFusedConv, ResidualAndActivations) {
  FUSEC_REQUIRE_GPU();
  const char* acts[] = {"", "Relu", "Clip", "SiLU", "HardSwish", "Sigmoid"};
  for (Precision p : kAll)
    for (const char* act : acts) {
      for (bool residual : {false, true}) {
        OpCase c = conv({2, 8, 9, 9}, {8, 8, 3, 3}, {attr("pads", std::vector<int64_t>{1, 1, 1, 1}), attr("activation", std::string(act))});
        c.op = "FusedConv";
        c.domain = "ai.fusec";
        if (std::string(act) == "Clip") c.attrs.push_back(attr("activation_params", std::vector<float>{0.0f, 6.0f}));
        if (residual) c.inputs.push_back(random_tensor(DType::Float32, {2, 8, 9, 9}, 29));
        SCOPED_TRACE(std::string(act) + (residual ? " + residual" : ""));
        expect_gpu_matches_cpu(c, p);
      }
    }
}

TEST(GpuConvTranspose, StridesAndOutputPadding) {
  FUSEC_REQUIRE_GPU();
  for (Precision p : kAll) {
    OpCase c;
    c.op = "ConvTranspose";
    c.inputs = {random_tensor(DType::Float32, {2, 6, 7, 7}, 31), random_tensor(DType::Float32, {6, 4, 3, 3}, 32),
                random_tensor(DType::Float32, {4}, 33)};
    c.constant = {1, 2};
    c.attrs = {attr("strides", std::vector<int64_t>{2, 2}), attr("pads", std::vector<int64_t>{1, 1, 1, 1}),
               attr("output_padding", std::vector<int64_t>{1, 1})};
    expect_gpu_matches_cpu(c, p);
  }
}
