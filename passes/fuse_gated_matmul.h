#pragma once
#include "passes/pass.h"

namespace fusec {

/// The gated MLP's two projections of one input and their gating (SwiGLU, GeGLU) -> ai.fusec
/// GatedMatMul (see fuse_gated_matmul.cpp).
class FuseGatedMatMulPass : public Pass {
 public:
  std::string name() const override { return "fuse_gated_matmul"; }
  bool run(Graph& g, PassContext& ctx) override;
};

}  // namespace fusec
