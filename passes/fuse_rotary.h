#pragma once
#include "passes/pass.h"

namespace fusec {

/// Half-split rotary position embedding (transformers' rotate_half) => ai.fusec Rotary, with the
/// head split's Reshape/Transpose moved after it (see fuse_rotary.cpp).
class FuseRotaryPass : public Pass {
 public:
  std::string name() const override { return "fuse_rotary"; }
  bool run(Graph& g, PassContext& ctx) override;
};

}  // namespace fusec
