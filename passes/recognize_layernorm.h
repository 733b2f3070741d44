#pragma once
#include "passes/pass.h"

namespace fusec {

/// LayerNorm and RMSNorm subgraphs -> LayerNormalization / ai.fusec SimplifiedLayerNorm (see
/// recognize_layernorm.cpp).
class RecognizeLayerNormPass : public Pass {
 public:
  std::string name() const override { return "recognize_layernorm"; }
  bool run(Graph& g, PassContext& ctx) override;
};

}  // namespace fusec
