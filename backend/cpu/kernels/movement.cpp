// CPU kernels for the data movement ops. Most of them only move bytes, so they dispatch on the
// element size, not the dtype, and reduce to one strided copy: Transpose, Slice, Expand, Tile,
// DepthToSpace and SpaceToDepth are all "output[i] = input[base + Σ i_k·stride_k]" over some view.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "backend/cpu/kernels/common.h"
#include "ir/dim_math.h"
#include "backend/dispatch_bytes.h"
#include "ir/ops/movement_util.h"

namespace fusec::cpu {

namespace {

// ------------------------------------------------------------------ helpers

/// Calls f(U{}) with U an unsigned integer type as wide as one element (dispatch_bytes).
template <typename F>
void dispatch_size(size_t esize, const NodeAttrs& where, F&& f) {
  if (!dispatch_bytes(esize, std::forward<F>(f)))
    where.unsupported("unsupported element size " + std::to_string(esize));
}

int64_t prod(const std::vector<int64_t>& d, size_t b, size_t e) {
  int64_t p = 1;
  for (size_t i = b; i < e && i < d.size(); ++i) p *= d[i];
  return p;
}

/// A multi-index over `dims` that also tracks Σ idx_k·strides_k as it advances in row-major order.
struct Odometer {
  const std::vector<int64_t>& dims;
  const std::vector<int64_t>& strides;
  std::vector<int64_t> idx;
  int64_t off = 0;
  Odometer(const std::vector<int64_t>& d, const std::vector<int64_t>& s, int64_t start)
      : dims(d), strides(s), idx(d.size(), 0) {
    for (size_t i = d.size(); i-- > 0;) {
      idx[i] = start % d[i];
      start /= d[i];
      off += idx[i] * s[i];
    }
  }
  void next() {
    for (size_t i = dims.size(); i-- > 0;) {
      ++idx[i];
      off += strides[i];
      if (idx[i] < dims[i]) return;
      off -= strides[i] * dims[i];
      idx[i] = 0;
    }
  }
};

/// Fills the contiguous `dst` of shape `dims` with src[Σ i_k·strides_k] (element strides, possibly
/// zero or negative; `src` already points at the element for index 0). Adjacent dims that are
/// contiguous in the source merge first, so most views become a few long memcpy rows; a view whose
/// innermost source dim is elsewhere (a transpose) is copied in cache-sized tiles.
void strided_copy(size_t esize, const std::vector<int64_t>& dims_in, const std::vector<int64_t>& strides_in,
                  const void* src_v, void* dst_v, const NodeAttrs& where) {
  std::vector<int64_t> d, s;
  for (size_t i = 0; i < dims_in.size(); ++i) {
    if (dims_in[i] == 0) return;
    if (dims_in[i] == 1) continue;
    if (!d.empty() && s.back() == strides_in[i] * dims_in[i]) {
      d.back() *= dims_in[i];
      s.back() = strides_in[i];
    } else {
      d.push_back(dims_in[i]);
      s.push_back(strides_in[i]);
    }
  }
  const char* src = static_cast<const char*>(src_v);
  char* dst = static_cast<char*>(dst_v);
  if (d.empty()) {
    std::memcpy(dst, src, esize);
    return;
  }
  const size_t r = d.size();
  const int64_t inner = d[r - 1], inner_stride = s[r - 1];
  std::vector<int64_t> od(d.begin(), d.end() - 1), os(s.begin(), s.end() - 1);
  const int64_t rows = prod(od, 0, od.size());
  const int64_t min_rows = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, inner * static_cast<int64_t>(esize)));

  if (inner_stride == 1) {
    const size_t row_bytes = static_cast<size_t>(inner) * esize;
    parallel_for(rows, min_rows, [&](int64_t r0, int64_t r1) {
      Odometer it(od, os, r0);
      for (int64_t row = r0; row < r1; ++row, it.next())
        std::memcpy(dst + row * row_bytes, src + it.off * static_cast<int64_t>(esize), row_bytes);
    });
    return;
  }

  // A transpose: some other dim k is contiguous in the source. Copy 2-D tiles of (k, last) so
  // both the reads (along k) and the writes (along last) stay in cache.
  size_t k = r;
  for (size_t i = 0; i + 1 < r; ++i)
    if (s[i] == 1) k = i;
  dispatch_size(esize, where, [&](auto tag) {
    using U = decltype(tag);
    const U* x = reinterpret_cast<const U*>(src);
    U* y = reinterpret_cast<U*>(dst);
    if (k == r || d[k] < 8 || inner < 8) {
      parallel_for(rows, min_rows, [&](int64_t r0, int64_t r1) {
        Odometer it(od, os, r0);
        for (int64_t row = r0; row < r1; ++row, it.next()) {
          U* out = y + row * inner;
          const U* in = x + it.off;
          for (int64_t j = 0; j < inner; ++j) out[j] = in[j * inner_stride];
        }
      });
      return;
    }
    auto dst_strides = contiguous_strides(d);
    std::vector<int64_t> bd, bs, bo;  // batch dims: all but k and the last
    for (size_t i = 0; i + 1 < r; ++i)
      if (i != k) {
        bd.push_back(d[i]);
        bs.push_back(s[i]);
        bo.push_back(dst_strides[i]);
      }
    constexpr int64_t T = 32;
    const int64_t dk = d[k], dk_stride = dst_strides[k];
    const int64_t kblocks = (dk + T - 1) / T;
    const int64_t batches = prod(bd, 0, bd.size());
    parallel_for(batches * kblocks, std::max<int64_t>(1, 4096 / (T * inner)), [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t b = t / kblocks, i0 = (t % kblocks) * T, i1 = std::min(dk, i0 + T);
        int64_t soff = 0, doff = 0, rem = b;
        for (size_t q = bd.size(); q-- > 0;) {
          int64_t iq = rem % bd[q];
          rem /= bd[q];
          soff += iq * bs[q];
          doff += iq * bo[q];
        }
        for (int64_t j0 = 0; j0 < inner; j0 += T) {
          const int64_t j1 = std::min(inner, j0 + T);
          for (int64_t i = i0; i < i1; ++i) {
            U* out = y + doff + i * dk_stride;
            const U* in = x + soff + i;
            for (int64_t j = j0; j < j1; ++j) out[j] = in[j * inner_stride];
          }
        }
      }
    });
  });
}

/// Index i of an int64 or int32 tensor, checked against an axis of length `dim` and made
/// non-negative, read where a kernel uses it: GatherElements and ScatterElements read each index
/// once, and copying them all first (into int64, one thread) cost as much as the scatter itself
/// (Faster R-CNN's RoI pooling scatters 1.9M elements a level).
class IndexReader {
 public:
  IndexReader(const Tensor& t, int64_t dim, const NodeAttrs& where, const char* what = "index")
      : t_(t), dim_(dim), where_(where), what_(what) {
    if (t.dtype() == DType::Int64)
      i64_ = t.data<int64_t>();
    else if (t.dtype() == DType::Int32)
      i32_ = t.data<int32_t>();
  }

  int64_t operator()(int64_t i) const {
    const int64_t x = i64_ ? i64_[i] : i32_ ? static_cast<int64_t>(i32_[i]) : t_.as_int64(i);
    if (x < -dim_ || x >= dim_) [[unlikely]]
      out_of_range(x);
    return x < 0 ? x + dim_ : x;
  }

 private:
  [[noreturn]] __attribute__((noinline, cold)) void out_of_range(int64_t x) const {
    where_.fail(std::string(what_) + " " + std::to_string(x) + " is out of range for an axis of length " +
                std::to_string(dim_));
  }

  const Tensor& t_;
  int64_t dim_;
  const NodeAttrs& where_;
  const char* what_;
  const int64_t* i64_ = nullptr;
  const int32_t* i32_ = nullptr;
};

/// Every index, read and checked by IndexReader, as int64: for Gather, which reads each once per
/// outer position.
std::vector<int64_t> read_indices(const Tensor& t, int64_t dim, const NodeAttrs& where, const char* what = "index") {
  const IndexReader at(t, dim, where, what);
  std::vector<int64_t> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[static_cast<size_t>(i)] = at(i);
  return v;
}

const char* bytes_of(const Tensor& t) { return static_cast<const char*>(t.raw()); }
char* bytes_of(Tensor& t) { return static_cast<char*>(t.raw()); }

// ------------------------------------------------------------------ Transpose

void transpose_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output(0);
  const int64_t r = static_cast<int64_t>(x.rank());
  std::vector<int64_t> perm = ctx.has_attr("perm") ? ctx.attr_ints("perm") : std::vector<int64_t>{};
  if (perm.empty())
    for (int64_t i = r - 1; i >= 0; --i) perm.push_back(i);
  auto in_strides = contiguous_strides(x.dims());
  std::vector<int64_t> st(r);
  for (int64_t i = 0; i < r; ++i) st[i] = in_strides[perm[i]];
  strided_copy(dtype_size(x.dtype()), y.dims(), st, x.raw(), y.raw(), ctx);
}

// ------------------------------------------------------------------ Concat, Split

void concat_kernel(KernelContext& ctx) {
  Tensor& y = ctx.output(0);
  const int64_t r = static_cast<int64_t>(y.rank());
  const int64_t ax = normalize_axis(ctx.attr_int("axis"), r, ctx);
  const size_t esize = dtype_size(y.dtype());
  const int64_t outer = prod(y.dims(), 0, ax);
  const int64_t inner = prod(y.dims(), ax + 1, r) * static_cast<int64_t>(esize);
  const int64_t out_row = y.dim(ax) * inner;
  int64_t off = 0;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    const Tensor& x = ctx.input(i);
    const int64_t block = x.dim(ax) * inner;
    if (block > 0) {
      const char* src = bytes_of(x);
      char* dst = bytes_of(y) + off;
      parallel_for(outer, std::max<int64_t>(1, 65536 / block), [&](int64_t o0, int64_t o1) {
        for (int64_t o = o0; o < o1; ++o) std::memcpy(dst + o * out_row, src + o * block, block);
      });
    }
    off += block;
  }
}

void split_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t r = static_cast<int64_t>(x.rank());
  const int64_t ax = normalize_axis(ctx.attr_int("axis"), r, ctx);
  const size_t esize = dtype_size(x.dtype());
  const int64_t outer = prod(x.dims(), 0, ax);
  const int64_t inner = prod(x.dims(), ax + 1, r) * static_cast<int64_t>(esize);
  const int64_t in_row = x.dim(ax) * inner;
  int64_t off = 0;
  for (size_t i = 0; i < ctx.num_outputs(); ++i) {
    if (!ctx.has_output(i)) internal_error("Split output left out" + ctx.node().ref());
    Tensor& y = ctx.output(i);
    const int64_t block = y.dim(ax) * inner;
    if (off + block > in_row) ctx.fail("split sizes exceed the axis length");
    if (block > 0) {
      const char* src = bytes_of(x) + off;
      char* dst = bytes_of(y);
      parallel_for(outer, std::max<int64_t>(1, 65536 / block), [&](int64_t o0, int64_t o1) {
        for (int64_t o = o0; o < o1; ++o) std::memcpy(dst + o * block, src + o * in_row, block);
      });
    }
    off += block;
  }
}

// ------------------------------------------------------------------ Slice

void slice_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output(0);
  std::vector<int64_t> starts, ends, axes, steps;
  if (ctx.opset() < 10) {
    starts = ctx.attr_ints("starts");
    ends = ctx.attr_ints("ends");
    if (ctx.has_attr("axes")) axes = ctx.attr_ints("axes");
  } else {
    starts = ctx.input(1).to_int64_vector();
    ends = ctx.input(2).to_int64_vector();
    if (ctx.has_input(3)) axes = ctx.input(3).to_int64_vector();
    if (ctx.has_input(4)) steps = ctx.input(4).to_int64_vector();
  }
  auto p = movement::compute_slice(x.dims(), starts, ends, axes, steps, ctx);
  if (p.out_dims != y.dims()) internal_error("Slice output shape disagrees with inference" + ctx.node().ref());
  if (y.numel() == 0) return;
  const size_t esize = dtype_size(x.dtype());
  auto in_strides = contiguous_strides(x.dims());
  std::vector<int64_t> st(x.rank());
  int64_t base = 0;
  for (size_t i = 0; i < x.rank(); ++i) {
    st[i] = in_strides[i] * p.step[i];
    base += p.start[i] * in_strides[i];
  }
  strided_copy(esize, y.dims(), st, bytes_of(x) + base * static_cast<int64_t>(esize), y.raw(), ctx);
}

// ------------------------------------------------------------------ Gather family

void gather_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& ind = ctx.input(1);
  Tensor& y = ctx.output(0);
  const int64_t r = static_cast<int64_t>(x.rank());
  const int64_t ax = normalize_axis(ctx.attr_int("axis"), r, ctx);
  const int64_t dim = x.dim(ax);
  auto idx = read_indices(ind, dim, ctx);
  const int64_t n = static_cast<int64_t>(idx.size());
  const size_t esize = dtype_size(x.dtype());
  const int64_t outer = prod(x.dims(), 0, ax);
  const int64_t inner = prod(x.dims(), ax + 1, r) * static_cast<int64_t>(esize);
  if (inner == 0 || n == 0) return;
  const char* src = bytes_of(x);
  char* dst = bytes_of(y);
  parallel_for(outer * n, std::max<int64_t>(1, 32768 / inner), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t o = t / n, k = t % n;
      std::memcpy(dst + t * inner, src + (o * dim + idx[k]) * inner, inner);
    }
  });
}

void gather_elements_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& ind = ctx.input(1);
  Tensor& y = ctx.output(0);
  const int64_t r = static_cast<int64_t>(x.rank());
  const int64_t ax = normalize_axis(ctx.attr_int("axis"), r, ctx);
  if (static_cast<int64_t>(ind.rank()) != r) ctx.fail("indices must have the same rank as data");
  for (int64_t d = 0; d < r; ++d)
    if (d != ax && ind.dim(d) > x.dim(d))
      ctx.fail("indices shape " + dims_str(ind.dims()) + " exceeds data shape " + dims_str(x.dims()) + " off the axis");
  const IndexReader idx(ind, x.dim(ax), ctx);
  if (y.numel() == 0) return;
  auto xs = contiguous_strides(x.dims());
  const int64_t s_ax = xs[ax];
  // Rows over all output dims but the last; the axis contributes through the index, not the row.
  std::vector<int64_t> od(y.dims().begin(), y.dims().end() - 1), os(xs.begin(), xs.end() - 1);
  if (ax < r - 1) os[ax] = 0;
  const int64_t inner = y.dims().back();
  const int64_t step = ax == r - 1 ? 0 : 1;
  dispatch_size(dtype_size(x.dtype()), ctx, [&](auto tag) {
    using U = decltype(tag);
    const U* src = x.data<U>();
    U* dst = y.data<U>();
    parallel_for(prod(od, 0, od.size()), std::max<int64_t>(1, 16384 / inner), [&](int64_t r0, int64_t r1) {
      Odometer it(od, os, r0);
      for (int64_t row = r0; row < r1; ++row, it.next()) {
        U* out = dst + row * inner;
        for (int64_t j = 0; j < inner; ++j) out[j] = src[it.off + j * step + idx(row * inner + j) * s_ax];
      }
    });
  });
}

void gather_nd_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& ind = ctx.input(1);
  Tensor& y = ctx.output(0);
  const int64_t b = ctx.opset() >= 12 ? ctx.attr_int("batch_dims") : 0;
  const auto& D = x.dims();
  const auto& Q = ind.dims();
  const int64_t k = Q.back();
  const int64_t batch = prod(Q, 0, b);
  const int64_t per_batch = prod(Q, b, Q.size() - 1);
  const size_t esize = dtype_size(x.dtype());
  const int64_t slice = prod(D, b + k, D.size()) * static_cast<int64_t>(esize);
  const int64_t batch_stride = prod(D, b, D.size()) * static_cast<int64_t>(esize);
  auto xs = contiguous_strides(D);
  // Validate every index tuple first, turning each into a byte offset within its batch.
  std::vector<int64_t> offs(static_cast<size_t>(batch * per_batch));
  for (int64_t t = 0; t < batch * per_batch; ++t) {
    int64_t off = 0;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t dim = D[b + j];
      int64_t v = ind.as_int64(t * k + j);
      if (v < -dim || v >= dim)
        ctx.fail("index " + std::to_string(v) + " is out of range for a dim of length " + std::to_string(dim));
      if (v < 0) v += dim;
      off += v * xs[b + j];
    }
    offs[t] = off * static_cast<int64_t>(esize);
  }
  if (slice == 0) return;
  const char* src = bytes_of(x);
  char* dst = bytes_of(y);
  parallel_for(batch * per_batch, std::max<int64_t>(1, 32768 / slice), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      std::memcpy(dst + t * slice, src + (t / per_batch) * batch_stride + offs[t], slice);
  });
}

// ------------------------------------------------------------------ Scatter family

enum class Reduction { None, Add, Mul, Max, Min };

/// The reduction to apply; on bool data add is logical or (max) and mul logical and (min).
Reduction reduction_of(const KernelContext& ctx) {
  if (!ctx.schema().find_attr("reduction")) return Reduction::None;
  std::string r = ctx.attr_string("reduction");
  const bool boolean = ctx.input(0).dtype() == DType::Bool;
  if (r == "none") return Reduction::None;
  if (r == "add") return boolean ? Reduction::Max : Reduction::Add;
  if (r == "mul") return boolean ? Reduction::Min : Reduction::Mul;
  if (r == "max") return Reduction::Max;
  if (r == "min") return Reduction::Min;
  ctx.fail("unknown reduction '" + r + "'");
}

template <typename T>
void apply(T& dst, T v, Reduction red) {
  switch (red) {
    case Reduction::None:
      dst = v;
      break;
    case Reduction::Add:
      dst = static_cast<T>(dst + v);
      break;
    case Reduction::Mul:
      dst = static_cast<T>(dst * v);
      break;
    case Reduction::Max:
      dst = std::max(dst, v);
      break;
    case Reduction::Min:
      dst = std::min(dst, v);
      break;
  }
}

/// Runs `body(T)` with T the element type: raw bytes for plain assignment and bool, the numeric
/// type for a reduction (half types go through float32).
template <typename Body>
void dispatch_scatter(KernelContext& ctx, Reduction red, const Kernel& self, Body&& body) {
  if (red == Reduction::None || ctx.input(0).dtype() == DType::Bool) {
    dispatch_size(dtype_size(ctx.input(0).dtype()), ctx, body);
    return;
  }
  if (has_half_io(ctx)) return via_float32(ctx, self);
  dispatch_numeric(ctx.input(0).dtype(), ctx, body);
}

void scatter_elements_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& ind = ctx.input(1);
  const Tensor& upd = ctx.input(2);
  Tensor& y = ctx.output(0);
  const Reduction red = reduction_of(ctx);
  const int64_t r = static_cast<int64_t>(x.rank());
  const int64_t ax = normalize_axis(ctx.attr_int("axis"), r, ctx);
  if (static_cast<int64_t>(ind.rank()) != r || ind.dims() != upd.dims())
    ctx.fail("indices and updates must have the same shape, of data's rank");
  for (int64_t d = 0; d < r; ++d)
    if (d != ax && ind.dim(d) > x.dim(d)) ctx.fail("indices shape exceeds data shape off the axis");
  const IndexReader idx(ind, x.dim(ax), ctx);
  auto xs = contiguous_strides(x.dims());
  dispatch_scatter(ctx, red, scatter_elements_kernel, [&](auto tag) {
    using T = decltype(tag);
    std::memcpy(y.raw(), x.raw(), x.nbytes());
    if (upd.numel() == 0) return;
    T* out = y.data<T>();
    const T* u = upd.data<T>();
    const auto& ud = upd.dims();
    // updates seen as [outer, D, inner] around the axis. An update lands at
    // outer_at[o] + inner_at[i] + index * xs[ax] (updates may be smaller than data off the axis).
    const size_t a = static_cast<size_t>(ax);
    const int64_t outer = prod(ud, 0, a), D = ud[a], inner = prod(ud, a + 1, ud.size());
    auto offsets = [&](size_t b, size_t e, int64_t n) {
      const std::vector<int64_t> dims(ud.begin() + b, ud.begin() + e), strides(xs.begin() + b, xs.begin() + e);
      std::vector<int64_t> at(static_cast<size_t>(n));
      Odometer it(dims, strides, 0);
      for (auto& v : at) {
        v = it.off;
        it.next();
      }
      return at;
    };
    const std::vector<int64_t> outer_at = offsets(0, a, outer), inner_at = offsets(a + 1, ud.size(), inner);
    // Two updates can land on one element only if they share their outer and inner positions
    // (their offsets differ in some other dim otherwise). Each task takes a run of inner positions
    // of one outer position and walks the axis in order over it, so with duplicate indices the
    // later update still wins (or accumulates last), as sequentially.
    // Where updates cover data's whole extent off the axis, inner position i is element i.
    const bool dense_inner = inner == prod(x.dims(), a + 1, x.dims().size());
    const int64_t run = std::min<int64_t>(inner, 2048), runs = (inner + run - 1) / run;
    auto scatter = [&](auto reduce) {
      parallel_for(outer * runs, std::max<int64_t>(1, 32768 / (run * D)), [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t o = t / runs, i0 = t % runs * run, i1 = std::min(inner, i0 + run);
          T* base = out + outer_at[static_cast<size_t>(o)];
          for (int64_t k = 0; k < D; ++k) {
            const int64_t row = (o * D + k) * inner;
            if (dense_inner)
              for (int64_t i = i0; i < i1; ++i) reduce(base[i + idx(row + i) * xs[a]], u[row + i]);
            else
              for (int64_t i = i0; i < i1; ++i)
                reduce(base[inner_at[static_cast<size_t>(i)] + idx(row + i) * xs[a]], u[row + i]);
          }
        }
      });
    };
    if (red == Reduction::None)
      scatter([](T& dst, T v) { dst = v; });
    else
      scatter([red](T& dst, T v) { apply(dst, v, red); });
  });
}

void scatter_nd_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& ind = ctx.input(1);
  const Tensor& upd = ctx.input(2);
  Tensor& y = ctx.output(0);
  const Reduction red = reduction_of(ctx);
  const auto& D = x.dims();
  const auto& Q = ind.dims();
  if (Q.empty()) ctx.fail("indices must have rank >= 1");
  const int64_t k = Q.back();
  if (k < 1 || k > static_cast<int64_t>(D.size())) ctx.fail("the last dim of indices must be in [1, rank(data)]");
  std::vector<int64_t> want(Q.begin(), Q.end() - 1);
  want.insert(want.end(), D.begin() + k, D.end());
  if (upd.dims() != want) ctx.fail("updates has shape " + dims_str(upd.dims()) + ", expected " + dims_str(want));
  const int64_t n = prod(Q, 0, Q.size() - 1);
  const int64_t slice = prod(D, k, D.size());
  auto xs = contiguous_strides(D);
  std::vector<int64_t> offs(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) {
    int64_t off = 0;
    for (int64_t j = 0; j < k; ++j) {
      int64_t v = ind.as_int64(t * k + j);
      if (v < -D[j] || v >= D[j])
        ctx.fail("index " + std::to_string(v) + " is out of range for a dim of length " + std::to_string(D[j]));
      off += (v < 0 ? v + D[j] : v) * xs[j];
    }
    offs[t] = off;
  }
  dispatch_scatter(ctx, red, scatter_nd_kernel, [&](auto tag) {
    using T = decltype(tag);
    std::memcpy(y.raw(), x.raw(), x.nbytes());
    T* out = y.data<T>();
    const T* u = upd.data<T>();
    for (int64_t t = 0; t < n; ++t)
      for (int64_t j = 0; j < slice; ++j) apply(out[offs[t] + j], u[t * slice + j], red);
  });
}

// ------------------------------------------------------------------ Expand, Tile

void expand_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output(0);
  const size_t r = y.rank(), xr = x.rank();
  auto xs = contiguous_strides(x.dims());
  std::vector<int64_t> st(r, 0);
  for (size_t i = 0; i < xr; ++i) {
    const size_t o = r - xr + i;
    if (x.dim(i) == y.dim(o))
      st[o] = xs[i];
    else if (x.dim(i) != 1)
      internal_error("Expand shape disagrees with inference" + ctx.node().ref());
  }
  strided_copy(dtype_size(x.dtype()), y.dims(), st, x.raw(), y.raw(), ctx);
}

void tile_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output(0);
  auto rep = ctx.input(1).to_int64_vector();
  auto xs = contiguous_strides(x.dims());
  // Output dim i (= repeats_i * d_i) viewed as [repeats_i, d_i] reads [0, stride_i].
  std::vector<int64_t> dims, st;
  for (size_t i = 0; i < x.rank(); ++i) {
    dims.push_back(rep[i]);
    st.push_back(0);
    dims.push_back(x.dim(i));
    st.push_back(xs[i]);
  }
  strided_copy(dtype_size(x.dtype()), dims, st, x.raw(), y.raw(), ctx);
}

// ------------------------------------------------------------------ Pad

/// Source coordinate of output coordinate o along one axis, or -1 for the constant.
int64_t pad_source(int64_t o, int64_t begin, int64_t n, const std::string& mode) {
  int64_t x = o - begin;
  if (x >= 0 && x < n) return x;
  if (mode == "constant") return -1;
  if (mode == "edge") return x < 0 ? 0 : n - 1;
  if (mode == "wrap") return ((x % n) + n) % n;
  // reflect: mirror about the first and last elements (numpy 'reflect'), period 2(n-1).
  if (n == 1) return 0;
  const int64_t period = 2 * (n - 1);
  int64_t m = (x < 0 ? -x : x) % period;
  return m < n ? m : period - m;
}

void pad_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output(0);
  const int64_t r = static_cast<int64_t>(x.rank());
  const std::string mode = ctx.attr_string("mode");
  std::vector<int64_t> pads, axes;
  // The constant, as one element of the output's dtype.
  Tensor cv(x.dtype(), {});
  if (ctx.opset() < 11) {
    pads = ctx.attr_ints("pads");
    Tensor f = Tensor::scalar_float(ctx.attr_float("value"));
    convert_tensor(f, cv);
  } else {
    pads = ctx.input(1).to_int64_vector();
    if (ctx.has_input(2)) {
      const Tensor& c = ctx.input(2);
      if (c.numel() != 1) ctx.fail("constant_value must have one element");
      std::memcpy(cv.raw(), c.raw(), cv.nbytes());
    }
    if (ctx.has_input(3)) axes = ctx.input(3).to_int64_vector();
  }
  auto p = movement::full_pads(r, pads, axes, ctx);
  if (y.numel() == 0) return;
  if (r == 0) {
    std::memcpy(y.raw(), x.raw(), x.nbytes());
    return;
  }
  for (int64_t d = 0; d < r; ++d)
    if (x.dim(d) == 0 && mode != "constant" && y.dim(d) > 0) ctx.fail("cannot pad an empty dim in mode '" + mode + "'");
  std::vector<std::vector<int64_t>> map(r);
  for (int64_t d = 0; d < r; ++d) {
    map[d].resize(y.dim(d));
    for (int64_t o = 0; o < y.dim(d); ++o) map[d][o] = pad_source(o, p[d], x.dim(d), mode);
  }
  auto xs = contiguous_strides(x.dims());
  const int64_t inner = y.dims().back();
  const std::vector<int64_t>& last = map[r - 1];
  std::vector<int64_t> od(y.dims().begin(), y.dims().end() - 1);
  dispatch_size(dtype_size(x.dtype()), ctx, [&](auto tag) {
    using U = decltype(tag);
    const U c = *cv.data<U>();
    const U* src = x.data<U>();
    U* dst = y.data<U>();
    parallel_for(prod(od, 0, od.size()), std::max<int64_t>(1, 16384 / inner), [&](int64_t r0, int64_t r1) {
      std::vector<int64_t> idx(od.size());
      for (int64_t row = r0; row < r1; ++row) {
        int64_t rem = row, off = 0;
        bool constant = false;
        for (size_t d = od.size(); d-- > 0;) {
          const int64_t i = rem % od[d];
          rem /= od[d];
          const int64_t s = map[d][i];
          if (s < 0) constant = true;
          off += s * xs[d];
        }
        U* out = dst + row * inner;
        if (constant) {
          std::fill(out, out + inner, c);
          continue;
        }
        const U* in = src + off;
        for (int64_t j = 0; j < inner; ++j) out[j] = last[j] < 0 ? c : in[last[j]];
      }
    });
  });
}

// ------------------------------------------------------------------ DepthToSpace, SpaceToDepth

void depth_to_space_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output(0);
  const int64_t b = ctx.attr_int("blocksize");
  const bool crd = ctx.opset() >= 11 && ctx.attr_string("mode") == "CRD";
  const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3), Co = C / (b * b);
  // Output viewed as [N, Co, H, b1, W, b2]; strides of those into the input.
  const int64_t sN = C * H * W, sH = W, sW = 1;
  int64_t sC, s1, s2;
  if (crd) {  // input [N, Co, b1, b2, H, W]
    sC = b * b * H * W;
    s1 = b * H * W;
    s2 = H * W;
  } else {  // DCR: input [N, b1, b2, Co, H, W]
    s1 = b * Co * H * W;
    s2 = Co * H * W;
    sC = H * W;
  }
  strided_copy(dtype_size(x.dtype()), {N, Co, H, b, W, b}, {sN, sC, sH, s1, sW, s2}, x.raw(), y.raw(), ctx);
}

void space_to_depth_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output(0);
  const int64_t b = ctx.attr_int("blocksize");
  const bool crd = ctx.opset() >= 28 && ctx.attr_string("mode") == "CRD";
  const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3), Ho = H / b, Wo = W / b;
  // Input viewed as [N, C, Ho, b1, Wo, b2]; output is [N, b1, b2, C, Ho, Wo] (DCR) or
  // [N, C, b1, b2, Ho, Wo] (CRD, opset 28).
  if (crd)
    strided_copy(dtype_size(x.dtype()), {N, C, b, b, Ho, Wo}, {C * H * W, H * W, W, 1, b * W, b}, x.raw(), y.raw(),
                 ctx);
  else
    strided_copy(dtype_size(x.dtype()), {N, b, b, C, Ho, Wo}, {C * H * W, W, 1, H * W, b * W, b}, x.raw(), y.raw(),
                 ctx);
}

// ------------------------------------------------------------------ Col2Im

/// Each column value added at its image position: block position l (row-major over the block
/// grid) and offset k in the block (row-major over block_shape) land at l_d·stride - pad_begin +
/// k_d·dilation along each dim d, unless that is in the padding. Images and channels in parallel.
void col2im_kernel(KernelContext& ctx) {
  if (has_half_io(ctx)) return via_float32(ctx, col2im_kernel);
  const Tensor& x = ctx.input(0);
  const Tensor& image = ctx.input(1);
  const Tensor& block = ctx.input(2);
  Tensor& y = ctx.output(0);
  const int64_t n = image.numel();
  if (x.rank() != 3 || n < 1 || block.numel() != n)
    ctx.fail("input must be 3-D and image_shape and block_shape of one length, at least 1");
  std::vector<int64_t> img(static_cast<size_t>(n)), k(static_cast<size_t>(n)), grid(static_cast<size_t>(n));
  std::vector<int64_t> dil = ctx.attr_ints("dilations"), pads = ctx.attr_ints("pads"), str = ctx.attr_ints("strides");
  if (dil.empty()) dil.assign(static_cast<size_t>(n), 1);
  if (pads.empty()) pads.assign(static_cast<size_t>(2 * n), 0);
  if (str.empty()) str.assign(static_cast<size_t>(n), 1);
  if (static_cast<int64_t>(dil.size()) != n || static_cast<int64_t>(pads.size()) != 2 * n ||
      static_cast<int64_t>(str.size()) != n)
    ctx.fail("dilations, pads and strides must have one value a dim (pads two)");
  int64_t per_block = 1, positions = 1, pixels = 1;
  for (int64_t d = 0; d < n; ++d) {
    const size_t i = static_cast<size_t>(d);
    img[i] = image.as_int64(d);
    k[i] = block.as_int64(d);
    if (img[i] < 1 || k[i] < 1 || dil[i] < 1 || str[i] < 1 || pads[i] < 0 || pads[i + n] < 0)
      ctx.fail("image_shape, block_shape, dilations and strides must be positive, pads non-negative");
    const int64_t span = dims::add(dims::mul(dil[i], k[i] - 1, ctx, "dilated block"), 1, ctx, "dilated block");
    const int64_t padded = dims::add(img[i], dims::add(pads[i], pads[i + n], ctx, "pads"), ctx, "padded image");
    if (padded < span) ctx.fail("the block is larger than the padded image");
    grid[i] = (padded - span) / str[i] + 1;
    per_block = dims::mul(per_block, k[i], ctx, "block size");
    positions = dims::mul(positions, grid[i], ctx, "block positions");
    pixels = dims::mul(pixels, img[i], ctx, "image size");
  }
  if (x.dim(1) % per_block) ctx.fail("input dim 1 is not a multiple of the block's values");
  const int64_t images = x.dim(0), channels = x.dim(1) / per_block;
  if (x.dim(2) != positions)
    ctx.fail("input has " + std::to_string(x.dim(2)) + " block positions, want " + std::to_string(positions));
  if (y.numel() != images * channels * pixels) ctx.fail("the output does not hold the image");
  dispatch_numeric(x.dtype(), ctx, [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    parallel_for(images * channels, 1, [&](int64_t b, int64_t e) {
      std::vector<int64_t> at(static_cast<size_t>(n));
      for (int64_t ic = b; ic < e; ++ic) {
        T* out = yp + ic * pixels;
        const T* cols = xp + ic * per_block * positions;  // channel c's per_block rows of L
        for (int64_t kk = 0; kk < per_block; ++kk) {
          for (int64_t l = 0; l < positions; ++l) {
            int64_t rk = kk, rl = l, pos = 0;
            bool inside = true;
            for (int64_t d = n - 1; d >= 0; --d) {
              const size_t i = static_cast<size_t>(d);
              const int64_t kd = rk % k[i], ld = rl % grid[i];
              rk /= k[i];
              rl /= grid[i];
              at[i] = ld * str[i] - pads[i] + kd * dil[i];
              inside = inside && at[i] >= 0 && at[i] < img[i];
            }
            if (!inside) continue;
            for (int64_t d = 0; d < n; ++d) pos = pos * img[static_cast<size_t>(d)] + at[static_cast<size_t>(d)];
            out[pos] = static_cast<T>(out[pos] + cols[kk * positions + l]);
          }
        }
      }
    });
  });
}

// ------------------------------------------------------------------ TopK

template <typename T>
bool greater_nan_high(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a)) return !std::isnan(b);
    if (std::isnan(b)) return false;
  }
  return a > b;
}

void topk_kernel(KernelContext& ctx) {
  if (has_half_io(ctx)) return via_float32(ctx, topk_kernel);
  const Tensor& x = ctx.input(0);
  Tensor& vals = ctx.output(0);
  Tensor& inds = ctx.output(1);
  const int64_t r = static_cast<int64_t>(x.rank());
  const int64_t ax = normalize_axis(ctx.attr_int("axis"), r, ctx);
  const bool largest = ctx.opset() < 11 || ctx.attr_int("largest") != 0;
  const int64_t n = x.dim(ax), k = vals.dim(ax);
  if (k > n) ctx.fail("k is larger than the axis length");
  const int64_t outer = prod(x.dims(), 0, ax), inner = prod(x.dims(), ax + 1, r);
  if (k == 0 || outer * inner == 0) return;
  dispatch_numeric(x.dtype(), ctx, [&](auto tag) {
    using T = decltype(tag);
    const T* src = x.data<T>();
    T* ov = vals.data<T>();
    int64_t* oi = inds.data<int64_t>();
    parallel_for(outer * inner, std::max<int64_t>(1, 4096 / n), [&](int64_t b0, int64_t b1) {
      std::vector<int64_t> order(n);
      for (int64_t s = b0; s < b1; ++s) {
        const int64_t o = s / inner, i = s % inner;
        const T* base = src + o * n * inner + i;
        std::iota(order.begin(), order.end(), 0);
        // Ties keep the lower index first; NaN ranks above every number.
        auto cmp = [&](int64_t a, int64_t c) {
          const T va = base[a * inner], vc = base[c * inner];
          if (largest) {
            if (greater_nan_high(va, vc)) return true;
            if (greater_nan_high(vc, va)) return false;
          } else {
            if (greater_nan_high(vc, va)) return true;
            if (greater_nan_high(va, vc)) return false;
          }
          return a < c;
        };
        std::partial_sort(order.begin(), order.begin() + k, order.end(), cmp);
        for (int64_t j = 0; j < k; ++j) {
          const int64_t dst = (o * k + j) * inner + i;
          ov[dst] = base[order[j] * inner];
          oi[dst] = order[j];
        }
      }
    });
  });
}

// ------------------------------------------------------------------ Compress, ReverseSequence

void compress_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& cond = ctx.input(1);
  Tensor& y = ctx.output(0);
  const size_t esize = dtype_size(x.dtype());
  int64_t outer = 1, dim = x.numel(), inner = 1;
  if (ctx.has_attr("axis")) {
    const int64_t r = static_cast<int64_t>(x.rank());
    const int64_t ax = normalize_axis(ctx.attr_int("axis"), r, ctx);
    outer = prod(x.dims(), 0, ax);
    dim = x.dim(ax);
    inner = prod(x.dims(), ax + 1, r);
  }
  std::vector<int64_t> sel;
  for (int64_t i = 0; i < cond.numel(); ++i) {
    if (!cond.as_int64(i)) continue;
    if (i >= dim)
      ctx.fail("condition selects index " + std::to_string(i) + " beyond the axis length " + std::to_string(dim));
    sel.push_back(i);
  }
  const int64_t m = static_cast<int64_t>(sel.size());
  const int64_t block = inner * static_cast<int64_t>(esize);
  const char* src = bytes_of(x);
  char* dst = bytes_of(y);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < m; ++j) std::memcpy(dst + (o * m + j) * block, src + (o * dim + sel[j]) * block, block);
}

void reverse_sequence_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& lens_t = ctx.input(1);
  Tensor& y = ctx.output(0);
  const int64_t ba = ctx.attr_int("batch_axis"), ta = ctx.attr_int("time_axis");
  const int64_t B = x.dim(ba), T = x.dim(ta);
  if (lens_t.numel() != B)
    ctx.fail("sequence_lens has " + std::to_string(lens_t.numel()) + " entries but the batch has " + std::to_string(B));
  auto lens = lens_t.to_int64_vector();
  for (int64_t l : lens)
    if (l < 0 || l > T) ctx.fail("sequence length " + std::to_string(l) + " is outside [0, " + std::to_string(T) + "]");
  const int64_t block = prod(x.dims(), 2, x.rank()) * static_cast<int64_t>(dtype_size(x.dtype()));
  auto off = [&](int64_t t, int64_t b) { return (ta == 0 ? t * B + b : b * T + t) * block; };
  const char* src = bytes_of(x);
  char* dst = bytes_of(y);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const int64_t from = t < lens[b] ? lens[b] - 1 - t : t;
      std::memcpy(dst + off(t, b), src + off(from, b), block);
    }
}

}  // namespace

void register_movement_kernels(KernelRegistry& r) {
  r.add("Transpose", transpose_kernel, "", Writes::Every);  // strided_copy covers the output
  r.add("Concat", concat_kernel, "", Writes::Every);
  r.add("Split", split_kernel, "", Writes::Every);
  r.add("Slice", slice_kernel, "", Writes::Every);
  r.add("Gather", gather_kernel, "", Writes::Every);
  r.add("GatherElements", gather_elements_kernel, "", Writes::Every);
  r.add("GatherND", gather_nd_kernel, "", Writes::Every);
  r.add("Scatter", scatter_elements_kernel, "", Writes::Every);
  r.add("ScatterElements", scatter_elements_kernel, "", Writes::Every);
  r.add("ScatterND", scatter_nd_kernel, "", Writes::Every);
  r.add("Expand", expand_kernel, "", Writes::Every);
  r.add("Tile", tile_kernel, "", Writes::Every);
  r.add("Pad", pad_kernel, "", Writes::Every);
  r.add("DepthToSpace", depth_to_space_kernel, "", Writes::Every);
  r.add("Col2Im", col2im_kernel);  // adds into the zeroed image: Writes::Some
  r.add("SpaceToDepth", space_to_depth_kernel, "", Writes::Every);
  r.add("TopK", topk_kernel, "", Writes::Every);
  r.add("Compress", compress_kernel, "", Writes::Every);
  r.add("ReverseSequence", reverse_sequence_kernel, "", Writes::Every);
}

}  // namespace fusec::cpu
