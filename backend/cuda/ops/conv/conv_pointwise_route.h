// fusec's own kernels for a channels-last 1x1 conv, as a route (conv_route.h) the conv tuner times
// against cuDNN at every precision. In NHWC memory a 1x1, stride-1, unpadded, ungrouped conv is a
// plain product,
//
//     Y[N·H·W, Cout] = act(X[N·H·W, Cin] · Wᵀ + b + Z),   W: [Cout][Cin] (the weights' own memory)
//
// with no copy of anything, and both candidates apply the whole epilogue before their one store,
// in the reference's order (conv + b) + z, then the activation. cuDNN's fused call takes bias,
// residual and ReLU only, so a 1x1 conv followed by SiLU, HardSwish, Sigmoid or GELU ran as its
// conv and then the epilogue pass, which reads and writes the whole output again. The candidates:
//   * the wgmma GEMM (hgemm.cuh), fp16/bf16 on Hopper (EfficientNet's and MobileNetV3's expansion
//     layers);
//   * few rows (pointwise_rows.cuh), float storage: a squeeze-excite block's two layers, N·1·1
//     rows, where cuDNN launched a tile kernel and the pass for a few thousand multiply-adds.
// Both only where cuDNN would need that pass: with ReLU or no activation its fused call is one
// kernel already.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/ops/conv/conv_route.h"
#include "backend/cuda/ops/conv/pointwise_rows.cuh"
#include "backend/cuda/ops/gemm/hgemm.cuh"

namespace fusec::cuda {

class ConvPointwiseRoute : public ConvRoute {
 public:
  /// `hgemm`: the wgmma GEMM's operands (pointers unset) when its configurations are candidates;
  /// `rows`: the few-rows kernel's, when it is one.
  ConvPointwiseRoute(const HgemmArgs* hgemm, const PointwiseRowsArgs* rows, bool bias, bool residual);

  int candidates() const override { return static_cast<int>(kinds_.size()); }
  std::string identity(int i) const override;
  size_t workspace(int i) const override { return 0; }
  bool run(int i, const void* x, const void* w, const void* b, const void* z, void* y, void* ws,
           cudaStream_t stream) const override;
  void launch(int i, const void* x, const void* w, const void* b, const void* z, void* y, void* ws,
              cudaStream_t stream) const override;
  std::string kernel_name(int i) const override;

 private:
  HgemmArgs hgemm_;
  PointwiseRowsArgs rows_;
  bool bias_, residual_;
  std::vector<int> kinds_;  // per candidate: a wgmma configuration (>= 0), or kRows
  static constexpr int kRows = -1;
};

/// The route for a channels-last, 1x1, stride-1, unpadded, ungrouped conv with an activation
/// cuDNN's fused call cannot apply (not ReLU, not none), where one of its kernels takes it: the
/// wgmma GEMM for fp16/bf16 on Hopper (FUSEC_HGEMM=0 leaves it out), the few-rows kernel for at
/// most kPointwiseRowsMax rows;
/// null elsewhere. FUSEC_CONV_GEMM=0 leaves the route out, as it does the NCHW GEMM route.
std::unique_ptr<ConvRoute> plan_conv_pointwise_route(const PlanContext& c, const WindowGeometry& g, int group,
                                                     const ConvEpilogue& ep);

}  // namespace fusec::cuda
