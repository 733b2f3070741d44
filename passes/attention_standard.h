// ONNX Attention as torch's exporter writes scaled_dot_product_attention at opset 23: one node over
// 4-D [B, H, S, D] operands, behind the head split and (GQA) the repeat of K and V, before the head
// merge. fuse_attention reads the same views around the softmax form it fuses; here they go around
// a node that is already Attention (see attention_standard.cpp).
#pragma once
#include <string>

#include "ir/graph.h"

namespace fusec {
class Rewriter;
}

namespace fusec::attention {

/// Rewrites the 4-D ONNX Attention `attn` as the 3-D form over the head splits' [B, S, H·D] inputs
/// (q_num_heads, kv_num_heads; no repeat of K and V: Attention's own grouped heads) writing the
/// head merge's output. Returns the new node, or null with `why` set (the near-miss reason), or
/// null with `why` empty when `attn` is not a plain 4-D Attention at all.
Node* absorb_standard_views(Rewriter& r, Node* attn, std::string* why);

}  // namespace fusec::attention
