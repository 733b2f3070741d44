// Attention over rank-3 tensors [N, S, D] whose batch dim N folds the batch and the heads: what
// torch's F.multi_head_attention_forward writes when it returns the attention weights
// (nn.MultiheadAttention's default, need_weights=True: WavLM, DETR-style decoders, and most user
// models that call the module), and what transformers' older attention classes write (BART-era bmm
// attention: XGLM, MVP, TrOCR, FSMT, LED, BLOOM, Table Transformer, SpeechT5...): Q·Kᵀ as a bmm of
// [B·H, S, D] by [B·H, D, S], an optional mask (added to the [B·H, S, S] scores, or to their view
// [B, H, S, S] and viewed back), Softmax, a bmm with V. Every op of such a core treats N as a
// batch, so the core is the same computation on [B, H, S, D] tensors, which fuse_attention matches.
// split_folded_heads rewrites it so, with B and H from the core's own views of N, or 1 and N where
// it has none.
#pragma once

#include <string>

#include "ir/graph.h"

namespace fusec::attention {

/// If `softmax` is the Softmax (last axis) of a closed attention core of rank-3 tensors (the
/// Softmax itself on the scores or on their [B, H, S, S] view: BLOOM), rewrites
/// the core with N split in two, and returns true. The core: two MatMuls of two computed rank-3
/// operands each (N their batch dim) and this Softmax, with Transposes, element-wise
/// Add/Sub/Mul/Div, and Reshapes that split N into [B, H] or merge it back; every value of it
/// tracks where N is. Those Reshapes then map a tensor to its own shape and go. A rank-3 value read
/// from outside gets a Reshape to its split form (a constant is reshaped in place), a value read
/// outside gets a Reshape back. Kᵀ stays what it was (a Transpose or a tensor): fuse_attention
/// reads any 4-D Kᵀ. Changes nothing and returns false otherwise, with why not.
bool split_folded_heads(Graph& g, Node* softmax, std::string* why);

/// Whether a rank-3 MatMul (Q·Kᵀ) is behind `softmax`, through at most six ops: what makes a
/// rank-3 Softmax attention worth a near-miss.
bool rank3_scores_behind(const Node* softmax);

}  // namespace fusec::attention
