// canonicalize's Einsum rule (canonicalize_einsum.cpp): a two-operand Einsum that is a batched
// matrix product, as MatMul with the transposes it needs.
#pragma once
#include "ir/graph.h"
#include "passes/rewrite.h"

namespace fusec {

/// Rewrites `n` if it is such an Einsum; returns whether it did.
bool einsum_as_matmul(Rewriter& r, Node* n);

}  // namespace fusec
