// CPU reference kernel of Attention (ONNX opsets 23-25 and ai.fusec; semantics in
// ir/ops/attention.cpp and docs/ops.md).
//
// One task per (batch, query head): S = scale·Q·K'ᵀ, then per query row the softcap, the additive
// bias (mask, causal frontier, padding, window), a softmax, and Y = P·V' (both products through
// the blocked GEMM for large heads, as plain vectorizable loops for small ones). Q, K, V and Y are read and written in
// place in either layout (3-D [B, S, H·D] or 4-D [B, H, S, D]) through row strides, so no transpose is materialized; K'
// and V' (the cache concatenated with the new keys) are built only where there is a cache or a present output, into the
// present outputs when those are requested. float16/bfloat16 run in float32 (via_float32), float64 in double. Packed
// QKV (ai.fusec, K and V omitted) is read in place too: Q, K and V are views of the one [B, S, (Hq + 2·Hkv)·D] tensor
// at their column offsets (AttentionDims::q_view/k_view/v_view).
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "backend/cpu/gemm.h"
#include "backend/cpu/kernels/common.h"
#include "backend/cpu/kernels/exp_vec.h"
#include "ir/ops/attention.h"

namespace fusec::cpu {

namespace {

enum Input : size_t { kQ = 0, kK, kV, kMask, kPastKey, kPastValue, kNonpad };
constexpr size_t kCos = 4, kSin = 5;  // ai.fusec's rotary tables (packed QKV)
enum Output : size_t { kY = 0, kPresentKey, kPresentValue, kQk };

/// attn_mask viewed as [B, Hq, Sq, len] through element strides (0 on broadcast dims). Keys at
/// j >= len are masked: the standard op's padding of a short mask (ONNX's reference pads it
/// with −inf / false).
struct MaskView {
  const Tensor* t = nullptr;
  int64_t len = 0;
  int64_t sb = 0, sh = 0, sq = 0, sj = 0;
};

MaskView mask_view(const KernelContext& ctx, const Tensor& m, const AttentionDims& a, bool standard) {
  const int64_t total = a.total_kv();
  const std::vector<int64_t> target = {a.batch, a.q_heads, a.q_seq, total};
  const size_t r = m.rank();
  if (r < 1 || r > 4) ctx.fail("attn_mask must have rank 1 to 4, not " + dims_str(m.dims()));
  MaskView v;
  v.t = &m;
  int64_t stride = 1;
  int64_t* strides[] = {&v.sb, &v.sh, &v.sq, &v.sj};
  for (size_t i = 0; i < r; ++i) {
    const size_t axis = 3 - i;  // target axis of mask dim r-1-i
    const int64_t d = m.dim(r - 1 - i);
    if (axis == 3) {
      v.len = d;
      if (standard ? d > total : (d != 1 && d != total))
        ctx.fail("attn_mask " + dims_str(m.dims()) + " does not broadcast to the scores' " + dims_str(target));
      if (d == 1 && !standard) v.len = total;  // ai.fusec: numpy broadcasting of a width-1 mask
      *strides[axis] = d == 1 ? 0 : stride;
    } else {
      if (d != 1 && d != target[axis])
        ctx.fail("attn_mask " + dims_str(m.dims()) + " does not broadcast to the scores' " + dims_str(target));
      *strides[axis] = d == 1 ? 0 : stride;
    }
    stride *= d;
  }
  return v;
}

/// dst [B, Hkv, T, size] = concat(past [B, Hkv, Sp, size], src viewed through `view`) along the sequence.
template <typename T>
void concat_cache(const AttentionDims& a, const Tensor* past, const Tensor& src, AttentionDims::View view, int64_t size,
                  T* dst) {
  const int64_t total = a.total_kv();
  const auto st = view.st;
  const T* s = src.data<T>() + view.offset;
  const T* p = past ? past->data<T>() : nullptr;
  parallel_for(a.batch * a.kv_heads, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t bh = lo; bh < hi; ++bh) {
      const int64_t b = bh / a.kv_heads, h = bh % a.kv_heads;
      T* out = dst + bh * total * size;
      if (p) std::copy(p + bh * a.past_seq * size, p + (bh + 1) * a.past_seq * size, out);
      for (int64_t j = 0; j < a.kv_seq; ++j) {
        const T* row = s + b * st.b + h * st.h + j * st.s;
        std::copy(row, row + size, out + (a.past_seq + j) * size);
      }
    }
  });
}

/// Farther than any key index can be (tensors hold far fewer than 2^40 elements per dim).
constexpr int64_t kFar = int64_t{1} << 40;

/// Everything about one node that is the same for every (batch, head) task.
struct Plan {
  AttentionDims a;
  float scale = 1, softcap = 0;
  bool causal = false;
  int64_t left = -1, right = -1;  // sliding window (opset 25); -1: unbounded
  QkOutputMode mode = QkOutputMode::Raw;
  MaskView mask;
  const int64_t* nonpad = nullptr;  // points into `nonpad_store`
  std::vector<int64_t> nonpad_store;
  const Tensor* qkv = nullptr;  // packed QKV read in place of input 0 (its heads rotated), or null
};

/// Packed QKV with its Q and K heads rotated by ai.fusec Attention's cos and sin, as ai.fusec Rotary
/// computes them (rotated = (Hq + Hkv)·D; V's heads copied).
template <typename T>
Tensor rotated_qkv(const KernelContext& ctx, const AttentionDims& a) {
  const Tensor& x = ctx.input(kQ);
  const Tensor &cs = ctx.input(kCos), &sn = ctx.input(kSin);
  for (const Tensor* t : {&cs, &sn})
    if (t->dtype() != x.dtype()) ctx.fail("cos and sin must have Q's type");
  const RotaryTableStrides cst = rotary_table_strides(ctx, cs.dims(), a, "cos");
  const RotaryTableStrides sst = rotary_table_strides(ctx, sn.dims(), a, "sin");
  Tensor y(x.dtype(), x.dims());
  const int64_t d = a.head_size, half = d / 2, w = a.packed_width(), rotated = (a.q_heads + a.kv_heads) * d;
  const T* xp = x.data<T>();
  const T* cp = cs.data<T>();
  const T* sp = sn.data<T>();
  T* yp = y.data<T>();
  parallel_for(a.batch * a.q_seq, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t b = r / a.q_seq, pos = r % a.q_seq;
      const T* xr = xp + r * w;
      T* yr = yp + r * w;
      const T* c = cp + b * cst.batch + pos * cst.seq;
      const T* s = sp + b * sst.batch + pos * sst.seq;
      for (int64_t h0 = 0; h0 < rotated; h0 += d)
        for (int64_t j = 0; j < half; ++j) {
          yr[h0 + j] = xr[h0 + j] * c[j] + (-xr[h0 + j + half]) * s[j];
          yr[h0 + j + half] = xr[h0 + j + half] * c[j + half] + xr[h0 + j] * s[j + half];
        }
      std::copy(xr + rotated, xr + w, yr + rotated);
    }
  });
  return y;
}

/// True when some key may be masked: otherwise the bias is zero everywhere and is skipped.
bool has_bias(const Plan& p) { return p.mask.t || p.causal || p.nonpad || p.left >= 0 || p.right >= 0; }

/// Additive bias of query row i of (b, h) over the T keys; returns false when every key is masked.
template <typename T>
bool bias_row(const Plan& p, int64_t b, int64_t h, int64_t i, T* bias) {
  const AttentionDims& a = p.a;
  const int64_t total = a.total_kv();
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  std::fill(bias, bias + total, T(0));
  if (const Tensor* m = p.mask.t) {
    const int64_t row = b * p.mask.sb + h * p.mask.sh + i * p.mask.sq, len = std::min(p.mask.len, total),
                  sj = p.mask.sj;
    if (m->dtype() == DType::Bool) {
      const uint8_t* keep = m->data<uint8_t>() + row;
      for (int64_t j = 0; j < len; ++j) bias[j] = keep[j * sj] ? T(0) : kNegInf;
    } else {
      const T* add = m->data<T>() + row;
      for (int64_t j = 0; j < len; ++j) bias[j] = add[j * sj];
    }
    std::fill(bias + len, bias + total, kNegInf);  // a short standard mask: the keys after it are padding
  }
  // Keys before the query block: the cache (past_key), or an external cache's valid keys minus
  // the queries (nonpad_kv_seqlen); causal masking and windows are aligned to it. Query i may see
  // keys [first, last): causal stops at i + offset, padding at nonpad, the window on both sides.
  const int64_t offset = a.past_seq > 0 ? a.past_seq : p.nonpad ? p.nonpad[b] - a.q_seq : 0;
  int64_t first = 0, last = total;
  if (p.causal) last = std::min(last, i + offset + 1);
  if (p.nonpad) last = std::min(last, p.nonpad[b]);
  if (p.right >= 0) last = std::min(last, i + offset + p.right + 1);
  if (p.left >= 0) first = std::max(first, i + offset - p.left);
  last = std::clamp<int64_t>(last, 0, total);
  first = std::clamp<int64_t>(first, 0, last);
  std::fill(bias, bias + first, kNegInf);
  std::fill(bias + last, bias + total, kNegInf);
  for (int64_t j = first; j < last; ++j)
    if (bias[j] != kNegInf) return true;
  return false;
}

/// Softmax in place over n scores; a row whose maximum is −inf becomes zeros (as ONNX's reference),
/// and a key whose bias is −inf gets exactly 0.
template <typename T>
void softmax_row(T* s, const T* bias, int64_t n) {
  T m = -std::numeric_limits<T>::infinity();
  for (int64_t j = 0; j < n; ++j) m = std::max(m, s[j]);
  if (m == -std::numeric_limits<T>::infinity()) {
    std::fill(s, s + n, T(0));
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    for (int64_t j = 0; j < n; ++j) s[j] = exp_vec(s[j] - m);
  } else {
    for (int64_t j = 0; j < n; ++j) s[j] = std::exp(s[j] - m);
  }
  for (int64_t j = 0; j < n; ++j)
    if (bias[j] == -std::numeric_limits<T>::infinity()) s[j] = 0;  // also when the score is +inf or NaN
  double sum = 0;
  for (int64_t j = 0; j < n; ++j) sum += s[j];
  const T inv = static_cast<T>(1.0 / sum);
  for (int64_t j = 0; j < n; ++j) s[j] *= inv;
}

/// Below this many multiply-adds per (batch, head) the two products run as plain loops: the
/// blocked GEMM's packing costs more than it saves on BERT-small's 16×16×16 heads.
constexpr int64_t kGemmWork = 1 << 15;
/// Query rows whose scores are held at once.
constexpr int64_t kRowBlock = 64;

template <typename T>
void run_attention(KernelContext& ctx, const Plan& p) {
  const AttentionDims& a = p.a;
  const int64_t total = a.total_kv(), d = a.head_size, dv = a.v_head_size;
  // ai.fusec's inputs 4 and 5 are the rotary tables, not a cache.
  const bool cache = is_standard_attention(ctx);
  const Tensor* past_k = cache && ctx.has_input(kPastKey) ? &ctx.input(kPastKey) : nullptr;
  const Tensor* past_v = cache && ctx.has_input(kPastValue) ? &ctx.input(kPastValue) : nullptr;
  // K' and V' as rows (b, g, j) at base + b·st.b + g·st.h + j·st.s: the inputs themselves when
  // there is no cache to prepend and no present output to write, else [B, Hkv, T, size] copies.
  // Packed, K and V are views of Q's tensor.
  struct Rows {
    const T* base;
    AttentionDims::Strides st;
  };
  Tensor k_scratch, v_scratch;  // Tensors, so the host memory budget counts them
  auto rows = [&](size_t in, AttentionDims::View view, const Tensor* past, size_t out, Tensor& scratch,
                  int64_t size) -> Rows {
    const Tensor& src = a.packed && p.qkv ? *p.qkv : ctx.input(a.packed ? kQ : in);
    if (!past && !ctx.has_output(out)) return {src.template data<T>() + view.offset, view.st};
    T* dst;
    if (ctx.has_output(out)) {
      dst = ctx.output(out).template data<T>();
    } else {
      scratch = Tensor(src.dtype(), {a.batch, a.kv_heads, total, size});
      dst = scratch.template data<T>();
    }
    concat_cache<T>(a, past, src, view, size, dst);
    return {dst, {a.kv_heads * total * size, total * size, size}};
  };
  const Rows keys = rows(kK, a.k_view(), past_k, kPresentKey, k_scratch, d);
  const Rows values = rows(kV, a.v_view(), past_v, kPresentValue, v_scratch, dv);

  const auto qv = a.q_view();
  const auto qs = qv.st;
  const auto ys = a.y_strides();
  const T* q = (p.qkv ? *p.qkv : ctx.input(kQ)).data<T>() + qv.offset;
  T* y = ctx.output(kY).data<T>();
  T* qk = ctx.has_output(kQk) ? ctx.output(kQk).data<T>() : nullptr;
  const T scale = static_cast<T>(p.scale), cap = static_cast<T>(p.softcap);
  const bool use_gemm = a.q_seq * total * std::max(d, dv) >= kGemmWork;
  const bool biased = has_bias(p);
  // Query rows go in blocks, so the scores held per thread stay kRowBlock × T however long the
  // sequences are (a model file cannot make this allocate Sq × T).
  const int64_t block = std::min<int64_t>(a.q_seq, kRowBlock);
  parallel_for(a.batch * a.q_heads, 1, [&](int64_t lo, int64_t hi) {
    std::vector<T> scores(static_cast<size_t>(block * total)), bias(static_cast<size_t>(total), T(0));
    std::vector<T> kt(use_gemm ? 0 : static_cast<size_t>(d * total));
    for (int64_t bh = lo; bh < hi; ++bh) {
      const int64_t b = bh / a.q_heads, h = bh % a.q_heads, g = h / a.group();
      const T* qbh = q + b * qs.b + h * qs.h;
      const T* kg = keys.base + b * keys.st.b + g * keys.st.h;
      const T* vg = values.base + b * values.st.b + g * values.st.h;
      T* ybh = y + b * ys.b + h * ys.h;
      T* qk_bh = qk ? qk + bh * a.q_seq * total : nullptr;
      if (!use_gemm)  // Kᵀ [D, T] once per head: s_i = scale · Σ_d q_id · Kᵀ[d, :] needs no horizontal sums
        for (int64_t e = 0; e < d; ++e)
          for (int64_t j = 0; j < total; ++j) kt[e * total + j] = kg[j * keys.st.s + e];
      for (int64_t i0 = 0; i0 < a.q_seq; i0 += block) {
        const int64_t rows = std::min(block, a.q_seq - i0);
        if (use_gemm) {
          gemm(false, true, rows, total, d, scale, qbh + i0 * qs.s, qs.s, kg, keys.st.s, T(0), scores.data(), total);
        } else {
          for (int64_t r = 0; r < rows; ++r) {
            T* si = scores.data() + r * total;
            const T* qi = qbh + (i0 + r) * qs.s;
            std::fill(si, si + total, T(0));
            for (int64_t e = 0; e < d; ++e) {
              const T qe = qi[e] * scale;
              const T* row = kt.data() + e * total;
              for (int64_t j = 0; j < total; ++j) si[j] += qe * row[j];
            }
          }
        }
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t i = i0 + r;
          T* s = scores.data() + r * total;
          T* out = qk_bh ? qk_bh + i * total : nullptr;
          if (out && p.mode == QkOutputMode::Raw) std::copy(s, s + total, out);
          if (cap > 0)
            for (int64_t j = 0; j < total; ++j) s[j] = cap * std::tanh(s[j] / cap);
          if (out && p.mode == QkOutputMode::AfterSoftcap) std::copy(s, s + total, out);
          const bool attends = !biased || bias_row<T>(p, b, h, i, bias.data());
          if (biased)
            for (int64_t j = 0; j < total; ++j) s[j] += bias[j];
          if (out && p.mode == QkOutputMode::WithBias) std::copy(s, s + total, out);
          // Decided on the bias, not the scores: a query with no key to attend gives a zero row.
          if (attends)
            softmax_row(s, bias.data(), total);
          else
            std::fill(s, s + total, T(0));
          if (out && p.mode == QkOutputMode::AfterSoftmax) std::copy(s, s + total, out);
          if (use_gemm) continue;
          T* yi = ybh + i * ys.s;  // y_i = Σ_j p_ij v_j, accumulated along V's contiguous rows
          std::fill(yi, yi + dv, T(0));
          for (int64_t j = 0; j < total; ++j) {
            const T pj = s[j];
            const T* vj = vg + j * values.st.s;
            for (int64_t e = 0; e < dv; ++e) yi[e] += pj * vj[e];
          }
        }
        if (use_gemm)
          gemm(false, false, rows, dv, total, T(1), scores.data(), total, vg, values.st.s, T(0), ybh + i0 * ys.s, ys.s);
      }
    }
  });
}

void attention_kernel(KernelContext& ctx) {
  if (has_half_io(ctx)) return via_float32(ctx, attention_kernel);
  const bool standard = is_standard_attention(ctx);
  const Tensor& q = ctx.input(kQ);
  const Tensor* past_k = standard && ctx.has_input(kPastKey) ? &ctx.input(kPastKey) : nullptr;
  if (standard && ctx.has_input(kPastKey) != ctx.has_input(kPastValue))
    ctx.fail("past_key and past_value must be given together");
  Plan p;
  if (!standard && !ctx.has_input(kK) && !ctx.has_input(kV)) {
    p.a = packed_attention_dims(ctx, q.dims());  // ai.fusec has no cache inputs
  } else {
    const Tensor &k = ctx.input(kK), &v = ctx.input(kV);  // fails naming the node when one is omitted
    p.a = attention_dims(ctx, q.dims(), k.dims(), v.dims(), past_k ? &past_k->dims() : nullptr);
  }
  const AttentionDims& a = p.a;
  if (past_k) {
    const std::vector<int64_t> want = {a.batch, a.kv_heads, a.past_seq, a.v_head_size};
    if (ctx.input(kPastValue).dims() != want)
      ctx.fail("past_value " + dims_str(ctx.input(kPastValue).dims()) + " should be " + dims_str(want));
  }
  p.scale = attention_scale(ctx, a.head_size);
  p.causal = ctx.attr_int("is_causal") != 0;
  p.softcap = ctx.attr_float("softcap");
  if (standard) {
    p.mode = static_cast<QkOutputMode>(ctx.attr_int("qk_matmul_output_mode"));
    if (ctx.schema().find_attr("left_window_size")) {
      p.left = std::clamp<int64_t>(ctx.attr_int("left_window_size"), -1, kFar);
      p.right = std::clamp<int64_t>(ctx.attr_int("right_window_size"), -1, kFar);
    }
  }
  if (ctx.has_input(kMask)) p.mask = mask_view(ctx, ctx.input(kMask), a, standard);
  if (ctx.has_input(kNonpad)) {
    const Tensor& n = ctx.input(kNonpad);
    if (n.dtype() != DType::Int64 || n.dims() != std::vector<int64_t>{a.batch})
      ctx.fail("nonpad_kv_seqlen must be int64 of shape [" + std::to_string(a.batch) + "]");
    if (past_k) ctx.fail("nonpad_kv_seqlen cannot be combined with past_key/past_value");
    // Lengths beyond ±kFar act like ±kFar (every key / none), and keep the frontier arithmetic
    // i + nonpad − Sq + window far from int64 overflow.
    p.nonpad_store.assign(n.data<int64_t>(), n.data<int64_t>() + a.batch);
    for (int64_t& v : p.nonpad_store) v = std::clamp<int64_t>(v, -kFar, kFar);
    p.nonpad = p.nonpad_store.data();
  }
  const bool rotary = !standard && (ctx.has_input(kCos) || ctx.has_input(kSin));
  if (rotary && !(a.packed && ctx.has_input(kCos) && ctx.has_input(kSin)))
    ctx.fail("rotary tables (cos and sin, both) need packed QKV (K and V omitted)");
  dispatch_float(q.dtype(), ctx, [&](auto tag) {
    using T = decltype(tag);
    if (p.mask.t && p.mask.t->dtype() != DType::Bool && p.mask.t->dtype() != q.dtype())
      ctx.fail(std::string("attn_mask has type ") + dtype_name(p.mask.t->dtype()) + "; it must be bool or Q's type");
    Tensor rotated;
    if (rotary) {
      rotated = rotated_qkv<T>(ctx, a);
      p.qkv = &rotated;
    }
    run_attention<T>(ctx, p);
  });
}

/// RotaryEmbedding (opset 23), as ONNX's reference computes it: each head's pairs (j, j + r/2), or
/// (2j, 2j + 1) interleaved, rotated by cos and sin of the token's entry j, real = cos·x1 − sin·x2,
/// imag = sin·x1 + cos·x2, in float; values past r copied.
void rotary_embedding_kernel(KernelContext& ctx) {
  if (has_half_io(ctx)) return via_float32(ctx, rotary_embedding_kernel);
  const Tensor& x = ctx.input(0);
  const Tensor& cs = ctx.input(1);
  const Tensor& sn = ctx.input(2);
  const Tensor* pos = ctx.has_input(3) ? &ctx.input(3) : nullptr;
  if (x.dtype() != DType::Float32) ctx.unsupported(std::string("X of type ") + dtype_name(x.dtype()));
  const bool four_d = x.rank() == 4;
  const int64_t B = x.dim(0);
  const int64_t H = four_d ? x.dim(1) : ctx.has_attr("num_heads") ? ctx.attr_int("num_heads") : 0;
  if (H <= 0) ctx.fail("a 3-D X needs num_heads");
  const int64_t S = four_d ? x.dim(2) : x.dim(1);
  const int64_t D = four_d ? x.dim(3) : x.dim(2) / H;
  const int64_t rd = ctx.attr_int("rotary_embedding_dim"), r = rd > 0 ? rd : D, half = r / 2;
  const bool interleaved = ctx.attr_int("interleaved") != 0;
  if (pos && pos->dims() != std::vector<int64_t>{B, S})
    ctx.fail("position_ids " + dims_str(pos->dims()) + " must be [B, S] = " + dims_str({B, S}));
  const int64_t table_rows = pos ? cs.dim(0) : B * S;
  if (!pos && (cs.dims() != std::vector<int64_t>{B, S, half} || sn.dims() != cs.dims()))
    ctx.fail("cos_cache and sin_cache must be [B, S, r/2] = " + dims_str({B, S, half}));
  if (pos && (cs.rank() != 2 || cs.dim(1) != half || sn.dims() != cs.dims()))
    ctx.fail("cos_cache and sin_cache must be [max_position, " + std::to_string(half) + "]");
  // Each token's table row, checked once here rather than once per head below. A negative position
  // counts from the end, as Gather's index (and ONNX's reference) does.
  std::vector<int64_t> table_row(static_cast<size_t>(B * S));
  for (int64_t i = 0; i < B * S; ++i) {
    int64_t t = pos ? pos->data<int64_t>()[i] : i;
    if (t < -table_rows || t >= table_rows)
      ctx.fail("position_ids holds " + std::to_string(t) + ", outside the caches' " + std::to_string(table_rows) +
               " positions");
    table_row[static_cast<size_t>(i)] = t < 0 ? t + table_rows : t;
  }
  const float* xp = x.data<float>();
  const float* cp = cs.data<float>();
  const float* sp = sn.data<float>();
  float* yp = ctx.output(0).data<float>();
  // Heads in X's order: [B, S, H, D] for 3-D X, [B, H, S, D] for 4-D.
  parallel_for(B * H * S, std::max<int64_t>(1, 16384 / std::max<int64_t>(D, 1)), [&](int64_t b0, int64_t e0) {
    for (int64_t row = b0; row < e0; ++row) {
      const int64_t b = row / (H * S);
      const int64_t s = four_d ? row % S : row / H % S;
      const int64_t t = table_row[static_cast<size_t>(b * S + s)];
      const float* c = cp + t * half;
      const float* sv = sp + t * half;
      const float* xr = xp + row * D;
      float* yr = yp + row * D;
      for (int64_t j = 0; j < half; ++j) {
        const int64_t lo = interleaved ? 2 * j : j, hi = interleaved ? 2 * j + 1 : j + half;
        const float x1 = xr[lo], x2 = xr[hi];
        yr[lo] = c[j] * x1 - sv[j] * x2;
        yr[hi] = sv[j] * x1 + c[j] * x2;
      }
      std::copy(xr + r, xr + D, yr + r);
    }
  });
}

}  // namespace

void register_attention_kernels(KernelRegistry& r) {
  r.add("RotaryEmbedding", rotary_embedding_kernel, "", Writes::Every);
  // Y, the present cache (past and new rows) and every query row of the scores (mode 0-3).
  r.add("Attention", attention_kernel, "", Writes::Every);
  r.add("Attention", attention_kernel, "ai.fusec", Writes::Every);
}

}  // namespace fusec::cpu
