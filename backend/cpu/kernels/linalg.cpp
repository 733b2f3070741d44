// CPU kernels for MatMul, Gemm and Einsum. Float types run on the packed GEMM
// (backend/cpu/gemm.h); integer types use plain loops with wrap-around arithmetic.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <type_traits>

#include "backend/cpu/gemm.h"
#include "backend/cpu/kernels/common.h"
#include "backend/cpu/kernels/linalg.h"
#include "backend/cpu/kernels/packed_weight.h"
#include "ir/ops/einsum.h"

namespace fusec::cpu {

namespace {

template <typename T>
constexpr bool kGemmType = std::is_same_v<T, float> || std::is_same_v<T, double>;

/// Integer dot products wrap modulo 2^bits, as the reference implementations do.
template <typename T>
using Accum = std::conditional_t<std::is_floating_point_v<T>, T, uint64_t>;

/// C = op(A)·op(B) for plain loops (integer types).
template <typename T>
void matmul_loops(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* B, int64_t ldb,
                  T* C, int64_t ldc) {
  parallel_for(M, std::max<int64_t>(1, 65536 / std::max<int64_t>(N * K, 1)), [&](int64_t i0, int64_t i1) {
    std::vector<Accum<T>> row(static_cast<size_t>(N));
    for (int64_t i = i0; i < i1; ++i) {
      std::fill(row.begin(), row.end(), Accum<T>(0));
      for (int64_t k = 0; k < K; ++k) {
        const Accum<T> a = static_cast<Accum<T>>(ta ? A[k * lda + i] : A[i * lda + k]);
        if (tb)
          for (int64_t j = 0; j < N; ++j) row[j] += a * static_cast<Accum<T>>(B[j * ldb + k]);
        else
          for (int64_t j = 0; j < N; ++j) row[j] += a * static_cast<Accum<T>>(B[k * ldb + j]);
      }
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = static_cast<T>(row[j]);
    }
  });
}

/// C_b = op(A_b)·op(B_b) for every batch b, where A_b = A + a_off[b], B_b = B + b_off[b] and
/// C_b = C + b·M·N (contiguous). Many small products run one per thread; large ones use
/// every thread each.
template <typename T>
void batched_matmul(const T* A, const std::vector<int64_t>& a_off, bool ta, int64_t lda, const T* B,
                    const std::vector<int64_t>& b_off, bool tb, int64_t ldb, T* C, int64_t M, int64_t N, int64_t K) {
  const int64_t batch = static_cast<int64_t>(a_off.size());
  auto one = [&](int64_t b) {
    if constexpr (kGemmType<T>)
      gemm(ta, tb, M, N, K, T(1), A + a_off[b], lda, B + b_off[b], ldb, T(0), C + b * M * N, N);
    else
      matmul_loops(ta, tb, M, N, K, A + a_off[b], lda, B + b_off[b], ldb, C + b * M * N, N);
  };
  const double flops = 2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K);
  if (batch > 1 && (flops < 4e6 || batch >= 4 * num_threads())) {
    const int64_t min_chunk = std::max<int64_t>(1, static_cast<int64_t>(2e5 / std::max(flops, 1.0)));
    parallel_for(batch, min_chunk, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) one(b);
    });
  } else {
    for (int64_t b = 0; b < batch; ++b) one(b);
  }
}

// ---- MatMul ----

}  // namespace

void matmul(const NodeAttrs& ctx, const Tensor& a, const Tensor& b, Tensor& y, StepCache* b_cache) {
  if (a.dtype() != b.dtype()) ctx.fail("A and B have different types");
  std::vector<int64_t> ad = a.dims(), bd = b.dims();
  if (ad.empty() || bd.empty()) ctx.fail("MatMul operands must have rank >= 1");
  if (ad.size() == 1) ad.insert(ad.begin(), 1);
  if (bd.size() == 1) bd.push_back(1);
  const int64_t M = ad[ad.size() - 2], K = ad.back(), N = bd.back();
  if (bd[bd.size() - 2] != K) ctx.fail("inner dimensions differ: " + dims_str(a.dims()) + " x " + dims_str(b.dims()));
  // Batch dims, right-aligned, with per-operand strides (0 where broadcast).
  const size_t ra = ad.size() - 2, rb = bd.size() - 2, rank = std::max(ra, rb);
  std::vector<int64_t> out_batch(rank), sa(rank, 0), sb(rank, 0);
  int64_t stride_a = M * K, stride_b = K * N, a_batch = 1, b_batch = 1;
  for (size_t i = rank; i-- > 0;) {
    const int64_t da = i >= rank - ra ? ad[i - (rank - ra)] : 1;
    const int64_t db = i >= rank - rb ? bd[i - (rank - rb)] : 1;
    if (da != db && da != 1 && db != 1)
      ctx.fail("cannot broadcast batch dims of " + dims_str(a.dims()) + " and " + dims_str(b.dims()));
    out_batch[i] = da == 1 ? db : da;
    sa[i] = da == 1 ? 0 : stride_a;
    sb[i] = db == 1 ? 0 : stride_b;
    stride_a *= da;
    stride_b *= db;
    a_batch *= da;
    b_batch *= db;
  }
  const int64_t batch = checked_numel(out_batch);
  std::vector<int64_t> want = out_batch;
  if (a.rank() > 1) want.push_back(M);
  if (b.rank() > 1) want.push_back(N);
  if (y.dims() != want) ctx.fail("output has shape " + dims_str(y.dims()) + ", expected " + dims_str(want));
  if (y.numel() == 0) return;
  if (K == 0) {
    std::memset(y.raw(), 0, y.nbytes());
    return;
  }

  dispatch_numeric(a.dtype(), ctx, [&](auto tag) {
    using T = decltype(tag);
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* py = y.data<T>();
    // B shared by every batch and A not broadcast: one GEMM with the batches stacked as rows.
    if (b_batch == 1 && a_batch == batch) {
      if constexpr (kGemmType<T>) {
        // A constant B (a layer's weight) packed once for the executable.
        using Packed = PackedOperand<T>;
        const PackedWeight<T>* packed = nullptr;
        if (gemm_packs(batch * M, N, K))
          packed = packed_weight<T>(b_cache, Packed::bytes_for(Packed::Side::B, K, N), [&](std::vector<Packed>& parts) {
            parts.emplace_back(Packed::Side::B, false, K, N, pb, N);
          });
        if (const Packed* bp = packed ? packed->part(0, pb) : nullptr) {
          gemm(false, batch * M, T(1), pa, K, *bp, T(0), py, N);
          return;
        }
      }
      batched_matmul<T>(pa, {0}, false, K, pb, {0}, false, N, py, batch * M, N, K);
      return;
    }
    std::vector<int64_t> a_off(static_cast<size_t>(batch)), b_off(static_cast<size_t>(batch));
    std::vector<int64_t> idx(rank, 0);
    int64_t oa = 0, ob = 0;
    for (int64_t t = 0; t < batch; ++t) {
      a_off[t] = oa;
      b_off[t] = ob;
      for (size_t i = rank; i-- > 0;) {
        ++idx[i];
        oa += sa[i];
        ob += sb[i];
        if (idx[i] < out_batch[i]) break;
        oa -= sa[i] * out_batch[i];
        ob -= sb[i] * out_batch[i];
        idx[i] = 0;
      }
    }
    batched_matmul<T>(pa, a_off, false, K, pb, b_off, false, N, py, M, N, K);
  });
}

namespace {

void matmul_kernel(KernelContext& ctx) {
  if (has_half_io(ctx)) return via_float32(ctx, matmul_kernel);
  matmul(ctx, ctx.input(0), ctx.input(1), ctx.output(0), ctx.cache_for_input(1));
}

// ---- Gemm ----

void gemm_kernel(KernelContext& ctx) {
  if (has_half_io(ctx)) return via_float32(ctx, gemm_kernel);
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  Tensor& y = ctx.output(0);
  if (a.rank() != 2 || b.rank() != 2) ctx.fail("A and B must be 2-D");
  if (a.dtype() != b.dtype() || (ctx.has_input(2) && ctx.input(2).dtype() != a.dtype()))
    ctx.fail("A, B and C must have the same type");
  const bool ta = ctx.attr_int("transA") != 0, tb = ctx.attr_int("transB") != 0;
  const double alpha = ctx.attr_float("alpha"), beta = ctx.attr_float("beta");
  const int64_t M = a.dim(ta ? 1 : 0), K = a.dim(ta ? 0 : 1), N = b.dim(tb ? 0 : 1);
  if (b.dim(tb ? 1 : 0) != K)
    ctx.fail("inner dimensions differ: A " + dims_str(a.dims()) + ", B " + dims_str(b.dims()));
  if (y.dims() != std::vector<int64_t>{M, N})
    ctx.fail("output has shape " + dims_str(y.dims()) + ", expected " + dims_str({M, N}));
  if (y.numel() == 0) return;
  const bool use_c = ctx.has_input(2) && beta != 0;
  // C broadcast to (M, N): strides 0 along size-1 (or absent) dims.
  int64_t c_rs = 0, c_cs = 0;
  if (use_c) {
    const auto& cd = ctx.input(2).dims();
    if (cd.size() > 2) ctx.fail("C must have rank <= 2");
    const int64_t cr = cd.size() == 2 ? cd[0] : 1, cc = cd.empty() ? 1 : cd.back();
    if ((cr != 1 && cr != M) || (cc != 1 && cc != N))
      ctx.fail("C of shape " + dims_str(cd) + " cannot be broadcast to " + dims_str({M, N}));
    c_cs = cc == 1 ? 0 : 1;
    c_rs = cr == 1 ? 0 : cc;
  }
  dispatch_numeric(a.dtype(), ctx, [&](auto tag) {
    using T = decltype(tag);
    T* py = y.data<T>();
    const T* pc = use_c ? ctx.input(2).data<T>() : nullptr;
    if constexpr (kGemmType<T>) {
      if (use_c)
        parallel_for(M, std::max<int64_t>(1, 16384 / N), [&](int64_t i0, int64_t i1) {
          for (int64_t i = i0; i < i1; ++i)
            for (int64_t j = 0; j < N; ++j) py[i * N + j] = pc[i * c_rs + j * c_cs];
        });
      // A constant B (a layer's weight) packed once for the executable.
      using Packed = PackedOperand<T>;
      const T* pb = b.data<T>();
      const PackedWeight<T>* packed = nullptr;
      if (gemm_packs(M, N, K))
        packed = packed_weight<T>(
            ctx.cache_for_input(1), Packed::bytes_for(Packed::Side::B, K, N),
            [&](std::vector<Packed>& parts) { parts.emplace_back(Packed::Side::B, tb, K, N, pb, b.dim(1)); });
      const T beta_t = use_c ? static_cast<T>(beta) : T(0);
      if (const Packed* bp = packed ? packed->part(0, pb) : nullptr)
        gemm(ta, M, static_cast<T>(alpha), a.data<T>(), a.dim(1), *bp, beta_t, py, N);
      else
        gemm(ta, tb, M, N, K, static_cast<T>(alpha), a.data<T>(), a.dim(1), pb, b.dim(1), beta_t, py, N);
    } else {
      matmul_loops(ta, tb, M, N, K, a.data<T>(), a.dim(1), b.data<T>(), b.dim(1), py, N);
      if (alpha != 1 || use_c)
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j) {
            double v = alpha * static_cast<double>(py[i * N + j]);
            if (use_c) v += beta * static_cast<double>(pc[i * c_rs + j * c_cs]);
            py[i * N + j] = static_cast<T>(v);
          }
    }
  });
}

// ---- Einsum ----

/// An operand or intermediate result: contiguous data with one label per dim.
template <typename T>
struct Operand {
  const T* data = nullptr;
  std::vector<T> owned;  // intermediates own their data
  std::vector<int64_t> dims;
  std::vector<int> labels;
};

/// Labels' sizes over several operands: equal, or 1 (which broadcasts).
template <typename T>
std::vector<int64_t> label_sizes(const std::vector<const Operand<T>*>& ops, size_t n_labels, const NodeAttrs& where) {
  std::vector<int64_t> size(n_labels, 1);
  for (const auto* op : ops)
    for (size_t d = 0; d < op->dims.size(); ++d) {
      int64_t& s = size[op->labels[d]];
      const int64_t x = op->dims[d];
      if (x == s || x == 1) continue;
      if (s != 1) where.fail("einsum label sizes differ: " + std::to_string(s) + " vs " + std::to_string(x));
      s = x;
    }
  return size;
}

/// The general case: out[o] = sum over the other labels of the product of the operands,
/// repeated labels taking diagonals and size-1 dims broadcasting. `out` has the sizes of `out_labels`.
template <typename T>
void einsum_loops(const std::vector<const Operand<T>*>& ops, const std::vector<int>& out_labels, size_t n_labels,
                  T* out, const NodeAttrs& where) {
  const std::vector<int64_t> size = label_sizes(ops, n_labels, where);
  std::vector<bool> used(n_labels, false), in_out(n_labels, false);
  for (const auto* op : ops)
    for (int l : op->labels) used[l] = true;
  for (int l : out_labels) in_out[l] = true;
  std::vector<int> summed;
  for (size_t l = 0; l < n_labels; ++l)
    if (used[l] && !in_out[l]) summed.push_back(static_cast<int>(l));
  // stride[k][l]: how far operand k moves when label l advances (diagonals add up).
  const size_t n = ops.size();
  std::vector<std::vector<int64_t>> stride(n, std::vector<int64_t>(n_labels, 0));
  for (size_t k = 0; k < n; ++k) {
    const auto& d = ops[k]->dims;
    int64_t s = 1;
    for (size_t i = d.size(); i-- > 0;) {
      if (d[i] != 1) stride[k][ops[k]->labels[i]] += s;
      s *= d[i];
    }
  }
  int64_t out_count = 1, sum_count = 1;
  for (int l : out_labels) out_count *= size[l];
  for (int l : summed) sum_count *= size[l];
  if (out_count == 0) return;
  using Acc = std::conditional_t<std::is_floating_point_v<T>, double, uint64_t>;
  parallel_for(out_count, std::max<int64_t>(1, 4096 / std::max<int64_t>(sum_count, 1)), [&](int64_t o0, int64_t o1) {
    std::vector<int64_t> base(n), off(n), idx(summed.size());
    for (int64_t o = o0; o < o1; ++o) {
      std::fill(base.begin(), base.end(), 0);
      int64_t rem = o;
      for (size_t i = out_labels.size(); i-- > 0;) {
        const int l = out_labels[i];
        const int64_t x = rem % size[l];
        rem /= size[l];
        for (size_t k = 0; k < n; ++k) base[k] += x * stride[k][l];
      }
      Acc acc = 0;
      off = base;
      std::fill(idx.begin(), idx.end(), 0);
      for (int64_t s = 0; s < sum_count; ++s) {
        Acc p = static_cast<Acc>(ops[0]->data[off[0]]);
        for (size_t k = 1; k < n; ++k) p *= static_cast<Acc>(ops[k]->data[off[k]]);
        acc += p;
        for (size_t i = summed.size(); i-- > 0;) {
          const int l = summed[i];
          for (size_t k = 0; k < n; ++k) off[k] += stride[k][l];
          if (++idx[i] < size[l]) break;
          for (size_t k = 0; k < n; ++k) off[k] -= stride[k][l] * size[l];
          idx[i] = 0;
        }
      }
      out[o] = static_cast<T>(acc);
    }
  });
}

/// out = in with its dims reordered: out dim i is in dim perm[i].
template <typename T>
void permute(const T* in, const std::vector<int64_t>& dims, const std::vector<size_t>& perm, T* out) {
  const size_t r = dims.size();
  std::vector<int64_t> in_stride(r, 1), od(r), os(r);
  for (size_t i = r; i-- > 1;) in_stride[i - 1] = in_stride[i] * dims[i];
  for (size_t i = 0; i < r; ++i) {
    od[i] = dims[perm[i]];
    os[i] = in_stride[perm[i]];
  }
  const int64_t total = checked_numel(od);
  if (total == 0) return;
  if (r == 0) {
    out[0] = in[0];
    return;
  }
  const int64_t inner = od[r - 1], inner_stride = os[r - 1], rows = total / inner;
  parallel_for(rows, std::max<int64_t>(1, 16384 / inner), [&](int64_t r0, int64_t r1) {
    for (int64_t row = r0; row < r1; ++row) {
      int64_t rem = row, src = 0;
      for (size_t i = r - 1; i-- > 0;) {
        src += (rem % od[i]) * os[i];
        rem /= od[i];
      }
      T* dst = out + row * inner;
      for (int64_t j = 0; j < inner; ++j) dst[j] = in[src + j * inner_stride];
    }
  });
}

template <typename T>
std::vector<size_t> positions(const std::vector<int>& labels, const std::vector<int>& order) {
  std::vector<size_t> p;
  for (int l : order) p.push_back(static_cast<size_t>(std::find(labels.begin(), labels.end(), l) - labels.begin()));
  return p;
}

/// x ⊗ y contracted over the labels not in `keep`, as batched matrix products where the
/// labels allow it: result labels are [batch, x-only, y-only]. Falls back to the loops for
/// diagonals, broadcasting, and labels only one side sums over.
template <typename T>
Operand<T> contract_pair(const Operand<T>& x, const Operand<T>& y, const std::vector<bool>& keep, size_t n_labels,
                         const NodeAttrs& where) {
  auto has = [](const Operand<T>& o, int l) {
    return std::find(o.labels.begin(), o.labels.end(), l) != o.labels.end();
  };
  auto distinct = [](const std::vector<int>& v) {
    std::vector<int> s = v;
    std::sort(s.begin(), s.end());
    return std::adjacent_find(s.begin(), s.end()) == s.end();
  };
  std::vector<int> batch, m_labels, n_labels_, k_labels;
  bool simple = distinct(x.labels) && distinct(y.labels);
  const std::vector<int64_t> size = label_sizes<T>({&x, &y}, n_labels, where);
  for (const auto* o : {&x, &y})
    for (size_t d = 0; d < o->dims.size(); ++d)
      if (o->dims[d] != size[o->labels[d]]) simple = false;  // broadcast dim
  for (int l : x.labels) {
    if (has(y, l))
      (keep[l] ? batch : k_labels).push_back(l);
    else if (keep[l])
      m_labels.push_back(l);
    else
      simple = false;  // x alone sums over l
  }
  for (int l : y.labels) {
    if (has(x, l)) continue;
    if (keep[l])
      n_labels_.push_back(l);
    else
      simple = false;
  }
  Operand<T> r;
  if (simple) {
    r.labels = batch;
    r.labels.insert(r.labels.end(), m_labels.begin(), m_labels.end());
    r.labels.insert(r.labels.end(), n_labels_.begin(), n_labels_.end());
  } else {
    std::vector<bool> seen(n_labels, false);
    for (const auto* o : {&x, &y})
      for (int l : o->labels)
        if (keep[l] && !seen[l]) {
          seen[l] = true;
          r.labels.push_back(l);
        }
  }
  for (int l : r.labels) r.dims.push_back(size[l]);
  r.owned.assign(static_cast<size_t>(checked_numel(r.dims)), T(0));
  r.data = r.owned.data();
  if (!simple) {
    einsum_loops<T>({&x, &y}, r.labels, n_labels, r.owned.data(), where);
    return r;
  }
  auto prod = [&](const std::vector<int>& ls) {
    int64_t p = 1;
    for (int l : ls) p *= size[l];
    return p;
  };
  const int64_t B = prod(batch), M = prod(m_labels), N = prod(n_labels_), K = prod(k_labels);
  if (r.owned.empty() || K == 0) return r;
  auto cat = [](std::vector<int> a, const std::vector<int>& b, const std::vector<int>& c) {
    a.insert(a.end(), b.begin(), b.end());
    a.insert(a.end(), c.begin(), c.end());
    return a;
  };
  // x as [batch, M, K] or, read transposed, [batch, K, M]; copy into the first if neither.
  std::vector<T> xbuf, ybuf;
  const T* xp = x.data;
  bool ta = false;
  if (x.labels == cat(batch, k_labels, m_labels)) {
    ta = true;
  } else if (x.labels != cat(batch, m_labels, k_labels)) {
    xbuf.resize(static_cast<size_t>(B * M * K));
    permute(x.data, x.dims, positions<T>(x.labels, cat(batch, m_labels, k_labels)), xbuf.data());
    xp = xbuf.data();
  }
  const T* yp = y.data;
  bool tb = false;
  if (y.labels == cat(batch, n_labels_, k_labels)) {
    tb = true;
  } else if (y.labels != cat(batch, k_labels, n_labels_)) {
    ybuf.resize(static_cast<size_t>(B * K * N));
    permute(y.data, y.dims, positions<T>(y.labels, cat(batch, k_labels, n_labels_)), ybuf.data());
    yp = ybuf.data();
  }
  std::vector<int64_t> a_off(static_cast<size_t>(B)), b_off(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    a_off[b] = b * M * K;
    b_off[b] = b * K * N;
  }
  batched_matmul<T>(xp, a_off, ta, ta ? M : K, yp, b_off, tb, tb ? K : N, r.owned.data(), M, N, K);
  return r;
}

void einsum_kernel(KernelContext& ctx) {
  if (has_half_io(ctx)) return via_float32(ctx, einsum_kernel);
  std::vector<size_t> ranks;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) ranks.push_back(ctx.input(i).rank());
  const EinsumSpec spec = parse_einsum(ctx.attr_string("equation"), ranks, ctx);
  const size_t n_labels = 52 + static_cast<size_t>(spec.ellipsis_rank);
  Tensor& y = ctx.output(0);
  dispatch_numeric(ctx.input(0).dtype(), ctx, [&](auto tag) {
    using T = decltype(tag);
    std::vector<Operand<T>> ins(ctx.num_inputs());
    for (size_t i = 0; i < ins.size(); ++i) {
      const Tensor& t = ctx.input(i);
      if (t.dtype() != ctx.input(0).dtype()) ctx.fail("inputs have different types");
      ins[i].data = t.data<T>();
      ins[i].dims = t.dims();
      ins[i].labels = spec.inputs[i];
    }
    std::vector<const Operand<T>*> all;
    for (const auto& o : ins) all.push_back(&o);
    const std::vector<int64_t> size = label_sizes(all, n_labels, ctx);
    std::vector<int64_t> want;
    for (int l : spec.output) want.push_back(size[l]);
    if (want != y.dims()) ctx.fail("output shape " + dims_str(y.dims()) + " differs from " + dims_str(want));
    T* out = y.data<T>();
    if (ins.size() == 1) {
      einsum_loops<T>(all, spec.output, n_labels, out, ctx);
      return;
    }
    // Left to right, pairwise: after each step keep the labels the output or a later operand needs.
    Operand<T> cur;
    const Operand<T>* acc = &ins[0];
    for (size_t i = 1; i < ins.size(); ++i) {
      std::vector<bool> keep(n_labels, false);
      for (int l : spec.output) keep[l] = true;
      for (size_t j = i + 1; j < ins.size(); ++j)
        for (int l : ins[j].labels) keep[l] = true;
      Operand<T> next = contract_pair(*acc, ins[i], keep, n_labels, ctx);
      cur = std::move(next);
      cur.data = cur.owned.data();
      acc = &cur;
    }
    // cur holds exactly the output labels, in its own order.
    if (cur.labels == spec.output) {
      if (!cur.owned.empty()) std::memcpy(out, cur.owned.data(), cur.owned.size() * sizeof(T));
    } else {
      permute(cur.owned.data(), cur.dims, positions<T>(cur.labels, spec.output), out);
    }
  });
}

// ---- Det ----

/// Each matrix's determinant by LU with partial pivoting, in float64.
void det_kernel(KernelContext& ctx) {
  if (has_half_io(ctx)) return via_float32(ctx, det_kernel);
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output(0);
  if (x.rank() < 2 || x.dim(x.rank() - 1) != x.dim(x.rank() - 2))
    ctx.fail("Det needs square matrices, got " + dims_str(x.dims()));
  const int64_t m = x.dim(x.rank() - 1);
  const std::vector<int64_t> want(x.dims().begin(), x.dims().end() - 2);
  if (y.dims() != want) ctx.fail("output has shape " + dims_str(y.dims()) + ", expected " + dims_str(want));
  dispatch_float(x.dtype(), ctx, [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* py = y.data<T>();
    std::vector<double> a(static_cast<size_t>(m * m));
    for (int64_t b = 0; b < y.numel(); ++b) {
      for (int64_t i = 0; i < m * m; ++i) a[i] = static_cast<double>(px[b * m * m + i]);
      double det = 1;
      for (int64_t k = 0; k < m && det != 0; ++k) {
        int64_t p = k;
        for (int64_t i = k + 1; i < m; ++i)
          if (std::fabs(a[i * m + k]) > std::fabs(a[p * m + k])) p = i;
        if (a[p * m + k] == 0) {
          det = 0;
          break;
        }
        if (p != k) {
          for (int64_t j = 0; j < m; ++j) std::swap(a[k * m + j], a[p * m + j]);
          det = -det;
        }
        det *= a[k * m + k];
        for (int64_t i = k + 1; i < m; ++i) {
          const double f = a[i * m + k] / a[k * m + k];
          for (int64_t j = k + 1; j < m; ++j) a[i * m + j] -= f * a[k * m + j];
        }
      }
      py[b] = static_cast<T>(det);
    }
  });
}

}  // namespace

void register_linalg_kernels(KernelRegistry& r) {
  r.add("Det", det_kernel, "", Writes::Every);
  r.add("MatMul", matmul_kernel, "", Writes::Every);  // GEMM with beta 0 (or zeros when K is 0)
  r.add("Gemm", gemm_kernel, "", Writes::Every);      // C copied in first, or beta 0
  r.add("Einsum", einsum_kernel, "", Writes::Every);
}

}  // namespace fusec::cpu
