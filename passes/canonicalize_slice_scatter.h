// canonicalize's slice-scatter rule (canonicalize_slice_scatter.cpp): torch's in-place update of
// a slice, as the dynamo export writes it (ScatterND of consecutive rows between transposes), as an
// Add of the update padded with zeros.
#pragma once
#include "ir/graph.h"
#include "passes/rewrite.h"

namespace fusec {

/// Rewrites `n` if it is such a ScatterND; returns whether it did.
bool slice_scatter_as_add(Rewriter& r, Node* n);

}  // namespace fusec
