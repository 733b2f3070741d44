#pragma once
#include "passes/pass.h"

namespace fusec {

/// Maximal regions of elementwise float ops -> one ai.fusec FusedElementwise each (see
/// fuse_elementwise.cpp).
class FuseElementwisePass : public Pass {
 public:
  std::string name() const override { return "fuse_elementwise"; }
  bool run(Graph& g, PassContext& ctx) override;
};

}  // namespace fusec
