// Conv, FusedConv and ConvTranspose on cuDNN against the CPU reference.
#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/ops/conv/conv_igemm.cuh"
#include "backend/cuda/ops/conv/conv_igemm_route.h"
#include "backend/cuda/ops/gemm/hgemm.cuh"
#include "backend/cuda/core/tuning_cache.h"
#include "ir/switches.h"
#include "gpu_test_util.h"
#include "passes/infer_shapes.h"
#include "profiler/cuda/cuda_profiler.h"

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
    expect_gpu_matches_cpu(
        conv({2, 3, 32, 32}, {16, 3, 7, 7},
             {attr("strides", std::vector<int64_t>{2, 2}), attr("pads", std::vector<int64_t>{3, 3, 3, 3})}),
        p);
    expect_gpu_matches_cpu(conv({2, 16, 14, 14}, {32, 16, 1, 1}, {}), p);
    expect_gpu_matches_cpu(
        conv({2, 16, 15, 13}, {16, 16, 3, 3}, {attr("pads", std::vector<int64_t>{1, 1, 1, 1})}, false), p);
  }
}

TEST(GpuConv, GroupsDilationsAndOneD) {
  FUSEC_REQUIRE_GPU();
  for (Precision p : kAll) {
    expect_gpu_matches_cpu(
        conv({1, 8, 17, 17}, {8, 1, 3, 3}, {attr("group", int64_t{8}), attr("pads", std::vector<int64_t>{1, 1, 1, 1})}),
        p);
    expect_gpu_matches_cpu(
        conv({1, 8, 20, 20}, {4, 4, 3, 3}, {attr("group", int64_t{2}), attr("dilations", std::vector<int64_t>{2, 2})}),
        p);
    expect_gpu_matches_cpu(conv({3, 4, 50}, {6, 4, 5},
                                {attr("strides", std::vector<int64_t>{2}), attr("pads", std::vector<int64_t>{2, 2})}),
                           p);
  }
  expect_gpu_matches_cpu(conv({1, 2, 6, 6, 6}, {4, 2, 3, 3, 3}, {}), Precision::FP32);
}

TEST(GpuConv, AsymmetricPaddingFallsBackToTheReference) {
  FUSEC_REQUIRE_GPU();
  expect_gpu_matches_cpu(
      conv({1, 3, 10, 10}, {4, 3, 3, 3},
           {attr("auto_pad", std::string("SAME_UPPER")), attr("strides", std::vector<int64_t>{2, 2})}),
      Precision::FP32, -1, /*require_gpu_kernel=*/false);
}

TEST(GpuFusedConv, ResidualAndActivations) {
  FUSEC_REQUIRE_GPU();
  const char* acts[] = {"", "Relu", "Clip", "SiLU", "HardSwish", "Sigmoid"};
  for (Precision p : kAll)
    for (const char* act : acts) {
      for (bool residual : {false, true}) {
        OpCase c = conv({2, 8, 9, 9}, {8, 8, 3, 3},
                        {attr("pads", std::vector<int64_t>{1, 1, 1, 1}), attr("activation", std::string(act))});
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

namespace {

/// stem conv -> max pool -> FusedConv -> FusedConv with the residual -> global pool -> Flatten ->
/// Gemm: a ResNet block in miniature, which the planner runs channels-last at fp16/bf16/tf32.
std::unique_ptr<Graph> mini_resnet() {
  GraphBuilder b;
  b.graph().opsets["ai.fusec"] = 1;
  Value* x = b.input("x", DType::Float32, {Dim(2), Dim(3), Dim(20), Dim(20)});
  auto w = [&](const char* name, std::vector<int64_t> d, uint64_t seed) {
    return b.initializer(name, random_tensor(DType::Float32, d, seed, -0.3, 0.3));
  };
  Value* c1 =
      b.node("Conv", {x, w("w1", {8, 3, 3, 3}, 1), w("b1", {8}, 2)}, {attr("pads", std::vector<int64_t>{1, 1, 1, 1})});
  Value* p = b.node("MaxPool", {c1},
                    {attr("kernel_shape", std::vector<int64_t>{3, 3}), attr("strides", std::vector<int64_t>{2, 2}),
                     attr("pads", std::vector<int64_t>{1, 1, 1, 1})});
  Value* f1 = b.node_n("FusedConv", {p, w("w2", {8, 8, 3, 3}, 3), w("b2", {8}, 4)}, 1,
                       {attr("pads", std::vector<int64_t>{1, 1, 1, 1}), attr("activation", std::string("Relu"))}, "",
                       "ai.fusec")[0];
  Value* f2 = b.node_n("FusedConv", {f1, w("w3", {8, 8, 1, 1}, 5), w("b3", {8}, 6), p}, 1,
                       {attr("activation", std::string("Relu"))}, "", "ai.fusec")[0];
  Value* gap = b.node("GlobalAveragePool", {f2});
  Value* flat = b.node("Flatten", {gap});
  b.output(b.node("Gemm", {flat, w("wf", {8, 5}, 7), w("bf", {5}, 8)}));
  b.output(f2);  // an NHWC value that is also a graph output: converted back at the end
  auto g = b.build();
  infer_shapes(*g);
  return g;
}

}  // namespace

TEST(GpuConvChannelsLast, ResNetBlockMatchesTheReference) {
  FUSEC_REQUIRE_GPU();
  auto g = mini_resnet();
  Tensor x = random_tensor(DType::Float32, {2, 3, 20, 20}, 40);
  for (Precision p : {Precision::TF32, Precision::FP16, Precision::BF16}) {
    SCOPED_TRACE(precision_name(p));
    expect_graph_gpu_matches_cpu(*g, {x}, p);
    cuda::CudaOptions o;
    o.precision = p;
    auto exe = cuda::CudaBackend(o).compile_cuda(*g);
    exe->run({x});
    int nhwc = 0;
    for (const auto& pl : exe->placement()) nhwc += pl.kernel.find("NHWC") != std::string::npos;
    EXPECT_EQ(nhwc, 5) << "conv, max pool, two fused convs and the global pool run channels-last";
    // The same plan without channels-last gives the same numbers.
    o.channels_last = false;
    auto nchw = cuda::CudaBackend(o).compile_cuda(*g)->run({x});
    auto cl = exe->run({x});
    for (size_t i = 0; i < cl.size(); ++i)
      for (int64_t k = 0; k < cl[i].numel(); ++k)
        EXPECT_NEAR(cl[i].as_double(k), nchw[i].as_double(k), 2e-2 * (1 + std::fabs(nchw[i].as_double(k))));
  }
}

namespace {

/// x -> 1x1 conv(s) in each epilogue form the GEMM route has: bias plane + ReLU in the GEMM,
/// residual as C with bias and ReLU in the pass, bias plane + another activation in the pass, no
/// bias, and a 1-D conv.
std::unique_ptr<Graph> pointwise_convs() {
  GraphBuilder b;
  b.graph().opsets["ai.fusec"] = 1;
  Value* x = b.input("x", DType::Float32, {Dim(3), Dim(24), Dim(7), Dim(9)});
  auto w = [&](const char* name, std::vector<int64_t> d, uint64_t seed) {
    return b.initializer(name, random_tensor(DType::Float32, d, seed, -0.3, 0.3));
  };
  auto fused = [&](std::vector<Value*> in, const char* act) {
    return b.node_n("FusedConv", std::move(in), 1, {attr("activation", std::string(act))}, "", "ai.fusec")[0];
  };
  Value* a = fused({x, w("w1", {40, 24, 1, 1}, 1), w("b1", {40}, 2)}, "Relu");
  Value* r = b.node("Conv", {x, w("w2", {40, 24, 1, 1}, 3), w("b2", {40}, 4)});
  Value* c = fused({a, w("w3", {40, 40, 1, 1}, 5), w("b3", {40}, 6), r}, "Relu");
  Value* d = fused({c, w("w4", {16, 40, 1, 1}, 7), w("b4", {16}, 8)}, "Sigmoid");
  Value* e = b.node("Conv", {d, w("w5", {8, 16, 1, 1}, 9)});
  Value* flat = b.node("Reshape", {e, b.initializer("shape", Tensor::from_int64({3, 8, 63}, {3}))});
  b.output(b.node("Conv", {flat, w("w6", {5, 8, 1}, 10), w("b6", {5}, 11)}));
  auto g = b.build();
  infer_shapes(*g);
  return g;
}

}  // namespace

TEST(GpuConvGemmRoute, PointwiseConvsMatchTheReference) {
  FUSEC_REQUIRE_GPU();
  auto g = pointwise_convs();
  Tensor x = random_tensor(DType::Float32, {3, 24, 7, 9}, 41);
  ScopedEnv force("FUSEC_CONV_GEMM", "force");
  for (Precision p : {Precision::FP32, Precision::TF32}) {
    SCOPED_TRACE(precision_name(p));
    cuda::CudaOptions o;
    o.precision = p;
    o.channels_last = false;  // tf32 would run NHWC; the route is for NCHW memory
    auto exe = cuda::CudaBackend(o).compile_cuda(*g);
    int gemm = 0;
    for (const auto& pl : exe->placement()) gemm += pl.kernel.find("(1x1 conv)") != std::string::npos;
    EXPECT_EQ(gemm, 6) << "every conv runs as a cuBLASLt GEMM";
    auto ref = cpu::CpuBackend().compile(*g)->run({x});
    auto out = exe->run({x});
    ASSERT_EQ(out.size(), ref.size());
    double mx = 0, err = 0;
    for (int64_t k = 0; k < ref[0].numel(); ++k) {
      mx = std::max(mx, std::fabs(ref[0].as_double(k)));
      err = std::max(err, std::fabs(out[0].as_double(k) - ref[0].as_double(k)));
    }
    EXPECT_GT(mx, 0.0);
    EXPECT_LE(err, default_tolerance(p) * mx);
  }
}

TEST(GpuConvGemmRoute, StridedOrPaddedConvsStayOnCudnn) {
  FUSEC_REQUIRE_GPU();
  ScopedEnv force("FUSEC_CONV_GEMM", "force");
  // A strided or padded 1x1 conv is not a plain GEMM over NCHW memory; cuDNN keeps it.
  expect_gpu_matches_cpu(conv({2, 8, 9, 9}, {12, 8, 1, 1}, {attr("strides", std::vector<int64_t>{2, 2})}),
                         Precision::FP32);
  expect_gpu_matches_cpu(conv({2, 8, 9, 9}, {12, 8, 1, 1}, {attr("pads", std::vector<int64_t>{1, 1, 1, 1})}),
                         Precision::FP32);
  expect_gpu_matches_cpu(conv({2, 8, 9, 9}, {8, 4, 1, 1}, {attr("group", int64_t{2})}), Precision::FP32);
}

// Untimed (fp16) choices are remembered in the tuning cache: a warm build reads the algorithm and
// the fused call's outcome back instead of querying cuDNN's heuristics, and a remembered fused
// call this cuDNN refuses (identity activation with IMPLICIT_GEMM) falls back to the same
// algorithm unfused at the first launch.
TEST(GpuConvChoice, WarmBuildsRecallTheChoiceAndSurviveARefusedFusedCall) {
  FUSEC_REQUIRE_GPU();
  const ScopedTuningCache scoped("conv_choice");
  auto& cache = cuda::TuningCache::global();
  OpCase c = conv({2, 16, 14, 14}, {32, 16, 3, 3}, {attr("pads", std::vector<int64_t>{1, 1, 1, 1})});
  expect_gpu_matches_cpu(c, Precision::FP16);  // cold: heuristics and the fused trial, remembered
  const std::string key = scoped.key_containing("|conv choice float16");
  ASSERT_FALSE(key.empty()) << scoped.text();
  const std::string value = cache.get(key).value_or("");
  int algo = -1, math = -1, fused = -1, falgo = -1;
  ASSERT_EQ(std::sscanf(value.c_str(), "%d:%d:%d:%d", &algo, &math, &fused, &falgo), 4) << value;
  expect_gpu_matches_cpu(c, Precision::FP16);  // warm: read back
  cache.put(key, std::to_string(algo) + ":" + std::to_string(math) +
                     ":1:" + std::to_string(CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM));
  expect_gpu_matches_cpu(c, Precision::FP16);
  cache.put(key, "garbage");  // unreadable: the heuristics again
  expect_gpu_matches_cpu(c, Precision::FP16);
}

namespace {

OpCase fused_conv(std::vector<int64_t> x, std::vector<int64_t> w, std::vector<NamedAttribute> attrs, const char* act,
                  bool residual) {
  OpCase c = conv(x, w, std::move(attrs));
  c.op = "FusedConv";
  c.domain = "ai.fusec";
  c.attrs.push_back(attr("activation", std::string(act)));
  if (residual) {
    auto y = x;
    y[1] = w[0];
    c.inputs.push_back(random_tensor(DType::Float32, y, 31));
  }
  return c;
}

/// The same case without its bias input (the residual, if any, stays input 3).
OpCase without_bias(OpCase c) {
  c.inputs[2] = Tensor();
  return c;
}

}  // namespace

// fusec's implicit-GEMM conv (conv_igemm.cuh), each configuration forced, on the shapes its
// edges live in: K (= C·R·S) not a multiple of the 16-deep slice (the 7x7 stem's 147), outputs
// per image not a multiple of 4 (scalar stores) and a multiple (16-byte stores), taps in the
// padding on every side, strides, dilations, a non-square window, Cout not a multiple of the
// tile, K deep enough for split-K, and each fused epilogue; with 16-byte stores, a last tile of
// pixels past the batch's end (3 images of 8x8: 192 columns in tiles of 128); the pointwise
// configurations on 1x1 convs they take (K = 24 and 40: a part-filled last slice) and on those
// they run as their im2col twins; each with K in the weights' (c, r, s) order and, where C % 16
// == 0, in (r, s, c) order (ConvTapArgs).
TEST(GpuConvIgemm, EveryConfigurationMatchesTheReference) {
  FUSEC_REQUIRE_GPU();
  using V = std::vector<int64_t>;
  const std::vector<std::pair<const char*, OpCase>> cases = {
      {"stem 7x7 s2 p3", conv({2, 3, 30, 30}, {16, 3, 7, 7}, {attr("strides", V{2, 2}), attr("pads", V{3, 3, 3, 3})})},
      {"3x3 p1, no bias", conv({2, 16, 15, 13}, {24, 16, 3, 3}, {attr("pads", V{1, 1, 1, 1})}, false)},
      {"3x3 s2 p1 to 7x7",
       conv({2, 32, 14, 14}, {40, 32, 3, 3}, {attr("strides", V{2, 2}), attr("pads", V{1, 1, 1, 1})})},
      {"1x1 s2", conv({2, 24, 16, 16}, {36, 24, 1, 1}, {attr("strides", V{2, 2})})},
      {"3x3 dilation 2",
       conv({1, 8, 20, 20}, {12, 8, 3, 3}, {attr("dilations", V{2, 2}), attr("pads", V{2, 2, 2, 2})})},
      {"3x5 s(2,1)", conv({2, 6, 11, 12}, {10, 6, 3, 5}, {attr("strides", V{2, 1}), attr("pads", V{1, 2, 1, 2})})},
      {"3x5 s(2,1) dilation (2,1), 16 channels",
       conv({2, 16, 11, 12}, {10, 16, 3, 5},
            {attr("strides", V{2, 1}), attr("pads", V{2, 2, 2, 2}), attr("dilations", V{2, 1})})},
      {"residual + relu, 8x8", fused_conv({3, 64, 8, 8}, {70, 64, 3, 3}, {attr("pads", V{1, 1, 1, 1})}, "Relu", true)},
      {"residual + relu, 7x7", fused_conv({2, 16, 7, 7}, {16, 16, 3, 3}, {attr("pads", V{1, 1, 1, 1})}, "Relu", true)},
      {"1x1 pointwise, residual + relu", fused_conv({3, 24, 8, 8}, {36, 24, 1, 1}, {}, "Relu", true)},
      {"1x1 pointwise, 14x14", conv({2, 40, 14, 14}, {20, 40, 1, 1}, {})},
      {"1x1, 7x7: no 16-byte rows", conv({2, 32, 7, 7}, {24, 32, 1, 1}, {})},
      {"gelu", fused_conv({1, 8, 9, 9}, {8, 8, 3, 3}, {attr("pads", V{1, 1, 1, 1})}, "Gelu", false)},
      // Stream-K: more K tiles than resident CTAs, so ranges cross tiles (a tail, a head), and
      // more tiles than CTAs, so a range holds whole tiles.
      {"3x3 residual + relu, 25 tiles of 18 K tiles",
       fused_conv({2, 32, 40, 40}, {48, 32, 3, 3}, {attr("pads", V{1, 1, 1, 1})}, "Relu", true)},
      {"1x1 pointwise, 288 tiles of one K tile", conv({4, 16, 96, 96}, {24, 16, 1, 1}, {})},
      // Packed candidates: 1x1 convs whose planes have no 16-byte rows, or strided.
      {"1x1, 7x7, batch 4, residual + relu: packed", fused_conv({4, 32, 7, 7}, {40, 32, 1, 1}, {}, "Relu", true)},
      // No bias input (the dynamo exporter drops all-zero biases): the epilogue takes a null bias.
      {"no bias, residual + relu, 7x7",
       without_bias(fused_conv({2, 16, 7, 7}, {16, 16, 3, 3}, {attr("pads", V{1, 1, 1, 1})}, "Relu", true))},
  };
  // The cases a packed candidate runs packed (a 1x1 conv not read as it is 16 bytes at a time,
  // batch·P·Q % 4 == 0); elsewhere it runs as its plain configuration.
  const std::set<std::string> packs = {"1x1 s2", "1x1, 7x7, batch 4, residual + relu: packed"};
  // The cases the Winograd candidates run as such (3x3, stride 1, pad 1): channel-major where the
  // tiles over the batch are a multiple of 4, tile-major where Cout is; elsewhere they run as the
  // first plain configuration.
  const std::set<std::string> wino_channels = {"3x3 p1, no bias", "residual + relu, 8x8", "residual + relu, 7x7",
                                               "3x3 residual + relu, 25 tiles of 18 K tiles",
                                               "no bias, residual + relu, 7x7"};
  const std::set<std::string> wino_tiles = {"3x3 p1, no bias", "residual + relu, 7x7", "gelu",
                                            "3x3 residual + relu, 25 tiles of 18 K tiles",
                                            "no bias, residual + relu, 7x7"};
  using Mode = cuda::ConvIgemmRoute::Mode;
  ASSERT_GT(cuda::ConvIgemmRoute::candidate_count(), cuda::conv_igemm_config_count());
  for (bool tap_major : {true, false})
    for (int i = 0; i < cuda::ConvIgemmRoute::candidate_count(); ++i) {
      Mode mode = Mode::Plain;
      const int cfg = cuda::ConvIgemmRoute::config_of(i, &mode);
      const bool wino = mode == Mode::WinogradChannels || mode == Mode::WinogradTiles;
      if (wino && !tap_major) continue;  // the K order does not reach the Winograd kernels
      const std::string forced = std::to_string(i + 1);
      ScopedEnv force("FUSEC_CONV_IGEMM", forced.c_str());
      ScopedEnv order("FUSEC_CONV_TAP", tap_major ? "1" : "0");
      for (const auto& [what, c] : cases) {
        std::string name = wino ? cuda::conv_igemm_config_name(0) : cuda::conv_igemm_config_name(cfg);
        if (mode == Mode::Packed && packs.count(what)) name = "packed " + name;
        if (mode == Mode::WinogradChannels && wino_channels.count(what))
          name = std::string("winograd channel-major ") + cuda::winograd_gemm_config_name(cfg);
        if (mode == Mode::WinogradTiles && wino_tiles.count(what))
          name = std::string("winograd tile-major ") + cuda::winograd_gemm_config_name(cfg);
        SCOPED_TRACE(std::string(what) + ", " + name + (tap_major ? ", tap-major where C % 16 == 0" : ""));
        expect_gpu_matches_cpu(c, Precision::FP32, -1, true, name);
      }
    }
}

TEST(GpuConvIgemm, WhatItDoesNotFuseStaysOnCudnn) {
  FUSEC_REQUIRE_GPU();
  ScopedEnv force("FUSEC_CONV_IGEMM", "1");
  using V = std::vector<int64_t>;
  // An activation its epilogue lacks, a grouped conv, and TF32 (where cuDNN's tensor cores win).
  expect_gpu_matches_cpu(fused_conv({1, 8, 9, 9}, {8, 8, 3, 3}, {attr("pads", V{1, 1, 1, 1})}, "Sigmoid", false),
                         Precision::FP32, -1, true, "cuDNN");
  expect_gpu_matches_cpu(conv({1, 8, 9, 9}, {8, 4, 3, 3}, {attr("group", int64_t{2})}), Precision::FP32, -1, true,
                         "cuDNN");
  expect_gpu_matches_cpu(conv({1, 8, 9, 9}, {8, 8, 3, 3}, {}), Precision::TF32, -1, true, "cuDNN");
}

// ---------------------------------------------------------------- bias-free convs
//
// The dynamo exporter writes Conv(x, W) without B where the bias is all zero (BN folded into a
// conv of zero bias, library-initialized weights), and conv -> ReLU without BN has no bias in any
// export. Such a conv must run as its biased twin does: same numbers, same kernels.

namespace {

/// x -> FusedConv "biased" (x, w, b[, z]) and FusedConv "bias_free" (x, w2[, z]), the same
/// geometry and activation, both graph outputs.
std::unique_ptr<Graph> twin_convs(const std::vector<int64_t>& xd, const std::vector<int64_t>& wd, int64_t pad,
                                  const char* act, bool residual) {
  GraphBuilder b;
  b.graph().opsets["ai.fusec"] = 1;
  Value* x = b.input("x", DType::Float32, shape_of(xd));
  std::vector<int64_t> yd = xd;
  yd[1] = wd[0];
  Value* z = residual ? b.input("z", DType::Float32, shape_of(yd)) : nullptr;
  auto w = [&](const char* name, std::vector<int64_t> d, uint64_t seed) {
    return b.initializer(name, random_tensor(DType::Float32, d, seed, -0.3, 0.3));
  };
  std::vector<NamedAttribute> attrs = {attr("pads", std::vector<int64_t>{pad, pad, pad, pad}),
                                       attr("activation", std::string(act))};
  if (std::string(act) == "LeakyRelu") attrs.push_back(attr("activation_params", std::vector<float>{0.1f}));
  std::vector<Value*> in1 = {x, w("w1", wd, 1), w("b1", {wd[0]}, 2)}, in2 = {x, w("w2", wd, 3), nullptr};
  if (residual) {
    in1.push_back(z);
    in2.push_back(z);
  } else {
    in2.pop_back();
  }
  b.output(b.node_n("FusedConv", in1, 1, attrs, "biased", "ai.fusec")[0]);
  b.output(b.node_n("FusedConv", in2, 1, attrs, "bias_free", "ai.fusec")[0]);
  auto g = b.build();
  infer_shapes(*g);
  return g;
}

std::vector<Tensor> twin_inputs(const Graph& g) {
  std::vector<Tensor> in;
  for (size_t i = 0; i < g.inputs.size(); ++i)
    in.push_back(random_tensor(DType::Float32, static_dims(*g.inputs[i]->type.shape), 50 + i));
  return in;
}

/// Kernels each step launched in one CUDA-graph replay, by step label (the node's name).
std::map<std::string, int> kernels_per_step(cuda::CudaExecutable& exe, const std::vector<Tensor>& in) {
  profiler::CudaRunSettings s;
  s.warmup = 1;
  s.iterations = 2;
  s.stream = false;
  const profiler::Collected c = profiler::profile_cuda(exe, in, s);
  std::map<std::string, int> n;
  for (const auto& r : c.records)
    if (r.mode == 0 && r.iteration == 0 && r.step >= 0 && r.kind == profiler::RecordKind::Kernel)
      ++n[c.steps[r.step].label];
  return n;
}

void expect_outputs(const std::vector<Tensor>& got, const std::vector<Tensor>& want, Precision p,
                    const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    compare(got[i], want[i], default_tolerance(p), what + " output " + std::to_string(i));
}

}  // namespace

TEST(GpuFusedConv, BiasFreeMatchesTheReference) {
  FUSEC_REQUIRE_GPU();
  const char* acts[] = {"", "Relu", "LeakyRelu", "SiLU", "HardSwish"};
  for (Precision p : kAll)
    for (const char* act : acts)
      for (bool residual : {false, true}) {
        SCOPED_TRACE(std::string(precision_name(p)) + " " + act + (residual ? " + residual" : ""));
        // Odd sizes; at tf32/fp16/bf16 the planner runs these channels-last, at fp32 NCHW.
        auto g = twin_convs({2, 16, 13, 11}, {24, 16, 3, 3}, 1, act, residual);
        expect_graph_gpu_matches_cpu(*g, twin_inputs(*g), p);
        auto g1 = twin_convs({2, 24, 7, 9}, {40, 24, 1, 1}, 0, act, residual);  // 1x1
        expect_graph_gpu_matches_cpu(*g1, twin_inputs(*g1), p);
      }
}

TEST(GpuFusedConv, BiasFreeOnEveryRoute) {
  FUSEC_REQUIRE_GPU();
  for (const char* act : {"", "Relu", "SiLU"})
    for (bool residual : {false, true}) {
      SCOPED_TRACE(std::string(act) + (residual ? " + residual" : ""));
      auto g = twin_convs({2, 16, 13, 11}, {24, 16, 3, 3}, 1, act, residual);
      auto g1 = twin_convs({2, 24, 7, 9}, {40, 24, 1, 1}, 0, act, residual);
      const auto in = twin_inputs(*g), in1 = twin_inputs(*g1);
      const auto want = cpu::CpuBackend().compile(*g)->run(in), want1 = cpu::CpuBackend().compile(*g1)->run(in1);
      {  // fp16 NCHW: cuDNN's fused call (conv + epilogue pass for SiLU) on NCHW memory
        cuda::CudaOptions o;
        o.precision = Precision::FP16;
        o.channels_last = false;
        expect_outputs(cuda::CudaBackend(o).compile_cuda(*g)->run(in), want, Precision::FP16, "fp16 NCHW");
      }
      {  // the 1x1 GEMM route, untimed
        ScopedEnv force("FUSEC_CONV_GEMM", "force");
        auto exe = cuda::CudaBackend(cuda::CudaOptions{}).compile_cuda(*g1);
        EXPECT_NE(kernel_of(*exe, "bias_free").find("(1x1 conv)"), std::string::npos) << kernel_of(*exe, "bias_free");
        expect_outputs(exe->run(in1), want1, Precision::FP32, "GEMM route");
      }
      {  // fusec's implicit-GEMM conv, its first configuration (it fuses ReLU, not SiLU: cuDNN runs those)
        ScopedEnv force("FUSEC_CONV_IGEMM", "1");
        auto exe = cuda::CudaBackend(cuda::CudaOptions{}).compile_cuda(*g);
        if (std::string(act) != "SiLU")
          EXPECT_NE(kernel_of(*exe, "bias_free").find("implicit-GEMM"), std::string::npos)
              << kernel_of(*exe, "bias_free");
        expect_outputs(exe->run(in), want, Precision::FP32, "implicit-GEMM");
      }
    }
}

/// twin_convs(x, w, 0, act, residual) at precision p: both twins run on the kernel named
/// `kernel`, match the CPU reference, and launch one kernel each. Under compute-sanitizer CUPTI
/// records nothing at all (the sanitizer holds its callbacks), so there the count is left to a
/// plain run.
void expect_one_route_kernel(const std::vector<int64_t>& x, const std::vector<int64_t>& w, const char* act,
                             bool residual, Precision p, const std::string& kernel) {
  auto g = twin_convs(x, w, 0, act, residual);
  const auto in = twin_inputs(*g);
  const auto want = cpu::CpuBackend().compile(*g)->run(in);
  cuda::CudaOptions o;
  o.precision = p;
  auto exe = cuda::CudaBackend(o).compile_cuda(*g);
  for (const char* node : {"biased", "bias_free"})
    EXPECT_NE(kernel_of(*exe, node).find(kernel), std::string::npos) << kernel_of(*exe, node);
  expect_outputs(exe->run(in), want, p, kernel);
  const auto n = kernels_per_step(*exe, in);
  if (n.empty() && env_switch("FUSEC_UNDER_SANITIZER")) return;
  EXPECT_EQ(n.count("biased") ? n.at("biased") : 0, 1);
  EXPECT_EQ(n.count("bias_free") ? n.at("bias_free") : 0, 1);
}

TEST(GpuFusedConv, PointwiseRouteRunsTheWholeEpilogueInOneKernel) {
  FUSEC_REQUIRE_GPU();
  int device = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  const bool wgmma = cuda::hgemm_available(device);
  // Forced untimed (FUSEC_CONV_GEMM=force takes the route's first candidate: the few-rows kernel
  // for up to 64 rows, else the wgmma GEMM's first configuration). The wgmma GEMM: partial tiles
  // (M = N·H·W of 189 and 1800, Cout of 40 and 24). The few-rows kernel: 2 and 16 rows (a
  // squeeze-excite block's layers), K of 8, 20 (scalar loads) and 120, Cout of 136, 120 and 20.
  // Every activation family of the epilogue (the generic instance through LeakyRelu), bias or
  // none, residual or none, every precision that runs channels-last.
  struct Shape {
    std::vector<int64_t> x, w;
  };
  const Shape shapes[] = {{{3, 24, 7, 9}, {40, 24, 1, 1}},  {{2, 96, 30, 30}, {24, 96, 1, 1}},
                          {{2, 8, 1, 1}, {136, 8, 1, 1}},   {{16, 20, 1, 1}, {120, 20, 1, 1}},
                          {{16, 120, 1, 1}, {20, 120, 1, 1}}};
  ScopedEnv force("FUSEC_CONV_GEMM", "force");
  for (Precision p : {Precision::FP16, Precision::BF16, Precision::TF32})
    for (const Shape& sh : shapes)
      for (const char* act : {"SiLU", "HardSwish", "Gelu", "Sigmoid", "LeakyRelu"})
        for (bool residual : {false, true}) {
          const bool few = sh.x[0] * sh.x[2] * sh.x[3] <= 64;
          if (!few && (!wgmma || p == Precision::TF32)) continue;  // the wgmma GEMM: fp16/bf16 on Hopper
          SCOPED_TRACE(std::string(precision_name(p)) + " " + act + (residual ? " + residual" : "") + " x " +
                       std::to_string(sh.x[1]) + "->" + std::to_string(sh.w[0]));
          expect_one_route_kernel(sh.x, sh.w, act, residual, p,
                                  few ? "fusec few-rows 1x1 conv" : "fusec wgmma GEMM 1x1 conv");
        }
}

TEST(GpuFusedConv, NarrowChannelsRunUnpaddedInOneKernel) {
  FUSEC_REQUIRE_GPU();
  // 1x1 convs whose Cin or Cout is not a multiple of 16 bytes, which cuDNN pads channels-last on
  // every call: ShuffleNetV2's 58 and 116 (116 is whole 16-byte groups in fp32, so not narrow at
  // tf32), odd K (7, 3) against whole and partial 64-channel tiles (Cout 70, 130), rows that leave
  // both configurations' last tile partial. Each configuration forced (candidates 1 and 2: no
  // shape here has few enough rows for the few-rows kernel), ReLU, none and an activation cuDNN's
  // fused call cannot take, bias or none, residual or none, every precision that runs
  // channels-last.
  struct Shape {
    std::vector<int64_t> x, w;
  };
  const Shape shapes[] = {{{2, 58, 7, 9}, {58, 58, 1, 1}},
                          {{3, 24, 5, 5}, {58, 24, 1, 1}},
                          {{2, 116, 6, 6}, {116, 116, 1, 1}},
                          {{1, 7, 9, 11}, {70, 7, 1, 1}},
                          {{2, 3, 8, 8}, {130, 3, 1, 1}}};
  for (const char* forced : {"force:1", "force:2"}) {
    ScopedEnv force("FUSEC_CONV_GEMM", forced);
    for (Precision p : {Precision::FP16, Precision::BF16, Precision::TF32})
      for (const Shape& sh : shapes)
        for (const char* act : {"Relu", "", "SiLU"})
          for (bool residual : {false, true}) {
            if (p == Precision::TF32 && sh.x[1] % 4 == 0 && sh.w[0] % 4 == 0) continue;  // whole fp32 groups
            SCOPED_TRACE(std::string(forced) + " " + precision_name(p) + " " + act + (residual ? " + residual" : "") +
                         " " + std::to_string(sh.x[1]) + "->" + std::to_string(sh.w[0]));
            expect_one_route_kernel(sh.x, sh.w, act, residual, p, "fusec narrow-channel 1x1 conv");
          }
  }
}

TEST(GpuFusedConv, BiasFreeLaunchesWhatTheBiasedFormLaunches) {
  FUSEC_REQUIRE_GPU();
  // Untimed precisions (the heuristics' choice, the same for both twins), both layouts. ReLU or
  // no activation: cuDNN's fused call does the whole epilogue in one kernel, bias or not.
  for (Precision p : {Precision::TF32, Precision::FP16, Precision::BF16})
    for (bool channels_last : {true, false})
      for (const char* act : {"Relu", ""})
        for (bool residual : {false, true}) {
          if (!*act && !residual) continue;  // nothing to fuse for the bias-free twin: a plain conv
          SCOPED_TRACE(std::string(precision_name(p)) + (channels_last ? " NHWC " : " NCHW ") + act +
                       (residual ? " + residual" : ""));
          auto g = twin_convs({4, 32, 14, 14}, {32, 32, 3, 3}, 1, act, residual);
          cuda::CudaOptions o;
          o.precision = p;
          o.channels_last = channels_last;
          auto exe = cuda::CudaBackend(o).compile_cuda(*g);
          const auto n = kernels_per_step(*exe, twin_inputs(*g));
          ASSERT_TRUE(n.count("biased") && n.count("bias_free"));
          EXPECT_EQ(n.at("bias_free"), n.at("biased"));
          const std::string kb = kernel_of(*exe, "biased"), kf = kernel_of(*exe, "bias_free");
          EXPECT_EQ(kb.find("fused") != std::string::npos, kf.find("fused") != std::string::npos) << kb << " | " << kf;
          if (kb.find("fused") != std::string::npos) EXPECT_EQ(kf.find("epilogue"), std::string::npos) << kf;
        }
}

TEST(GpuFusedConv, ActivationTheFusedCallCannotTakeRunsAsAPassAfterIt) {
  FUSEC_REQUIRE_GPU();
  // cuDNN's fused call takes the bias and the residual with an identity activation; SiLU,
  // HardSwish and GELU then run as an activation-only pass: one kernel more than the same conv
  // without the activation launches, as the unfused Conv and its activation node would, never
  // cuDNN's plain forward call plus the whole epilogue. Untimed precisions, both layouts, a 3x3
  // conv (no route of fusec's own for it at these precisions). Where cuDNN takes the identity
  // fused call for the no-activation twin, it must take it here too.
  ScopedEnv no_pointwise("FUSEC_CONV_GEMM", "0");
  for (Precision p : {Precision::TF32, Precision::FP16, Precision::BF16})
    for (bool channels_last : {true, false})
      for (bool residual : {false, true})
        for (const char* act : {"SiLU", "HardSwish", "Gelu"}) {
          SCOPED_TRACE(std::string(precision_name(p)) + (channels_last ? " NHWC " : " NCHW ") + act +
                       (residual ? " + residual" : ""));
          cuda::CudaOptions o;
          o.precision = p;
          o.channels_last = channels_last;
          auto plain = twin_convs({4, 32, 14, 14}, {32, 32, 3, 3}, 1, "", residual);
          auto plain_exe = cuda::CudaBackend(o).compile_cuda(*plain);
          const bool identity_fused = kernel_of(*plain_exe, "biased").find("fused") != std::string::npos;
          auto g = twin_convs({4, 32, 14, 14}, {32, 32, 3, 3}, 1, act, residual);
          const auto in = twin_inputs(*g);
          auto exe = cuda::CudaBackend(o).compile_cuda(*g);
          expect_outputs(exe->run(in), cpu::CpuBackend().compile(*g)->run(in), p, "fused call + activation pass");
          if (!identity_fused) continue;
          for (const char* node : {"biased", "bias_free"})
            EXPECT_NE(kernel_of(*exe, node).find(std::string(" + ") + act + " pass"), std::string::npos)
                << kernel_of(*exe, node);
          const auto n = kernels_per_step(*exe, in);
          if (n.empty() && env_switch("FUSEC_UNDER_SANITIZER")) continue;
          const auto n_plain = kernels_per_step(*plain_exe, twin_inputs(*plain));
          ASSERT_TRUE(n.count("biased") && n_plain.count("biased"));
          EXPECT_EQ(n.at("biased"), n_plain.at("biased") + 1);
        }
}
