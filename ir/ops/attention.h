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
///
/// Packed QKV (ai.fusec only; K and V omitted): Q is [batch, seq, W] with W = (q_heads + 2·kv_heads)·
/// head_size, each token's row [Q heads | K heads | V heads]; Q/K/V element (b, h, s, d) sits at
/// b·seq·W + s·W + off + h·head_size + d with off = 0, q_heads·head_size, (q_heads + kv_heads)·
/// head_size. Then q_seq = kv_seq and v_head_size = head_size; Y is unpacked [batch, seq, q_heads·head_size].
struct AttentionDims {
  bool three_d = false;
  bool packed = false;
  int64_t batch = 0, q_heads = 0, kv_heads = 0;
  int64_t q_seq = 0;
  int64_t kv_seq = 0;    // keys/values given in K and V (the new ones when there is a cache)
  int64_t past_seq = 0;  // keys/values in past_key/past_value (standard Attention only)
  int64_t head_size = 0, v_head_size = 0;

  int64_t total_kv() const { return past_seq + kv_seq; }
  int64_t group() const { return q_heads / kv_heads; }
  /// Element strides in the 4-D view: {b, h, s}.
  struct Strides {
    int64_t b, h, s;
  };
  /// Strides of one unpacked Q-like (heads = q_heads) or KV-like tensor, in this node's layout
  /// (3-D or 4-D). Y always has these; Q, K and V unless packed (see q_view, k_view, v_view).
  Strides strides(int64_t heads, int64_t seq, int64_t size) const {
    if (three_d) return {seq * heads * size, size, heads * size};
    return {heads * seq * size, seq * size, size};
  }
  /// Where an input's element (b, h, s, d) sits in the tensor it is read from:
  /// offset + b·st.b + h·st.h + s·st.s + d.
  struct View {
    int64_t offset;
    Strides st;
  };
  /// Row width of the packed tensor, (q_heads + 2·kv_heads)·head_size.
  int64_t packed_width() const { return (q_heads + 2 * kv_heads) * head_size; }
  View q_view() const { return input_view(0, q_heads, q_seq, head_size); }
  View k_view() const { return input_view(q_heads * head_size, kv_heads, kv_seq, head_size); }
  View v_view() const { return input_view((q_heads + kv_heads) * head_size, kv_heads, kv_seq, v_head_size); }
  Strides y_strides() const { return strides(q_heads, q_seq, v_head_size); }

 private:
  View input_view(int64_t packed_offset, int64_t heads, int64_t seq, int64_t size) const {
    if (!packed) return {0, strides(heads, seq, size)};
    const int64_t w = packed_width();
    return {packed_offset, {seq * w, size, w}};
  }
};

/// The geometry of an Attention node at static shapes; fails naming the node when the inputs do
/// not fit together (the same checks as shape inference, on concrete dims). `past_key` may be null.
AttentionDims attention_dims(const NodeAttrs& node, const std::vector<int64_t>& q, const std::vector<int64_t>& k,
                             const std::vector<int64_t>& v, const std::vector<int64_t>* past_key);
/// The same for the packed form (ai.fusec Attention with K and V omitted): `qkv` is Q's dims,
/// [B, S, (q_num_heads + 2·kv_num_heads)·D].
AttentionDims packed_attention_dims(const NodeAttrs& node, const std::vector<int64_t>& qkv);
/// True when the node is the packed form: K and V both omitted (only ai.fusec Attention allows it).
inline bool is_packed_attention(const Node& n) { return !n.input(1) && !n.input(2); }

/// Where row (b, s) of a rotary table (packed ai.fusec Attention's cos or sin) starts: b·batch +
/// s·seq elements in, its D values contiguous (0 along a broadcast dim).
struct RotaryTableStrides {
  int64_t batch = 0, seq = 0;
};
/// The strides of a table of these dims against the packed node's geometry; fails naming the node
/// (and `name`) when the table does not broadcast to [B, S, 1, D].
RotaryTableStrides rotary_table_strides(const NodeAttrs& node, const std::vector<int64_t>& table,
                                        const AttentionDims& a, const char* name);

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
