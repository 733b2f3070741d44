// Attention: scaled dot-product attention as one op, in two schemas with one meaning.
//
//   ONNX Attention (opset 23; 24 adds nonpad_kv_seqlen; 25 adds left/right_window_size):
//     inputs  Q, K, V, [attn_mask], [past_key], [past_value], [nonpad_kv_seqlen]
//     outputs Y, [present_key], [present_value], [qk_matmul_output]
//   ai.fusec Attention (since 1): inputs Q, [K], [V], [attn_mask], [cos], [sin]; output Y;
//     attributes scale, is_causal, q_num_heads, kv_num_heads — ONNX Attention restricted to those,
//     which is what fusec's attention fusion writes for models older than opset 23 (docs/ops.md).
//     K and V may both be omitted: Q then packs all three, [B, S, (Hq + 2·Hkv)·D], each token's row
//     [Q heads | K heads | V heads] (one merged projection GEMM wrote it, passes/merge_qkv.cpp);
//     Sq = Skv = S, Dv = D, Y [B, S, Hq·D]. Packed, cos and sin (both or neither) rotate Q's and
//     K's heads first, as ai.fusec Rotary does (passes/fuse_rotary_attention.cpp).
//
//   Q [B, Hq, Sq, D] or [B, Sq, Hq·D];  K [B, Hkv, Skv, D] or [B, Skv, Hkv·D];  V likewise with Dv.
//   K' = concat(past_key, K) and V' = concat(past_value, V) along the sequence (T = Sp + Skv keys).
//   S = softcap(scale · Q·K'ᵀ) + bias;  Y = softmax(S, last axis) · V'  (query head h reads kv head
//   h / (Hq/Hkv)); Y has Q's layout with Dv. bias (additive, [B, Hq, Sq, T]) sums: a bool attn_mask
//   (false → −inf), a float attn_mask, −inf where is_causal forbids j > i + offset (offset = Sp,
//   or nonpad_kv_seqlen[b] − Sq, else 0), −inf at j ≥ nonpad_kv_seqlen[b], −inf outside the
//   sliding window. A row whose bias is −inf everywhere gives a zero row, not NaN.
#include "ir/ops/attention.h"

#include <cmath>

#include "ir/dim_math.h"
#include "ir/ops/all_ops.h"

namespace fusec {

namespace {

enum Input : size_t { kQ = 0, kK, kV, kMask, kPastKey, kPastValue, kNonpad };
// ai.fusec's rotary tables take the slots ONNX gives the cache.
constexpr size_t kCos = 4, kSin = 5;
enum Output : size_t { kY = 0, kPresentKey, kPresentValue, kQk };

bool differ(const Dim& a, const Dim& b) { return a.is_static() && b.is_static() && a.value != b.value; }
Dim known(const Dim& a, const Dim& b) { return a.is_static() || !a.symbol.empty() ? a : b; }

/// a / heads when a is static (it must divide), else unknown.
Dim per_head(const InferContext& c, const Dim& a, int64_t heads, const char* what) {
  if (!a.is_static()) return Dim();
  if (a.value % heads != 0)
    c.fail(std::string(what) + "'s hidden size " + std::to_string(a.value) + " is not a multiple of its " +
           std::to_string(heads) + " heads");
  return Dim(a.value / heads);
}

int64_t heads_attr(const InferContext& c, const char* name) {
  if (!c.has_attr(name)) c.fail(std::string("3-D inputs need the attribute '") + name + "'");
  const int64_t h = c.attr_int(name);
  if (h <= 0) c.fail(std::string(name) + " must be positive, not " + std::to_string(h));
  return h;
}

void check_attributes(const InferContext& c, bool standard) {
  if (c.attr_int("is_causal") != 0 && c.attr_int("is_causal") != 1)
    c.fail("is_causal must be 0 or 1, not " + std::to_string(c.attr_int("is_causal")));
  if (c.has_attr("scale") && !std::isfinite(c.attr_float("scale"))) c.fail("scale must be finite");
  const float cap = c.attr_float("softcap");
  if (!(cap >= 0) || !std::isfinite(cap)) c.fail("softcap must be a finite value >= 0");
  if (!standard) return;
  const int64_t mode = c.attr_int("qk_matmul_output_mode");
  if (mode < 0 || mode > 3) c.fail("qk_matmul_output_mode must be 0, 1, 2 or 3, not " + std::to_string(mode));
  if (c.has_attr("softmax_precision")) {
    const int64_t p = c.attr_int("softmax_precision");
    const DType pt = dtype_from_onnx(static_cast<int32_t>(p));
    if (!is_float(pt)) c.fail("softmax_precision " + onnx_dtype_name(static_cast<int32_t>(p)) + " is not a float type");
  }
  if (c.schema().find_attr("left_window_size"))
    for (const char* w : {"left_window_size", "right_window_size"})
      if (c.attr_int(w) < -1) c.fail(std::string(w) + " must be -1 or >= 0");
}

void check_types(const InferContext& c, bool standard) {
  const DType t = c.input_dtype(kQ);
  if (standard)
    c.require_dtype(kQ, {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64});
  else
    c.require_dtype(kQ, {DType::Float32, DType::Float16, DType::BFloat16});
  const char* names[] = {"Q", "K", "V", "attn_mask", "past_key", "past_value"};
  for (size_t i : {kK, kV, kPastKey, kPastValue})
    if (c.has_input(i) && c.input_dtype(i) != t)
      c.unsupported(std::string(names[i]) + " has type " + dtype_name(c.input_dtype(i)) + ", Q has " + dtype_name(t) +
             " (mixed types are not supported)");
  if (c.has_input(kMask) && c.input_dtype(kMask) != DType::Bool && c.input_dtype(kMask) != t)
    c.fail(std::string("attn_mask has type ") + dtype_name(c.input_dtype(kMask)) + "; it must be bool or Q's type " +
           dtype_name(t));
  if (c.has_input(kPastKey) != c.has_input(kPastValue)) c.fail("past_key and past_value must be given together");
  if (c.has_input(kNonpad)) {
    if (c.input_dtype(kNonpad) != DType::Int64) c.fail("nonpad_kv_seqlen must be int64");
    if (c.has_input(kPastKey)) c.fail("nonpad_kv_seqlen cannot be combined with past_key/past_value");
  }
}

/// attn_mask must broadcast (right-aligned) to [B, Hq, Sq, T]. Its last dim may be shorter than T
/// in the standard op (the missing keys are masked, as ONNX's reference pads them); ai.fusec
/// follows numpy broadcasting there too (1 or T).
void check_mask(const InferContext& c, const Shape& target, bool standard) {
  const auto& m = c.input_shape(kMask);
  if (!m) return;
  if (m->empty() || m->size() > 4)
    c.fail("attn_mask must have rank 1 to 4, not " + std::to_string(m->size()) + " (shape " + shape_str(*m) + ")");
  for (size_t i = 0; i + 1 < m->size(); ++i) {
    const Dim& d = (*m)[m->size() - 2 - i];
    const Dim& want = target[target.size() - 2 - i];
    if (d.is_static() && d.value != 1 && differ(d, want))
      c.fail("attn_mask shape " + shape_str(*m) + " does not broadcast to the scores' " + shape_str(target));
  }
  const Dim& last = m->back();
  const Dim& total = target.back();
  if (!last.is_static() || !total.is_static()) return;
  if (standard ? last.value > total.value : (last.value != 1 && last.value != total.value))
    c.fail("attn_mask shape " + shape_str(*m) + " does not broadcast to the scores' " + shape_str(target));
}

/// cos and sin of the packed form: Q's type, broadcasting (right-aligned) to [B, S, 1, D].
void check_rotary_tables(const InferContext& c, const Dim& batch, const Dim& seq, const Dim& head) {
  if (head.is_static() && head.value % 2 != 0)
    c.fail("rotary tables need an even head size, not " + std::to_string(head.value));
  const Shape want{batch, seq, Dim(1), head};
  for (size_t i : {kCos, kSin}) {
    const char* name = i == kCos ? "cos" : "sin";
    if (c.input_dtype(i) != c.input_dtype(kQ)) c.fail(std::string(name) + " must have Q's type");
    const auto& t = c.input_shape(i);
    if (!t) continue;
    bool fits = !t->empty() && t->size() <= 4;
    for (size_t k = 0; fits && k < t->size(); ++k) {
      const Dim& d = (*t)[t->size() - 1 - k];
      const Dim& w = want[3 - k];
      fits = k == 0 ? !differ(d, w) : !(d.is_static() && d.value != 1 && differ(d, w));
      if (k == 1 && d.is_static() && d.value != 1) fits = false;  // the same rotation for every head
    }
    if (!fits)
      c.fail(std::string(name) + " " + shape_str(*t) + " does not broadcast to [B, S, 1, D] = " + shape_str(want));
  }
}

/// The packed form (ai.fusec, K and V omitted): Q is [B, S, (Hq + 2·Hkv)·D].
void infer_packed(InferContext& c) {
  const DType t = c.input_dtype(kQ);
  const auto& qs = c.input_shape(kQ);
  for (const char* name : {"q_num_heads", "kv_num_heads"})
    if (!c.has_attr(name)) c.fail(std::string("packed QKV (K and V omitted) needs the attribute '") + name + "'");
  const int64_t hq = heads_attr(c, "q_num_heads"), hkv = heads_attr(c, "kv_num_heads");
  if (hq % hkv != 0) c.fail("Q's " + std::to_string(hq) + " heads are not a multiple of K/V's " + std::to_string(hkv));
  if (!qs) {
    c.set_output(kY, t, std::nullopt);
    return;
  }
  if (qs->size() != 3)
    c.fail("packed QKV (K and V omitted) must be 3-D [B, S, (q_num_heads + 2·kv_num_heads)·head_size], not " +
           shape_str(*qs));
  const Dim& w = (*qs)[2];
  const int64_t parts = hq + 2 * hkv;
  Dim head;
  if (w.is_static()) {
    if (w.value % parts != 0)
      c.fail("packed QKV's last dim " + std::to_string(w.value) +
             " is not a multiple of q_num_heads + 2·kv_num_heads = " + std::to_string(parts));
    head = Dim(w.value / parts);
  }
  const Dim batch = (*qs)[0], seq = (*qs)[1];
  if (c.has_input(kMask)) check_mask(c, Shape{batch, Dim(hq), seq, seq}, false);
  if (c.has_input(kCos)) check_rotary_tables(c, batch, seq, head);
  c.set_output(kY, t,
               Shape{batch, seq, head.is_static() ? Dim(dims::mul(hq, head.value, c, "Y's hidden size")) : Dim()});
}

void infer_attention(InferContext& c) {
  const bool standard = is_standard_attention(c);
  if (!standard && c.has_input(kCos) != c.has_input(kSin)) c.fail("cos and sin must be given together");
  check_types(c, standard);
  check_attributes(c, standard);
  if (!c.has_input(kK) || !c.has_input(kV)) {
    if (standard) c.fail("K and V are required (only ai.fusec Attention takes Q, K and V packed in Q)");
    if (c.has_input(kK) || c.has_input(kV))
      c.fail("K and V must both be given, or both omitted (packed QKV in Q), not only " +
             std::string(c.has_input(kK) ? "K" : "V"));
    return infer_packed(c);
  }
  if (!standard && (c.has_input(kCos) || c.has_input(kSin)))
    c.fail("rotary tables (cos, sin) need packed QKV (K and V omitted)");
  const DType t = c.input_dtype(kQ);
  const auto &qs = c.input_shape(kQ), &ks = c.input_shape(kK), &vs = c.input_shape(kV);
  if (!qs || !ks || !vs) {
    for (size_t i = 0; i < c.num_outputs(); ++i) c.set_output(i, t, std::nullopt);
    return;
  }
  const size_t rank = qs->size();
  if (rank != 3 && rank != 4) c.fail("Q must be 3-D or 4-D, not " + shape_str(*qs));
  if (ks->size() != rank || vs->size() != rank)
    c.fail("Q, K and V must have the same rank: " + shape_str(*qs) + ", " + shape_str(*ks) + ", " + shape_str(*vs));
  Dim batch = (*qs)[0], q_seq, kv_seq, head, k_head, v_head;
  int64_t hq = 0, hkv = 0;
  if (rank == 3) {
    hq = heads_attr(c, "q_num_heads");
    hkv = heads_attr(c, "kv_num_heads");
    q_seq = (*qs)[1];
    kv_seq = (*ks)[1];
    head = per_head(c, (*qs)[2], hq, "Q");
    k_head = per_head(c, (*ks)[2], hkv, "K");
    v_head = per_head(c, (*vs)[2], hkv, "V");
  } else {
    q_seq = (*qs)[2];
    kv_seq = (*ks)[2];
    head = (*qs)[3];
    k_head = (*ks)[3];
    v_head = (*vs)[3];
    if (differ((*ks)[1], (*vs)[1])) c.fail("K has " + (*ks)[1].str() + " heads, V has " + (*vs)[1].str());
    const char* attrs[] = {"q_num_heads", "kv_num_heads"};
    const Dim* dims[] = {&(*qs)[1], &(*ks)[1]};
    for (int i = 0; i < 2; ++i)
      if (c.has_attr(attrs[i]) && differ(Dim(c.attr_int(attrs[i])), *dims[i]))
        c.fail(std::string(attrs[i]) + " " + std::to_string(c.attr_int(attrs[i])) + " contradicts the 4-D input's " +
               dims[i]->str() + " heads");
    if ((*qs)[1].is_static()) hq = (*qs)[1].value;
    if ((*ks)[1].is_static()) hkv = (*ks)[1].value;
  }
  if (differ(batch, (*ks)[0]) || differ(batch, (*vs)[0]))
    c.fail("Q, K and V have different batch sizes: " + shape_str(*qs) + ", " + shape_str(*ks) + ", " + shape_str(*vs));
  batch = known(known(batch, (*ks)[0]), (*vs)[0]);
  if (differ(kv_seq, rank == 3 ? (*vs)[1] : (*vs)[2]))
    c.fail("K and V have different sequence lengths: " + shape_str(*ks) + ", " + shape_str(*vs));
  if (differ(head, k_head)) c.fail("Q's head size " + head.str() + " differs from K's " + k_head.str());
  head = known(head, k_head);
  if (hq > 0 && hkv > 0 && hq % hkv != 0)
    c.fail("Q's " + std::to_string(hq) + " heads are not a multiple of K/V's " + std::to_string(hkv));
  const Dim q_heads = hq > 0 ? Dim(hq) : (*qs)[1];
  const Dim kv_heads = hkv > 0 ? Dim(hkv) : (*ks)[1];

  // The cache: past_key [B, Hkv, Sp, D], past_value [B, Hkv, Sp, Dv], always 4-D.
  Dim total = kv_seq;
  if (c.has_input(kPastKey)) {
    const auto &pk = c.input_shape(kPastKey), &pv = c.input_shape(kPastValue);
    if (pk && pv) {
      if (pk->size() != 4 || pv->size() != 4)
        c.fail("past_key and past_value must be 4-D, not " + shape_str(*pk) + " and " + shape_str(*pv));
      const Shape want_k{batch, kv_heads, (*pk)[2], head}, want_v{batch, kv_heads, (*pk)[2], v_head};
      for (size_t i = 0; i < 4; ++i)
        if (differ((*pk)[i], want_k[i]) || differ((*pv)[i], want_v[i]))
          c.fail("past_key " + shape_str(*pk) + " / past_value " + shape_str(*pv) + " do not fit K " + shape_str(*ks) +
                 " and V " + shape_str(*vs));
      total = (*pk)[2].is_static() && kv_seq.is_static()
                  ? Dim(dims::add((*pk)[2].value, kv_seq.value, c, "total sequence"))
                  : Dim();
    } else {
      total = Dim();
    }
  }
  if (c.has_input(kNonpad)) {
    const auto& n = c.input_shape(kNonpad);
    if (n && (n->size() != 1 || differ((*n)[0], batch)))
      c.fail("nonpad_kv_seqlen must have shape [" + batch.str() + "], not " + shape_str(*n));
  }
  const Shape scores{batch, q_heads, q_seq, total};
  if (c.has_input(kMask)) check_mask(c, scores, standard);

  Shape y;
  if (rank == 4) {
    y = {batch, q_heads, q_seq, v_head};
  } else {
    y = {batch, q_seq, v_head.is_static() ? Dim(dims::mul(hq, v_head.value, c, "Y's hidden size")) : Dim()};
  }
  c.set_output(kY, t, y);
  c.set_output(kPresentKey, t, Shape{batch, kv_heads, total, head});
  c.set_output(kPresentValue, t, Shape{batch, kv_heads, total, v_head});
  c.set_output(kQk, t, scores);
}

/// FLOPs: Q·K'ᵀ and P·V' (2·D and 2·Dv per score), then ~5 per score for scale, bias, exp, sum and
/// divide (+3 with a softcap: divide, tanh, multiply). Bytes: every input and output as stored;
/// the score matrix is not counted, as a fused kernel keeps it on chip.
Cost cost_attention(const CostContext& c) {
  const auto &q = c.in_dims[kQ], &k = c.in_dims[kK], &v = c.in_dims[kV];
  const double per_score = 5 + (c.node.attr_float("softcap", 0) > 0 ? 3 : 0);
  if (!c.has_input(kK) && !c.has_input(kV)) {
    // Packed QKV [B, S, (Hq + 2·Hkv)·D]: Sq = Skv = S, Dv = D; bytes read = the packed tensor (+ mask).
    if (q.size() != 3) return cost_data_movement(c);
    const double hq = static_cast<double>(std::max<int64_t>(1, c.node.attr_int("q_num_heads", 1)));
    const double hkv = static_cast<double>(std::max<int64_t>(1, c.node.attr_int("kv_num_heads", 1)));
    const double s = static_cast<double>(q[1]), d = static_cast<double>(q[2]) / (hq + 2 * hkv);
    const double n_scores = static_cast<double>(q[0]) * hq * s * s;
    return {n_scores * (2 * (d + d) + per_score), c.all_in_bytes(), c.all_out_bytes()};
  }
  // Costed at static shapes that inference may not have checked (a node it skipped): only read the
  // dims a well-formed node has.
  const size_t rank = q.size();
  const bool past_ok = !c.has_input(kPastKey) || c.in_dims[kPastKey].size() == 4;
  if ((rank != 3 && rank != 4) || k.size() != rank || v.size() != rank || !past_ok) return cost_data_movement(c);
  double batch = static_cast<double>(q[0]), hq, sq, d, dv, t;
  if (q.size() == 3) {
    hq = static_cast<double>(std::max<int64_t>(1, c.node.attr_int("q_num_heads", 1)));
    const double hkv = static_cast<double>(std::max<int64_t>(1, c.node.attr_int("kv_num_heads", 1)));
    sq = static_cast<double>(q[1]);
    d = static_cast<double>(q[2]) / hq;
    dv = static_cast<double>(v[2]) / hkv;
    t = static_cast<double>(k[1]);
  } else {
    hq = static_cast<double>(q[1]);
    sq = static_cast<double>(q[2]);
    d = static_cast<double>(q[3]);
    dv = static_cast<double>(v[3]);
    t = static_cast<double>(k[2]);
  }
  if (c.has_input(kPastKey)) t += static_cast<double>(c.in_dims[kPastKey][2]);
  const double n_scores = batch * hq * sq * t;
  return {n_scores * (2 * (d + dv) + per_score), c.all_in_bytes(), c.all_out_bytes()};
}

/// Attributes common to both schemas; `scale` has no default (absent: 1/√head_size).
OpSchema& attention_common(OpSchema& s) {
  return s.attr("scale", AttrKind::Float)
      .attr("is_causal", AttrKind::Int, AttrValue{int64_t{0}})
      .attr("q_num_heads", AttrKind::Int)
      .attr("kv_num_heads", AttrKind::Int)
      .set_infer(infer_attention)
      .set_cost(cost_attention);
}

/// RotaryEmbedding (opset 23): X [B, S, H·D] (with num_heads) or [B, H, S, D]; cos_cache and
/// sin_cache [max_position, r/2] read at position_ids [B, S], or [B, S, r/2] without them; r is
/// rotary_embedding_dim, or D.
void infer_rotary_embedding(InferContext& c) {
  c.require_dtype(0, {DType::Float32, DType::Float16, DType::BFloat16});
  for (size_t i : {size_t(1), size_t(2)})
    if (c.input_dtype(i) != c.input_dtype(0))
      c.fail(std::string(i == 1 ? "cos_cache" : "sin_cache") + " must have X's type");
  const bool positions = c.has_input(3);
  if (positions) c.require_dtype(3, {DType::Int64});
  const int64_t interleaved = c.attr_int("interleaved"), rd = c.attr_int("rotary_embedding_dim");
  const int64_t heads = c.has_attr("num_heads") ? c.attr_int("num_heads") : 0;
  if (interleaved != 0 && interleaved != 1) c.fail("interleaved must be 0 or 1");
  if (rd < 0 || rd % 2 != 0) c.fail("rotary_embedding_dim must be even and not negative");
  const auto& xs = c.input_shape(0);
  if (xs) {
    if (xs->size() != 3 && xs->size() != 4) c.fail("X must be [B, S, hidden] or [B, H, S, D], got " + shape_str(*xs));
    Dim head = xs->back();
    if (xs->size() == 3) {
      if (heads <= 0) c.fail("a 3-D X needs num_heads");
      if (head.is_static()) {
        if (head.value % heads != 0)
          c.fail("X's hidden size " + std::to_string(head.value) + " is not a multiple of num_heads " +
                 std::to_string(heads));
        head = Dim(head.value / heads);
      }
    } else if (heads > 0 && (*xs)[1].is_static() && (*xs)[1].value != heads) {
      c.fail("num_heads " + std::to_string(heads) + " but X has " + std::to_string((*xs)[1].value) + " heads");
    }
    if (head.is_static()) {
      const int64_t r = rd > 0 ? rd : head.value;
      if (r > head.value || r % 2 != 0)
        c.fail("the rotated size " + std::to_string(r) + " must be even and within the head's " +
               std::to_string(head.value) + " values");
      for (size_t i : {size_t(1), size_t(2)}) {
        const auto& t = c.input_shape(i);
        if (!t) continue;
        const char* name = i == 1 ? "cos_cache" : "sin_cache";
        if (t->size() != (positions ? 2u : 3u))
          c.fail(std::string(name) + " must be " + (positions ? "[max_position, r/2]" : "[B, S, r/2]") + ", got " +
                 shape_str(*t));
        if (t->back().is_static() && t->back().value != r / 2)
          c.fail(std::string(name) + "'s last dim " + std::to_string(t->back().value) +
                 " is not half the rotated size " + std::to_string(r));
      }
    }
  }
  c.propagate(0);
}

OpSchema& onnx_attention(OpRegistry& r, int64_t since, int64_t until, int max_inputs) {
  return attention_common(r.add("Attention").since(since, until).io(3, max_inputs, 1, 4))
      .attr("qk_matmul_output_mode", AttrKind::Int, AttrValue{int64_t{0}})
      .attr("softcap", AttrKind::Float, AttrValue{0.0f})
      .attr("softmax_precision", AttrKind::Int);
}

}  // namespace

AttentionDims attention_dims(const NodeAttrs& n, const std::vector<int64_t>& q, const std::vector<int64_t>& k,
                             const std::vector<int64_t>& v, const std::vector<int64_t>* past_key) {
  AttentionDims a;
  if (q.size() != k.size() || q.size() != v.size() || (q.size() != 3 && q.size() != 4))
    n.fail("Q, K and V must all be 3-D or all 4-D, not " + dims_str(q) + ", " + dims_str(k) + ", " + dims_str(v));
  a.three_d = q.size() == 3;
  a.batch = q[0];
  if (a.three_d) {
    a.q_heads = n.attr_int("q_num_heads");
    a.kv_heads = n.attr_int("kv_num_heads");
    if (a.q_heads <= 0 || a.kv_heads <= 0) n.fail("q_num_heads and kv_num_heads must be positive");
    if (q[2] % a.q_heads || k[2] % a.kv_heads || v[2] % a.kv_heads)
      n.fail("hidden sizes " + dims_str({q[2], k[2], v[2]}) + " do not split into the given heads");
    a.q_seq = q[1];
    a.kv_seq = k[1];
    a.head_size = q[2] / a.q_heads;
    a.v_head_size = v[2] / a.kv_heads;
    if (k[2] / a.kv_heads != a.head_size) n.fail("Q's and K's head sizes differ");
    if (v[1] != a.kv_seq) n.fail("K and V have different sequence lengths");
  } else {
    a.q_heads = q[1];
    a.kv_heads = k[1];
    a.q_seq = q[2];
    a.kv_seq = k[2];
    a.head_size = q[3];
    a.v_head_size = v[3];
    if (k[3] != a.head_size) n.fail("Q's and K's head sizes differ");
    if (v[1] != a.kv_heads || v[2] != a.kv_seq) n.fail("K " + dims_str(k) + " and V " + dims_str(v) + " do not match");
  }
  if (k[0] != a.batch || v[0] != a.batch) n.fail("Q, K and V have different batch sizes");
  if (a.kv_heads <= 0 || a.q_heads % a.kv_heads != 0)
    n.fail("Q's " + std::to_string(a.q_heads) + " heads are not a multiple of K/V's " + std::to_string(a.kv_heads));
  if (past_key) {
    const auto& p = *past_key;
    if (p.size() != 4 || p[0] != a.batch || p[1] != a.kv_heads || p[3] != a.head_size)
      n.fail("past_key " + dims_str(p) + " does not fit K");
    a.past_seq = p[2];
  }
  return a;
}

AttentionDims packed_attention_dims(const NodeAttrs& n, const std::vector<int64_t>& qkv) {
  if (is_standard_attention(n)) n.fail("K and V are required (only ai.fusec Attention takes Q, K and V packed in Q)");
  if (qkv.size() != 3)
    n.fail("packed QKV (K and V omitted) must be 3-D [B, S, (q_num_heads + 2·kv_num_heads)·head_size], not " +
           dims_str(qkv));
  if (!n.has_attr("q_num_heads") || !n.has_attr("kv_num_heads"))
    n.fail("packed QKV (K and V omitted) needs the attributes 'q_num_heads' and 'kv_num_heads'");
  AttentionDims a;
  a.three_d = a.packed = true;
  a.batch = qkv[0];
  a.q_heads = n.attr_int("q_num_heads");
  a.kv_heads = n.attr_int("kv_num_heads");
  if (a.q_heads <= 0 || a.kv_heads <= 0) n.fail("q_num_heads and kv_num_heads must be positive");
  if (a.q_heads % a.kv_heads != 0)
    n.fail("Q's " + std::to_string(a.q_heads) + " heads are not a multiple of K/V's " + std::to_string(a.kv_heads));
  const int64_t parts = a.q_heads + 2 * a.kv_heads;
  if (qkv[2] % parts != 0)
    n.fail("packed QKV's last dim " + std::to_string(qkv[2]) +
           " is not a multiple of q_num_heads + 2·kv_num_heads = " + std::to_string(parts));
  a.q_seq = a.kv_seq = qkv[1];
  a.head_size = a.v_head_size = qkv[2] / parts;
  return a;
}

RotaryTableStrides rotary_table_strides(const NodeAttrs& n, const std::vector<int64_t>& t, const AttentionDims& a,
                                        const char* name) {
  const int64_t want[4] = {a.batch, a.q_seq, 1, a.head_size};
  bool fits = !t.empty() && t.size() <= 4 && t.back() == a.head_size && a.head_size % 2 == 0;
  RotaryTableStrides st;
  int64_t stride = a.head_size;
  for (size_t k = 1; fits && k < t.size(); ++k) {
    const int64_t d = t[t.size() - 1 - k];
    if (d != 1 && (k == 1 || d != want[3 - k])) fits = false;
    if (k == 2) st.seq = d == 1 ? 0 : stride;
    if (k == 3) st.batch = d == 1 ? 0 : stride;
    stride *= d;
  }
  if (!fits)
    n.fail(std::string(name) + " " + dims_str(t) +
           " does not broadcast to [B, S, 1, D] = " + dims_str({a.batch, a.q_seq, 1, a.head_size}));
  return st;
}

float attention_scale(const NodeAttrs& n, int64_t head_size) {
  const bool given = n.has_attr("scale") && (is_standard_attention(n) || n.attr_float("scale") != 0.0f);
  if (given) return n.attr_float("scale");
  return head_size > 0 ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_size))) : 1.0f;
}

void register_attention_schemas(OpRegistry& r) {
  onnx_attention(r, 23, 23, 6).set_doc("Y = softmax(softcap(scale·Q·Kᵀ) + mask) · V, with an optional KV cache");
  onnx_attention(r, 24, 24, 7).set_doc("Attention-23 plus nonpad_kv_seqlen (an external KV cache's valid lengths)");
  onnx_attention(r, 25, 1000, 7)
      .attr("left_window_size", AttrKind::Int, AttrValue{int64_t{-1}})
      .attr("right_window_size", AttrKind::Int, AttrValue{int64_t{-1}})
      .set_doc("Attention-24 plus a sliding window (left/right_window_size)");
  // Per rotated pair: four multiplies and two adds.
  r.add("RotaryEmbedding")
      .since(23)
      .io(3, 4)
      .attr("interleaved", AttrKind::Int, AttrValue{int64_t{0}})
      .attr("rotary_embedding_dim", AttrKind::Int, AttrValue{int64_t{0}})
      .attr("num_heads", AttrKind::Int)
      .set_infer(infer_rotary_embedding)
      .set_cost([](const CostContext& c) { return cost_elementwise(c, 3); })
      .set_doc("Y = X rotated pairwise by the positions' angles (RoPE) over each head's first r values");
  attention_common(r.add("Attention", "ai.fusec").since(1).io(1, 6))
      .attr("softcap", AttrKind::Float, AttrValue{0.0f})
      .set_doc(
          "Y = softmax(softcap(scale·Q·Kᵀ) + mask [causal]) · V (ONNX Attention without cache or extra outputs; "
          "softcap(x) = c·tanh(x / c) where c > 0); "
          "K and V omitted: Q packs [Q | K | V] per token, and cos, sin rotate its Q and K heads first");
}

}  // namespace fusec
