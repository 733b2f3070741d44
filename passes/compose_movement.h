#pragma once
#include "passes/pass.h"

namespace fusec {

/// Chains of data-movement ops (Reshape, Transpose, Squeeze, Unsqueeze, Gather of one index) as at
/// most one Slice and one Transpose, with the permutations of a row-wise product's rows moved
/// across it where that lets the chains on both sides compose (see compose_movement.cpp).
class ComposeMovementPass : public Pass {
 public:
  std::string name() const override { return "compose_movement"; }
  bool run(Graph& g, PassContext& ctx) override;
};

}  // namespace fusec
