#pragma once
#include "passes/pass.h"

namespace fusec {

/// QK-norm (Qwen3, Gemma 3, OLMo 2's per-head form, EXAONE 4, Persimmon) and a scaled query (ESM)
/// in front of a rotation => one ai.fusec Rotary that normalizes each head first, with the head
/// split moved behind it (see fuse_qk_norm.cpp).
class FuseQkNormPass : public Pass {
 public:
  std::string name() const override { return "fuse_qk_norm"; }
  bool run(Graph& g, PassContext& ctx) override;
};

}  // namespace fusec
