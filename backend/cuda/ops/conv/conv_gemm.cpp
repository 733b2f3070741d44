// The 1x1 conv's GEMM route of the conv op (conv_gemm.h): cuBLASLt descriptors, candidates, launch.
#include "backend/cuda/ops/conv/conv_gemm.h"

#include <algorithm>
#include <cstdlib>
#include <numeric>

#include "backend/cuda/core/check.h"
#include "backend/cuda/core/cublaslt_util.h"
#include "ir/switches.h"

namespace fusec::cuda {

namespace {
constexpr int kCandidates = 8;
constexpr size_t kMaxPlane = 64u << 20;  // past this the bias goes into the epilogue pass
}  // namespace

Conv1x1Gemm::~Conv1x1Gemm() {
  for (auto l : {la_, lb_, lc_, ld_})
    if (l) cublasLtMatrixLayoutDestroy(l);
  if (desc_) cublasLtMatmulDescDestroy(desc_);
}

bool Conv1x1Gemm::plan(Context& ctx, const Problem& p, const Tensor* bias, std::string* why) {
  p_ = p;
  if (p.batch < 1 || p.cin < 1 || p.cout < 1 || p.hw < 1 || p.batch > INT32_MAX) {
    *why = "empty or oversized 1x1 conv";
    return false;
  }
  handle_ = ctx.cublaslt();
  // C: the residual, else the bias plane (when it is a constant of sensible size), else nothing.
  const bool plane = !p.residual && p.bias && bias && static_cast<size_t>(p.cout * p.hw) * sizeof(float) <= kMaxPlane;
  bias_in_pass_ = p.bias && !plane;
  const bool relu_in_gemm = p.act.act == Act::Relu && !bias_in_pass_;
  pass_act_ = relu_in_gemm ? ActParams{} : p.act;

  LT_CHECK(cublasLtMatmulDescCreate(&desc_, p.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasLtEpilogue_t epi = relu_in_gemm ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT;
  LT_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  LT_CHECK(cublasLtMatrixLayoutCreate(&la_, CUDA_R_32F, p.hw, p.cin, p.hw));
  LT_CHECK(cublasLtMatrixLayoutCreate(&lb_, CUDA_R_32F, p.cin, p.cout, p.cin));
  LT_CHECK(cublasLtMatrixLayoutCreate(&lc_, CUDA_R_32F, p.hw, p.cout, p.hw));
  LT_CHECK(cublasLtMatrixLayoutCreate(&ld_, CUDA_R_32F, p.hw, p.cout, p.hw));
  const int32_t n = static_cast<int32_t>(p.batch);
  const int64_t sx = p.cin * p.hw, sy = p.cout * p.hw, sw = 0,
                sc = plane ? 0 : sy;  // without the plane C is Z, or Y itself (beta 0)
  for (auto [l, stride] : {std::pair{la_, sx}, {lb_, sw}, {lc_, sc}, {ld_, sy}}) {
    LT_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &n, sizeof n));
    LT_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
  }
  if (plane) {
    std::vector<float> host(static_cast<size_t>(p.cout * p.hw));
    for (int64_t c = 0; c < p.cout; ++c)
      std::fill_n(host.begin() + c * p.hw, p.hw, static_cast<float>(bias->as_double(c)));
    plane_ = DeviceBuffer(host.size() * sizeof(float), "the bias plane of a 1x1 conv");
    FUSEC_CUDA_CHECK(cudaMemcpy(plane_.get(), host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
  }
  // Base addresses are 256-byte aligned; leading dims and image strides may not be.
  uint64_t align = 256;
  for (int64_t elems : {p.hw, p.cin, sx, sy})
    align = std::gcd<uint64_t>(align, static_cast<uint64_t>(elems) * sizeof(float));
  const uint32_t a32 = static_cast<uint32_t>(align);
  algos_ = lt_heuristic(handle_, desc_, la_, lb_, lc_, ld_, kLtWorkspace, a32, kCandidates);
  if (algos_.empty()) {
    *why = "cuBLASLt has no algorithm for this 1x1 conv";
    return false;
  }
  return true;
}

std::string Conv1x1Gemm::identity(int i) const { return lt_algo_identity(algos_.at(i).algo); }

std::string Conv1x1Gemm::describe() const {
  std::string s = p_.residual ? " + residual as C" : plane_.get() ? " + bias plane as C" : "";
  if (pass_act_.act == Act::None && !bias_in_pass_)
    s += p_.act.act == Act::Relu ? ", ReLU epilogue" : "";
  else
    s += " + epilogue";
  return s;
}

cublasStatus_t Conv1x1Gemm::run_gemm(int i, const void* x, const void* w, const void* b, const void* z, void* y,
                                     void* ws, cudaStream_t stream) const {
  const auto& a = algos_.at(i);
  const float one = 1.0f, zero = 0.0f;
  const void* c = p_.residual ? z : plane_.get() ? plane_.get() : y;
  const float* beta = p_.residual || plane_.get() ? &one : &zero;
  const cublasStatus_t st =
      cublasLtMatmul(handle_, desc_, &one, x, la_, w, lb_, beta, c, lc_, y, ld_, &a.algo, ws, a.workspaceSize, stream);
  if (st != CUBLAS_STATUS_SUCCESS || (!bias_in_pass_ && pass_act_.act == Act::None)) return st;
  if (!launch_epilogue(y, nullptr, DType::Float32, p_.batch * p_.cout * p_.hw, pass_act_, stream,
                       bias_in_pass_ ? b : nullptr, p_.cout, p_.hw))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  return st;
}

bool Conv1x1Gemm::run(int i, const void* x, const void* w, const void* b, const void* z, void* y, void* ws,
                      cudaStream_t stream) const {
  return run_gemm(i, x, w, b, z, y, ws, stream) == CUBLAS_STATUS_SUCCESS;
}

void Conv1x1Gemm::launch(int i, const void* x, const void* w, const void* b, const void* z, void* y, void* ws,
                         cudaStream_t stream) const {
  const cublasStatus_t st = run_gemm(i, x, w, b, z, y, ws, stream);
  if (st != CUBLAS_STATUS_SUCCESS)
    throw_cublas_error(st, "1x1 conv GEMM", __FILE__, __LINE__);
}

std::string Conv1x1Gemm::kernel_name(int i) const {
  return std::string("cuBLASLt GEMM ") + (p_.tf32 ? "tf32" : "fp32") + " NCHW (1x1 conv)" + describe();
}

/// A 1x1, stride-1, unpadded, ungrouped conv can also run as one cuBLASLt GEMM over NCHW
/// memory; the tuner times that route beside cuDNN's algorithms.
/// FUSEC_CONV_GEMM=0 leaves it out, =force takes it untimed wherever it applies.
std::unique_ptr<ConvRoute> plan_conv_gemm_route(const PlanContext& c, const WindowGeometry& g, int group,
                                                const ConvEpilogue& ep) {
  const char* e = env_switch("FUSEC_CONV_GEMM");
  if ((e && std::string(e) == "0") || group != 1) return nullptr;
  for (size_t i = 0; i < g.kernel.size(); ++i)
    if (g.kernel[i] != 1 || g.stride[i] != 1 || g.pad_begin[i] != 0 || g.pad_end[i] != 0) return nullptr;
  const auto& xd = c.in_dims(0);
  Conv1x1Gemm::Problem p;
  p.batch = xd[0];
  p.cin = xd[1];
  p.cout = ep.channels;
  p.hw = numel(xd) / std::max<int64_t>(1, xd[0] * xd[1]);
  p.tf32 = c.allow_tf32();
  p.bias = ep.has_bias;
  p.residual = ep.has_z;
  p.act = ep.act;
  auto route = std::make_unique<Conv1x1Gemm>();
  std::string why;
  if (route->plan(c.ctx(), p, ep.has_bias ? c.constant(2) : nullptr, &why)) return route;
  return nullptr;
}

int conv_gemm_forced_candidate() {
  const char* e = env_switch("FUSEC_CONV_GEMM");
  if (!e) return -1;
  const std::string v(e);
  if (v == "force") return 0;
  if (v.rfind("force:", 0) != 0) return -1;
  char* end = nullptr;
  const long n = std::strtol(v.c_str() + 6, &end, 10);
  return end && *end == '\0' && n >= 1 && n <= 1024 ? static_cast<int>(n - 1) : -1;
}

bool conv_gemm_forced() { return conv_gemm_forced_candidate() >= 0; }

}  // namespace fusec::cuda
