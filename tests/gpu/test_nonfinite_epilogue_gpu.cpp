// A NaN that reaches a fused activation comes out as NaN, as the standalone ONNX op gives it
// (backend/formulas.h: ReLU's max and HardSigmoid's saturation keep NaN), on the routes a FusedConv
// or FusedMatMul can take: cuDNN's calls and the epilogue pass after them, fusec's implicit-GEMM,
// depthwise and 1x1 kernels, cuBLASLt's epilogues and fusec's GEMMs. Each route is pinned by its
// switch; the CPU reference is the oracle. The one exception allowed: cuDNN's fused
// conv+bias+ReLU call maps NaN to 0 (docs/ops.md). Not pinned: cuDNN's plain conv followed by the pass
// (FUSEC_CONV_FUSED=0), whose Winograd and FFT algorithms spread a NaN to outputs outside its
// window (more NaNs, never fewer: a property of those algorithms, not of the epilogue).
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

const char* const kActs[] = {"Relu", "LeakyRelu", "Clip", "HardSigmoid", "HardSwish"};

std::vector<NamedAttribute> act_attrs(const std::string& act) {
  std::vector<NamedAttribute> a = {attr("activation", act)};
  if (act == "Clip") a.push_back(attr("activation_params", std::vector<float>{-0.5f, 0.5f}));
  if (act == "LeakyRelu") a.push_back(attr("activation_params", std::vector<float>{0.1f}));
  if (act == "HardSigmoid") a.push_back(attr("activation_params", std::vector<float>{0.2f, 0.5f}));
  return a;
}

/// A NaN in every `stride`-th element from `first`.
Tensor with_nans(Tensor t, int64_t first, int64_t stride) {
  for (int64_t i = first; i < t.numel(); i += stride) t.data<float>()[i] = std::numeric_limits<float>::quiet_NaN();
  return t;
}

OpCase fused_conv(std::vector<int64_t> x, std::vector<int64_t> w, int64_t group, const std::string& act) {
  OpCase c;
  c.op = "FusedConv";
  c.domain = "ai.fusec";
  c.inputs = {with_nans(random_tensor(DType::Float32, x, 41), 37, 997), random_tensor(DType::Float32, w, 42, -0.3, 0.3),
              random_tensor(DType::Float32, {w[0]}, 43)};
  c.constant = {1, 2};
  c.attrs = act_attrs(act);
  const int64_t p = w[2] / 2;
  c.attrs.push_back(attr("pads", std::vector<int64_t>{p, p, p, p}));
  if (group > 1) c.attrs.push_back(attr("group", group));
  return c;
}

/// Runs the case on the CPU reference and on CUDA at `p`. Every element the reference has as NaN
/// must be NaN, except where the node ran as cuDNN's fused conv+bias+ReLU call, whose ReLU maps
/// NaN to 0 (the one route fusec does not write; docs/ops.md says so): there it may be NaN or 0.
/// Every other element matches within the precision's tolerance.
void expect_nan_kept(const OpCase& c, Precision p) {
  std::vector<Tensor> feeds;
  auto g = build_case(c, &feeds);
  infer_shapes(*g);
  const Tensor want = cpu::CpuBackend().compile(*g)->run(feeds)[0];
  cuda::CudaOptions o;
  o.precision = p;
  o.context = shared_context();
  auto exe = cuda::CudaBackend(o).compile_cuda(*g);
  std::string kernel;
  for (const auto& pl : exe->placement())
    if (pl.node == "node_under_test") kernel = pl.kernel;
  SCOPED_TRACE(kernel);
  const bool cudnn_relu = kernel.find("cuDNN") != std::string::npos && kernel.find("+act fused") != std::string::npos;
  Tensor got = exe->run(feeds)[0];
  ASSERT_EQ(got.numel(), want.numel());
  ASSERT_EQ(got.dtype(), DType::Float32);
  int64_t nans = 0;
  for (int64_t i = 0; i < want.numel(); ++i)
    if (std::isnan(want.as_double(i))) {
      ++nans;
      const double v = got.as_double(i);
      if (!(cudnn_relu && v == 0))
        EXPECT_TRUE(std::isnan(v)) << "element " << i << " is " << v << " where the reference has NaN";
      // compare() checks the rest; the NaNs are checked here.
      got.data<float>()[i] = want.data<float>()[i];
    }
  EXPECT_GT(nans, 0) << "no NaN reached the output: the case tests nothing";
  compare(got, want, default_tolerance(p), c.op + " at " + precision_name(p));
}

struct Route {
  const char* what;
  const char* env;  // switch, or nullptr for the tuner's own choice
  const char* value;
};

}  // namespace

TEST(GpuNonFiniteEpilogue, FusedConvKeepsNaNOnEveryRoute) {
  FUSEC_REQUIRE_GPU();
  const Route routes[] = {{"tuned", nullptr, nullptr},
                          {"implicit-GEMM", "FUSEC_CONV_IGEMM", "1"},
                          {"1x1 GEMM route", "FUSEC_CONV_GEMM", "force"}};
  for (const Route& r : routes)
    for (const char* act : kActs)
      for (Precision p : {Precision::FP32, Precision::FP16}) {
        SCOPED_TRACE(std::string(r.what) + " " + act + " " + precision_name(p));
        std::unique_ptr<ScopedEnv> pin;
        if (r.env) pin = std::make_unique<ScopedEnv>(r.env, r.value);
        expect_nan_kept(fused_conv({2, 16, 11, 9}, {24, 16, 3, 3}, 1, act), p);
        expect_nan_kept(fused_conv({2, 24, 7, 9}, {40, 24, 1, 1}, 1, act), p);
      }
}

TEST(GpuNonFiniteEpilogue, DepthwiseConvKeepsNaNOnEveryKernel) {
  FUSEC_REQUIRE_GPU();
  // 0: the tuner's choice; 1, 2, ...: the depthwise kernels in turn (conv_depthwise_forced).
  for (const char* pin : {"", "1", "2", "3"})
    for (const char* act : kActs)
      for (Precision p : {Precision::FP32, Precision::FP16}) {
        SCOPED_TRACE(std::string("depthwise ") + (*pin ? pin : "tuned") + " " + act + " " + precision_name(p));
        std::unique_ptr<ScopedEnv> e;
        if (*pin) e = std::make_unique<ScopedEnv>("FUSEC_CONV_DEPTHWISE", pin);
        expect_nan_kept(fused_conv({2, 32, 15, 13}, {32, 1, 3, 3}, 32, act), p);
      }
}

TEST(GpuNonFiniteEpilogue, FusedMatMulKeepsNaNOnEveryRoute) {
  FUSEC_REQUIRE_GPU();
  const Route routes[] = {{"tuned", nullptr, nullptr},
                          {"cuBLASLt (fp32)", "FUSEC_SGEMM", "0"},
                          {"fusec sgemm", "FUSEC_SGEMM", "force"},
                          {"cuBLASLt (fp16)", "FUSEC_HGEMM", "0"},
                          {"fusec hgemm", "FUSEC_HGEMM", "force"}};
  for (const Route& r : routes)
    for (const char* act : kActs)
      for (Precision p : {Precision::FP32, Precision::FP16}) {
        SCOPED_TRACE(std::string(r.what) + " " + act + " " + precision_name(p));
        std::unique_ptr<ScopedEnv> pin;
        if (r.env) pin = std::make_unique<ScopedEnv>(r.env, r.value);
        for (int64_t m : {int64_t{34}, int64_t{256}}) {
          OpCase c;
          c.op = "FusedMatMul";
          c.domain = "ai.fusec";
          c.inputs = {with_nans(random_tensor(DType::Float32, {m, 64}, 51, -0.25, 0.25), 5, 611),
                      random_tensor(DType::Float32, {64, 48}, 52),
                      random_tensor(DType::Float32, {48}, 53, -0.25, 0.25)};
          c.constant = {1, 2};
          c.attrs = act_attrs(act);
          expect_nan_kept(c, p);
        }
      }
}
