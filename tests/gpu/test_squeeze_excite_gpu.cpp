// ai.fusec SqueezeExcite on CUDA (backend/cuda/ops/pool/squeeze_excite.cuh) against the CPU
// reference: channels-last inside a conv region and NCHW, at every precision, at odd sizes, with
// squeezed widths on both sides of the thread-per-gate limit, maps from 1x1 to 57x61, and no
// biases. The squeeze kernel keeps sums and tickets between launches, so every case runs several
// times on new data (eagerly and replaying its CUDA graph) and must match each time.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "gpu_test_util.h"
#include "passes/infer_shapes.h"

using namespace fusec;
using namespace fusec::test;

namespace {

struct Shape4 {
  int64_t n, c, cr, h, w;
  const char* act;
  const char* gate;
  bool biases;
  const char* body = "Relu";  // the activation of the conv in front of the block
};

Value* weight(GraphBuilder& b, const std::string& name, std::vector<int64_t> d, uint64_t seed, double scale = 0.3) {
  return b.initializer(name, random_tensor(DType::Float32, std::move(d), seed, -scale, scale));
}

/// x -> FusedConv 3x3 (ReLU) -> SqueezeExcite -> FusedConv 1x1: the block as an optimized CNN holds
/// it, so that at tf32, fp16 and bf16 it runs inside a channels-last region.
std::unique_ptr<Graph> block(const Shape4& s) {
  GraphBuilder b(18);
  b.graph().opsets["ai.fusec"] = 1;
  Value* x = b.input("x", DType::Float32, {Dim(s.n), Dim(s.c), Dim(s.h), Dim(s.w)});
  Value* a = b.node_n("FusedConv", {x, weight(b, "body.w", {s.c, s.c, 3, 3}, 1, 0.1), weight(b, "body.b", {s.c}, 2)}, 1,
                      {attr("activation", std::string(s.body)), attr("pads", std::vector<int64_t>{1, 1, 1, 1})}, "body",
                      "ai.fusec")[0];
  std::vector<Value*> ins = {a, weight(b, "fc1.w", {s.cr, s.c, 1, 1}, 3), weight(b, "fc2.w", {s.c, s.cr, 1, 1}, 4)};
  if (s.biases) {
    ins.push_back(weight(b, "fc1.b", {s.cr}, 5));
    ins.push_back(weight(b, "fc2.b", {s.c}, 6));
  }
  std::vector<NamedAttribute> attrs = {attr("activation", std::string(s.act)), attr("gate", std::string(s.gate))};
  if (std::string(s.gate) == "HardSigmoid") attrs.push_back(attr("gate_params", std::vector<float>{1.0f / 6, 0.5f}));
  Value* e = b.node_n("SqueezeExcite", ins, 1, attrs, "se", "ai.fusec")[0];
  b.output(b.node_n("FusedConv", {e, weight(b, "project.w", {8, s.c, 1, 1}, 7), weight(b, "project.b", {8}, 8)}, 1, {},
                    "project", "ai.fusec")[0]);
  auto g = b.build();
  infer_shapes(*g);
  return g;
}

/// Compiles once, then runs three input sets (the first again last), each against the CPU.
void expect_runs_match(const Graph& g, const std::vector<int64_t>& x_dims, Precision p, const std::string& layout) {
  cuda::CudaOptions o;
  o.precision = p;
  auto exe = cuda::CudaBackend(o).compile_cuda(g);
  const std::string k = kernel_of(*exe, "se");
  EXPECT_NE(k.find("squeeze-excite"), std::string::npos) << "ran as: " << k;
  if (!layout.empty()) EXPECT_NE(k.find(layout), std::string::npos) << "ran as: " << k;
  for (uint64_t seed : {11u, 12u, 11u, 12u}) {
    std::vector<Tensor> in = {random_tensor(DType::Float32, x_dims, seed)};
    auto want = cpu::CpuBackend().compile(g)->run(in);
    auto got = exe->run(in);
    ASSERT_EQ(got.size(), 1u);
    compare(got[0], want[0], default_tolerance(p),
            std::string("seed ") + std::to_string(seed) + " at " + precision_name(p));
  }
}

}  // namespace

TEST(GpuSqueezeExcite, BlocksInAConvRegionMatchTheReference) {
  FUSEC_REQUIRE_GPU();
  const Shape4 shapes[] = {
      {3, 40, 10, 13, 11, "Relu", "HardSigmoid", true},  // MobileNetV3's pair, odd map
      {2, 96, 4, 57, 61, "SiLU", "Sigmoid", true},       // EfficientNet's early block: many squeeze blocks
      {5, 1152, 48, 7, 7, "SiLU", "Sigmoid", true},      // EfficientNet's last
      {1, 72, 80, 3, 3, "Relu", "Sigmoid", false},       // more squeezed channels than the thread-per-gate limit
      {4, 24, 6, 1, 1, "", "Sigmoid", true},             // a 1x1 map, no activation
      {2, 20, 5, 9, 5, "Relu", "Sigmoid", true},         // channels not a whole vector
  };
  for (const Shape4& s : shapes) {
    auto g = block(s);
    for (Precision p : {Precision::FP32, Precision::TF32, Precision::FP16, Precision::BF16}) {
      SCOPED_TRACE("N" + std::to_string(s.n) + " C" + std::to_string(s.c) + " Cr" + std::to_string(s.cr) + " " +
                   std::to_string(s.h) + "x" + std::to_string(s.w) + " " + precision_name(p));
      // fp16 and bf16 keep C = 40, 96, 1152, 72 and 24 channels-last (whole 16-byte groups).
      const bool nhwc = (p == Precision::FP16 || p == Precision::BF16) && s.c % 8 == 0 && s.h * s.w > 1;
      expect_runs_match(*g, {s.n, s.c, s.h, s.w}, p, nhwc ? "NHWC" : p == Precision::FP32 ? "NCHW" : "");
    }
  }
}

// Straight on a graph input (NCHW at every precision), and over a 1-D map [N, C, L].
TEST(GpuSqueezeExcite, NchwAndOneDimensionalMapsMatchTheReference) {
  FUSEC_REQUIRE_GPU();
  struct Case {
    std::vector<int64_t> x;
    int64_t cr;
  };
  for (const Case& c : {Case{{3, 32, 10, 16}, 8}, Case{{2, 24, 50}, 6}, Case{{2, 17, 7, 9}, 70}}) {
    std::vector<int64_t> w1 = {c.cr, c.x[1]}, w2 = {c.x[1], c.cr};
    for (size_t d = 2; d < c.x.size(); ++d) w1.push_back(1), w2.push_back(1);
    OpCase k;
    k.op = "SqueezeExcite";
    k.domain = "ai.fusec";
    k.inputs = {random_tensor(DType::Float32, c.x, 21), random_tensor(DType::Float32, w1, 22, -0.3, 0.3),
                random_tensor(DType::Float32, w2, 23, -0.3, 0.3), random_tensor(DType::Float32, {c.cr}, 24),
                random_tensor(DType::Float32, {c.x[1]}, 25)};
    k.constant = {1, 2, 3, 4};
    k.attrs = {attr("activation", std::string("HardSwish")), attr("gate", std::string("Sigmoid"))};
    for (Precision p : {Precision::FP32, Precision::FP16, Precision::BF16}) {
      SCOPED_TRACE(dims_str(c.x) + " " + precision_name(p));
      expect_gpu_matches_cpu(k, p, -1, true, "squeeze-excite");
    }
  }
}

// Non-finite values reach the gates of their own image only. The conv in front has no activation
// (cuDNN's fused ReLU call maps NaN to 0), and SiLU carries them into the gates. The later images
// are checked by what the block must give: every output non-finite.
TEST(GpuSqueezeExcite, NonFiniteValuesStayInTheirImage) {
  FUSEC_REQUIRE_GPU();
  const Shape4 s = {3, 16, 4, 6, 5, "SiLU", "Sigmoid", true, ""};
  auto g = block(s);
  Tensor x = random_tensor(DType::Float32, {s.n, s.c, s.h, s.w}, 31);
  x.data<float>()[1 * s.c * s.h * s.w + 7] = std::numeric_limits<float>::infinity();
  x.data<float>()[2 * s.c * s.h * s.w + 3] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<Tensor> want = cpu::CpuBackend().compile(*g)->run({x});
  for (Precision p : {Precision::FP32, Precision::FP16}) {
    cuda::CudaOptions o;
    o.precision = p;
    auto exe = cuda::CudaBackend(o).compile_cuda(*g);
    for (int run = 0; run < 2; ++run) {
      auto got = exe->run({x});
      const int64_t per = 8 * s.h * s.w;
      const float* gp = got[0].data<float>();
      const float* wp = want[0].data<float>();
      // Image 0 is finite, and matches the reference.
      Tensor g0(DType::Float32, {1, 8, s.h, s.w}), w0(DType::Float32, {1, 8, s.h, s.w});
      std::copy(gp, gp + per, g0.data<float>());
      std::copy(wp, wp + per, w0.data<float>());
      for (int64_t i = 0; i < per; ++i) ASSERT_TRUE(std::isfinite(gp[i])) << precision_name(p) << " value " << i;
      compare(g0, w0, default_tolerance(p),
              std::string("image 0 at ") + precision_name(p) + " run " + std::to_string(run));
      // An infinite or NaN input makes its image's mean non-finite, SiLU carries that into every
      // hidden unit and so every gate: each output of images 1 and 2 is non-finite.
      for (int64_t img : {1, 2}) {
        int64_t bad = 0;
        for (int64_t i = img * per; i < (img + 1) * per; ++i) bad += !std::isfinite(gp[i]);
        EXPECT_EQ(bad, per) << precision_name(p) << " image " << img << " run " << run;
      }
    }
  }
}
