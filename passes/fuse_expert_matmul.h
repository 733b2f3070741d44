#pragma once
#include "passes/pass.h"

namespace fusec {

/// A mixture of experts' batched product of weights gathered per row -> ai.fusec ExpertMatMul
/// (see fuse_expert_matmul.cpp).
class FuseExpertMatMulPass : public Pass {
 public:
  std::string name() const override { return "fuse_expert_matmul"; }
  bool run(Graph& g, PassContext& ctx) override;
};

}  // namespace fusec
