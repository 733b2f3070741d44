#pragma once
#include "passes/pass.h"

namespace fusec {

/// Conv [-> Add(residual)] [-> activation] becomes one ai.fusec FusedConv (see
/// fuse_conv_activation.cpp). Under --portable it only records near-misses.
class FuseConvActivationPass : public Pass {
 public:
  std::string name() const override { return "fuse_conv_activation"; }
  bool run(Graph& g, PassContext& ctx) override;
};

}  // namespace fusec
