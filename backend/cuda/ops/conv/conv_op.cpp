// Conv, ai.fusec FusedConv and ConvTranspose on the GPU: the CudaOp that checks a node, plans the
// routes that can run it (conv_route.h) and picks one. cuDNN (conv_cudnn.h) is planned for every
// node and runs it unless another route is picked: at strict fp32 the tuner times cuDNN's usable
// algorithms (each fused where cuDNN's fused call takes it), the 1x1 conv's GEMM route
// (conv_gemm.h) and the implicit-GEMM route's candidates (conv_igemm_route.h), each as it will
// launch, and keeps the fastest (tuning cache). A channels-last depthwise conv is timed at every
// precision: the depthwise route's candidates (depthwise_route.h) against cuDNN's choice; so is a
// channels-last 1x1 conv that fusec's own pointwise kernels take (conv_pointwise_route.h). A node
// without a bias input is a first-class case on every route: fusec's own kernels (the
// implicit-GEMM conv, Winograd, the depthwise conv, the epilogue pass) and the 1x1 GEMM route take
// a null bias; only cuDNN's fused call needs a bias tensor, and gets [C] zeros made once at plan
// time. Asymmetric padding, which cuDNN's legacy API cannot express, runs on the depthwise route
// where it applies, else on the CPU reference. The tuner that times the candidates is
// conv_tune.cpp.
#include "backend/cuda/ops/conv/conv_op.h"

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstdlib>

#include "backend/cuda/core/build_trace.h"
#include "backend/cuda/core/check.h"
#include "backend/cuda/core/cuda_op.h"
#include "backend/cuda/core/dnn_check.h"
#include "backend/cuda/core/tuning_cache.h"
#include "backend/cuda/ops/conv/conv_cudnn.h"
#include "backend/cuda/ops/conv/conv_gemm.h"
#include "backend/cuda/ops/conv/conv_igemm_route.h"
#include "backend/cuda/ops/conv/conv_pointwise_route.h"
#include "backend/cuda/ops/conv/conv_route.h"
#include "backend/cuda/ops/conv/depthwise_route.h"
#include "backend/cuda/ops/conv/grouped_route.h"
#include "backend/cuda/ops/elementwise/epilogue.cuh"
#include "ir/switches.h"
#include "ir/ops/conv_geometry.h"

namespace fusec::cuda {

bool ConvOp::plan(const PlanContext& c, bool transpose, bool nhwc, std::string* why) {
  ep_.dt = c.out_dtype(0);
  cudnnDataType_t t;
  if (!CudnnConv::data_type(ep_.dt, &t) || c.in_dtype(0) != ep_.dt || c.in_dtype(1) != ep_.dt) {
    *why = std::string("convolution on ") + dtype_name(c.in_dtype(0)) + " runs on the CPU";
    return false;
  }
  const auto& xd = c.in_dims(0);
  const auto& wd = c.in_dims(1);
  if (xd.size() < 3 || xd.size() > 5) {
    *why = "only 1-D, 2-D and 3-D convolutions run on cuDNN";
    return false;
  }
  if (nhwc && ((xd.size() != 4 && xd.size() != 5) || transpose || !c.constant(1))) {
    *why = "channels-last needs a 2-D or 3-D conv with constant weights";
    return false;
  }
  for (int64_t d : xd)
    if (d > INT32_MAX) {
      *why = "dims beyond int32";
      return false;
    }
  const size_t nsp = xd.size() - 2;
  std::vector<int64_t> in_sp(xd.begin() + 2, xd.end());
  std::vector<int64_t> kernel(wd.begin() + 2, wd.end());
  WindowGeometry g = transpose ? conv_transpose_geometry(c, in_sp, kernel) : window_geometry(c, in_sp, kernel, false);
  if (!plan_epilogue(c, nhwc, why)) return false;
  const int group = static_cast<int>(c.attr_int("group"));
  bool asymmetric = false;
  for (size_t i = 0; i < nsp; ++i) asymmetric = asymmetric || g.pad_begin[i] != g.pad_end[i] || g.pad_begin[i] < 0;
  // The depthwise route where it can be chosen: timed, forced, or as the only GPU route for
  // asymmetric pads, which cuDNN cannot express.
  if (!transpose &&
      (asymmetric || conv_depthwise_forced() >= 0 || (conv_tuning_on(true) && TuningCache::global().enabled())))
    dw_route_ = plan_conv_depthwise_route(c, g, group, ep_, nhwc);
  // The channels-last grouped conv where it can be chosen: timed, or forced.
  if (!transpose && !asymmetric &&
      (conv_grouped_forced() >= 0 || (conv_tuning_on(true) && TuningCache::global().enabled())))
    grp_route_ = plan_conv_grouped_route(c, g, group, ep_, nhwc);
  // The channels-last 1x1 conv on fusec's own kernels with the whole epilogue inside (the wgmma
  // GEMM where cuDNN would need the epilogue pass, a few-rows kernel for squeeze-excite layers, the
  // narrow-channel kernel where cuDNN pads): timed against cuDNN's choice at every precision.
  if (!transpose && nhwc && !asymmetric && pointwise_route_planned())
    gemm_route_ = plan_conv_pointwise_route(c, g, group, ep_);
  if (asymmetric) {
    if (dw_route_) return plan_depthwise_only();
    *why = "asymmetric padding runs on the CPU";
    return false;
  }
  if (transpose) {
    for (size_t i = 0; i < nsp; ++i) {
      // cuDNN derives the forward-conv size from the output; it must give back the input.
      const int64_t window = (g.kernel[i] - 1) * g.dilation[i] + 1;  // checked by the geometry already
      int64_t fwd = (g.out[i] + 2 * g.pad_begin[i] - window) / g.stride[i] + 1;
      if (fwd != in_sp[i]) {
        *why = "this output_padding/output_shape runs on the CPU";
        return false;
      }
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
  cudnn_.set_tensors(c, t, transpose, nhwc);
  auto phase_t0 = std::chrono::steady_clock::now();
  if (nhwc) cudnn_.own_weights(c);
  if (nhwc) BuildTrace::add("conv weights KRSC", c.node().op_type, c.node().name, ms_since(phase_t0));
  phase_t0 = std::chrono::steady_clock::now();
  // Strict fp32 must not use TF32 tensor cores (cuDNN's default math allows them on sm_80+).
  const bool strict = ep_.dt == DType::Float32 && !c.allow_tf32();
  cudnn_.set_convolution(pads, strides, dil, group, strict);

  // A depthwise conv with its own route is timed at every precision: which of the two is faster
  // depends on the device and the shape (cuDNN's channels-last depthwise kernels ran far below the
  // copy peak on some). So is a channels-last 1x1 conv with its own route (conv_pointwise_route.h).
  const bool tuning =
      !transpose && conv_tuning_on(strict || dw_route_ || gemm_route_ || grp_route_) && TuningCache::global().enabled();
  const int dw_forced = dw_route_ ? conv_depthwise_forced() : -1;
  const char* no_fused = env_switch("FUSEC_CONV_FUSED");
  // Whether the bias exists does not matter: a conv without one (dynamo exports drop all-zero
  // biases; conv -> ReLU without BN has none) runs the same fused call on a zero bias made once
  // here (CudnnConv's zero_bias_), so it launches one kernel as the biased form does. A conv with no
  // epilogue at all runs as the plain forward call.
  const bool epilogue_work = ep_.has_bias || ep_.has_z || ep_.act.act != Act::None;
  // An activation the fused call cannot take (HardSwish, SiLU, ...) runs as a pass after it, the
  // bias and residual inside the call: the kernels the unfused Conv and its activation node get,
  // so fusing the activation into the node never leaves cuDNN's faster fused call out.
  const bool may_fuse =
      !transpose && epilogue_work && ep_.dt != DType::Float64 && !(no_fused && std::string(no_fused) == "0");
  // Untimed choices (fp16, bf16, tf32 by default) are remembered too: a warm build reads the
  // algorithm and the fused call's outcome back instead of asking cuDNN's heuristics and making
  // a trial call. The first launch checks the fused call.
  std::string choice;
  if (!transpose && !tuning && !conv_gemm_forced() && dw_forced < 0 && ep_.dt != DType::Float64 &&
      TuningCache::global().enabled())
    choice = cudnn_.choice_key(c, "choice", strict, may_fuse);
  if (!choice.empty() && cudnn_.recall_choice(choice, may_fuse)) {
    BuildTrace::add("conv heuristics", c.node().op_type, c.node().name, ms_since(phase_t0));
    keep_picked_route();
    cudnn_.keep_zero_bias_if_fused();
    describe();
    return true;
  }
  if (tuning && dw_forced < 0 && dw_route_ && recall_depthwise(c, strict, may_fuse)) {
    BuildTrace::add("conv heuristics", c.node().op_type, c.node().name, ms_since(phase_t0));
    keep_picked_route();
    describe();
    return true;
  }
  std::vector<FwdChoice> candidates;  // usable forward algorithms, the heuristics' order
  const bool found = cudnn_.heuristics(strict, &candidates);
  BuildTrace::add("conv heuristics", c.node().op_type, c.node().name, ms_since(phase_t0));
  if (!found) {
    *why = "cuDNN has no algorithm for this convolution";
    return false;
  }

  // The GEMM route only where it can be chosen: timed by the tuner, or forced.
  if (!transpose && !nhwc && ep_.dt == DType::Float32 && (tuning || conv_gemm_forced()))
    gemm_route_ = plan_conv_gemm_route(c, g, group, ep_);  // (channels-last: the pointwise route above)
  if (!transpose && !nhwc && strict && (tuning || conv_igemm_forced() >= 0))
    igemm_route_ = plan_conv_igemm_route(c, g, group, ep_);
  // The algorithm by timing the launch as it will run (fused, or the conv and its epilogue
  // pass), warm and repeated, on scratch buffers: strict fp32 by default, where the heuristics'
  // first choice ran ResNet-50's convolutions far from the fp32 peak. cuDNN's own trial timings
  // (cudnnFindConvolutionForwardAlgorithmEx, one cold run each) misled: at fp16 they picked
  // kernels many times slower in the real fused NHWC launch.
  // FUSEC_CONV_TUNE=0 keeps the heuristics' choice; =all times every precision.
  bool tuned = false;
  if (gemm_route_ && conv_gemm_forced()) {  // tests and A/B runs: the GEMM route without timing
    FwdChoice ch = cudnn_.choice();
    const int forced = conv_gemm_forced_candidate();
    ch.gemm = forced < gemm_route_->candidates() ? forced : 0;
    tuned = apply(ch);
  }
  if (!tuned && igemm_route_ && conv_igemm_forced() >= 0) {  // tests: one implicit-GEMM configuration, untimed
    FwdChoice ch = cudnn_.choice();
    ch.igemm = conv_igemm_forced();
    tuned = apply(ch);
  }
  if (!tuned && grp_route_ && conv_grouped_forced() >= 0) {  // tests and A/B runs: a grouped configuration, untimed
    FwdChoice ch = cudnn_.choice();
    ch.grp = conv_grouped_forced();
    tuned = apply(ch);
  }
  if (!tuned && dw_forced >= 0) {  // tests and A/B runs: one depthwise configuration, untimed
    FwdChoice ch = cudnn_.choice();
    ch.dw = dw_forced;
    tuned = apply(ch);
  }
  if (!tuned && tuning) {
    const FwdChoice heuristic = cudnn_.choice();
    // Timed only for the depthwise route: against cuDNN's own choice, not each of its algorithms.
    if (!conv_tuning_on(strict)) candidates.erase(candidates.begin() + 1, candidates.end());
    phase_t0 = std::chrono::steady_clock::now();
    tuned = tune_forward(c, candidates, may_fuse);
    BuildTrace::add("conv tuning", c.node().op_type, c.node().name, ms_since(phase_t0));
    if (!tuned) {  // trials may have left another choice applied
      cudnn_.restore(heuristic);
      gemm_pick_ = -1;
      igemm_pick_ = -1;
      dw_pick_ = -1;
      grp_pick_ = -1;
    }
  }
  if (!tuned) {
    cudnn_.exact_workspace();
    phase_t0 = std::chrono::steady_clock::now();
    if (may_fuse) cudnn_.try_fused(c);
    BuildTrace::add("conv fused trial", c.node().op_type, c.node().name, ms_since(phase_t0));
    if (!choice.empty()) cudnn_.remember_choice(choice);
  }
  keep_picked_route();
  cudnn_.keep_zero_bias_if_fused();
  describe();
  return true;
}

bool ConvOp::plan_epilogue(const PlanContext& c, bool nhwc, std::string* why) {
  // Bias per output channel, FusedConv's residual and activation.
  if (c.node().domain == "ai.fusec") {
    if (!parse_activation(c.attr_string("activation"), c.attr_floats("activation_params"), &ep_.act)) {
      *why = "unknown activation";
      return false;
    }
    ep_.has_z = c.has_input(3);
    if (ep_.has_z && c.in_dims(3) != c.out_dims(0)) {
      *why = "residual shape differs from the output";
      return false;
    }
  }
  ep_.has_bias = c.has_input(2);
  const auto& od = c.out_dims(0);
  ep_.yelems = numel(od);
  ep_.channels = od[1];
  ep_.inner = 1;
  if (!nhwc)  // NHWC: the channel is the innermost dim
    for (size_t i = 2; i < od.size(); ++i) ep_.inner *= od[i];
  if (ep_.has_bias && numel(c.in_dims(2)) != ep_.channels) {
    *why = "bias length differs from the output channels";
    return false;
  }
  return true;
}

bool ConvOp::plan_depthwise_only() {
  const int forced = conv_depthwise_forced();
  FwdChoice ch{};
  ch.dw = forced >= 0 && forced < dw_route_->candidates() ? forced : dw_route_->default_candidate();
  if (!apply(ch)) internal_error("the depthwise route refused its own candidate");
  describe();
  return true;
}

void ConvOp::keep_picked_route() {
  if (gemm_pick_ < 0) gemm_route_.reset();  // cuDNN runs it: no descriptors or bias plane held for nothing
  if (igemm_pick_ < 0)
    igemm_route_.reset();
  else
    igemm_route_->keep_only(igemm_pick_);
  if (dw_pick_ < 0)
    dw_route_.reset();
  else
    cudnn_.release_weights();  // the route reads its own copy
  if (grp_pick_ < 0) {
    grp_route_.reset();
  } else {
    grp_route_->keep_only(grp_pick_);
    cudnn_.release_weights();
  }
}

ConvRoute* ConvOp::picked(int* i) const {
  if (igemm_pick_ >= 0) return *i = igemm_pick_, igemm_route_.get();
  if (gemm_pick_ >= 0) return *i = gemm_pick_, gemm_route_.get();
  if (dw_pick_ >= 0) return *i = dw_pick_, dw_route_.get();
  if (grp_pick_ >= 0) return *i = grp_pick_, grp_route_.get();
  return nullptr;
}

const void* ConvOp::bias_or_zero(const LaunchArgs& a) const {
  return ep_.has_bias ? a.inputs[2].data : cudnn_.zero_bias();
}

void ConvOp::describe() {
  int i = -1;
  const ConvRoute* r = picked(&i);
  name_ = r ? r->kernel_name(i) : cudnn_.kernel_name();
}

bool ConvOp::apply(const FwdChoice& ch) {
  gemm_pick_ = igemm_pick_ = dw_pick_ = grp_pick_ = -1;
  // One of fusec's routes, if ch names one, with what it reads made (prepare); else cuDNN.
  auto take = [&](ConvRoute* route, int i, int* pick) {
    if (!route || i >= route->candidates() || !route->prepare(i)) return false;
    *pick = i;
    cudnn_.unfuse();
    return true;
  };
  if (ch.igemm >= 0) return take(igemm_route_.get(), ch.igemm, &igemm_pick_);
  if (ch.gemm >= 0) return take(gemm_route_.get(), ch.gemm, &gemm_pick_);
  if (ch.dw >= 0) return take(dw_route_.get(), ch.dw, &dw_pick_);
  if (ch.grp >= 0) return take(grp_route_.get(), ch.grp, &grp_pick_);
  return cudnn_.apply(ch);
}

cudnnStatus_t ConvOp::run_conv(const void* x, const void* w, const void* b, const void* z, void* y, void* ws,
                               cudaStream_t stream) {
  int i = -1;
  if (const ConvRoute* r = picked(&i))
    return r->run(i, x, w, b, z, y, ws, stream) ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_EXECUTION_FAILED;
  return cudnn_.run(x, w, b, z, y, ws, stream);
}

size_t ConvOp::workspace_bytes() const {
  int i = -1;
  const ConvRoute* r = picked(&i);
  return r ? r->workspace(i) : cudnn_.workspace();
}

bool ConvOp::reads_input(size_t i) const {
  int k = -1;
  const ConvRoute* r = picked(&k);
  return !(i == 1 && (cudnn_.owned_weights() || (r && r->owns_weights(k))));
}

void ConvOp::launch(const LaunchArgs& a) {
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
  const void* w = cudnn_.owned_weights() ? cudnn_.owned_weights() : a.inputs[1].data;
  int i = -1;
  if (const ConvRoute* r = picked(&i)) {
    r->launch(i, X.data, w, b, z, Y.data, a.workspace, a.stream);
    return;
  }
  if (cudnn_.fused_unchecked()) {
    // A remembered fused call this cuDNN refuses (it says so before launching anything): the
    // same algorithm unfused, with the epilogue pass, in the workspace already reserved.
    if (cudnn_.check_fused(X.data, w, b, z, Y.data, a.workspace, a.stream)) return;
    describe();
  }
  DNN_CHECK(run_conv(X.data, w, b, z, Y.data, a.workspace, a.stream));
}

namespace {

std::unique_ptr<CudaOp> make_conv(const PlanContext& c, std::string* why, bool transpose, bool nhwc = false) {
  auto op = std::make_unique<ConvOp>();
  if (!op->plan(c, transpose, nhwc, why)) return nullptr;
  return op;
}

}  // namespace

void register_conv_ops(CudaOpRegistry& r) {
  r.add("Conv", [](const PlanContext& c, std::string* why) { return make_conv(c, why, false); });
  r.add(
      "FusedConv", [](const PlanContext& c, std::string* why) { return make_conv(c, why, false); }, "ai.fusec");
  r.add("ConvTranspose", [](const PlanContext& c, std::string* why) { return make_conv(c, why, true); });
  r.add_channels_last("Conv", [](const PlanContext& c, std::string* why) { return make_conv(c, why, false, true); });
  r.add_channels_last(
      "FusedConv", [](const PlanContext& c, std::string* why) { return make_conv(c, why, false, true); }, "ai.fusec");
}

}  // namespace fusec::cuda
