#pragma once
#include "passes/pass.h"

namespace fusec {

/// A rotation of packed QKV's Q and K heads (ai.fusec Rotary) -> inside the packed ai.fusec
/// Attention that reads it, as its cos and sin (see fuse_rotary_attention.cpp).
class FuseRotaryAttentionPass : public Pass {
 public:
  std::string name() const override { return "fuse_rotary_attention"; }
  bool run(Graph& g, PassContext& ctx) override;
};

}  // namespace fusec
