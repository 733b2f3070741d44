#pragma once
#include "passes/pass.h"

namespace fusec {

/// MatMul -> Add(constant bias) [-> activation] -> Gemm or ai.fusec FusedMatMul (see
/// fuse_matmul_bias.cpp).
class FuseMatMulBiasPass : public Pass {
 public:
  std::string name() const override { return "fuse_matmul_bias"; }
  bool run(Graph& g, PassContext& ctx) override;
};

}  // namespace fusec
