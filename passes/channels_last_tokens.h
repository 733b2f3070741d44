#pragma once
#include "passes/pass.h"

namespace fusec {

/// Tokens turned into an image for a conv, and a conv's image turned back into tokens, written as
/// the 4-D channels-last Transposes a CUDA plan stores as views (see channels_last_tokens.cpp).
class ChannelsLastTokensPass : public Pass {
 public:
  std::string name() const override { return "channels_last_tokens"; }
  bool run(Graph& g, PassContext& ctx) override;
};

}  // namespace fusec
