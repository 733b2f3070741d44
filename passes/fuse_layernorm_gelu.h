#pragma once
#include "passes/pass.h"

namespace fusec {

/// LayerNormalization -> Gelu => ai.fusec LayerNormGelu (see fuse_layernorm_gelu.cpp).
class FuseLayerNormGeluPass : public Pass {
 public:
  std::string name() const override { return "fuse_layernorm_gelu"; }
  bool run(Graph& g, PassContext& ctx) override;
};

}  // namespace fusec
