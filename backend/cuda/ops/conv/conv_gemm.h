// 1x1 convolutions as cuBLASLt GEMMs over NCHW memory: a route (conv_route.h) the conv tuner
// times beside cuDNN's algorithms. At strict fp32 cuDNN's implicit-GEMM kernels ran ResNet-50's
// 1x1 convs well below the fp32 peak; the same products as cuBLASLt GEMMs ran faster on every
// such conv (scripts/lab/conv_fp32_lab.cpp).
//
// Per image n, in cuBLASLt's column-major terms (NCHW memory needs no copy):
//
//     Y[n]  (HW x Cout, ld HW)  =  X[n] (HW x Cin, ld HW) · Wᵀ (Cin x Cout: W's [Cout][Cin] memory)  +  C
//
// one strided-batched call over n. cuBLASLt's bias epilogue adds along rows (here HW), not
// columns, so the bias comes in through C instead: a plane of the bias broadcast over HW, built
// once, with batch stride 0 (it stays in L2 across images). With a residual Z, C is Z and the bias
// joins the activation in the epilogue pass (epilogue.cu), so the sum is (conv + z) + b, one
// rounding away from the reference's (conv + b) + z. ReLU goes into the GEMM's epilogue whenever
// nothing is left to add after it.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/core/context.h"
#include "backend/cuda/ops/conv/conv_route.h"
#include "backend/cuda/ops/elementwise/epilogue.cuh"
#include "ir/tensor.h"

namespace fusec::cuda {

class Conv1x1Gemm : public ConvRoute {
 public:
  struct Problem {
    int64_t batch = 0, cin = 0, cout = 0, hw = 0;  // Y[batch, cout, hw] = W[cout, cin] · X[batch, cin, hw]
    bool tf32 = false;
    bool bias = false, residual = false;
    ActParams act;
  };

  Conv1x1Gemm() = default;
  ~Conv1x1Gemm() override;
  Conv1x1Gemm(const Conv1x1Gemm&) = delete;
  Conv1x1Gemm& operator=(const Conv1x1Gemm&) = delete;

  /// Builds the descriptors and asks cuBLASLt for its candidates (float32 storage only);
  /// `bias` is the host bias when the problem has one. False, with why, when there is no route.
  bool plan(Context& ctx, const Problem& p, const Tensor* bias, std::string* why);

  int candidates() const override { return static_cast<int>(algos_.size()); }
  size_t workspace(int i) const override { return algos_.at(i).workspaceSize; }
  std::string identity(int i) const override;
  /// Short description for the kernel name: what goes through C and the epilogue pass.
  std::string describe() const;
  std::string kernel_name(int i) const override;
  bool one_kernel(int) const override { return !bias_in_pass_ && pass_act_.act == Act::None; }

  /// y = act(conv(x, w) + b + z) with candidate `i`: the GEMM, then the epilogue pass if needed.
  cublasStatus_t run_gemm(int i, const void* x, const void* w, const void* b, const void* z, void* y, void* ws,
                          cudaStream_t stream) const;
  bool run(int i, const void* x, const void* w, const void* b, const void* z, void* y, void* ws,
           cudaStream_t stream) const override;
  /// run_gemm, a cuBLASLt error when it fails.
  void launch(int i, const void* x, const void* w, const void* b, const void* z, void* y, void* ws,
              cudaStream_t stream) const override;

 private:
  Problem p_;
  cublasLtHandle_t handle_ = nullptr;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t la_ = nullptr, lb_ = nullptr, lc_ = nullptr, ld_ = nullptr;
  std::vector<cublasLtMatmulHeuristicResult_t> algos_;
  DeviceBuffer plane_;  // the bias broadcast over HW ([cout][hw]), when C carries the bias
  bool bias_in_pass_ = false;
  ActParams pass_act_;  // what the epilogue pass applies (None: no pass unless bias_in_pass_)
};

/// The route for a 1x1, stride-1, unpadded, ungrouped float32 conv in NCHW memory; null where it
/// does not apply or cuBLASLt has no algorithm. FUSEC_CONV_GEMM=0 leaves it out.
std::unique_ptr<ConvRoute> plan_conv_gemm_route(const PlanContext& c, const WindowGeometry& g, int group,
                                                const ConvEpilogue& ep);

/// FUSEC_CONV_GEMM=force or force:N (tests, A/B runs): the route is taken untimed wherever it
/// applies, its first candidate or its candidate N (from 1).
bool conv_gemm_forced();
/// The candidate FUSEC_CONV_GEMM forces (0 for "force", N - 1 for "force:N"), or -1.
int conv_gemm_forced_candidate();

}  // namespace fusec::cuda
