#pragma once
#include "passes/pass.h"

namespace fusec {

/// Evaluates nodes whose inputs are all constant, and Shape/Size of statically shaped values.
class ConstantFoldingPass : public Pass {
 public:
  std::string name() const override { return "constant_folding"; }
  bool run(Graph& g, PassContext& ctx) override;
};

}  // namespace fusec
