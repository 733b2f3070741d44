// Attention over tensors with two batch dims, [B, G, H, S, D]: MaxViT's block and grid attention
// (G windows or grid cells an image, written as Einsum("BGHID,BGHJD->BGHIJ"), which canonicalize
// makes MatMul and Transpose) and any model that keeps a group dim beside the batch. Every op of
// such a core treats [B, G] as one batch, so the core is the same computation on [B·G, H, S, D]
// tensors, which fuse_attention matches. merge_batch_dims rewrites it so.
#pragma once

#include <string>

#include "ir/graph.h"

namespace fusec::attention {

/// If `softmax` is the Softmax of a closed attention core of rank-5 tensors with two leading
/// batch dims, rewrites the core to rank 4 with those dims merged, and returns true. The core:
/// two MatMuls and this Softmax (last axis), with Transposes that keep dims 0 and 1 in place,
/// Mul/Div by constant scalars and Adds of a constant that is the same for every [B, G] pair,
/// entered through Reshapes that keep the two batch dims ([B, G, P, C] -> [B, G, P, H, D]) and
/// left through the same ([B, G, P, H, D] -> [B, G, P, C]). No value of it may be read outside
/// it. Each entry becomes Reshape [B·G, P, C] -> [B·G, P, H, D] (the 3-D head split
/// fuse_attention reads), each exit Reshape [B·G, P, C] -> [B, G, P, C]; every other node keeps
/// its op with the merged shape. Changes nothing and returns false otherwise, with why not.
bool merge_batch_dims(Graph& g, Node* softmax, std::string* why);

/// Whether a rank-5 MatMul (Q·Kᵀ) is behind `softmax`, through at most three ops with one
/// non-constant input each: what makes a rank-5 Softmax attention worth a near-miss.
bool scores_matmul_behind(const Node* softmax);

}  // namespace fusec::attention
