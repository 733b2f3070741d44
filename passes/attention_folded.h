// Attention over rank-3 tensors [N, S, D] whose batch dim N folds the batch and the heads: what
// torch's F.multi_head_attention_forward writes when it returns the attention weights
// (nn.MultiheadAttention's default, need_weights=True: WavLM, HuBERT-style encoders, DETR-style
// decoders, and most user models that call the module): Q·Kᵀ as a bmm of [B·H, S, D] by
// [B·H, D, S], an optional baddbmm mask [1, S, S] or [B·H, 1, S], Softmax, a bmm with V. Every op of
// such a core treats N as a batch, so the core is the same computation on [1, N, S, D] tensors (N
// heads of one batch), which fuse_attention matches. insert_unit_batch rewrites it so.
#pragma once

#include <string>

#include "ir/graph.h"

namespace fusec::attention {

/// If `softmax` is the Softmax (last axis) of a closed attention core of rank-3 tensors, rewrites
/// the core to rank 4 with a unit dim in front of N, and returns true. The core: two MatMuls of
/// two computed rank-3 operands each (N their batch dim) and this Softmax, with Transposes and
/// element-wise Add/Sub/Mul/Div between them; every value of it tracks where N is. A value read
/// from outside gets a Reshape to its rank-4 form (a constant is reshaped in place), a value read
/// outside gets a Reshape back. Kᵀ (the first product's second operand) becomes K [1, N, S, D] and
/// Transpose(0,1,3,2), the form fuse_attention reads: a Transpose of the core that made Kᵀ makes K
/// instead; any other Kᵀ is transposed into K (a copy).
/// Changes nothing and returns false otherwise, with why not.
bool insert_unit_batch(Graph& g, Node* softmax, std::string* why);

/// Whether a rank-3 MatMul (Q·Kᵀ) is behind `softmax`, through at most three ops: what makes a
/// rank-3 Softmax attention worth a near-miss.
bool rank3_scores_behind(const Node* softmax);

}  // namespace fusec::attention
