#pragma once
#include "passes/pass.h"

namespace fusec {

/// softmax(Q·Kᵀ·scale [+ mask]) · V, with the head split and merge around it => one Attention node
/// (ONNX Attention from opset 23, else ai.fusec Attention); see fuse_attention.cpp.
class FuseAttentionPass : public Pass {
 public:
  std::string name() const override { return "fuse_attention"; }
  bool run(Graph& g, PassContext& ctx) override;
};

}  // namespace fusec
