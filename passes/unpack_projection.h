#pragma once
#include "passes/pass.h"

namespace fusec {

/// A projection whose output is viewed [.., G, C] and cut along C into pieces (GPT-NeoX's and
/// Pythia's query_key_value, [.., H, 3·D] per token; CodeGen's mp_num-grouped qkv_proj) => one
/// projection per piece, whose weight columns are that piece's, so that each piece is an ordinary
/// projection of its own (see unpack_projection.cpp).
class UnpackProjectionPass : public Pass {
 public:
  std::string name() const override { return "unpack_projection"; }
  bool run(Graph& g, PassContext& ctx) override;
};

}  // namespace fusec
