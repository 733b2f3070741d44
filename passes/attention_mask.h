// Constant attention masks made cheaper once attention is one node (fuse_attention runs this):
//
//   Attention(q, k, v, M), M constant and masking nothing (additive: every value 0; bool: every
//   value true)                                         ->  Attention(q, k, v)
//   Attention(q, k, v, M), M constant, M[.., i, :] the same for every query row i
//                                                       ->  Attention(q, k, v, M[.., 0:1, :])
//
// Both are exact: s + 0 = s for every score (a -0 only changes the sign of a zero score, which
// softmax cannot see), and a size-1 query dim broadcasts the one row to every query row, as the
// rows already were. Exporters write such masks: transformers' BERT without an attention_mask input
// builds ones(B, S) -> [B, 1, S, S] of zeros, which constant folding turns into a 1 MiB initializer
// per model that every kernel would read and add. Without it the GPU runs its unmasked attention
// kernels; with one row per batch, the row-broadcast ones.
#pragma once
#include "ir/graph.h"
#include "passes/pass.h"

namespace fusec {

/// Simplifies the constant masks of every Attention node (ONNX or ai.fusec); records each as a
/// rewrite of `pass`. Returns true if the graph changed.
bool simplify_attention_masks(Graph& g, PassContext& ctx, const char* pass);

}  // namespace fusec
