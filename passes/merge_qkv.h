#pragma once
#include "passes/pass.h"

namespace fusec {

/// The Q, K and V projections of one 3-D attention (three GEMMs reading one X) -> one GEMM writing
/// packed QKV, read by ai.fusec Attention with K and V omitted; or a Split of packed QKV (GPT-2's
/// c_attn), or the head split of a 4-D attention's packed QKV (Swin's windows) -> gone, the
/// Attention reads its input packed. See merge_qkv.cpp.
class MergeQkvPass : public Pass {
 public:
  std::string name() const override { return "merge_qkv"; }
  bool run(Graph& g, PassContext& ctx) override;
};

}  // namespace fusec
