// fusec's own kernels for a channels-last 1x1 conv, as a route (conv_route.h) the conv tuner times
// against cuDNN at every precision. In NHWC memory a 1x1, stride-1, unpadded, ungrouped conv is a
// plain product,
//
//     Y[N·H·W, Cout] = act(X[N·H·W, Cin] · Wᵀ + b + Z),   W: [Cout][Cin] (the weights' own memory)
//
// with no copy of anything, and every candidate applies the whole epilogue before its one store,
// in the reference's order (conv + b) + z, then the activation. The candidates:
//   * the wgmma GEMM (hgemm.cuh), fp16/bf16 on Hopper, where cuDNN would need the epilogue pass: its
//     fused call takes bias, residual and ReLU only, so a 1x1 conv followed by SiLU, HardSwish,
//     Sigmoid or GELU ran as its conv and then a pass that reads and writes the whole output again
//     (EfficientNet's and MobileNetV3's expansion layers);
//   * few rows (pointwise_rows.cuh), float storage, on the same condition: a squeeze-excite
//     block's two layers, N·1·1 rows, where cuDNN launched a tile kernel and the pass for a few
//     thousand multiply-adds;
//   * narrow channels (pointwise_narrow.cuh), float storage, whatever the activation, where Cin or
//     Cout is not a multiple of 16 bytes: cuDNN pads those on every call (ShuffleNetV2's 58 and
//     116).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/ops/conv/conv_route.h"
#include "backend/cuda/ops/conv/pointwise_narrow.cuh"
#include "backend/cuda/ops/conv/pointwise_rows.cuh"
#include "backend/cuda/ops/gemm/hgemm.cuh"

namespace fusec::cuda {

class ConvPointwiseRoute : public ConvRoute {
 public:
  /// `hgemm`: the wgmma GEMM's operands (pointers unset) when its configurations are candidates;
  /// `rows`: the few-rows kernel's, when it is one; `narrow`: the narrow-channel kernel's, when its
  /// configurations are.
  ConvPointwiseRoute(const HgemmArgs* hgemm, const PointwiseRowsArgs* rows, const PointwiseNarrowArgs* narrow,
                     bool bias, bool residual);

  int candidates() const override { return static_cast<int>(kinds_.size()); }
  std::string identity(int i) const override;
  size_t workspace(int i) const override { return 0; }
  bool run(int i, const void* x, const void* w, const void* b, const void* z, void* y, void* ws,
           cudaStream_t stream) const override;
  std::string kernel_name(int i) const override;

 private:
  HgemmArgs hgemm_;
  PointwiseRowsArgs rows_;
  PointwiseNarrowArgs narrow_;
  bool bias_, residual_;
  // Per candidate: a wgmma configuration (>= 0), kRows, or kNarrow - c for narrow configuration c.
  std::vector<int> kinds_;
  static constexpr int kRows = -1, kNarrow = -2;
  static bool is_narrow(int kind) { return kind <= kNarrow; }
  DType dtype(int kind) const;
};

/// Whether a conv of these weight dims [Cout, Cin/group, kh, kw], group, strides and pads is one
/// the route runs on the narrow-channel kernel for `dt`: a 1x1, stride-1, unpadded, ungrouped conv
/// whose Cin or Cout is not a multiple of 16 bytes. The layout rule asks it too, so that such a
/// conv is not counted as one that cuDNN pads.
bool pointwise_narrow_applies(const std::vector<int64_t>& w, int64_t group, const std::vector<int64_t>& strides,
                              const std::vector<int64_t>& pads, DType dt);

/// Whether the conv op plans this route at all: timed by the tuner, or forced (FUSEC_CONV_GEMM).
bool pointwise_route_planned();

/// The route for a channels-last, 1x1, stride-1, unpadded, ungrouped conv, where one of its
/// kernels takes it: with an activation cuDNN's fused call cannot apply (not ReLU, not none), the
/// wgmma GEMM for fp16/bf16 on Hopper (FUSEC_HGEMM=0 leaves it out) and the few-rows kernel for at
/// most kPointwiseRowsMax rows; with any activation, the narrow-channel kernel where
/// pointwise_narrow_applies; null elsewhere. FUSEC_CONV_GEMM=0 leaves the route out, as it does the NCHW GEMM route.
std::unique_ptr<ConvRoute> plan_conv_pointwise_route(const PlanContext& c, const WindowGeometry& g, int group,
                                                     const ConvEpilogue& ep);

}  // namespace fusec::cuda
