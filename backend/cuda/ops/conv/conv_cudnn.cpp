// The cuDNN route of the conv op (conv_cudnn.h says what it does; conv_op.cpp decides when).
#include "backend/cuda/ops/conv/conv_cudnn.h"

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <cstdio>

#include "backend/cuda/core/check.h"
#include "backend/cuda/core/constant_upload.h"
#include "backend/cuda/core/dnn_check.h"
#include "backend/cuda/core/tuning_cache.h"

namespace fusec::cuda {

namespace {

std::vector<int> packed_strides(const std::vector<int>& dims) {
  std::vector<int> s(dims.size(), 1);
  for (size_t i = dims.size() - 1; i-- > 0;) s[i] = s[i + 1] * dims[i + 1];
  return s;
}

/// Strides of N, C, spatial... dims stored channels-last (N, spatial..., C).
std::vector<int> nhwc_strides(const std::vector<int>& d) {
  std::vector<int> s(d.size(), 1);
  int inner = d[1];
  for (size_t i = d.size(); i-- > 2;) {
    s[i] = inner;
    inner *= d[i];
  }
  s[0] = inner;
  return s;
}

/// NC + spatial dims as cuDNN wants them: at least 4-D (a 1-D conv gains H = 1).
std::vector<int> as_dnn_dims(const std::vector<int64_t>& d) {
  std::vector<int> out(d.begin(), d.end());
  if (out.size() == 3) out.insert(out.begin() + 2, 1);
  return out;
}

}  // namespace

CudnnConv::~CudnnConv() {
  if (x_) cudnnDestroyTensorDescriptor(x_);
  if (y_) cudnnDestroyTensorDescriptor(y_);
  if (w_) cudnnDestroyFilterDescriptor(w_);
  if (conv_) cudnnDestroyConvolutionDescriptor(conv_);
  if (bias_) cudnnDestroyTensorDescriptor(bias_);
  if (act_desc_) cudnnDestroyActivationDescriptor(act_desc_);
}

bool CudnnConv::data_type(DType t, cudnnDataType_t* out) {
  switch (t) {
    case DType::Float32:
      *out = CUDNN_DATA_FLOAT;
      return true;
    case DType::Float16:
      *out = CUDNN_DATA_HALF;
      return true;
    case DType::BFloat16:
      *out = CUDNN_DATA_BFLOAT16;
      return true;
    case DType::Float64:
      *out = CUDNN_DATA_DOUBLE;
      return true;
    default:
      return false;
  }
}

void CudnnConv::set_tensors(const PlanContext& c, cudnnDataType_t t, bool transpose, bool nhwc) {
  transpose_ = transpose;
  nhwc_ = nhwc;
  const auto& xd = c.in_dims(0);
  const auto& wd = c.in_dims(1);
  handle_ = c.ctx().cudnn();
  DNN_CHECK(cudnnCreateTensorDescriptor(&x_));
  DNN_CHECK(cudnnCreateTensorDescriptor(&y_));
  DNN_CHECK(cudnnCreateFilterDescriptor(&w_));
  DNN_CHECK(cudnnCreateConvolutionDescriptor(&conv_));
  // For ConvTranspose the forward conv runs from our output (cuDNN's dx) to our input (dy).
  std::vector<int> xdims = as_dnn_dims(transpose ? c.out_dims(0) : xd);
  std::vector<int> ydims = as_dnn_dims(transpose ? xd : c.out_dims(0));
  std::vector<int> wdims = as_dnn_dims(wd);
  rank_ = static_cast<int>(ydims.size());
  DNN_CHECK(cudnnSetTensorNdDescriptor(x_, t, static_cast<int>(xdims.size()), xdims.data(),
                                       (nhwc ? nhwc_strides(xdims) : packed_strides(xdims)).data()));
  DNN_CHECK(cudnnSetTensorNdDescriptor(y_, t, static_cast<int>(ydims.size()), ydims.data(),
                                       (nhwc ? nhwc_strides(ydims) : packed_strides(ydims)).data()));
  DNN_CHECK(cudnnSetFilterNdDescriptor(w_, t, nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                                       static_cast<int>(wdims.size()), wdims.data()));
}

void CudnnConv::own_weights(const PlanContext& c) {
  // The op's own KRSC copy of the weights (the shared weight buffer's KCRS copy is then not
  // uploaded: reads_input(1) is false).
  const Tensor& w = *c.constant(1);
  own_weights_ = DeviceBuffer(static_cast<size_t>(w.numel()) * dtype_size(ep_.dt), "channels-last conv weights");
  ConstantUploader up(c.ctx().stream());
  up.upload(w, own_weights_.get(), ep_.dt, /*krsc=*/true);
  up.finish();
}

void CudnnConv::set_convolution(const std::vector<int>& pads, const std::vector<int>& strides,
                                const std::vector<int>& dil, int group, bool strict) {
  strict_ = strict;
  cudnnDataType_t compute = ep_.dt == DType::Float64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  DNN_CHECK(cudnnSetConvolutionNdDescriptor(conv_, static_cast<int>(pads.size()), pads.data(), strides.data(),
                                            dil.data(), CUDNN_CROSS_CORRELATION, compute));
  DNN_CHECK(cudnnSetConvolutionGroupCount(conv_, group));
  // Strict fp32 must not use TF32 tensor cores (cuDNN's default math allows them on sm_80+).
  DNN_CHECK(cudnnSetConvolutionMathType(conv_, strict ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH));
}

bool CudnnConv::heuristics(bool strict, std::vector<FwdChoice>* candidates) {
  int count = 0;
  if (!transpose_) {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    DNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(handle_, x_, w_, conv_, y_, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                     &count, perf));
    for (int i = 0; i < count; ++i) {
      if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].memory > kMaxConvWorkspace) continue;
      if (strict && perf[i].mathType == CUDNN_TENSOR_OP_MATH) continue;
      // CUDNN_DEFAULT_MATH permits TF32 on sm_80+: strict fp32 asks for FMA kernels only.
      const cudnnMathType_t math = strict ? CUDNN_FMA_MATH : perf[i].mathType;
      bool seen = false;
      for (const auto& ch : *candidates) seen = seen || (ch.algo == perf[i].algo && ch.math == math);
      if (seen || perf[i].determinism != CUDNN_DETERMINISTIC) continue;  // a replay must equal the run before it
      candidates->push_back({perf[i].algo, math, false, perf[i].memory});
    }
    if (!candidates->empty()) {
      fwd_algo_ = (*candidates)[0].algo;
      math_ = (*candidates)[0].math;
      workspace_ = (*candidates)[0].ws;
      found_ = true;
    }
  } else {
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    DNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(handle_, w_, y_, conv_, x_,
                                                          CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count, perf));
    for (int i = 0; i < count; ++i) {
      if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].memory > kMaxConvWorkspace) continue;
      if (strict && perf[i].mathType == CUDNN_TENSOR_OP_MATH) continue;
      bwd_algo_ = perf[i].algo;
      math_ = strict ? CUDNN_FMA_MATH : perf[i].mathType;
      workspace_ = perf[i].memory;
      found_ = true;
      break;
    }
  }
  return found_;
}

size_t CudnnConv::candidate_workspaces(std::vector<FwdChoice>* cands) {
  size_t ws = 0;
  for (auto& ch : *cands) {
    if (cudnnSetConvolutionMathType(conv_, ch.math) != CUDNN_STATUS_SUCCESS ||
        cudnnGetConvolutionForwardWorkspaceSize(handle_, x_, w_, conv_, y_, ch.algo, &ch.ws) != CUDNN_STATUS_SUCCESS)
      ch.ws = kMaxConvWorkspace + 1;
    if (ch.ws <= kMaxConvWorkspace) ws = std::max(ws, ch.ws);
  }
  return ws;
}

bool CudnnConv::apply(const FwdChoice& ch) {
  if (cudnnSetConvolutionMathType(conv_, ch.math) != CUDNN_STATUS_SUCCESS) return false;
  size_t ws = 0;
  if (cudnnGetConvolutionForwardWorkspaceSize(handle_, x_, w_, conv_, y_, ch.algo, &ws) != CUDNN_STATUS_SUCCESS ||
      ws > kMaxConvWorkspace)
    return false;
  fwd_algo_ = ch.algo;
  math_ = ch.math;
  fused_ = ch.fused;
  fused_algo_ = ch.algo;
  workspace_ = ws;
  return true;
}

void CudnnConv::restore(const FwdChoice& ch) {
  fwd_algo_ = ch.algo;
  math_ = ch.math;
  workspace_ = ch.ws;
  fused_ = false;
}

void CudnnConv::exact_workspace() {
  DNN_CHECK(cudnnSetConvolutionMathType(conv_, math_));
  // The workspace the heuristics report can be an estimate; ask for the exact size.
  size_t exact = 0;
  if (!transpose_)
    DNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(handle_, x_, w_, conv_, y_, fwd_algo_, &exact));
  else
    DNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(handle_, w_, y_, conv_, x_, bwd_algo_, &exact));
  workspace_ = std::max(workspace_, exact);
}

/// The key remembers the heuristics' untimed choice too, so that a warm build skips cuDNN's
/// heuristics query, a cost paid per conv.
std::string CudnnConv::choice_key(const PlanContext& c, const char* what, bool fma, bool may_fuse) const {
  std::string key = "cudnn " + std::to_string(cudnnGetVersion()) + "|" + tuning_device_key(c.ctx().device()) +
                    "|conv " + what + " " + dtype_name(ep_.dt) + (fma ? " fma" : "") + (nhwc_ ? " nhwc" : " nchw") +
                    " x" + dims_str(c.in_dims(0)) + " w" + dims_str(c.in_dims(1)) + " y" + dims_str(c.out_dims(0));
  // cuDNN answers NOT_SUPPORTED when asked for more than CUDNN_DIM_MAX - 2 spatial dims.
  constexpr int kSpatialMax = CUDNN_DIM_MAX - 2;
  int pads[kSpatialMax], strides[kSpatialMax], dil[kSpatialMax], nd = 0;
  cudnnConvolutionMode_t mode;
  cudnnDataType_t ct;
  if (cudnnGetConvolutionNdDescriptor(conv_, kSpatialMax, &nd, pads, strides, dil, &mode, &ct) != CUDNN_STATUS_SUCCESS)
    return "";
  for (int i = 0; i < nd; ++i)
    key += " p" + std::to_string(pads[i]) + "s" + std::to_string(strides[i]) + "d" + std::to_string(dil[i]);
  int groups = 1;
  cudnnGetConvolutionGroupCount(conv_, &groups);
  key += " g" + std::to_string(groups) + (ep_.has_bias ? " bias" : "") + (ep_.has_z ? " residual" : "") + " act" +
         std::to_string(static_cast<int>(ep_.act.act)) + (may_fuse ? " fusable" : "");
  return key;
}

/// A remembered untimed choice ("algo:math:fused:fused_algo"); the fused call is checked by the
/// first launch.
bool CudnnConv::recall_choice(const std::string& key, bool may_fuse) {
  auto v = TuningCache::global().get(key);
  int algo = -1, math = -1, fused = 0, falgo = -1;
  if (!v || std::sscanf(v->c_str(), "%d:%d:%d:%d", &algo, &math, &fused, &falgo) != 4 || algo < 0 ||
      algo >= CUDNN_CONVOLUTION_FWD_ALGO_COUNT || falgo < 0 || falgo >= CUDNN_CONVOLUTION_FWD_ALGO_COUNT)
    return false;
  if (fused && (!may_fuse || !fusable_rank() || !fused_desc_ready(true))) return false;
  FwdChoice ch{static_cast<cudnnConvolutionFwdAlgo_t>(algo), static_cast<cudnnMathType_t>(math), false, 0};
  if (!apply(ch)) return false;
  if (fused) {
    size_t ws = 0;
    fused_algo_ = static_cast<cudnnConvolutionFwdAlgo_t>(falgo);
    if (cudnnGetConvolutionForwardWorkspaceSize(handle_, x_, w_, conv_, y_, fused_algo_, &ws) != CUDNN_STATUS_SUCCESS ||
        ws > kMaxConvWorkspace)
      return false;
    fused_ = true;
    workspace_ = std::max(workspace_, ws);
    unchecked_fused_ = true;
  }
  found_ = true;
  return true;
}

void CudnnConv::remember_choice(const std::string& key) const {
  TuningCache::global().put(key, std::to_string(static_cast<int>(fwd_algo_)) + ":" +
                                     std::to_string(static_cast<int>(math_)) + ":" + (fused_ ? "1" : "0") + ":" +
                                     std::to_string(static_cast<int>(fused_algo_)));
}

bool CudnnConv::fused_desc_ready(bool may_fuse) {
  if (!may_fuse) return true;
  cudnnDataType_t t = CUDNN_DATA_FLOAT;
  if (!data_type(ep_.dt, &t)) return false;
  if (!bias_ && cudnnCreateTensorDescriptor(&bias_) != CUDNN_STATUS_SUCCESS) return false;
  // [1, C, 1, ...] at the output's rank (4 for 1-D and 2-D convs, 5 for 3-D).
  std::vector<int> bdims(static_cast<size_t>(rank_), 1), bstrides(static_cast<size_t>(rank_), 1);
  bdims[1] = static_cast<int>(ep_.channels);
  bstrides[0] = static_cast<int>(ep_.channels);
  if (cudnnSetTensorNdDescriptor(bias_, t, rank_, bdims.data(), bstrides.data()) != CUDNN_STATUS_SUCCESS) return false;
  if (!ep_.has_bias && !zero_bias_.get()) {
    try {
      zero_bias_ = DeviceBuffer(static_cast<size_t>(ep_.channels) * dtype_size(ep_.dt),
                                "the zero bias of a bias-free fused conv");
    } catch (const Error&) {
      cudaGetLastError();
      return false;  // no memory for it: the conv runs unfused
    }
    // Done before any launch reads it, whichever stream that is on (plan time, once per conv).
    if (cudaMemset(zero_bias_.get(), 0, zero_bias_.size()) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess)
      return false;
  }
  if (!act_desc_ && cudnnCreateActivationDescriptor(&act_desc_) != CUDNN_STATUS_SUCCESS) return false;
  return cudnnSetActivationDescriptor(act_desc_,
                                      ep_.act.act == Act::Relu ? CUDNN_ACTIVATION_RELU : CUDNN_ACTIVATION_IDENTITY,
                                      CUDNN_NOT_PROPAGATE_NAN, 0.0) == CUDNN_STATUS_SUCCESS;
}

/// cudnnConvolutionBiasActivationForward supports some configurations only (ReLU or identity;
/// identity only with IMPLICIT_PRECOMP_GEMM); the only reliable test is a call, made once here on
/// scratch buffers. Any other activation runs identity there, then as a pass of its own.
void CudnnConv::try_fused(const PlanContext& c) {
  try_fused(c, ep_.act.act != Act::Relu ? CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM : fwd_algo_);
  // The tuned algorithm may be one the fused call does not take; implicit GEMM it always takes.
  if (!fused_ && fwd_algo_ != CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM)
    try_fused(c, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM);
}

void CudnnConv::try_fused(const PlanContext& c, cudnnConvolutionFwdAlgo_t algo) {
  size_t ws = 0;
  if (cudnnGetConvolutionForwardWorkspaceSize(handle_, x_, w_, conv_, y_, algo, &ws) != CUDNN_STATUS_SUCCESS) return;
  if (!fusable_rank() || !fused_desc_ready(true)) return;
  size_t es = dtype_size(ep_.dt);
  const size_t unfused_ws = workspace_;
  fused_ = true;
  fused_algo_ = algo;
  workspace_ = std::max(workspace_, ws);
  bool ok = false;
  try {
    DeviceBuffer x(numel(c.in_dims(0)) * es, "a conv trial"), w(numel(c.in_dims(1)) * es, "a conv trial"),
        y(numel(c.out_dims(0)) * es, "a conv trial"), b(ep_.channels * es, "a conv trial"),
        wsb(std::max<size_t>(workspace_, 16), "a conv trial");
    cudaMemset(x.get(), 0, x.size());
    cudaMemset(w.get(), 0, w.size());
    cudaMemset(b.get(), 0, b.size());
    ok = run(x.get(), w.get(), b.get(), y.get(), y.get(), wsb.get(), c.ctx().stream()) == CUDNN_STATUS_SUCCESS &&
         cudaStreamSynchronize(c.ctx().stream()) == cudaSuccess;
    cudaGetLastError();
  } catch (const Error&) {
    cudaGetLastError();  // not enough memory for the trial: keep the unfused path
  }
  if (!ok) {
    fused_ = false;
    workspace_ = unfused_ws;
  }
}

/// cuDNN's fused call takes no null bias: a bias-free conv that runs it reads zero_bias_ (made by
/// fused_desc_ready), which no other route needs (their epilogues take a null bias).
void CudnnConv::keep_zero_bias_if_fused() {
  if (ep_.has_bias || !fused_) zero_bias_ = DeviceBuffer();
}

cudnnStatus_t CudnnConv::run(const void* x, const void* w, const void* b, const void* z, void* y, void* ws,
                             cudaStream_t stream) {
  double one64 = 1, zero64 = 0;
  float one32 = 1, zero32 = 0;
  const void* one = ep_.dt == DType::Float64 ? static_cast<const void*>(&one64) : &one32;
  const void* zero = ep_.dt == DType::Float64 ? static_cast<const void*>(&zero64) : &zero32;
  if (fused_) {
    const cudnnStatus_t st = cudnnConvolutionBiasActivationForward(handle_, one, x_, x, w_, w, conv_, fused_algo_, ws,
                                                                   workspace_, ep_.has_z ? one : zero, y_,
                                                                   ep_.has_z ? z : y, bias_, b, act_desc_, y_, y);
    if (st == CUDNN_STATUS_SUCCESS) ep_.run_act_after_fused(y, stream);
    return st;
  }
  const cudnnStatus_t st =
      transpose_
          ? cudnnConvolutionBackwardData(handle_, one, w_, w, y_, x, conv_, bwd_algo_, ws, workspace_, zero, x_, y)
          : cudnnConvolutionForward(handle_, one, x_, x, w_, w, conv_, fwd_algo_, ws, workspace_, zero, y_, y);
  if (st == CUDNN_STATUS_SUCCESS) ep_.run(y, b, z, stream);
  return st;
}

bool CudnnConv::check_fused(const void* x, const void* w, const void* b, const void* z, void* y, void* ws,
                            cudaStream_t stream) {
  unchecked_fused_ = false;
  if (run(x, w, b, z, y, ws, stream) == CUDNN_STATUS_SUCCESS) return true;
  fused_ = false;
  return false;
}

std::string CudnnConv::kernel_name() const {
  return std::string("cuDNN ") + (transpose_ ? "conv-transpose " : "conv ") +
         (ep_.dt == DType::Float32    ? (strict_ ? "fp32" : "tf32")
          : ep_.dt == DType::Float16  ? "fp16"
          : ep_.dt == DType::BFloat16 ? "bf16"
                                      : "fp64") +
         (nhwc_ ? " NHWC" : " NCHW") +
         (fused_ && !ep_.act_in_cudnn() ? std::string(ep_.has_bias ? " conv+bias fused" : " conv fused (zero bias)") +
                                              " + " + activation_name(ep_.act.act) + " pass"
          : fused_ ? (ep_.has_bias ? " conv+bias+act fused" : " conv+act fused (zero bias)")
          : ep_.has_bias || ep_.has_z || ep_.act.act != Act::None ? " + epilogue"
                                                                  : "");
}

}  // namespace fusec::cuda
