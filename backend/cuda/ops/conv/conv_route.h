// What the conv op (conv_op.cpp) chooses among. A forward conv runs on cuDNN (conv_cudnn.h: its
// algorithms, the default and the fallback) or on one of fusec's routes behind ConvRoute: the 1x1
// conv as a cuBLASLt GEMM (conv_gemm.h), the implicit-GEMM conv with its Winograd candidates
// (conv_igemm_route.h), the channels-last depthwise conv (depthwise_route.h), the channels-last
// grouped conv (grouped_route.h) and the channels-last 1x1 conv on fusec's own kernels
// (conv_pointwise_route.h). A route has
// numbered candidates that the tuner times beside cuDNN's algorithms and remembers by index and
// identity; every route computes the same y = act(conv(x, w) + b + z), with the node's epilogue
// (ConvEpilogue) fused or as a pass.
//
// cuDNN is not a ConvRoute: its choice is state on its descriptors (the math mode is set on the
// convolution descriptor; the fused call and its algorithm are tried at plan time), not an index
// that each run could name without changing the calls cuDNN sees.
#pragma once
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstdint>
#include <string>
#include <vector>

#include "backend/cuda/core/check.h"
#include "backend/cuda/core/cuda_op.h"
#include "backend/cuda/ops/elementwise/epilogue.cuh"
#include "ir/error.h"
#include "ir/ops/conv_geometry.h"

namespace fusec::cuda {

/// Elements of a tensor of dims d (shared by the op and its routes' scratch sizes).
inline int64_t numel(const std::vector<int64_t>& d) {
  int64_t n = 1;
  for (int64_t v : d) n *= v;
  return n;
}

/// What the node asks of every route beyond the conv: bias per output channel, FusedConv's
/// residual (z) and activation, in the reference's order y = act(conv + b + z).
struct ConvEpilogue {
  DType dt = DType::Float32;
  bool has_bias = false, has_z = false;
  ActParams act;
  int64_t yelems = 0;
  int64_t channels = 1, inner = 1;  // inner: H·W… in NCHW; 1 in NHWC (the channel is innermost)

  /// Bias, residual and activation in place over y, in the reference's order (nothing without them).
  void run(void* y, const void* b, const void* z, cudaStream_t stream) const {
    if (!has_bias && !has_z && act.act == Act::None) return;
    if (!launch_epilogue(y, has_z ? z : nullptr, dt, yelems, act, stream, has_bias ? b : nullptr, channels, inner))
      internal_error("no epilogue kernel for this dtype");
  }
  /// Whether cuDNN's fused call computes the activation itself (ReLU, or none).
  bool act_in_cudnn() const { return act.act == Act::None || act.act == Act::Relu; }
  /// The activation alone, in place over y: what is left after cuDNN's fused call took the bias
  /// and the residual (nothing where the call took the activation too).
  void run_act_after_fused(void* y, cudaStream_t stream) const {
    if (act_in_cudnn()) return;
    if (!launch_epilogue(y, nullptr, dt, yelems, act, stream, nullptr, channels, inner))
      internal_error("no activation kernel for this dtype");
  }
};

/// One way to run a forward conv: an algorithm, its math mode, and whether it runs as
/// cudnnConvolutionBiasActivationForward (bias, residual and ReLU inside) or with the epilogue pass.
struct FwdChoice {
  cudnnConvolutionFwdAlgo_t algo;
  cudnnMathType_t math;
  bool fused;
  size_t ws;
  int gemm = -1;   // >= 0: not cuDNN but the 1x1 conv's GEMM route, this cuBLASLt candidate
  int igemm = -1;  // >= 0: not cuDNN but fusec's implicit-GEMM conv, this configuration
  int dw = -1;     // >= 0: not cuDNN but fusec's depthwise conv (depthwise_route.h), this configuration
  int grp = -1;    // >= 0: not cuDNN but fusec's grouped conv (grouped_route.h), this candidate
};

/// A route of fusec's own beside cuDNN, planned for one node (each route's plan_conv_*_route
/// returns one, or null where it does not apply). Candidate indices are stable for a given build
/// of fusec: the tuning cache keeps them beside identity(i), which must match to be reused.
class ConvRoute {
 public:
  virtual ~ConvRoute() = default;

  virtual int candidates() const = 0;
  /// Whether candidate i differs from the others here (the tuner skips twins).
  virtual bool worth_timing(int i) const { return true; }
  /// What identifies candidate i across builds and processes (tuning cache, trace).
  virtual std::string identity(int i) const = 0;
  /// The workspace bytes candidate i needs at launch.
  virtual size_t workspace(int i) const = 0;
  /// Makes what candidate i reads beyond the op's inputs, while the op is planned; false when it
  /// cannot.
  virtual bool prepare(int i) { return true; }

  /// y = act(conv(x, w) + b + z) with candidate i; false when it failed (plan-time trials).
  virtual bool run(int i, const void* x, const void* w, const void* b, const void* z, void* y, void* ws,
                   cudaStream_t stream) const = 0;
  /// The same at launch time: throws, with the library's or the kernel's error, when it fails. By
  /// default run(), the launch's error, and an internal error where the route refused a launch it
  /// was planned for (fusec's own kernels, whose trials ran on the 256-byte aligned buffers every
  /// launch gets); a library route throws the library's status instead.
  virtual void launch(int i, const void* x, const void* w, const void* b, const void* z, void* y, void* ws,
                      cudaStream_t stream) const {
    const bool launched = run(i, x, w, b, z, y, ws, stream);
    FUSEC_CUDA_CHECK(cudaGetLastError());
    if (!launched) internal_error(kernel_name(i) + " refused the launch it was planned for");
  }

  /// What runs, for the kernel name (inspect, bench, the profiler).
  virtual std::string kernel_name(int i) const = 0;
  /// Whether candidate i runs the node's whole epilogue inside the conv's kernel (no pass after).
  virtual bool one_kernel(int i) const { return true; }
  /// Whether candidate i reads its own copy of the weights rather than the op's input 1.
  virtual bool owns_weights(int i) const { return false; }
  /// Once candidate i is picked, at the end of the plan: frees what only the others needed.
  virtual void keep_only(int i) {}
};

}  // namespace fusec::cuda
