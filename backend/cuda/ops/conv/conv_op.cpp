// Conv, ai.fusec FusedConv and ConvTranspose on the GPU: the CudaOp that checks a node, plans the
// routes that can run it (conv_route.h) and picks one. cuDNN (conv_cudnn.h) is planned for every
// node and runs it unless another route is picked: at strict fp32 the tuner times cuDNN's usable
// algorithms (each fused where cuDNN's fused call takes it), the 1x1 conv's GEMM route
// (conv_gemm.h) and the implicit-GEMM route's candidates (conv_igemm_route.h), each as it will
// launch, and keeps the fastest (tuning cache). A node without a bias input is a first-class case
// on every route: fusec's own kernels (the implicit-GEMM conv, Winograd, the epilogue pass) and the
// 1x1 GEMM route take a null bias; only cuDNN's fused call needs a bias tensor, and gets [C] zeros
// made once at plan time. Asymmetric padding, which cuDNN's legacy API cannot express, runs on the
// CPU reference.
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "backend/cuda/core/build_trace.h"
#include "backend/cuda/core/check.h"
#include "backend/cuda/core/cuda_op.h"
#include "backend/cuda/core/dnn_check.h"
#include "backend/cuda/core/gpu_hold.cuh"
#include "backend/cuda/core/tuning_cache.h"
#include "backend/cuda/ops/conv/conv_cudnn.h"
#include "backend/cuda/ops/conv/conv_gemm.h"
#include "backend/cuda/ops/conv/conv_igemm_route.h"
#include "backend/cuda/ops/conv/conv_route.h"
#include "backend/cuda/ops/elementwise/epilogue.cuh"
#include "ir/ops/conv_geometry.h"

namespace fusec::cuda {

namespace {

class ConvOp : public CudaOp {
 public:
  /// Checks the node, plans cuDNN and the routes that may beat it, and picks one; false (with why)
  /// when cuDNN offers nothing.
  bool plan(const PlanContext& c, bool transpose, bool nhwc, std::string* why) {
    ep_.dt = c.out_dtype(0);
    cudnnDataType_t t;
    if (!CudnnConv::data_type(ep_.dt, &t) || c.in_dtype(0) != ep_.dt || c.in_dtype(1) != ep_.dt) {
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
    cudnn_.set_tensors(c, t, transpose, nhwc);
    auto phase_t0 = std::chrono::steady_clock::now();
    if (nhwc) cudnn_.own_weights(c);
    if (nhwc) BuildTrace::add("conv weights KRSC", c.node().op_type, c.node().name, ms_since(phase_t0));
    phase_t0 = std::chrono::steady_clock::now();
    // Strict fp32 must not use TF32 tensor cores (cuDNN's default math allows them on sm_80+).
    const bool strict = ep_.dt == DType::Float32 && !c.allow_tf32();
    cudnn_.set_convolution(pads, strides, dil, group, strict);

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
    const bool tuning = !transpose && conv_tuning_on(strict) && TuningCache::global().enabled();
    const char* no_fused = std::getenv("FUSEC_CONV_FUSED");
    // Whether the bias exists does not matter: a conv without one (dynamo exports drop all-zero
    // biases; conv -> ReLU without BN has none) runs the same fused call on a zero bias made once
    // here (CudnnConv's zero_bias_), so it launches one kernel as the biased form does. A conv with no
    // epilogue at all runs as the plain forward call.
    const bool epilogue_work = ep_.has_bias || ep_.has_z || ep_.act.act != Act::None;
    const bool may_fuse = !transpose && epilogue_work && ep_.dt != DType::Float64 && (ep_.act.act == Act::Relu || ep_.act.act == Act::None) &&
                          !(no_fused && std::string(no_fused) == "0");
    // Untimed choices (fp16, bf16, tf32 by default) are remembered too: a warm build reads the
    // algorithm and the fused call's outcome back instead of asking cuDNN's heuristics and making
    // a trial call. The first launch checks the fused call.
    std::string choice;
    if (!transpose && !tuning && !conv_gemm_forced() && ep_.dt != DType::Float64 && TuningCache::global().enabled())
      choice = cudnn_.choice_key(c, "choice", strict, may_fuse);
    if (!choice.empty() && cudnn_.recall_choice(choice, may_fuse)) {
      BuildTrace::add("conv heuristics", c.node().op_type, c.node().name, ms_since(phase_t0));
      cudnn_.keep_zero_bias_if_fused();
      describe();
      return true;
    }
    std::vector<FwdChoice> candidates;  // usable forward algorithms, the heuristics' order
    const bool found = cudnn_.heuristics(strict, &candidates);
    BuildTrace::add("conv heuristics", c.node().op_type, c.node().name, ms_since(phase_t0));
    if (!found) { *why = "cuDNN has no algorithm for this convolution"; return false; }

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
      FwdChoice ch = cudnn_.choice();
      ch.gemm = 0;
      tuned = apply(ch);
    }
    if (!tuned && igemm_route_ && conv_igemm_forced() >= 0) {  // tests: one implicit-GEMM configuration, untimed
      FwdChoice ch = cudnn_.choice();
      ch.igemm = conv_igemm_forced();
      tuned = apply(ch);
    }
    if (!tuned && tuning) {
      const FwdChoice heuristic = cudnn_.choice();
      phase_t0 = std::chrono::steady_clock::now();
      tuned = tune_forward(c, candidates, may_fuse);
      BuildTrace::add("conv tuning", c.node().op_type, c.node().name, ms_since(phase_t0));
      if (!tuned) {  // trials may have left another choice applied
        cudnn_.restore(heuristic);
        gemm_pick_ = -1;
        igemm_pick_ = -1;
      }
    }
    if (!tuned) {
      cudnn_.exact_workspace();
      phase_t0 = std::chrono::steady_clock::now();
      if (may_fuse) cudnn_.try_fused(c);
      BuildTrace::add("conv fused trial", c.node().op_type, c.node().name, ms_since(phase_t0));
      if (!choice.empty()) cudnn_.remember_choice(choice);
    }
    if (gemm_pick_ < 0) gemm_route_.reset();  // cuDNN runs it: no descriptors or bias plane held for nothing
    if (igemm_pick_ < 0) igemm_route_.reset();
    else igemm_route_->keep_only(igemm_pick_);
    cudnn_.keep_zero_bias_if_fused();
    describe();
    return true;
  }

  /// The bias a launch passes: the node's, the zero one for a bias-free fused call, else null.
  const void* bias_or_zero(const LaunchArgs& a) const { return ep_.has_bias ? a.inputs[2].data : cudnn_.zero_bias(); }

  void describe() {
    if (igemm_pick_ >= 0) {
      name_ = igemm_route_->kernel_name(igemm_pick_);
      return;
    }
    if (gemm_pick_ >= 0) {
      name_ = gemm_route_->kernel_name(gemm_pick_);
      return;
    }
    name_ = cudnn_.kernel_name();
  }

  static bool conv_tuning_on(bool strict) {
    const char* e = std::getenv("FUSEC_CONV_TUNE");
    if (e && std::string(e) == "0") return false;
    if (e && std::string(e) == "all") return true;
    return strict;
  }

  /// Sets the op to run `ch`: a route's candidate, or cuDNN's algorithm, math mode, exact
  /// workspace, fused or not.
  bool apply(const FwdChoice& ch) {
    igemm_pick_ = -1;
    if (ch.igemm >= 0) {
      if (!igemm_route_ || ch.igemm >= igemm_route_->candidates() || !igemm_route_->prepare(ch.igemm))
        return false;
      igemm_pick_ = ch.igemm;
      gemm_pick_ = -1;
      cudnn_.unfuse();
      return true;
    }
    if (ch.gemm >= 0) {
      if (!gemm_route_ || ch.gemm >= gemm_route_->candidates()) return false;
      gemm_pick_ = ch.gemm;
      cudnn_.unfuse();
      return true;
    }
    gemm_pick_ = -1;
    return cudnn_.apply(ch);
  }

  /// The fastest candidate by timing the real launch, remembered in the tuning cache; false
  /// (nothing changed) when tuning is off or there is no memory for the trial.
  bool tune_forward(const PlanContext& c, std::vector<FwdChoice> cands, bool may_fuse) {
    TuningCache& cache = TuningCache::global();
    if (!cache.enabled() || cands.empty() || ep_.dt == DType::Float64 || !cudnn_.fused_desc_ready(may_fuse)) return false;
    const std::string key = cudnn_.choice_key(c, "launch", cands[0].math == CUDNN_FMA_MATH, may_fuse);
    if (key.empty()) return false;
    const bool trace = std::getenv("FUSEC_CONV_TRACE") != nullptr;
    size_t es = dtype_size(ep_.dt);
    const size_t xb = numel(c.in_dims(0)) * es, wb = numel(c.in_dims(1)) * es, yb = numel(c.out_dims(0)) * es;
    size_t ws = cudnn_.candidate_workspaces(&cands);
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

  /// The convolution as it launches, on the picked route (cuDNN's: the fused call, or the conv then
  /// the epilogue pass). launch() and every plan-time trial run this one.
  cudnnStatus_t run_conv(const void* x, const void* w, const void* b, const void* z, void* y, void* ws, cudaStream_t stream) {
    if (igemm_pick_ >= 0)
      return igemm_route_->run(igemm_pick_, x, w, b, z, y, ws, stream) ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_EXECUTION_FAILED;
    if (gemm_pick_ >= 0)
      return gemm_route_->run(gemm_pick_, x, w, b, z, y, ws, stream) ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_EXECUTION_FAILED;
    return cudnn_.run(x, w, b, z, y, ws, stream);
  }

  size_t workspace_bytes() const override {
    if (igemm_pick_ >= 0) return igemm_route_->workspace(igemm_pick_);
    if (gemm_pick_ >= 0) return gemm_route_->workspace(gemm_pick_);
    return cudnn_.workspace();
  }
  std::string kernel_name() const override { return name_; }
  bool reads_input(size_t i) const override {
    return !(i == 1 && (cudnn_.owned_weights() || (igemm_pick_ >= 0 && igemm_route_->owns_weights(igemm_pick_))));
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
    const void* w = cudnn_.owned_weights() ? cudnn_.owned_weights() : a.inputs[1].data;
    if (igemm_pick_ >= 0) {
      igemm_route_->launch(igemm_pick_, X.data, w, b, z, Y.data, a.workspace, a.stream);
      return;
    }
    if (gemm_pick_ >= 0) {
      gemm_route_->launch(gemm_pick_, X.data, w, b, z, Y.data, a.workspace, a.stream);
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

 private:
  std::unique_ptr<ConvRoute> gemm_route_;   // 1x1 convs: the GEMM route the tuner may pick
  int gemm_pick_ = -1;                      // its chosen candidate, or -1: cuDNN runs the conv
  std::unique_ptr<ConvRoute> igemm_route_;  // strict fp32 2-D convs: fusec's own kernel
  int igemm_pick_ = -1;                     // its chosen configuration, or -1
  ConvEpilogue ep_;  // bias, residual, activation: what every route applies after the conv
  CudnnConv cudnn_{ep_};  // after the routes: torn down before them, as when it was part of this class
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
