#pragma once
#include "passes/pass.h"

namespace fusec {

/// The erf and tanh GELU subgraphs exporters write -> one Gelu node (see recognize_gelu.cpp).
class RecognizeGeluPass : public Pass {
 public:
  std::string name() const override { return "recognize_gelu"; }
  bool run(Graph& g, PassContext& ctx) override;
};

}  // namespace fusec
