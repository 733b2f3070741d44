#pragma once
#include "passes/pass.h"

namespace fusec {

/// A squeeze-and-excite block (pool, two 1x1 convs, the broadcast Mul) -> ai.fusec SqueezeExcite
/// (see fuse_squeeze_excite.cpp).
class FuseSqueezeExcitePass : public Pass {
 public:
  std::string name() const override { return "fuse_squeeze_excite"; }
  bool run(Graph& g, PassContext& ctx) override;
};

}  // namespace fusec
