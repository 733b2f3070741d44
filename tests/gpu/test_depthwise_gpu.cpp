// The channels-last depthwise conv (backend/cuda/ops/conv/depthwise.cu and its route) against the
// CPU reference: each kernel configuration forced on shapes that reach its edges, every
// activation of the fused epilogue, the tuner's pick and its tuning-cache entry, the convs the
// route leaves to cuDNN, and (FUSEC_BENCH_PRINT=1) its bandwidth on ConvNeXt's, MobileNetV3's and
// EfficientNet's depthwise convs beside cuDNN's.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cuda/core/cuda_op.h"
#include "backend/cuda/core/gpu_hold.cuh"
#include "backend/cuda/core/tuning_cache.h"
#include "backend/cuda/ops/conv/depthwise.cuh"
#include "backend/cuda/ops/conv/depthwise_mma.cuh"
#include "gpu_test_util.h"
#include "ir/half.h"
#include "ir/switches.h"

using namespace fusec;
using namespace fusec::test;

namespace {

using V = std::vector<int64_t>;

/// One depthwise conv: x [n, c, h, w], weights [c·m, 1, kh, kw], group c.
struct DwCase {
  const char* what;
  int64_t n, c, h, w, kh, kw;
  V strides = {1, 1};
  V pads = {0, 0, 0, 0};  // top, left, bottom, right
  V dil = {1, 1};
  int64_t m = 1;
  bool bias = true;
  const char* act = nullptr;  // FusedConv's activation; null: a plain Conv
  bool residual = false;

  int64_t oh() const { return (h + pads[0] + pads[2] - ((kh - 1) * dil[0] + 1)) / strides[0] + 1; }
  int64_t ow() const { return (w + pads[1] + pads[3] - ((kw - 1) * dil[1] + 1)) / strides[1] + 1; }
  cuda::DepthwiseShape shape() const {
    cuda::DepthwiseShape s;
    s.batch = n, s.c = c, s.h = h, s.w = w, s.m = m, s.oh = oh(), s.ow = ow(), s.kh = kh, s.kw = kw;
    s.stride_h = strides[0], s.stride_w = strides[1], s.dil_h = dil[0], s.dil_w = dil[1];
    s.pad_top = pads[0], s.pad_left = pads[1];
    return s;
  }
};

OpCase make_case(const DwCase& d, uint64_t seed = 1) {
  OpCase c;
  c.op = d.act ? "FusedConv" : "Conv";
  c.domain = d.act ? "ai.fusec" : "";
  c.inputs = {random_tensor(DType::Float32, {d.n, d.c, d.h, d.w}, seed),
              random_tensor(DType::Float32, {d.c * d.m, 1, d.kh, d.kw}, seed + 1, -0.5, 0.5)};
  c.inputs.push_back(d.bias ? random_tensor(DType::Float32, {d.c * d.m}, seed + 2) : Tensor());
  if (d.residual) c.inputs.push_back(random_tensor(DType::Float32, {d.n, d.c * d.m, d.oh(), d.ow()}, seed + 3));
  c.constant = {1, 2};
  c.attrs = {attr("group", d.c), attr("strides", d.strides), attr("pads", d.pads), attr("dilations", d.dil)};
  if (d.act) {
    const std::string act = d.act;
    c.attrs.push_back(attr("activation", act));
    if (act == "Clip") c.attrs.push_back(attr("activation_params", std::vector<float>{-0.5f, 1.5f}));
    if (act == "LeakyRelu") c.attrs.push_back(attr("activation_params", std::vector<float>{0.1f}));
    if (act == "HardSigmoid") c.attrs.push_back(attr("activation_params", std::vector<float>{0.25f, 0.4f}));
  }
  return c;
}

DType storage(Precision p) {
  return p == Precision::FP16 ? DType::Float16 : p == Precision::BF16 ? DType::BFloat16 : DType::Float32;
}

// Strict fp32 runs NCHW unless asked: FUSEC_CHANNELS_LAST=all makes its convs channels-last too,
// so the fp32 kernels are checked at fp32's tolerance.
const Precision kPrecisions[] = {Precision::FP32, Precision::FP16, Precision::BF16};

/// Shapes that reach every edge of the kernels: C = 1, 3, 17 (no whole vector), 96, 100 (a whole
/// 8-byte vector, not a 16-byte one at fp16), each window the tiled kernel has and one it has not
/// (3x5 is 5 wide: tiled; 5x3 is 3 wide), strides 1, 2, 3 and unequal ones, dilation, asymmetric
/// pads, rows whose last strip of pixels is partial, batch 1 and 3, M = 2.
const std::vector<DwCase>& edge_cases() {
  static const std::vector<DwCase> cases = {
      {.what = "C1 3x3 s1 p1", .n = 1, .c = 1, .h = 9, .w = 9, .kh = 3, .kw = 3, .pads = {1, 1, 1, 1}},
      {.what = "C3 5x5 s2 p2 batch 3",
       .n = 3,
       .c = 3,
       .h = 11,
       .w = 10,
       .kh = 5,
       .kw = 5,
       .strides = {2, 2},
       .pads = {2, 2, 2, 2}},
      {.what = "C17 7x7 s1 p3", .n = 2, .c = 17, .h = 9, .w = 13, .kh = 7, .kw = 7, .pads = {3, 3, 3, 3}},
      {.what = "C96 7x7 s1 p3 (ConvNeXt)", .n = 2, .c = 96, .h = 14, .w = 14, .kh = 7, .kw = 7, .pads = {3, 3, 3, 3}},
      {.what = "C100 3x3 s2 p1, 15x13",
       .n = 1,
       .c = 100,
       .h = 15,
       .w = 13,
       .kh = 3,
       .kw = 3,
       .strides = {2, 2},
       .pads = {1, 1, 1, 1}},
      {.what = "C32 3x3 s1 p1, 7 wide, no bias",
       .n = 3,
       .c = 32,
       .h = 6,
       .w = 7,
       .kh = 3,
       .kw = 3,
       .pads = {1, 1, 1, 1},
       .bias = false},
      {.what = "C16 3x3 s3 p1",
       .n = 1,
       .c = 16,
       .h = 13,
       .w = 14,
       .kh = 3,
       .kw = 3,
       .strides = {3, 3},
       .pads = {1, 1, 1, 1}},
      {.what = "C24 3x3 dilation 2 p2",
       .n = 1,
       .c = 24,
       .h = 12,
       .w = 11,
       .kh = 3,
       .kw = 3,
       .pads = {2, 2, 2, 2},
       .dil = {2, 2}},
      {.what = "C24 3x3 H dilation 2 only",
       .n = 1,
       .c = 24,
       .h = 12,
       .w = 11,
       .kh = 3,
       .kw = 3,
       .pads = {2, 1, 2, 1},
       .dil = {2, 1}},
      {.what = "C32 3x5 s(1,2) p(1,2)",
       .n = 2,
       .c = 32,
       .h = 10,
       .w = 17,
       .kh = 3,
       .kw = 5,
       .strides = {1, 2},
       .pads = {1, 2, 1, 2}},
      {.what = "C32 5x3 s(2,1)",
       .n = 2,
       .c = 32,
       .h = 10,
       .w = 9,
       .kh = 5,
       .kw = 3,
       .strides = {2, 1},
       .pads = {2, 1, 2, 1}},
      {.what = "C40 3x3 s2 asymmetric (SAME_UPPER: 0,0,1,1)",
       .n = 2,
       .c = 40,
       .h = 14,
       .w = 14,
       .kh = 3,
       .kw = 3,
       .strides = {2, 2},
       .pads = {0, 0, 1, 1}},
      {.what = "C48 5x5 s1 asymmetric (1,2,3,0)",
       .n = 1,
       .c = 48,
       .h = 9,
       .w = 12,
       .kh = 5,
       .kw = 5,
       .pads = {1, 2, 3, 0}},
      {.what = "C58 3x3 s1 p1 (channel pairs: no 8-byte vector divides 58)",
       .n = 2,
       .c = 58,
       .h = 9,
       .w = 11,
       .kh = 3,
       .kw = 3,
       .pads = {1, 1, 1, 1}},
      {.what = "C26 5x5 s2 p2, residual + ReLU (channel pairs)",
       .n = 1,
       .c = 26,
       .h = 12,
       .w = 13,
       .kh = 5,
       .kw = 5,
       .strides = {2, 2},
       .pads = {2, 2, 2, 2},
       .act = "Relu",
       .residual = true},
      {.what = "C8 3x3 M=2", .n = 2, .c = 8, .h = 9, .w = 10, .kh = 3, .kw = 3, .pads = {1, 1, 1, 1}, .m = 2},
      {.what = "C64 5x3 s1 p(2,1,1,0) 13x21 (shared-memory patches cut at both edges)",
       .n = 2,
       .c = 64,
       .h = 13,
       .w = 21,
       .kh = 5,
       .kw = 3,
       .pads = {2, 1, 1, 0}},
      {.what = "C32 7x7 s1 p3 on 5x6 (a patch larger than the image)",
       .n = 3,
       .c = 32,
       .h = 5,
       .w = 6,
       .kh = 7,
       .kw = 7,
       .pads = {3, 3, 3, 3},
       .act = "HardSwish"},
      {.what = "C16 7x7 s1 p3, 37x61 (banded kernel: row and column tiles cut at both edges)",
       .n = 1,
       .c = 16,
       .h = 37,
       .w = 61,
       .kh = 7,
       .kw = 7,
       .pads = {3, 3, 3, 3}},
      {.what = "C16 5x5 s2 dilation 2, pads (2,4,3,1), 41x45, residual + SiLU",
       .n = 2,
       .c = 16,
       .h = 41,
       .w = 45,
       .kh = 5,
       .kw = 5,
       .strides = {2, 2},
       .pads = {2, 4, 3, 1},
       .dil = {2, 2},
       .act = "SiLU",
       .residual = true},
      {.what = "C96 7x7 s1 p3, residual + GELU",
       .n = 1,
       .c = 96,
       .h = 11,
       .w = 19,
       .kh = 7,
       .kw = 7,
       .pads = {3, 3, 3, 3},
       .act = "Gelu",
       .residual = true},
  };
  return cases;
}

}  // namespace

// Each configuration forced (FUSEC_CONV_DEPTHWISE=N), on every edge case, at every precision; a
// configuration that does not take a shape runs it as the generic kernel, and says so.
TEST(GpuDepthwise, EveryConfigurationMatchesTheReference) {
  FUSEC_REQUIRE_GPU();
  ScopedEnv nhwc("FUSEC_CHANNELS_LAST", "all");
  for (int i = 0; i < cuda::depthwise_config_count(); ++i) {
    const std::string forced = std::to_string(i + 1);
    ScopedEnv force("FUSEC_CONV_DEPTHWISE", forced.c_str());
    for (const DwCase& d : edge_cases())
      for (Precision p : kPrecisions) {
        const bool takes = cuda::depthwise_config_applies(d.shape(), storage(p), i);
        const std::string name = std::string("[") + (takes ? cuda::depthwise_config_name(i) : "generic") + "]";
        SCOPED_TRACE(std::string(d.what) + ", configuration " + forced + " " + name + " at " + precision_name(p));
        expect_gpu_matches_cpu(make_case(d), p, -1, true, name);
      }
  }
}

// The banded kernel's fragments (host-built, no GPU needed): read back through the m16n8k16 B
// layout (lane l holds column l / 4 at rows 2(l % 4) + {0, 1}, and 8 further), each window row's
// product matrix must be the band B[k][j] = w[r][s] where k = SW·j + s·dw, zero elsewhere, in the
// storage type, at both strides and with W dilation.
TEST(GpuDepthwise, BandFragmentsFollowTheMmaLayout) {
  struct Band {
    int64_t kh, kw, sw, dw;
  };
  for (const Band b : {Band{2, 3, 1, 1}, Band{1, 7, 1, 1}, Band{1, 5, 2, 1}, Band{3, 3, 1, 3}, Band{1, 3, 2, 4}})
    for (DType t : {DType::Float16, DType::BFloat16}) {
      SCOPED_TRACE(std::to_string(b.kh) + "x" + std::to_string(b.kw) + " stride " + std::to_string(b.sw) +
                   " dilation " + std::to_string(b.dw) + " " + dtype_name(t));
      cuda::DepthwiseShape s;
      s.batch = 1, s.c = 16, s.h = 20, s.w = 40, s.kh = b.kh, s.kw = b.kw, s.stride_w = b.sw, s.dil_w = b.dw;
      s.oh = s.h - b.kh + 1, s.ow = (s.w - (b.kw - 1) * b.dw - 1) / b.sw + 1;
      ASSERT_TRUE(cuda::depthwise_mma_shape_ok(s, t));
      Tensor w = random_tensor(DType::Float32, {s.c, 1, b.kh, b.kw}, 1);
      auto weight = [&](int64_t c, int64_t r, int64_t tap) { return float(1 + tap + 8 * r + 32 * (c % 8)); };
      for (int64_t c = 0; c < s.c; ++c)
        for (int64_t r = 0; r < b.kh; ++r)
          for (int64_t tap = 0; tap < b.kw; ++tap) w.data<float>()[(c * b.kh + r) * b.kw + tap] = weight(c, r, tap);
      const std::vector<uint32_t> band = cuda::depthwise_mma_band(s, t, w);
      ASSERT_EQ(band.size(), size_t(s.c * b.kh * b.sw * 32 * 2));
      auto value = [&](uint32_t bits) { return t == DType::Float16 ? half_to_float(bits) : bf16_to_float(bits); };
      size_t at = 0;
      for (int64_t c = 0; c < s.c; ++c)
        for (int64_t r = 0; r < b.kh; ++r) {
          float got[32][8] = {};  // rows k of the product (16 a K-step), columns j
          for (int64_t q = 0; q < b.sw; ++q)
            for (int lane = 0; lane < 32; ++lane)
              for (int h = 0; h < 2; ++h) {
                const uint32_t word = band[at++];
                const int k = int(16 * q) + 8 * h + 2 * (lane % 4);
                got[k][lane / 4] = value(word & 0xFFFFu), got[k + 1][lane / 4] = value(word >> 16);
              }
          for (int64_t k = 0; k < 16 * b.sw; ++k)
            for (int64_t j = 0; j < 8; ++j) {
              const int64_t d = k - b.sw * j;
              const float want = d >= 0 && d % b.dw == 0 && d / b.dw < b.kw ? weight(c, r, d / b.dw) : 0.0f;
              ASSERT_EQ(got[k][j], want) << "channel " << c << ", window row " << r << ", B[" << k << "][" << j << "]";
            }
        }
    }
}

// The banded kernel multiplies whole column blocks by a band that is zero outside the window, and
// 0·inf is NaN: a patch with a non-finite input takes the direct path instead, so that every output
// whose window misses the inf or the NaN stays as the reference has it.
TEST(GpuDepthwise, NonFiniteInputsReachOnlyTheirWindows) {
  FUSEC_REQUIRE_GPU();
  ScopedEnv nhwc("FUSEC_CHANNELS_LAST", "all");
  const DwCase d = {.what = "C16 7x7 s1 p3", .n = 2, .c = 16, .h = 20, .w = 30, .kh = 7, .kw = 7, .pads = {3, 3, 3, 3}};
  OpCase c = make_case(d);
  float* x = c.inputs[0].data<float>();
  x[((0 * 16 + 3) * 20 + 5) * 30 + 9] = INFINITY;  // image 0, channel 3
  x[((1 * 16 + 12) * 20 + 17) * 30 + 26] = NAN;    // image 1, channel 12, near a corner
  x[((1 * 16 + 12) * 20 + 2) * 30 + 2] = -INFINITY;
  for (int i = 0; i < cuda::depthwise_config_count(); ++i) {
    if (!cuda::depthwise_config_applies(d.shape(), DType::Float16, i)) continue;
    const std::string forced = std::to_string(i + 1);
    ScopedEnv force("FUSEC_CONV_DEPTHWISE", forced.c_str());
    for (Precision p : {Precision::FP16, Precision::BF16}) {
      SCOPED_TRACE(std::string("configuration ") + cuda::depthwise_config_name(i) + " at " + precision_name(p));
      expect_gpu_matches_cpu(c, p, -1, true, cuda::depthwise_config_name(i));
    }
  }
}

TEST(GpuDepthwise, EveryActivationWithAndWithoutBiasAndResidual) {
  FUSEC_REQUIRE_GPU();
  ScopedEnv nhwc("FUSEC_CHANNELS_LAST", "all");
  const char* acts[] = {"",          "Relu", "LeakyRelu", "Clip",    "Sigmoid", "Tanh", "HardSigmoid",
                        "HardSwish", "SiLU", "Gelu",      "GeluTanh"};
  // The tiled kernel (configuration 2: 16-byte vectors, 4 pixels) and the generic one (1).
  for (const char* forced : {"2", "1"}) {
    ScopedEnv force("FUSEC_CONV_DEPTHWISE", forced);
    int k = 0;
    for (const char* act : acts)
      for (Precision p : kPrecisions) {
        DwCase d{.what = "C64 5x5 s2 p2",
                 .n = 2,
                 .c = 64,
                 .h = 13,
                 .w = 15,
                 .kh = 5,
                 .kw = 5,
                 .strides = {2, 2},
                 .pads = {2, 2, 2, 2}};
        d.act = act;
        d.bias = k % 2 == 0;
        d.residual = k % 3 != 0;
        ++k;
        SCOPED_TRACE(std::string("activation '") + act + "'" + (d.bias ? ", bias" : "") +
                     (d.residual ? ", residual" : "") + ", configuration " + forced + " at " + precision_name(p));
        expect_gpu_matches_cpu(make_case(d, 7), p, -1, true, "fusec depthwise conv");
      }
  }
}

// TF32 convs run channels-last without being asked; the depthwise kernels keep fp32 arithmetic.
TEST(GpuDepthwise, Tf32RunsTheRoute) {
  FUSEC_REQUIRE_GPU();
  ScopedEnv force("FUSEC_CONV_DEPTHWISE", "2");
  DwCase d{.what = "C32 3x3", .n = 2, .c = 32, .h = 10, .w = 10, .kh = 3, .kw = 3, .pads = {1, 1, 1, 1}};
  expect_gpu_matches_cpu(make_case(d), Precision::TF32, -1, true, "fusec depthwise conv fp32 NHWC");
}

// Unforced, at fp16: the tuner times the route's configurations against cuDNN's choice and keeps
// the faster under the conv's "launch" key; a warm build takes a remembered "dw:" pick, and one
// whose identity this build does not have is timed again.
TEST(GpuDepthwise, TheTunerPicksAndRemembers) {
  FUSEC_REQUIRE_GPU();
  const ScopedTuningCache scoped("dw_tune");
  auto& cache = cuda::TuningCache::global();
  DwCase d{.what = "C96 7x7", .n = 2, .c = 96, .h = 28, .w = 28, .kh = 7, .kw = 7, .pads = {3, 3, 3, 3}};
  const OpCase c = make_case(d);
  expect_gpu_matches_cpu(c, Precision::FP16);  // cold: timed
  const std::string key = scoped.key_containing("|conv launch float16");
  ASSERT_FALSE(key.empty()) << "a depthwise conv at fp16 is timed: " << scoped.text();
  ASSERT_TRUE(cache.get(key).has_value());
  expect_gpu_matches_cpu(c, Precision::FP16);  // warm: recalled
  const std::string pick = std::string("dw:2|") + cuda::depthwise_config_name(2);
  cache.put(key, pick);
  expect_gpu_matches_cpu(c, Precision::FP16, -1, true, std::string("[") + cuda::depthwise_config_name(2) + "]");
  cache.put(key, "dw:2|a configuration this build does not have");
  expect_gpu_matches_cpu(c, Precision::FP16);
  EXPECT_NE(cache.get(key).value_or(""), "dw:2|a configuration this build does not have");
  cache.put(key, "dw:99|v16 p4 b256");  // an index past the route's
  expect_gpu_matches_cpu(c, Precision::FP16);
}

// Strict fp32 depthwise convs are planned NCHW, where some of cuDNN's algorithms launch kernels per
// group: tuning SSDlite's 240-channel conv once sat in cudaGraphInstantiate for minutes on such a
// candidate's captured calls (captured_reps.h now times one that launches more than 16 kernels a
// call on the stream). With a cold tuning cache, these plan, tune and match the reference: the first
// is the shape SSDlite's build stalled on.
TEST(GpuDepthwise, StrictFp32WideConvsTuneAndMatch) {
  FUSEC_REQUIRE_GPU();
  const ScopedTuningCache scoped("dw_fp32_wide");
  const DwCase cases[] = {
      {.what = "C240 3x3 s2 (SSDlite)",
       .n = 1,
       .c = 240,
       .h = 40,
       .w = 40,
       .kh = 3,
       .kw = 3,
       .strides = {2, 2},
       .pads = {1, 1, 1, 1}},
      {.what = "C672 5x5 s1 (MobileNetV3)",
       .n = 1,
       .c = 672,
       .h = 20,
       .w = 20,
       .kh = 5,
       .kw = 5,
       .pads = {2, 2, 2, 2},
       .act = "HardSwish"},
  };
  for (const DwCase& d : cases) {
    SCOPED_TRACE(d.what);
    expect_gpu_matches_cpu(make_case(d), Precision::FP32);
  }
}

// Asymmetric pads, which cuDNN cannot express, run on the route even unforced; FUSEC_CONV_DEPTHWISE=0
// sends them back to the CPU reference and the symmetric ones to cuDNN.
TEST(GpuDepthwise, AsymmetricPadsRunOnTheRouteAndTheSwitchTurnsItOff) {
  FUSEC_REQUIRE_GPU();
  DwCase d{.what = "SAME_UPPER s2",
           .n = 2,
           .c = 32,
           .h = 15,
           .w = 16,
           .kh = 3,
           .kw = 3,
           .strides = {2, 2},
           .pads = {0, 0, 1, 1},
           .act = "HardSwish"};
  for (Precision p : {Precision::FP16, Precision::BF16})
    expect_gpu_matches_cpu(make_case(d), p, -1, true, "fusec depthwise conv");
  OpCase same_upper = make_case(d);
  same_upper.attrs = {attr("group", d.c), attr("strides", d.strides), attr("auto_pad", std::string("SAME_UPPER")),
                      attr("activation", std::string("HardSwish"))};
  expect_gpu_matches_cpu(same_upper, Precision::FP16, -1, true, "fusec depthwise conv");
  ScopedEnv off("FUSEC_CONV_DEPTHWISE", "0");
  expect_gpu_matches_cpu(make_case(d), Precision::FP16, -1, /*require_gpu_kernel=*/false);
  DwCase sym{.what = "3x3 p1", .n = 2, .c = 32, .h = 15, .w = 16, .kh = 3, .kw = 3, .pads = {1, 1, 1, 1}};
  expect_gpu_matches_cpu(make_case(sym), Precision::FP16, -1, true, "cuDNN");
}

// Grouped convs that are not depthwise, NCHW convs (strict fp32) and 1-D convs keep cuDNN even
// with the route forced.
TEST(GpuDepthwise, OtherConvsStayOnCudnn) {
  FUSEC_REQUIRE_GPU();
  ScopedEnv force("FUSEC_CONV_DEPTHWISE", "2");
  OpCase grouped = make_case({.what = "", .n = 1, .c = 8, .h = 9, .w = 9, .kh = 3, .kw = 3, .pads = {1, 1, 1, 1}});
  grouped.inputs[1] = random_tensor(DType::Float32, {8, 4, 3, 3}, 5);
  grouped.attrs[0] = attr("group", int64_t{2});
  expect_gpu_matches_cpu(grouped, Precision::FP16, -1, true, "cuDNN");
  DwCase d{.what = "", .n = 1, .c = 16, .h = 9, .w = 9, .kh = 3, .kw = 3, .pads = {1, 1, 1, 1}};
  expect_gpu_matches_cpu(make_case(d), Precision::FP32, -1, true, "cuDNN conv fp32 NCHW");
  OpCase one_d;
  one_d.op = "Conv";
  one_d.inputs = {random_tensor(DType::Float32, {2, 16, 30}, 1), random_tensor(DType::Float32, {16, 1, 3}, 2)};
  one_d.constant = {1};
  one_d.attrs = {attr("group", int64_t{16}), attr("pads", V{1, 1})};
  expect_gpu_matches_cpu(one_d, Precision::FP16, -1, true, "cuDNN");
}

// ---------------------------------------------------------------- bandwidth (not a check)

namespace {

struct BenchShape {
  const char* model;
  int64_t c, hw, k, stride;
  const char* act;  // null: Conv + bias (ConvNeXt); else FusedConv + bias + act
};

/// Median ms of one launch: warm (queued behind a hold kernel, back to back, as the tuner and a
/// CUDA graph run it; the input stays in L2 where it fits) and cold (L2 flushed before each).
struct Timing {
  double warm_ms = 0, cold_ms = 0;
};

template <typename Launch>
Timing time_launch(cudaStream_t s, const Launch& launch, cuda::DeviceBuffer& flush) {
  for (int i = 0; i < 3; ++i) launch();
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<float> warm, cold;
  for (int round = 0; round < 5; ++round) {
    cuda::launch_gpu_hold(s, 200);
    cudaEventRecord(e0, s);
    constexpr int kReps = 10;
    for (int i = 0; i < kReps; ++i) launch();
    cudaEventRecord(e1, s);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    warm.push_back(ms / kReps);
  }
  for (int i = 0; i < 11; ++i) {
    cudaMemsetAsync(flush.get(), i, flush.size(), s);
    cudaEventRecord(e0, s);
    launch();
    cudaEventRecord(e1, s);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    cold.push_back(ms);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::sort(warm.begin(), warm.end());
  std::sort(cold.begin(), cold.end());
  return {warm[warm.size() / 2], cold[cold.size() / 2]};
}

}  // namespace

// FUSEC_BENCH_PRINT=1: each shape at batch 16 through the conv op as a model plans it
// (channels-last), with cuDNN alone (FUSEC_CONV_DEPTHWISE=0), the tuner's pick ("auto", a fresh
// tuning cache) and each configuration forced; bytes moved = x + y + weights + bias in the
// storage type, against the H100's ~2960 GB/s copy peak and against a copy of as many bytes.
TEST(GpuDepthwise, Bandwidth) {
  FUSEC_REQUIRE_GPU();
  if (!env_switch("FUSEC_BENCH_PRINT")) GTEST_SKIP() << "FUSEC_BENCH_PRINT=1 runs it";
  constexpr double kCopyPeakGBs = 2960;
  const BenchShape shapes[] = {
      {"convnext", 96, 56, 7, 1, nullptr},         {"convnext", 192, 28, 7, 1, nullptr},
      {"convnext", 384, 14, 7, 1, nullptr},        {"convnext", 768, 7, 7, 1, nullptr},
      {"mobilenetv3", 16, 112, 3, 1, "Relu"},      {"mobilenetv3", 64, 112, 3, 2, "Relu"},
      {"mobilenetv3", 72, 56, 5, 2, "Relu"},       {"mobilenetv3", 120, 28, 5, 1, "Relu"},
      {"mobilenetv3", 240, 28, 3, 2, "HardSwish"}, {"mobilenetv3", 480, 14, 3, 1, "HardSwish"},
      {"mobilenetv3", 672, 14, 5, 2, "HardSwish"}, {"mobilenetv3", 960, 7, 5, 1, "HardSwish"},
      {"efficientnet", 32, 112, 3, 1, "SiLU"},     {"efficientnet", 96, 112, 3, 2, "SiLU"},
      {"efficientnet", 144, 56, 5, 2, "SiLU"},     {"efficientnet", 1152, 7, 3, 1, "SiLU"},
  };
  const ScopedTuningCache scoped("dw_bench");
  cuda::Context ctx(0);
  cuda::DeviceBuffer flush(size_t{256} << 20, "L2 flush");
  std::printf("[depthwise] %-34s %-28s %9s %9s %8s %6s\n", "shape (batch 16)", "route", "warm ms", "cold ms",
              "warm GB/s", "%peak");
  for (Precision p : {Precision::FP16, Precision::BF16, Precision::TF32}) {
    const DType t = storage(p);
    const size_t es = dtype_size(t);
    for (const BenchShape& b : shapes) {
      const int64_t n = 16, pad = b.k / 2, o = (b.hw + 2 * pad - b.k) / b.stride + 1;
      Node node;
      node.name = "bench";
      node.op_type = b.act ? "FusedConv" : "Conv";
      node.domain = b.act ? "ai.fusec" : "";
      node.attrs = {attr("group", b.c), attr("strides", V{b.stride, b.stride}), attr("pads", V{pad, pad, pad, pad})};
      if (b.act) node.attrs.push_back(attr("activation", std::string(b.act)));
      const int64_t opset = b.act ? 1 : 17;
      const OpSchema* schema = OpRegistry::global().find(node.domain, node.op_type, opset);
      ASSERT_NE(schema, nullptr);
      Tensor wt = random_tensor(DType::Float32, {b.c, 1, b.k, b.k}, 3, -0.3, 0.3);
      Tensor bt = random_tensor(DType::Float32, {b.c}, 4);
      auto value = [&](V dims, const Tensor* constant, bool nhwc) {
        cuda::PlanValue v;
        v.present = true;
        v.dims = std::move(dims);
        v.dtype = t;
        v.onnx_dtype = DType::Float32;
        v.constant = constant;
        v.nhwc = nhwc;
        return v;
      };
      const std::vector<cuda::PlanValue> ins = {value({n, b.c, b.hw, b.hw}, nullptr, true),
                                                value({b.c, 1, b.k, b.k}, &wt, false), value({b.c}, &bt, false)};
      const std::vector<cuda::PlanValue> outs = {value({n, b.c, o, o}, nullptr, true)};
      const size_t xb = n * b.c * b.hw * b.hw * es, yb = n * b.c * o * o * es, wb = b.c * b.k * b.k * es, bb = b.c * es;
      cuda::DeviceBuffer x(xb, "bench x"), y(yb, "bench y"), w(wb, "bench w"), bias(bb, "bench bias");
      for (auto* buf : {&x, &w, &bias}) cudaMemset(buf->get(), 0x3C, buf->size());  // never time on zeros
      char shape_name[96];
      std::snprintf(shape_name, sizeof shape_name, "%s %s %lldx%lld s%lld C%lld %lldx%lld", precision_name(p), b.model,
                    (long long)b.k, (long long)b.k, (long long)b.stride, (long long)b.c, (long long)b.hw,
                    (long long)b.hw);
      const char* filter = env_switch("FUSEC_BENCH_FILTER");
      auto route_of = [](const std::string& mode) {
        return mode == "0" ? std::string("cuDNN") : mode == "auto" ? std::string("auto (tuned)") : "forced " + mode;
      };
      std::vector<std::string> modes;
      for (int i = -1; i <= cuda::depthwise_config_count(); ++i) {
        const std::string mode = i < 0 ? "0" : i == 0 ? "auto" : std::to_string(i);
        if (!filter || (std::string(shape_name) + " | " + route_of(mode) + " |").find(filter) != std::string::npos)
          modes.push_back(mode);
      }
      if (modes.empty()) continue;
      // A device-to-device copy that reads and writes as many bytes as the conv: the bandwidth a
      // launch of this size can reach at all, which for the small late maps is well below the peak.
      const size_t copy_bytes = (xb + yb) / 2;
      cuda::DeviceBuffer copy_dst(copy_bytes, "bench copy");
      const Timing copy = time_launch(
          ctx.stream(),
          [&] { cudaMemcpyAsync(copy_dst.get(), x.get(), copy_bytes, cudaMemcpyDeviceToDevice, ctx.stream()); }, flush);
      const double copy_gbs = double(2 * copy_bytes) / (copy.warm_ms * 1e-3) / 1e9;
      std::printf("[depthwise] %-34s %-28s %9.4f %9.4f %8.0f %5.0f%%  cudaMemcpyAsync %zu bytes\n", shape_name,
                  "copy of as many bytes", copy.warm_ms, copy.cold_ms, copy_gbs, 100 * copy_gbs / kCopyPeakGBs,
                  copy_bytes);
      for (const std::string& mode : modes) {
        const std::string route = route_of(mode);
        if (mode == "auto")
          unsetenv("FUSEC_CONV_DEPTHWISE");
        else
          setenv("FUSEC_CONV_DEPTHWISE", mode.c_str(), 1);
        cuda::PlanContext pc(node, *schema, opset, p, ctx, ins, outs);
        std::string why;
        auto op = (*cuda::CudaOpRegistry::global().find_channels_last(node.domain, node.op_type))(pc, &why);
        ASSERT_NE(op, nullptr) << why;
        cuda::DeviceBuffer ws(std::max<size_t>(op->workspace_bytes(), 16), "bench workspace");
        std::vector<cuda::DTensor> din = {{x.get(), t, {n, b.c, b.hw, b.hw}},
                                          {op->reads_input(1) ? w.get() : nullptr, t, {b.c, 1, b.k, b.k}},
                                          {bias.get(), t, {b.c}}};
        std::vector<cuda::DTensor> dout = {{y.get(), t, {n, b.c, o, o}}};
        cuda::LaunchArgs la{din, dout, ctx, ctx.stream(), ws.get()};
        const Timing tm = time_launch(
            ctx.stream(), [&] { op->launch(la); }, flush);
        const double gbs = double(xb + yb + wb + bb) / (tm.warm_ms * 1e-3) / 1e9;
        std::printf("[depthwise] %-34s %-28s %9.4f %9.4f %8.0f %5.0f%%  %3.0f%% of the copy's  %s\n", shape_name,
                    route.c_str(), tm.warm_ms, tm.cold_ms, gbs, 100 * gbs / kCopyPeakGBs, 100 * gbs / copy_gbs,
                    op->kernel_name().c_str());
      }
      unsetenv("FUSEC_CONV_DEPTHWISE");
    }
  }
}
