// Conv, ai.fusec FusedConv and ConvTranspose through cuDNN 9's convolution API.
//
// Descriptors and the algorithm are chosen once at plan time: cuDNN's heuristics list the
// algorithms whose math mode honours the precision (strict fp32 must not use TF32 tensor cores);
// at strict fp32 each is timed as it will launch and the fastest kept (tuning cache); launch()
// is one cudnnConvolutionForward / BackwardData plus, when the node has a bias, a residual or an
// activation, one in-place epilogue pass (epilogue.cu) in the reference's order:
// y = act(conv(x, w) + b + z).
// Where cuDNN's fused call can do the epilogue (bias, residual and ReLU or nothing), the conv is
// cudnnConvolutionBiasActivationForward instead, tried once at plan time on scratch buffers. A
// node without a bias input is a first-class case on every route: fusec's own kernels (the
// implicit-GEMM conv, Winograd, the epilogue pass) and the 1x1 GEMM route take a null bias; only
// cuDNN's fused call needs a bias tensor, and gets [C] zeros made once at plan time.
// Layout: NCHW as the model has it, or NHWC for the planner's channels-last conv regions (fp16,
// bf16, tf32: cuDNN's tensor-core kernels want NHWC); then this op keeps its own copy of the
// weights in KRSC order. 1-D convs run as 2-D with H = 1. Asymmetric padding, which the legacy API
// cannot express, runs on the CPU reference.
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "backend/cuda/core/build_trace.h"
#include "backend/cuda/core/check.h"
#include "backend/cuda/core/constant_upload.h"
#include "backend/cuda/ops/conv/conv_gemm.h"
#include "backend/cuda/ops/conv/conv_igemm_route.h"
#include "backend/cuda/ops/conv/conv_route.h"
#include "backend/cuda/core/gpu_hold.cuh"
#include "backend/cuda/core/dnn_check.h"
#include "backend/cuda/core/cuda_op.h"
#include "backend/cuda/ops/elementwise/epilogue.cuh"
#include "backend/cuda/core/tuning_cache.h"
#include "ir/ops/conv_geometry.h"

namespace fusec::cuda {

namespace {

constexpr size_t kMaxConvWorkspace = 512u << 20;


bool dnn_type(DType t, cudnnDataType_t* out) {
  switch (t) {
    case DType::Float32: *out = CUDNN_DATA_FLOAT; return true;
    case DType::Float16: *out = CUDNN_DATA_HALF; return true;
    case DType::BFloat16: *out = CUDNN_DATA_BFLOAT16; return true;
    case DType::Float64: *out = CUDNN_DATA_DOUBLE; return true;
    default: return false;
  }
}

std::vector<int> packed_strides(const std::vector<int>& dims) {
  std::vector<int> s(dims.size(), 1);
  for (size_t i = dims.size() - 1; i-- > 0;) s[i] = s[i + 1] * dims[i + 1];
  return s;
}

/// Strides of N, C, H, W dims stored channels-last.
std::vector<int> nhwc_strides(const std::vector<int>& d) {
  return {d[1] * d[2] * d[3], 1, d[3] * d[1], d[1]};
}

/// NC + spatial dims as cuDNN wants them: at least 4-D (a 1-D conv gains H = 1).
std::vector<int> as_dnn_dims(const std::vector<int64_t>& d) {
  std::vector<int> out(d.begin(), d.end());
  if (out.size() == 3) out.insert(out.begin() + 2, 1);
  return out;
}

class ConvOp : public CudaOp {
 public:
  ~ConvOp() override {
    if (x_) cudnnDestroyTensorDescriptor(x_);
    if (y_) cudnnDestroyTensorDescriptor(y_);
    if (w_) cudnnDestroyFilterDescriptor(w_);
    if (conv_) cudnnDestroyConvolutionDescriptor(conv_);
    if (bias_) cudnnDestroyTensorDescriptor(bias_);
    if (act_desc_) cudnnDestroyActivationDescriptor(act_desc_);
  }

  /// Builds descriptors and picks the algorithm; false (with why) when cuDNN offers nothing.
  bool plan(const PlanContext& c, bool transpose, bool nhwc, std::string* why) {
    transpose_ = transpose;
    nhwc_ = nhwc;
    ep_.dt = c.out_dtype(0);
    cudnnDataType_t t;
    if (!dnn_type(ep_.dt, &t) || c.in_dtype(0) != ep_.dt || c.in_dtype(1) != ep_.dt) {
      *why = std::string("convolution on ") + dtype_name(c.in_dtype(0)) + " runs on the CPU";
      return false;
    }
    const auto& xd = c.in_dims(0);
    const auto& wd = c.in_dims(1);
    if (xd.size() < 3 || xd.size() > 5) { *why = "only 1-D, 2-D and 3-D convolutions run on cuDNN"; return false; }
    if (nhwc && (xd.size() != 4 || transpose || !c.constant(1))) { *why = "channels-last needs a 2-D conv with constant weights"; return false; }
    for (int64_t d : xd) if (d > INT32_MAX) { *why = "dims beyond int32"; return false; }
    const size_t nsp = xd.size() - 2;
    std::vector<int64_t> in_sp(xd.begin() + 2, xd.end());
    std::vector<int64_t> kernel(wd.begin() + 2, wd.end());
    WindowGeometry g = transpose ? conv_transpose_geometry(c, in_sp, kernel) : window_geometry(c, in_sp, kernel, false);
    for (size_t i = 0; i < nsp; ++i)
      if (g.pad_begin[i] != g.pad_end[i] || g.pad_begin[i] < 0) {
        *why = "asymmetric padding runs on the CPU";
        return false;
      }
    if (transpose) {
      for (size_t i = 0; i < nsp; ++i) {
        // cuDNN derives the forward-conv size from the output; it must give back the input.
        const int64_t window = (g.kernel[i] - 1) * g.dilation[i] + 1;  // checked by the geometry already
        int64_t fwd = (g.out[i] + 2 * g.pad_begin[i] - window) / g.stride[i] + 1;
        if (fwd != in_sp[i]) { *why = "this output_padding/output_shape runs on the CPU"; return false; }
      }
    }
    std::vector<int> pads, strides, dil;
    for (size_t i = 0; i < nsp; ++i) {
      pads.push_back(static_cast<int>(g.pad_begin[i]));
      strides.push_back(static_cast<int>(g.stride[i]));
      dil.push_back(static_cast<int>(g.dilation[i]));
    }
    if (nsp == 1) {
      pads.insert(pads.begin(), 0);
      strides.insert(strides.begin(), 1);
      dil.insert(dil.begin(), 1);
    }
    int group = static_cast<int>(c.attr_int("group"));
    handle_ = c.ctx().cudnn();
    DNN_CHECK(cudnnCreateTensorDescriptor(&x_));
    DNN_CHECK(cudnnCreateTensorDescriptor(&y_));
    DNN_CHECK(cudnnCreateFilterDescriptor(&w_));
    DNN_CHECK(cudnnCreateConvolutionDescriptor(&conv_));
    // For ConvTranspose the forward conv runs from our output (cuDNN's dx) to our input (dy).
    std::vector<int> xdims = as_dnn_dims(transpose ? c.out_dims(0) : xd);
    std::vector<int> ydims = as_dnn_dims(transpose ? xd : c.out_dims(0));
    std::vector<int> wdims = as_dnn_dims(wd);
    DNN_CHECK(cudnnSetTensorNdDescriptor(x_, t, static_cast<int>(xdims.size()), xdims.data(),
                                         (nhwc ? nhwc_strides(xdims) : packed_strides(xdims)).data()));
    DNN_CHECK(cudnnSetTensorNdDescriptor(y_, t, static_cast<int>(ydims.size()), ydims.data(),
                                         (nhwc ? nhwc_strides(ydims) : packed_strides(ydims)).data()));
    DNN_CHECK(cudnnSetFilterNdDescriptor(w_, t, nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                                         static_cast<int>(wdims.size()), wdims.data()));
    auto phase_t0 = std::chrono::steady_clock::now();
    if (nhwc) {
      // The op's own KRSC copy of the weights (the shared weight buffer's KCRS copy is then not
      // uploaded: reads_input(1) is false).
      const Tensor& w = *c.constant(1);
      own_weights_ = DeviceBuffer(static_cast<size_t>(w.numel()) * dtype_size(ep_.dt), "channels-last conv weights");
      ConstantUploader up(c.ctx().stream());
      up.upload(w, own_weights_.get(), ep_.dt, /*krsc=*/true);
      up.finish();
    }
    if (nhwc) BuildTrace::add("conv weights KRSC", c.node().op_type, c.node().name, ms_since(phase_t0));
    phase_t0 = std::chrono::steady_clock::now();
    cudnnDataType_t compute = ep_.dt == DType::Float64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    DNN_CHECK(cudnnSetConvolutionNdDescriptor(conv_, static_cast<int>(pads.size()), pads.data(), strides.data(), dil.data(),
                                              CUDNN_CROSS_CORRELATION, compute));
    DNN_CHECK(cudnnSetConvolutionGroupCount(conv_, group));
    // Strict fp32 must not use TF32 tensor cores (cuDNN's default math allows them on sm_80+).
    const bool strict = ep_.dt == DType::Float32 && !c.allow_tf32();
    DNN_CHECK(cudnnSetConvolutionMathType(conv_, strict ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH));

    // Epilogue: bias per output channel, FusedConv's residual and activation.
    if (c.node().domain == "ai.fusec") {
      if (!parse_activation(c.attr_string("activation"), c.attr_floats("activation_params"), &ep_.act)) {
        *why = "unknown activation";
        return false;
      }
      ep_.has_z = c.has_input(3);
      if (ep_.has_z && c.in_dims(3) != c.out_dims(0)) { *why = "residual shape differs from the output"; return false; }
    }
    ep_.has_bias = c.has_input(2);
    const auto& od = c.out_dims(0);
    ep_.yelems = numel(od);
    ep_.channels = od[1];
    ep_.inner = 1;
    if (!nhwc)  // NHWC: the channel is the innermost dim
      for (size_t i = 2; i < od.size(); ++i) ep_.inner *= od[i];
    if (ep_.has_bias) {
      int64_t bn = 1;
      for (int64_t d : c.in_dims(2)) bn *= d;
      if (bn != ep_.channels) { *why = "bias length differs from the output channels"; return false; }
    }
    strict_ = strict;
    const bool tuning = !transpose && conv_tuning_on(strict) && TuningCache::global().enabled();
    const char* no_fused = std::getenv("FUSEC_CONV_FUSED");
    // Whether the bias exists does not matter: a conv without one (dynamo exports drop all-zero
    // biases; conv -> ReLU without BN has none) runs the same fused call on a zero bias made once
    // here (zero_bias_), so it launches one kernel as the biased form does. A conv with no
    // epilogue at all runs as the plain forward call.
    const bool epilogue_work = ep_.has_bias || ep_.has_z || ep_.act.act != Act::None;
    const bool may_fuse = !transpose && epilogue_work && ep_.dt != DType::Float64 && (ep_.act.act == Act::Relu || ep_.act.act == Act::None) &&
                          !(no_fused && std::string(no_fused) == "0");
    // Untimed choices (fp16, bf16, tf32 by default) are remembered too: a warm build reads the
    // algorithm and the fused call's outcome back instead of asking cuDNN's heuristics and making
    // a trial call. The first launch checks the fused call.
    std::string choice;
    if (!transpose && !tuning && !conv_gemm_forced() && ep_.dt != DType::Float64 && TuningCache::global().enabled())
      choice = choice_key(c, "choice", strict, may_fuse);
    if (!choice.empty() && recall_choice(choice, may_fuse)) {
      BuildTrace::add("conv heuristics", c.node().op_type, c.node().name, ms_since(phase_t0));
      keep_zero_bias_if_fused();
      describe();
      return true;
    }
    int count = 0;
    std::vector<FwdChoice> candidates;  // usable forward algorithms, the heuristics' order
    if (!transpose) {
      cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
      DNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(handle_, x_, w_, conv_, y_, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, perf));
      for (int i = 0; i < count; ++i) {
        if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].memory > kMaxConvWorkspace) continue;
        if (strict && perf[i].mathType == CUDNN_TENSOR_OP_MATH) continue;
        // CUDNN_DEFAULT_MATH permits TF32 on sm_80+: strict fp32 asks for FMA kernels only.
        const cudnnMathType_t math = strict ? CUDNN_FMA_MATH : perf[i].mathType;
        bool seen = false;
        for (const auto& ch : candidates) seen = seen || (ch.algo == perf[i].algo && ch.math == math);
        if (seen || perf[i].determinism != CUDNN_DETERMINISTIC) continue;  // a replay must equal the run before it
        candidates.push_back({perf[i].algo, math, false, perf[i].memory});
      }
      if (!candidates.empty()) {
        fwd_algo_ = candidates[0].algo;
        math_ = candidates[0].math;
        workspace_ = candidates[0].ws;
        found_ = true;
      }
    } else {
      cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
      DNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(handle_, w_, y_, conv_, x_, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count, perf));
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
    BuildTrace::add("conv heuristics", c.node().op_type, c.node().name, ms_since(phase_t0));
    if (!found_) { *why = "cuDNN has no algorithm for this convolution"; return false; }

    // The GEMM route only where it can be chosen: timed by the tuner, or forced.
    if (!transpose && !nhwc && ep_.dt == DType::Float32 && (tuning || conv_gemm_forced())) gemm_route_ = plan_conv_gemm_route(c, g, group, ep_);
    if (!transpose && !nhwc && strict && (tuning || conv_igemm_forced() >= 0)) igemm_route_ = plan_conv_igemm_route(c, g, group, ep_);
    // The algorithm by timing the launch as it will run (fused, or the conv and its epilogue
    // pass), warm and repeated, on scratch buffers: strict fp32 by default, where the heuristics'
    // first choice ran ResNet-50's convolutions far from the fp32 peak. cuDNN's own trial timings
    // (cudnnFindConvolutionForwardAlgorithmEx, one cold run each) misled: at fp16 they picked
    // kernels many times slower in the real fused NHWC launch.
    // FUSEC_CONV_TUNE=0 keeps the heuristics' choice; =all times every precision.
    bool tuned = false;
    if (gemm_route_ && conv_gemm_forced()) {  // tests and A/B runs: the GEMM route without timing
      FwdChoice ch{fwd_algo_, math_, false, workspace_, 0};
      tuned = apply(ch);
    }
    if (!tuned && igemm_route_ && conv_igemm_forced() >= 0) {  // tests: one implicit-GEMM configuration, untimed
      FwdChoice ch{fwd_algo_, math_, false, workspace_, -1, conv_igemm_forced()};
      tuned = apply(ch);
    }
    if (!tuned && tuning) {
      const FwdChoice heuristic{fwd_algo_, math_, false, workspace_};
      phase_t0 = std::chrono::steady_clock::now();
      tuned = tune_forward(c, candidates, may_fuse);
      BuildTrace::add("conv tuning", c.node().op_type, c.node().name, ms_since(phase_t0));
      if (!tuned) {  // trials may have left another choice applied
        fwd_algo_ = heuristic.algo;
        math_ = heuristic.math;
        workspace_ = heuristic.ws;
        fused_ = false;
        gemm_pick_ = -1;
        igemm_pick_ = -1;
      }
    }
    if (!tuned) {
      DNN_CHECK(cudnnSetConvolutionMathType(conv_, math_));
      // The workspace the heuristics report can be an estimate; ask for the exact size.
      size_t exact = 0;
      if (!transpose) DNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(handle_, x_, w_, conv_, y_, fwd_algo_, &exact));
      else DNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(handle_, w_, y_, conv_, x_, bwd_algo_, &exact));
      workspace_ = std::max(workspace_, exact);
      phase_t0 = std::chrono::steady_clock::now();
      if (may_fuse) try_fused(c);
      BuildTrace::add("conv fused trial", c.node().op_type, c.node().name, ms_since(phase_t0));
      if (!choice.empty())
        TuningCache::global().put(choice, std::to_string(static_cast<int>(fwd_algo_)) + ":" + std::to_string(static_cast<int>(math_)) +
                                              ":" + (fused_ ? "1" : "0") + ":" + std::to_string(static_cast<int>(fused_algo_)));
    }
    if (gemm_pick_ < 0) gemm_route_.reset();  // cuDNN runs it: no descriptors or bias plane held for nothing
    if (igemm_pick_ < 0) igemm_route_.reset();
    else igemm_route_->keep_only(igemm_pick_);
    keep_zero_bias_if_fused();
    describe();
    return true;
  }

  /// cuDNN's fused call takes no null bias: a bias-free conv that runs it reads zero_bias_ (made by
  /// fused_desc_ready), which no other route needs (their epilogues take a null bias).
  void keep_zero_bias_if_fused() {
    if (ep_.has_bias || !fused_) zero_bias_ = DeviceBuffer();
  }

  /// The bias a launch passes: the node's, the zero one for a bias-free fused call, else null.
  const void* bias_or_zero(const LaunchArgs& a) const { return ep_.has_bias ? a.inputs[2].data : zero_bias_.get(); }

  void describe() {
    if (igemm_pick_ >= 0) {
      name_ = igemm_route_->kernel_name(igemm_pick_);
      return;
    }
    if (gemm_pick_ >= 0) {
      name_ = gemm_route_->kernel_name(gemm_pick_);
      return;
    }
    name_ = std::string("cuDNN ") + (transpose_ ? "conv-transpose " : "conv ") +
            (ep_.dt == DType::Float32 ? (strict_ ? "fp32" : "tf32") : ep_.dt == DType::Float16 ? "fp16" : ep_.dt == DType::BFloat16 ? "bf16" : "fp64") +
            (nhwc_ ? " NHWC" : " NCHW") +
            (fused_ ? (ep_.has_bias ? " conv+bias+act fused" : " conv+act fused (zero bias)")
                    : ep_.has_bias || ep_.has_z || ep_.act.act != Act::None ? " + epilogue" : "");
  }

  /// A remembered untimed choice ("algo:math:fused:fused_algo"), applied when this cuDNN still
  /// takes the algorithm; the fused call is checked by the first launch.
  bool recall_choice(const std::string& key, bool may_fuse) {
    auto v = TuningCache::global().get(key);
    int algo = -1, math = -1, fused = 0, falgo = -1;
    if (!v || std::sscanf(v->c_str(), "%d:%d:%d:%d", &algo, &math, &fused, &falgo) != 4 || algo < 0 ||
        algo >= CUDNN_CONVOLUTION_FWD_ALGO_COUNT || falgo < 0 || falgo >= CUDNN_CONVOLUTION_FWD_ALGO_COUNT)
      return false;
    if (fused && (!may_fuse || !fused_desc_ready(true))) return false;
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

  static bool conv_tuning_on(bool strict) {
    const char* e = std::getenv("FUSEC_CONV_TUNE");
    if (e && std::string(e) == "0") return false;
    if (e && std::string(e) == "all") return true;
    return strict;
  }

  /// Sets the op to run `ch`: algorithm, math mode, exact workspace, fused or not.
  bool apply(const FwdChoice& ch) {
    igemm_pick_ = -1;
    if (ch.igemm >= 0) {
      if (!igemm_route_ || ch.igemm >= igemm_route_->candidates() || !igemm_route_->prepare(ch.igemm))
        return false;
      igemm_pick_ = ch.igemm;
      gemm_pick_ = -1;
      fused_ = false;
      workspace_ = igemm_route_->workspace(ch.igemm);
      return true;
    }
    if (ch.gemm >= 0) {
      if (!gemm_route_ || ch.gemm >= gemm_route_->candidates()) return false;
      gemm_pick_ = ch.gemm;
      fused_ = false;
      workspace_ = gemm_route_->workspace(ch.gemm);
      return true;
    }
    gemm_pick_ = -1;
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

  /// The tuning-cache key of this conv: "launch" for a timed choice, "choice" for the heuristics'
  /// untimed one (remembered so that a warm build skips cuDNN's heuristics query, a cost paid per
  /// conv). Empty when the descriptor cannot be read back.
  std::string choice_key(const PlanContext& c, const char* what, bool fma, bool may_fuse) const {
    std::string key = "cudnn " + std::to_string(cudnnGetVersion()) + "|" + tuning_device_key(c.ctx().device()) + "|conv " + what +
                      " " + dtype_name(ep_.dt) + (fma ? " fma" : "") + (nhwc_ ? " nhwc" : " nchw") + " x" + dims_str(c.in_dims(0)) +
                      " w" + dims_str(c.in_dims(1)) + " y" + dims_str(c.out_dims(0));
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

  /// The fastest candidate by timing the real launch, remembered in the tuning cache; false
  /// (nothing changed) when tuning is off or there is no memory for the trial.
  bool tune_forward(const PlanContext& c, std::vector<FwdChoice> cands, bool may_fuse) {
    TuningCache& cache = TuningCache::global();
    if (!cache.enabled() || cands.empty() || ep_.dt == DType::Float64 || !fused_desc_ready(may_fuse)) return false;
    const std::string key = choice_key(c, "launch", cands[0].math == CUDNN_FMA_MATH, may_fuse);
    if (key.empty()) return false;
    const bool trace = std::getenv("FUSEC_CONV_TRACE") != nullptr;
    size_t es = dtype_size(ep_.dt);
    const size_t xb = numel(c.in_dims(0)) * es, wb = numel(c.in_dims(1)) * es, yb = numel(c.out_dims(0)) * es;
    size_t ws = 0;
    for (auto& ch : cands) {
      if (cudnnSetConvolutionMathType(conv_, ch.math) != CUDNN_STATUS_SUCCESS ||
          cudnnGetConvolutionForwardWorkspaceSize(handle_, x_, w_, conv_, y_, ch.algo, &ch.ws) != CUDNN_STATUS_SUCCESS)
        ch.ws = kMaxConvWorkspace + 1;
      if (ch.ws <= kMaxConvWorkspace) ws = std::max(ws, ch.ws);
    }
    const int gemm_cands = gemm_route_ ? gemm_route_->candidates() : 0;
    for (int i = 0; i < gemm_cands; ++i) ws = std::max(ws, gemm_route_->workspace(i));
    for (int i = 0; igemm_route_ && i < igemm_route_->candidates(); ++i) ws = std::max(ws, igemm_route_->workspace(i));
    if (xb + wb + 2 * yb + ws > (size_t{1} << 30)) return false;
    try {
      DeviceBuffer x(xb, "conv tuning"), w(wb, "conv tuning"), y(yb, "conv tuning"), z(ep_.has_z ? yb : es, "conv tuning"),
          b(ep_.channels * es, "conv tuning"), wsb(std::max<size_t>(ws, 16), "conv tuning");
      cudaStream_t stream = c.ctx().stream();
      // Not zeros: FFT and tensor-core timings depend on the data.
      for (auto* buf : {&x, &w, &z, &b}) FUSEC_CUDA_CHECK(cudaMemsetAsync(buf->get(), 0x3C, buf->size(), stream));
      // Applies ch and runs it once on the scratch buffers: whether it works here.
      auto works = [&](const FwdChoice& ch) {
        const bool ok = apply(ch) && run_conv(x.get(), w.get(), b.get(), z.get(), y.get(), wsb.get(), stream) == CUDNN_STATUS_SUCCESS &&
                        cudaStreamSynchronize(stream) == cudaSuccess;
        cudaGetLastError();
        return ok;
      };
      // A remembered route pick, "gemm:index|identity" or "igemm:index|identity", taken when this
      // build's route has the same candidate at that index and it runs.
      auto recall_route = [&](const std::string& v, bool own) {
        const auto bar = v.find('|');
        const int i = std::atoi(v.c_str() + (own ? 6 : 5));
        const int count = own ? (igemm_route_ ? igemm_route_->candidates() : 0) : gemm_cands;
        if (bar == std::string::npos || i < 0 || i >= count) return false;
        if ((own ? igemm_route_->identity(i) : gemm_route_->identity(i)) != v.substr(bar + 1)) return false;
        FwdChoice ch = cands[0];
        (own ? ch.igemm : ch.gemm) = i;
        return works(ch);
      };
      if (auto v = cache.get(key); v && v->rfind("gemm:", 0) == 0) {
        if (recall_route(*v, false)) return true;
      } else if (v && v->rfind("igemm:", 0) == 0) {
        if (recall_route(*v, true)) return true;
      } else if (v) {  // "algo:math:fused", checked again by one call
        int algo = -1, math = -1, fused = 0;
        if (std::sscanf(v->c_str(), "%d:%d:%d", &algo, &math, &fused) == 3)
          for (const auto& ch0 : cands)
            if (static_cast<int>(ch0.algo) == algo && static_cast<int>(ch0.math) == math) {
              FwdChoice ch = ch0;
              ch.fused = fused != 0;
              if (works(ch)) return true;
            }
      }
      // Each algorithm fused where cuDNN takes it (ReLU or identity, bias), else with the epilogue pass.
      std::vector<FwdChoice> runs;
      for (const auto& ch0 : cands) {
        if (ch0.ws > kMaxConvWorkspace) continue;
        for (bool fused : {true, false}) {
          if (fused && (!may_fuse || c.in_dims(0).size() != 4)) continue;
          FwdChoice ch = ch0;
          ch.fused = fused;
          if (works(ch)) {
            runs.push_back(ch);
            break;  // fused when it works: the epilogue pass only adds
          }
        }
      }
      for (int i = 0; i < gemm_cands; ++i) {
        FwdChoice ch = cands[0];
        ch.gemm = i;
        ch.fused = false;
        if (works(ch)) runs.push_back(ch);
      }
      for (int i = 0; igemm_route_ && i < igemm_route_->candidates(); ++i) {
        FwdChoice ch = cands[0];
        ch.igemm = i;
        ch.fused = false;
        if (igemm_route_->worth_timing(i) && works(ch)) runs.push_back(ch);
      }
      if (runs.empty()) return false;
      cudaEvent_t e0, e1;
      FUSEC_CUDA_CHECK(cudaEventCreate(&e0));
      FUSEC_CUDA_CHECK(cudaEventCreate(&e1));
      // Interleaved rounds, each candidate's best round kept (as the GEMM tuner does). The reps
      // queue up behind a hold kernel, so the events time the GPU alone (gpu_hold.cuh): as in the
      // model's CUDA graph, where no host work sits between launches.
      constexpr int kRounds = 3, kReps = 5, kHoldUs = 400;
      std::vector<float> best(runs.size(), -1.0f);
      for (int round = 0; round < kRounds; ++round)
        for (size_t i = 0; i < runs.size(); ++i) {
          apply(runs[i]);
          run_conv(x.get(), w.get(), b.get(), z.get(), y.get(), wsb.get(), stream);  // warm
          launch_gpu_hold(stream, kHoldUs);
          FUSEC_CUDA_CHECK(cudaEventRecord(e0, stream));
          for (int k = 0; k < kReps; ++k) run_conv(x.get(), w.get(), b.get(), z.get(), y.get(), wsb.get(), stream);
          FUSEC_CUDA_CHECK(cudaEventRecord(e1, stream));
          FUSEC_CUDA_CHECK(cudaEventSynchronize(e1));
          float ms = 0;
          FUSEC_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
          ms /= kReps;
          if (best[i] < 0 || ms < best[i]) best[i] = ms;
        }
      cudaEventDestroy(e0);
      cudaEventDestroy(e1);
      size_t pick = 0;
      for (size_t i = 1; i < runs.size(); ++i)
        if (best[i] < best[pick]) pick = i;
      // Within 3% of the heuristics' first choice is noise: keep that one.
      if (best[0] <= 1.03f * best[pick]) pick = 0;
      for (size_t i = 0; trace && i < runs.size(); ++i) {
        const char* chosen = i == pick ? "  <- chosen" : "";
        if (runs[i].igemm >= 0)
          std::fprintf(stderr, "conv tune %s: implicit GEMM [%s] %.4f ms%s\n", key.c_str(),
                       igemm_route_->identity(runs[i].igemm).c_str(), best[i], chosen);
        else if (runs[i].gemm >= 0)
          std::fprintf(stderr, "conv tune %s: GEMM candidate %d [%s] %.4f ms%s\n", key.c_str(), runs[i].gemm,
                       gemm_route_->identity(runs[i].gemm).c_str(), best[i], chosen);
        else
          std::fprintf(stderr, "conv tune %s: algo %d math %d %s %.4f ms%s\n", key.c_str(), static_cast<int>(runs[i].algo),
                       static_cast<int>(runs[i].math), runs[i].fused ? "fused" : "+epilogue", best[i], chosen);
      }
      if (!apply(runs[pick])) return false;
      if (runs[pick].igemm >= 0) {
        cache.put(key, "igemm:" + std::to_string(runs[pick].igemm) + "|" + igemm_route_->identity(runs[pick].igemm));
        return true;
      }
      if (runs[pick].gemm >= 0) {
        cache.put(key, "gemm:" + std::to_string(runs[pick].gemm) + "|" + gemm_route_->identity(runs[pick].gemm));
        return true;
      }
      cache.put(key, std::to_string(static_cast<int>(runs[pick].algo)) + ":" + std::to_string(static_cast<int>(runs[pick].math)) +
                         ":" + (runs[pick].fused ? "1" : "0"));
      return true;
    } catch (const Error&) {
      cudaGetLastError();
      return false;  // no memory for the trial: the heuristics choose
    }
  }

  /// The bias and activation descriptors the fused call needs (made once).
  bool fused_desc_ready(bool may_fuse) {
    if (!may_fuse) return true;
    cudnnDataType_t t = CUDNN_DATA_FLOAT;
    if (!dnn_type(ep_.dt, &t)) return false;
    if (!bias_ && cudnnCreateTensorDescriptor(&bias_) != CUDNN_STATUS_SUCCESS) return false;
    int bdims[4] = {1, static_cast<int>(ep_.channels), 1, 1}, bstrides[4] = {static_cast<int>(ep_.channels), 1, 1, 1};
    if (cudnnSetTensorNdDescriptor(bias_, t, 4, bdims, bstrides) != CUDNN_STATUS_SUCCESS) return false;
    if (!ep_.has_bias && !zero_bias_.get()) {
      try {
        zero_bias_ = DeviceBuffer(static_cast<size_t>(ep_.channels) * dtype_size(ep_.dt), "the zero bias of a bias-free fused conv");
      } catch (const Error&) {
        cudaGetLastError();
        return false;  // no memory for it: the conv runs unfused
      }
      // Done before any launch reads it, whichever stream that is on (plan time, once per conv).
      if (cudaMemset(zero_bias_.get(), 0, zero_bias_.size()) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) return false;
    }
    if (!act_desc_ && cudnnCreateActivationDescriptor(&act_desc_) != CUDNN_STATUS_SUCCESS) return false;
    return cudnnSetActivationDescriptor(act_desc_, ep_.act.act == Act::Relu ? CUDNN_ACTIVATION_RELU : CUDNN_ACTIVATION_IDENTITY,
                                        CUDNN_NOT_PROPAGATE_NAN, 0.0) == CUDNN_STATUS_SUCCESS;
  }

  /// The convolution as it launches: the fused call, or the conv (forward, or backward data for
  /// ConvTranspose) then the epilogue pass. launch() and every plan-time trial run this one.
  cudnnStatus_t run_conv(const void* x, const void* w, const void* b, const void* z, void* y, void* ws, cudaStream_t stream) {
    if (igemm_pick_ >= 0)
      return igemm_route_->run(igemm_pick_, x, w, b, z, y, ws, stream) ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_EXECUTION_FAILED;
    if (gemm_pick_ >= 0)
      return gemm_route_->run(gemm_pick_, x, w, b, z, y, ws, stream) ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_EXECUTION_FAILED;
    double one64 = 1, zero64 = 0;
    float one32 = 1, zero32 = 0;
    const void* one = ep_.dt == DType::Float64 ? static_cast<const void*>(&one64) : &one32;
    const void* zero = ep_.dt == DType::Float64 ? static_cast<const void*>(&zero64) : &zero32;
    if (fused_)
      return cudnnConvolutionBiasActivationForward(handle_, one, x_, x, w_, w, conv_, fused_algo_, ws, workspace_,
                                                   ep_.has_z ? one : zero, y_, ep_.has_z ? z : y, bias_, b, act_desc_, y_, y);
    const cudnnStatus_t st =
        transpose_ ? cudnnConvolutionBackwardData(handle_, one, w_, w, y_, x, conv_, bwd_algo_, ws, workspace_, zero, x_, y)
                   : cudnnConvolutionForward(handle_, one, x_, x, w_, w, conv_, fwd_algo_, ws, workspace_, zero, y_, y);
    if (st == CUDNN_STATUS_SUCCESS) ep_.run(y, b, z, stream);
    return st;
  }

  /// cudnnConvolutionBiasActivationForward supports some configurations only (ReLU or identity;
  /// identity only with IMPLICIT_PRECOMP_GEMM); the only reliable test is a call, made once here on
  /// scratch buffers.
  void try_fused(const PlanContext& c) {
    try_fused(c, ep_.act.act == Act::None ? CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM : fwd_algo_);
    // The tuned algorithm may be one the fused call does not take; implicit GEMM it always takes.
    if (!fused_ && fwd_algo_ != CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM)
      try_fused(c, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM);
  }

  void try_fused(const PlanContext& c, cudnnConvolutionFwdAlgo_t algo) {
    size_t ws = 0;
    if (cudnnGetConvolutionForwardWorkspaceSize(handle_, x_, w_, conv_, y_, algo, &ws) != CUDNN_STATUS_SUCCESS) return;
    if (!fused_desc_ready(true) || c.in_dims(0).size() != 4) return;
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
      ok = run_conv(x.get(), w.get(), b.get(), y.get(), y.get(), wsb.get(), c.ctx().stream()) == CUDNN_STATUS_SUCCESS &&
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

  size_t workspace_bytes() const override { return workspace_; }
  std::string kernel_name() const override { return name_; }
  bool reads_input(size_t i) const override {
    return !(i == 1 && (own_weights_.get() || (igemm_pick_ >= 0 && igemm_route_->owns_weights(igemm_pick_))));
  }

  void launch(const LaunchArgs& a) override {
    const DTensor& X = a.inputs[0];
    const DTensor& Y = a.outputs[0];
    if (Y.numel() == 0) return;
    const void* b = bias_or_zero(a);
    const void* z = ep_.has_z ? a.inputs[3].data : nullptr;
    if (X.numel() == 0) {  // no input channels or pixels: the conv is 0, its epilogue still applies
      FUSEC_CUDA_CHECK(cudaMemsetAsync(Y.data, 0, Y.nbytes(), a.stream));
      ep_.run(Y.data, b, z, a.stream);
      return;
    }
    const void* w = own_weights_.get() ? own_weights_.get() : a.inputs[1].data;
    if (igemm_pick_ >= 0) {
      igemm_route_->launch(igemm_pick_, X.data, w, b, z, Y.data, a.workspace, a.stream);
      return;
    }
    if (gemm_pick_ >= 0) {
      gemm_route_->launch(gemm_pick_, X.data, w, b, z, Y.data, a.workspace, a.stream);
      return;
    }
    if (unchecked_fused_) {
      // A remembered fused call this cuDNN refuses (it says so before launching anything): the
      // same algorithm unfused, with the epilogue pass, in the workspace already reserved.
      unchecked_fused_ = false;
      if (run_conv(X.data, w, b, z, Y.data, a.workspace, a.stream) == CUDNN_STATUS_SUCCESS) return;
      fused_ = false;
      describe();
    }
    DNN_CHECK(run_conv(X.data, w, b, z, Y.data, a.workspace, a.stream));
  }

 private:
  bool transpose_ = false, nhwc_ = false, found_ = false, fused_ = false, strict_ = false;
  bool unchecked_fused_ = false;  // fused_ from the tuning cache, not yet called
  DeviceBuffer own_weights_;  // NHWC: KRSC weights
  std::unique_ptr<ConvRoute> gemm_route_;   // 1x1 convs: the GEMM route the tuner may pick
  int gemm_pick_ = -1;                      // its chosen candidate, or -1: cuDNN runs the conv
  std::unique_ptr<ConvRoute> igemm_route_;  // strict fp32 2-D convs: fusec's own kernel
  int igemm_pick_ = -1;                     // its chosen configuration, or -1
  cudnnTensorDescriptor_t bias_ = nullptr;
  DeviceBuffer zero_bias_;  // [channels] zeros: the fused call's bias when the node has none
  cudnnActivationDescriptor_t act_desc_ = nullptr;
  cudnnConvolutionFwdAlgo_t fused_algo_{};
  cudnnHandle_t handle_ = nullptr;
  cudnnTensorDescriptor_t x_ = nullptr, y_ = nullptr;
  cudnnFilterDescriptor_t w_ = nullptr;
  cudnnConvolutionDescriptor_t conv_ = nullptr;
  cudnnConvolutionFwdAlgo_t fwd_algo_{};
  cudnnConvolutionBwdDataAlgo_t bwd_algo_{};
  cudnnMathType_t math_ = CUDNN_DEFAULT_MATH;
  size_t workspace_ = 0;
  ConvEpilogue ep_;  // bias, residual, activation: what every route applies after the conv
  std::string name_;
};

std::unique_ptr<CudaOp> make_conv(const PlanContext& c, std::string* why, bool transpose, bool nhwc = false) {
  auto op = std::make_unique<ConvOp>();
  if (!op->plan(c, transpose, nhwc, why)) return nullptr;
  return op;
}

}  // namespace

void register_conv_ops(CudaOpRegistry& r) {
  r.add("Conv", [](const PlanContext& c, std::string* why) { return make_conv(c, why, false); });
  r.add("FusedConv", [](const PlanContext& c, std::string* why) { return make_conv(c, why, false); }, "ai.fusec");
  r.add("ConvTranspose", [](const PlanContext& c, std::string* why) { return make_conv(c, why, true); });
  r.add_channels_last("Conv", [](const PlanContext& c, std::string* why) { return make_conv(c, why, false, true); });
  r.add_channels_last("FusedConv", [](const PlanContext& c, std::string* why) { return make_conv(c, why, false, true); }, "ai.fusec");
}

}  // namespace fusec::cuda
