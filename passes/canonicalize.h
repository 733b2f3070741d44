#pragma once
#include "passes/pass.h"

namespace fusec {

/// One spelling for what exporters write several ways: a Reshape-Transpose-Reshape of whole dim
/// groups as one Transpose, Div(1, y) as Reciprocal, a Gather of every element as a Reshape (see
/// canonicalize.cpp).
class CanonicalizePass : public Pass {
 public:
  std::string name() const override { return "canonicalize"; }
  bool run(Graph& g, PassContext& ctx) override;
};

}  // namespace fusec
