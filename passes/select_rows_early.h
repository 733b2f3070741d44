#pragma once
#include "passes/pass.h"

namespace fusec {

/// A constant row selection (Gather or Slice on one axis) moves above the row-wise ops that feed
/// it, so they compute only the rows that are kept (see select_rows_early.cpp).
class SelectRowsEarlyPass : public Pass {
 public:
  std::string name() const override { return "select_rows_early"; }
  bool run(Graph& g, PassContext& ctx) override;
};

}  // namespace fusec
