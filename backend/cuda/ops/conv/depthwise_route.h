// The depthwise conv (depthwise.cuh) as a route of the conv op (conv_route.h): a channels-last,
// 2-D conv whose group count equals its input channels (a channel multiplier M = Cout / Cin of
// 1 or more), float32/float16/bfloat16 storage, its whole epilogue fused (bias, residual, every
// FusedConv activation). Its candidates are the kernel's configurations: the tuner times them
// against cuDNN's choice at every precision (conv_op.cpp), since the faster of the two depends on
// the device and the shape.
//
// Unlike cuDNN it takes asymmetric pads (TensorFlow-style SAME padding at stride 2), which the
// conv op otherwise leaves to the CPU reference: there it runs untimed, as the only GPU route.
#pragma once
#include <cuda_runtime_api.h>

#include <memory>
#include <string>

#include "backend/cuda/core/context.h"
#include "backend/cuda/ops/conv/conv_route.h"
#include "backend/cuda/ops/conv/depthwise.cuh"
#include "ir/tensor.h"

namespace fusec::cuda {

class ConvDepthwiseRoute : public ConvRoute {
 public:
  /// Uploads the route's [R][S][K] float32 copy of the constant weights ([K][1][R][S]); false,
  /// with why, where no configuration takes the shape or the dtype.
  bool plan(const DepthwiseShape& s, DType dtype, const ConvEpilogue& ep, const Tensor& weights, cudaStream_t stream,
            std::string* why);

  int candidates() const override { return depthwise_config_count(); }
  /// A configuration that does not take the shape is not timed (it runs as the generic kernel);
  /// the generic kernel is timed only where no other configuration takes the shape.
  bool worth_timing(int i) const override;
  std::string identity(int i) const override;
  size_t workspace(int i) const override { return 0; }
  /// The candidate taken untimed (asymmetric pads, where cuDNN has nothing to time against): the
  /// first tiled configuration that takes the shape, else the generic kernel.
  int default_candidate() const;

  /// y = act(conv(x) + b + z) with candidate i (the op's weights w are not read: the route's own
  /// copy is); false when it launched nothing.
  bool run(int i, const void* x, const void* w, const void* b, const void* z, void* y, void* ws,
           cudaStream_t stream) const override;
  std::string kernel_name(int i) const override;
  bool owns_weights(int i) const override { return true; }

 private:
  /// Candidate i's configuration here: itself where it takes the shape, else the generic kernel.
  int config(int i) const;

  DepthwiseShape s_;
  DType dt_ = DType::Undefined;
  bool bias_ = false, residual_ = false;
  ActParams act_;
  DeviceBuffer w_;     // [R][S][K] float32
  DeviceBuffer band_;  // the banded kernel's fragments (depthwise_mma.cuh), where it takes the shape
};

/// The route for a channels-last 2-D depthwise conv (group == C_in, one input channel per group)
/// with constant weights; null elsewhere (NCHW, grouped or ungrouped convs, 1-D and 3-D, float64,
/// dims past 32 bits). FUSEC_CONV_DEPTHWISE=0 leaves it out.
std::unique_ptr<ConvDepthwiseRoute> plan_conv_depthwise_route(const PlanContext& c, const WindowGeometry& g, int group,
                                                              const ConvEpilogue& ep, bool nhwc);

/// The candidate FUSEC_CONV_DEPTHWISE=N forces (tests, A/B runs: N - 1, taken untimed), or -1.
int conv_depthwise_forced();

}  // namespace fusec::cuda
