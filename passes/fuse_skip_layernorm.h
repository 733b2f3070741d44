#pragma once
#include "passes/pass.h"

namespace fusec {

/// Residual Add -> LayerNormalization => ai.fusec SkipLayerNorm (see fuse_skip_layernorm.cpp).
class FuseSkipLayerNormPass : public Pass {
 public:
  std::string name() const override { return "fuse_skip_layernorm"; }
  bool run(Graph& g, PassContext& ctx) override;
};

}  // namespace fusec
