#pragma once
#include "passes/pass.h"

namespace fusec {

/// Identity/Dropout/no-op removal, dead nodes, unused initializers, CSE (see cleanup.cpp).
class CleanupPass : public Pass {
 public:
  std::string name() const override { return "cleanup"; }
  bool run(Graph& g, PassContext& ctx) override;
};

}  // namespace fusec
