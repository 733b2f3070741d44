#pragma once
#include "passes/pass.h"
#include "passes/rewrite.h"

namespace fusec {

/// Half-split rotary position embedding (transformers' rotate_half) => ai.fusec Rotary, with the
/// head split's Reshape/Transpose moved after it (see fuse_rotary.cpp).
class FuseRotaryPass : public Pass {
 public:
  std::string name() const override { return "fuse_rotary"; }
  bool run(Graph& g, PassContext& ctx) override;
};

/// Moves the Transpose (keeping the last axis) or the head-split Reshape in front of ai.fusec
/// Rotary `rot` (no head_size yet) behind it, the tables permuted to match; returns the new Rotary,
/// or nullptr when nothing moved. fuse_qk_norm calls it again once a norm no longer stands between.
Node* sink_head_split(Rewriter& r, Node* rot);

}  // namespace fusec
