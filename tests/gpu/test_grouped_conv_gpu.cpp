// The channels-last grouped conv (backend/cuda/ops/conv/grouped.cu and its route) against the CPU
// reference: RegNet's and ResNeXt's group widths, strides, dilation, output groups wider than
// their inputs, odd sizes that leave partial patches, every epilogue, at tf32, fp16 and bf16 (the
// precisions that run channels-last), each configuration pinned with FUSEC_CONV_GROUPED=force,
// force2 or force3 (the tensor-core one: fp16 and bf16, groups of 8k channels in and out; k padded
// to 16, several output slices a group, images wider than a block); and the tuner's race against
// cuDNN, which may pick any.
#include <limits>
#include <string>
#include <vector>

#include "backend/cuda/ops/conv/grouped.cuh"
#include "gpu_test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

struct GcCase {
  std::vector<int64_t> x, w;  // [N, C, H, W], [K, C / group, R, S]
  int64_t group = 1, stride = 1, dil = 1;
  const char* act = "";
  bool residual = false;
};

OpCase make_case(const GcCase& d, uint64_t seed) {
  OpCase c;
  c.op = "FusedConv";
  c.domain = "ai.fusec";
  c.inputs = {random_tensor(DType::Float32, d.x, seed), random_tensor(DType::Float32, d.w, seed + 1, -0.3, 0.3),
              random_tensor(DType::Float32, {d.w[0]}, seed + 2)};
  const int64_t pad = (d.w[2] / 2) * d.dil;
  c.attrs = {attr("group", d.group), attr("strides", std::vector<int64_t>{d.stride, d.stride}),
             attr("dilations", std::vector<int64_t>{d.dil, d.dil}),
             attr("pads", std::vector<int64_t>{pad, pad, pad, pad}), attr("activation", std::string(d.act))};
  if (d.residual) {
    const int64_t oh = (d.x[2] + 2 * pad - d.dil * (d.w[2] - 1) - 1) / d.stride + 1;
    const int64_t ow = (d.x[3] + 2 * pad - d.dil * (d.w[3] - 1) - 1) / d.stride + 1;
    c.inputs.push_back(random_tensor(DType::Float32, {d.x[0], d.w[0], oh, ow}, seed + 3));
  }
  c.constant = {1, 2};
  return c;
}

const std::vector<GcCase>& cases() {
  static const std::vector<GcCase> all = {
      {{2, 72, 13, 11}, {72, 24, 3, 3}, 3, 1, 1, "Relu", false},    // RegNetX-1.6GF's 24-wide groups
      {{2, 48, 15, 14}, {48, 24, 3, 3}, 2, 2, 1, "Relu", false},    // its stride-2 first block
      {{2, 32, 9, 9}, {32, 4, 3, 3}, 8, 1, 1, "", true},            // ResNeXt's 4-wide groups, a residual
      {{2, 16, 7, 9}, {24, 8, 3, 3}, 2, 1, 1, "HardSwish", false},  // 12 outputs a group from 8 inputs
      {{1, 64, 10, 10}, {64, 32, 3, 3}, 2, 1, 2, "SiLU", true},     // 32-wide groups, dilation 2
      {{3, 96, 17, 19}, {96, 16, 5, 5}, 6, 1, 1, "Relu", false},    // a 5x5 window, partial patches
      {{2, 912, 7, 7}, {912, 24, 3, 3}, 38, 1, 1, "Relu", true},    // RegNetX's last stage
      {{2, 16, 6, 150}, {80, 8, 3, 3}, 2, 1, 1, "Relu", true},      // 5 slices of 8 a group; rows of 150
      {{2, 96, 9, 7}, {96, 48, 1, 1}, 2, 1, 1, "SiLU", false},      // 1x1, 2 slices of 24
      {{1, 128, 11, 13}, {256, 32, 3, 3}, 4, 2, 1, "", true},       // 64 outputs a group, stride 2
  };
  return all;
}

}  // namespace

TEST(GpuGroupedConv, EveryShapeMatchesTheReferenceOnEachConfiguration) {
  FUSEC_REQUIRE_GPU();
  const char* configs[] = {"force", "force2", "force3"};
  for (int config = 0; config < 3; ++config) {
    ScopedEnv force("FUSEC_CONV_GROUPED", configs[config]);
    uint64_t seed = 10;
    for (const GcCase& d : cases())
      for (Precision p : {Precision::TF32, Precision::FP16, Precision::BF16}) {
        const bool mma_takes = p != Precision::TF32 && d.x[1] / d.group % 8 == 0 && d.w[0] / d.group % 8 == 0;
        if (config == cuda::kGroupedMmaConfig && !mma_takes) continue;
        SCOPED_TRACE(std::string(configs[config]) + " " + dims_str(d.x) + " w " + dims_str(d.w) + " group " +
                     std::to_string(d.group) + " stride " + std::to_string(d.stride) + " " + d.act + " at " +
                     precision_name(p));
        expect_gpu_matches_cpu(make_case(d, seed += 4), p, -1, true,
                               std::string("[") + cuda::grouped_config_name(config) + "]");
      }
  }
}

TEST(GpuGroupedConv, TheTunerRacesCudnnAndEitherMatches) {
  FUSEC_REQUIRE_GPU();
  ScopedTuningCache cache("grouped");
  for (const GcCase& d : cases()) {
    SCOPED_TRACE(dims_str(d.x) + " w " + dims_str(d.w));
    expect_gpu_matches_cpu(make_case(d, 90), Precision::FP16);
  }
}

TEST(GpuGroupedConv, NonFiniteInputsReachOnlyTheirWindows) {
  FUSEC_REQUIRE_GPU();
  OpCase c = make_case({{2, 48, 9, 10}, {48, 16, 3, 3}, 3, 1, 1, "Relu", false}, 70);
  float* x = c.inputs[0].data<float>();
  x[5] = std::numeric_limits<float>::quiet_NaN();                // image 0, group 0
  x[9 * 10 * 47 + 33] = std::numeric_limits<float>::infinity();  // image 0, the last channel (group 2)
  {
    ScopedEnv force("FUSEC_CONV_GROUPED", "force");
    for (Precision p : {Precision::TF32, Precision::FP16}) expect_gpu_matches_cpu(c, p, -1, true, "fusec grouped conv");
  }
  // The tensor-core kernel at RegNetX's 24-wide groups: k runs 216 taps padded to 224, and the
  // padding must read zeros, not a pixel's NaN; 9 x 10 outputs, so its last tile's pixels clamp.
  OpCase m = make_case({{2, 72, 9, 10}, {72, 24, 3, 3}, 3, 1, 1, "Relu", false}, 71);
  float* xm = m.inputs[0].data<float>();
  xm[5] = std::numeric_limits<float>::quiet_NaN();
  xm[9 * 10 * 71 + 50] = std::numeric_limits<float>::infinity();
  xm[9 * 10 * 72 + 7] = -std::numeric_limits<float>::infinity();  // image 1
  ScopedEnv force("FUSEC_CONV_GROUPED", "force3");
  for (Precision p : {Precision::FP16, Precision::BF16})
    expect_gpu_matches_cpu(m, p, -1, true, std::string("[") + cuda::grouped_config_name(cuda::kGroupedMmaConfig) + "]");
}
