// Scaled dot-product attention (ONNX Attention, opsets 23-25, and ai.fusec Attention): the
// geometry both kernels (CPU reference, CUDA) read off a node at its actual shapes, so the two
// cannot disagree on how 3-D inputs split into heads or what the default scale is.
// Semantics: docs/ops.md ("Attention") and ir/ops/attention.cpp.
#pragma once
#include <cstdint>
#include <vector>

#include "ir/op_schema.h"

namespace fusec {

/// Q, K, V in the 4-D view [batch, heads, seq, head_size]. For 3-D inputs [batch, seq, heads·size]
/// element (b, h, s, d) sits at b·seq·heads·size + s·heads·size + h·size + d; for 4-D inputs at
/// ((b·heads + h)·seq + s)·size + d. Query head h reads kv head h / (q_heads / kv_heads).
struct AttentionDims {
  bool three_d = false;
  int64_t batch = 0, q_heads = 0, kv_heads = 0;
  int64_t q_seq = 0;
  int64_t kv_seq = 0;    // keys/values given in K and V (the new ones when there is a cache)
  int64_t past_seq = 0;  // keys/values in past_key/past_value (standard Attention only)
  int64_t head_size = 0, v_head_size = 0;

  int64_t total_kv() const { return past_seq + kv_seq; }
  int64_t group() const { return q_heads / kv_heads; }
  /// Element strides of Q-like (heads = q_heads) or KV-like tensors in the 4-D view: {b, h, s}.
  struct Strides { int64_t b, h, s; };
  Strides strides(int64_t heads, int64_t seq, int64_t size) const {
    if (three_d) return {seq * heads * size, size, heads * size};
    return {heads * seq * size, seq * size, size};
  }
};

/// The geometry of an Attention node at static shapes; fails naming the node when the inputs do
/// not fit together (the same checks as shape inference, on concrete dims). `past_key` may be null.
AttentionDims attention_dims(const NodeAttrs& node, const std::vector<int64_t>& q, const std::vector<int64_t>& k,
                             const std::vector<int64_t>& v, const std::vector<int64_t>* past_key);

/// The factor applied to Q·Kᵀ: the `scale` attribute, or 1/√head_size when it is absent (and, for
/// ai.fusec Attention, when it is 0).
float attention_scale(const NodeAttrs& node, int64_t head_size);

/// True for the node's domain being the standard one (ONNX Attention): it then also has past_key/
/// past_value/nonpad_kv_seqlen, the extra outputs, softcap, softmax_precision and (opset 25) windows.
inline bool is_standard_attention(const NodeAttrs& node) {
  return node.node().domain.empty() || node.node().domain == "ai.onnx";
}

/// qk_matmul_output_mode values (ONNX Attention).
enum class QkOutputMode : int64_t { Raw = 0, AfterSoftcap = 1, WithBias = 2, AfterSoftmax = 3 };

}  // namespace fusec
