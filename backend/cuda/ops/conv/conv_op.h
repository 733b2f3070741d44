// The conv op's class, defined in two files: conv_op.cpp (the node's checks, the routes' plans,
// the pick, launch, registration) and conv_tune.cpp (timing the candidates of every route on
// scratch buffers, and the tuning cache's "launch" entries). Only ops/conv/ includes it.
#pragma once
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/core/cuda_op.h"
#include "backend/cuda/ops/conv/conv_cudnn.h"
#include "backend/cuda/ops/conv/conv_route.h"
#include "backend/cuda/ops/conv/depthwise_route.h"

namespace fusec::cuda {

class ConvOp : public CudaOp {
 public:
  /// Checks the node, plans cuDNN and the routes that may beat it, and picks one; false (with why)
  /// when cuDNN offers nothing.
  bool plan(const PlanContext& c, bool transpose, bool nhwc, std::string* why);

  void launch(const LaunchArgs& a) override;
  size_t workspace_bytes() const override;
  std::string kernel_name() const override { return name_; }
  bool reads_input(size_t i) const override;
  std::string device_decision() const override { return decision_; }

  /// Whether the tuner times this conv: FUSEC_CONV_TUNE=0 never, =all at every precision, else
  /// where `timed` (strict fp32, or a conv with a route of fusec's own).
  static bool conv_tuning_on(bool timed);

 private:
  /// Bias, residual and activation from the node into ep_; false (with why) where they do not fit.
  bool plan_epilogue(const PlanContext& c, bool nhwc, std::string* why);
  /// The depthwise route alone, untimed (a conv cuDNN cannot take: asymmetric pads).
  bool plan_depthwise_only();
  /// The route of fusec's own that runs the conv and its candidate in *i; null when cuDNN runs it.
  ConvRoute* picked(int* i) const;
  /// At the end of the plan: frees the routes (and cuDNN's weights) that the pick does not use.
  void keep_picked_route();
  /// The tuning cache's key for the conv's launch choice: cuDNN's problem key and a signature of
  /// the routes' candidates, so that a pick is recalled only by a build with the same race.
  std::string launch_key(const PlanContext& c, bool fma, bool may_fuse) const;
  /// The fastest candidate by timing the real launch, remembered in the tuning cache; false
  /// (nothing changed) when tuning is off or there is no memory for the trial.
  bool tune_forward(const PlanContext& c, std::vector<FwdChoice> cands, bool may_fuse);
  /// A depthwise pick remembered under the conv's "launch" key ("dw:index|identity"), applied
  /// without asking cuDNN's heuristics (a warm build); false when there is none for this build.
  bool recall_depthwise(const PlanContext& c, bool strict, bool may_fuse);
  /// Sets the op to run `ch`: a route's candidate, or cuDNN's algorithm, math mode, exact
  /// workspace, fused or not.
  bool apply(const FwdChoice& ch);
  /// The convolution as it launches, on the picked route (cuDNN's: the fused call, or the conv then
  /// the epilogue pass). launch() and every plan-time trial run this one.
  cudnnStatus_t run_conv(const void* x, const void* w, const void* b, const void* z, void* y, void* ws,
                         cudaStream_t stream);
  /// The bias a launch passes: the node's, the zero one for a bias-free fused call, else null.
  const void* bias_or_zero(const LaunchArgs& a) const;
  void describe();

  std::unique_ptr<ConvRoute> gemm_route_;         // 1x1 convs: the GEMM route the tuner may pick
  int gemm_pick_ = -1;                            // its chosen candidate, or -1: cuDNN runs the conv
  std::unique_ptr<ConvRoute> igemm_route_;        // strict fp32 2-D convs: fusec's own kernel
  int igemm_pick_ = -1;                           // its chosen configuration, or -1
  std::unique_ptr<ConvDepthwiseRoute> dw_route_;  // channels-last depthwise convs: fusec's own kernel
  int dw_pick_ = -1;                              // its chosen configuration, or -1
  std::unique_ptr<ConvRoute> grp_route_;          // channels-last grouped convs: fusec's own kernel
  int grp_pick_ = -1;                             // its chosen candidate, or -1
  ConvEpilogue ep_;                               // bias, residual, activation: what every route applies after the conv
  CudnnConv cudnn_{ep_};  // after the routes: torn down before them, as when it was part of this class
  std::string name_;
  std::string decision_;  // device_decision(): set by tune_forward, or recalled with its pick
};

}  // namespace fusec::cuda
