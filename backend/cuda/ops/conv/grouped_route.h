// The grouped conv (grouped.cuh) as a route of the conv op (conv_route.h): a channels-last 2-D conv
// of 1 < G < C groups, each a multiple of 4 output channels wide, float32/float16/bfloat16
// storage (the tensor-core candidate: 8k channels in and out, float16/bfloat16), its whole
// epilogue fused. Its candidates are the kernel's configurations, timed against
// cuDNN's choice at every precision (conv_op.cpp): cuDNN's grouped kernels are fast where its tiles fit the groups and
// wrap the conv in layout transforms where they do not.
#pragma once
#include <memory>
#include <string>

#include "backend/cuda/core/context.h"
#include "backend/cuda/ops/conv/conv_route.h"
#include "backend/cuda/ops/conv/grouped.cuh"
#include "ir/tensor.h"

namespace fusec::cuda {

class ConvGroupedRoute : public ConvRoute {
 public:
  /// Uploads the route's copies of the constant weights ([G·Kg][Cg][R][S]): [G][R][S][Cg][Kg]
  /// float32 for the FMA configurations, [G][Kg][R·S·Cg] in the storage type for the tensor-core
  /// one, each where it takes the conv; false, with why, where none does.
  bool plan(const GroupedShape& s, DType dtype, const ConvEpilogue& ep, const Tensor& weights, std::string* why);

  int candidates() const override { return grouped_config_count(); }
  bool worth_timing(int i) const override;
  bool prepare(int i) override;
  void keep_only(int i) override;
  std::string identity(int i) const override { return grouped_config_name(i); }
  size_t workspace(int i) const override { return 0; }
  bool run(int i, const void* x, const void* w, const void* b, const void* z, void* y, void* ws,
           cudaStream_t stream) const override;
  std::string kernel_name(int i) const override;
  bool owns_weights(int i) const override { return true; }

 private:
  GroupedShape s_;
  DType dt_ = DType::Undefined;
  bool bias_ = false, residual_ = false;
  ActParams act_;
  DeviceBuffer w_;      // [G][R][S][Cg][Kg] float32
  DeviceBuffer w_mma_;  // [G][Kg][kp] float16 or bfloat16
};

/// The route for a channels-last 2-D grouped conv (1 < group < C_in) with constant weights; null
/// elsewhere. FUSEC_CONV_GROUPED=0 leaves it out.
std::unique_ptr<ConvGroupedRoute> plan_conv_grouped_route(const PlanContext& c, const WindowGeometry& g, int group,
                                                          const ConvEpilogue& ep, bool nhwc);
/// The candidate FUSEC_CONV_GROUPED=force (0), =force2 (1) or =force3 (the tensor-core one) takes
/// untimed (tests, A/B runs), or -1.
int conv_grouped_forced();

}  // namespace fusec::cuda
