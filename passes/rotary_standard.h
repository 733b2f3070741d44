// ONNX's RotaryEmbedding (opset 23) as ai.fusec Rotary, the one RoPE form the later passes read
// (sink_head_split, fuse_rotary_attention) and the CUDA backend runs (see rotary_standard.cpp).
#pragma once

#include <map>
#include <tuple>

#include "ir/graph.h"

namespace fusec {
class Rewriter;

/// The whole-width tables already built in a pass, by (cache, position_ids, interleaved, heads
/// axis): a decoder's Q and K of every layer read the same caches, and share one table each.
using RotaryTables = std::map<std::tuple<Value*, Value*, bool, int64_t>, Value*>;

/// Rewrites the RotaryEmbedding `n` as Rotary over its X with whole-width tables: the caches read
/// at position_ids (a Gather), each half-width row widened to the rotated size (its two copies side
/// by side, or each entry twice when interleaved) and viewed to broadcast over X's heads. Returns
/// the Rotary, or null when `n` is not a RotaryEmbedding whose X's rank is known.
Node* rotary_from_standard(Rewriter& r, Node* n, RotaryTables& tables);

}  // namespace fusec
