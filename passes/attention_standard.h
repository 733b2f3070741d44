// ONNX Attention as torch's exporter writes scaled_dot_product_attention at opset 23: one node over
// 4-D [B, H, S, D] operands, behind the head split and (GQA) the repeat of K and V, before the head
// merge. fuse_attention reads the same views around the softmax form it fuses; here they go around
// a node that is already Attention (see attention_standard.cpp).
#pragma once
#include <string>
#include <vector>

#include "ir/graph.h"

namespace fusec {
class Rewriter;
}

namespace fusec::attention {

/// The value a 3-D Attention writes for the head merge's output `merged`: `merged` itself, or, for a
/// merge straight to [B·S, H·Dv] (one view for the next Gemm), a new [B, S, H·Dv] value, with
/// `*flat` set to `merged` (add_flatten then views it back).
Value* three_d_output(Graph& g, Value* merged, Value** flat);
/// The free Reshape from the 3-D output `y` to `flat`'s [B·S, H·Dv] (nothing when `flat` is null).
void add_flatten(Graph& g, Value* y, Value* flat, const std::string& name);
/// Removes the `candidates` (an operand's transposes, reshapes, repeats and scales) that nothing
/// reads any more, repeatedly, crediting them to `fused`.
void remove_unread(Rewriter& r, Node* fused, const std::vector<Node*>& candidates);

/// Rewrites the 4-D ONNX Attention `attn` as the 3-D form over the head splits' [B, S, H·D] inputs
/// (q_num_heads, kv_num_heads; no repeat of K and V: Attention's own grouped heads) writing the
/// head merge's output. Returns the new node, or null with `why` set (the near-miss reason), or
/// null with `why` empty when `attn` is not a plain 4-D Attention at all.
Node* absorb_standard_views(Rewriter& r, Node* attn, std::string* why);

}  // namespace fusec::attention
