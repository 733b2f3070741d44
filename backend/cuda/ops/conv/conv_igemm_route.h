// The implicit-GEMM convolution (conv_igemm.cuh) as a route (conv_route.h) the conv tuner times
// beside cuDNN's algorithms at strict fp32: NCHW, 2-D, ungrouped, with bias, residual and ReLU (or
// GELU) fused. It holds the shape's tap table on the device. Its last candidates are Winograd's
// (winograd_route.cpp): they share the route's numbering, which the tuning cache and
// FUSEC_CONV_IGEMM=N name, so they are candidates of this route, not a route of their own.
//
// K runs tap-major wherever it can (C % 16 == 0 and constant weights). Both orders were timed on
// every ResNet-50 conv at batch 16: tap-major won every shape it applies to, even the stride-2
// ones where the (c, r, s) order keeps an input row's sectors in L1 across a window's taps; its
// copies cost fewer instructions. A deeper ring (6 stages) for the late layers won nothing either.
#pragma once
#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/core/context.h"
#include "backend/cuda/ops/conv/conv_igemm.cuh"
#include "backend/cuda/ops/conv/conv_route.h"
#include "backend/cuda/ops/elementwise/epilogue.cuh"
#include "backend/cuda/ops/conv/winograd.cuh"
#include "ir/tensor.h"

namespace fusec::cuda {

class ConvIgemmRoute : public ConvRoute {
 public:
  /// Uploads the tap table; false, with why, when the kernel does not take the shape or the
  /// activation. Given the weights (a constant) and C % 16 == 0, the route runs tap-major on its
  /// own [Cout][R][S][C] copy of them (ConvTapArgs).
  bool plan(const ConvIgemmShape& s, bool bias, bool residual, const ActParams& act, const Tensor* weights,
            cudaStream_t stream, std::string* why);

  /// Whether candidate i reads the route's own copy of the weights rather than the op's input.
  bool owns_weights(int i) const override;

  /// How a candidate reads X: as it is, or (pointwise configurations) a 1x1 conv's packed
  /// [C][batch·P·Q] copy, where X's own planes have no 16-byte rows (P·Q % 4 != 0) or are strided;
  /// or as a Winograd F(4x4, 3x3) conv (winograd.cuh) in either layout, for a 3x3 stride-1 pad-1
  /// conv with constant weights, its configuration then one of the batched GEMM's.
  enum class Mode { Plain, Packed, WinogradChannels, WinogradTiles };
  /// Every kernel configuration, then the pointwise ones packed, then the Winograd ones.
  static int candidate_count();
  /// Candidate i's kernel configuration (of conv_igemm.cuh's, or the Winograd GEMM's) and mode.
  static int config_of(int i, Mode* mode);
  int candidates() const override { return candidate_count(); }
  /// Candidate i's name where it applies here (a packed candidate elsewhere runs as its plain
  /// configuration, an im2col configuration as its tap-major form where the route has one).
  std::string identity(int i) const override;
  /// Whether candidate i differs from the others here: a pointwise one only for a 1x1 conv it
  /// takes (elsewhere it would run as its im2col twin), a packed one only for a 1x1 conv whose
  /// own planes have no 16-byte rows or are strided (ResNet-50's layer-4 7x7 convs, downsamples).
  bool worth_timing(int i) const override;

  /// The workspace candidate i needs: the packed copy of X, stream-K's partial sums.
  size_t workspace(int i) const override;

  /// y = act(conv(x, w) + b + z) with configuration i and its workspace; false when it launched
  /// nothing. A candidate that does not apply here runs as its plain configuration (a Winograd
  /// one as the first plain configuration).
  bool run(int i, const void* x, const void* w, const void* b, const void* z, void* y, void* ws,
           cudaStream_t stream) const override;
  /// run, an error when it launched nothing or the launch failed.
  std::string kernel_name(int i) const override;

  /// Makes what candidate i reads beyond the op's inputs (a Winograd layout's transformed filter),
  /// if it has not been made; false when it cannot be (after the plan, whose weights it reads).
  /// Call before running the candidate, while the op is planned (on the plan's stream).
  bool prepare(int i) override;

  /// Once candidate i is picked, at the end of the plan: frees the device copies of the weights
  /// that it does not read, and forgets the plan's weights.
  void keep_only(int i) override;

 private:
  ConvIgemmShape s_;
  DeviceBuffer taps_, weights_;
  DeviceBuffer flags_;                       // stream-K's, zero between launches
  DeviceBuffer wino_channels_, wino_tiles_;  // the transformed filters, one per layout, once prepared
  WinogradShape wino_;
  bool wino_channels_ok_ = false, wino_tiles_ok_ = false;  // the layouts the shape takes
  const Tensor* weights_host_ = nullptr;                   // during the plan only
  cudaStream_t stream_ = nullptr;                          // the plan's
  DeviceBuffer wino_w_;                                    // the weights, during the plan
  SgemmAct act_ = SgemmAct::None;
  bool bias_ = false, residual_ = false, pointwise_ = false, packable_ = false, tap_major_ = false;
  static bool winograd(Mode m) { return m == Mode::WinogradChannels || m == Mode::WinogradTiles; }
  size_t pack_bytes(Mode mode) const;
  bool applies(Mode mode) const;
  // winograd_route.cpp:
  void plan_winograd(const Tensor& weights);
  bool run_winograd(Mode mode, int cfg, const void* x, const void* b, const void* z, void* y, void* ws,
                    cudaStream_t stream) const;
};

/// The route for a 2-D, ungrouped conv whose kernel takes the shape and the activation; null
/// elsewhere. FUSEC_CONV_IGEMM=0 leaves it out; FUSEC_CONV_TAP=0 keeps K in the weights' (c, r, s)
/// order.
std::unique_ptr<ConvRoute> plan_conv_igemm_route(const PlanContext& c, const WindowGeometry& g, int group,
                                                 const ConvEpilogue& ep);

/// The candidate FUSEC_CONV_IGEMM=N forces (tests: N - 1, taken untimed), or -1.
int conv_igemm_forced();

}  // namespace fusec::cuda
