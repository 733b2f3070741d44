// CPU kernels for MaxPool, AveragePool, LpPool and the Global pools. Each (n, c) plane is
// independent; planes run in parallel, and every output walks the part of its window that
// lies inside the input (padding never contributes a value).
#include <cmath>
#include <cstring>
#include <limits>

#include "backend/cpu/kernels/common.h"
#include "backend/cpu/kernels/conv_util.h"

namespace fusec::cpu {

namespace {

/// The part of one output's window inside the input: per dim, kernel taps [lo, hi) and the
/// input position of tap 0 (`start`, possibly in the padding).
struct Window {
  int64_t lo[3], hi[3], start[3];
  int64_t padded[3];  // taps inside the padded input (AveragePool's count_include_pad divisor)
};

/// Calls f(plane, output index, window) for every output element. The per-dim window bounds
/// depend only on that dim's output coordinate, so they are tabulated once.
template <typename F>
void for_each_window(int64_t planes, const Geo3& g, F&& f) {
  std::vector<int64_t> lo[3], hi[3], start[3], padded[3];
  for (int i = 0; i < 3; ++i) {
    const size_t n = static_cast<size_t>(g.out[i]);
    lo[i].resize(n);
    hi[i].resize(n);
    start[i].resize(n);
    padded[i].resize(n);
    for (int64_t o = 0; o < g.out[i]; ++o) {
      start[i][o] = o * g.s[i] - g.pb[i];
      valid_range(g.k[i], g.in[i], g.d[i], start[i][o], lo[i][o], hi[i][o]);
      int64_t plo, phi;
      valid_range(g.k[i], g.in[i] + g.pb[i] + g.pe[i], g.d[i], start[i][o] + g.pb[i], plo, phi);
      padded[i][o] = phi - plo;
    }
  }
  const int64_t s_out = g.out_size();
  const int64_t per_plane = s_out * g.kernel_size();
  parallel_for(planes, std::max<int64_t>(1, 32768 / std::max<int64_t>(per_plane, 1)), [&](int64_t p0, int64_t p1) {
    Window w;
    for (int64_t p = p0; p < p1; ++p) {
      int64_t o = p * s_out;
      for (int64_t o0 = 0; o0 < g.out[0]; ++o0) {
        w.lo[0] = lo[0][o0];
        w.hi[0] = hi[0][o0];
        w.start[0] = start[0][o0];
        w.padded[0] = padded[0][o0];
        for (int64_t o1 = 0; o1 < g.out[1]; ++o1) {
          w.lo[1] = lo[1][o1];
          w.hi[1] = hi[1][o1];
          w.start[1] = start[1][o1];
          w.padded[1] = padded[1][o1];
          for (int64_t o2 = 0; o2 < g.out[2]; ++o2, ++o) {
            w.lo[2] = lo[2][o2];
            w.hi[2] = hi[2][o2];
            w.start[2] = start[2][o2];
            w.padded[2] = padded[2][o2];
            f(p, o, w);
          }
        }
      }
    }
  });
}

/// Geometry of a windowed pool from X's dims and the node's attributes; checks the outputs'
/// shapes against it.
Geo3 pool_geometry(const KernelContext& ctx, const Tensor& x) {
  const std::vector<int64_t> kernel = ctx.attr_ints("kernel_shape");
  if (x.rank() != kernel.size() + 2) ctx.fail("kernel_shape does not match the rank of X");
  std::vector<int64_t> in(x.dims().begin() + 2, x.dims().end());
  const bool ceil_mode = ctx.schema().find_attr("ceil_mode") && ctx.attr_int("ceil_mode") != 0;
  const WindowGeometry wg = window_geometry(ctx, in, kernel, ceil_mode);
  Geo3 g;
  if (!to_geo3(wg, g)) ctx.unsupported("pools over more than 3 spatial dims are not supported");
  for (size_t i = 0; i < ctx.num_outputs(); ++i)
    if (ctx.has_output(i)) require_dims(ctx, ctx.output(i), nc_and_out(x.dim(0), x.dim(1), wg));
  return g;
}

/// NaN for float types (a NaN in a window makes its max NaN, as numpy does); unused for ints.
template <typename T>
T v_nan() {
  if constexpr (std::numeric_limits<T>::has_quiet_NaN) return std::numeric_limits<T>::quiet_NaN();
  return T(0);
}

void max_pool_kernel(KernelContext& ctx) {
  if (has_half_io(ctx)) return via_float32(ctx, max_pool_kernel);
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output(0);
  const Geo3 g = pool_geometry(ctx, x);
  const int64_t planes = x.dim(0) * x.dim(1), s_in = g.in_size();
  int64_t* indices = ctx.has_output(1) ? ctx.output(1).data<int64_t>() : nullptr;
  const bool col_major = ctx.schema().find_attr("storage_order") && ctx.attr_int("storage_order") != 0;
  const size_t nd = x.rank() - 2;
  if (y.numel() == 0) return;
  dispatch_numeric(x.dtype(), ctx, [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* py = y.data<T>();
    constexpr T lowest =
        std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::lowest();
    if (!indices) {
      // Values only: a branch-free running max (the branchy form below mispredicts on every new
      // maximum). A window with no input element cannot occur (see window_geometry).
      for_each_window(planes, g, [&](int64_t p, int64_t o, const Window& w) {
        const T* xp = px + p * s_in;
        T best = lowest;
        bool nan = false;
        for (int64_t k0 = w.lo[0]; k0 < w.hi[0]; ++k0)
          for (int64_t k1 = w.lo[1]; k1 < w.hi[1]; ++k1) {
            const int64_t base =
                ((w.start[0] + k0 * g.d[0]) * g.in[1] + w.start[1] + k1 * g.d[1]) * g.in[2] + w.start[2];
            for (int64_t k2 = w.lo[2]; k2 < w.hi[2]; ++k2) {
              const T v = xp[base + k2 * g.d[2]];
              nan |= v != v;
              best = v > best ? v : best;
            }
          }
        py[o] = nan ? v_nan<T>() : best;
      });
      return;
    }
    for_each_window(planes, g, [&](int64_t p, int64_t o, const Window& w) {
      const T* xp = px + p * s_in;
      T best =
          std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::lowest();
      int64_t at[3] = {-1, -1, -1};
      bool found = false;
      for (int64_t k0 = w.lo[0]; k0 < w.hi[0]; ++k0) {
        const int64_t i0 = w.start[0] + k0 * g.d[0];
        for (int64_t k1 = w.lo[1]; k1 < w.hi[1]; ++k1) {
          const int64_t i1 = w.start[1] + k1 * g.d[1];
          const T* row = xp + (i0 * g.in[1] + i1) * g.in[2];
          for (int64_t k2 = w.lo[2]; k2 < w.hi[2]; ++k2) {
            const int64_t i2 = w.start[2] + k2 * g.d[2];
            const T v = row[i2];
            if (!found || v > best || (v != v && best == best)) {  // the first NaN wins
              best = v;
              at[0] = i0;
              at[1] = i1;
              at[2] = i2;
              found = true;
            }
          }
        }
      }
      py[o] = best;
      if (!indices) return;
      if (!found) {
        indices[o] = -1;
        return;
      }
      // Row-major index into X, or with storage_order 1 column-major over the spatial dims.
      int64_t idx;
      if (!col_major) {
        idx = (at[0] * g.in[1] + at[1]) * g.in[2] + at[2];
      } else {
        idx = 0;
        int64_t mult = 1;
        for (size_t i = 3 - nd; i < 3; ++i) {
          idx += at[i] * mult;
          mult *= g.in[i];
        }
      }
      indices[o] = p * s_in + idx;
    });
  });
}

void average_pool_kernel(KernelContext& ctx) {
  if (has_half_io(ctx)) return via_float32(ctx, average_pool_kernel);
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output(0);
  const Geo3 g = pool_geometry(ctx, x);
  const int64_t planes = x.dim(0) * x.dim(1), s_in = g.in_size();
  const bool include_pad = ctx.schema().find_attr("count_include_pad") && ctx.attr_int("count_include_pad") != 0;
  if (y.numel() == 0) return;
  dispatch_float(x.dtype(), ctx, [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* py = y.data<T>();
    for_each_window(planes, g, [&](int64_t p, int64_t o, const Window& w) {
      const T* xp = px + p * s_in;
      double sum = 0;
      for (int64_t k0 = w.lo[0]; k0 < w.hi[0]; ++k0) {
        const int64_t i0 = w.start[0] + k0 * g.d[0];
        for (int64_t k1 = w.lo[1]; k1 < w.hi[1]; ++k1) {
          const T* row = xp + (i0 * g.in[1] + w.start[1] + k1 * g.d[1]) * g.in[2];
          for (int64_t k2 = w.lo[2]; k2 < w.hi[2]; ++k2) sum += row[w.start[2] + k2 * g.d[2]];
        }
      }
      // The divisor counts the taps inside the input, or with count_include_pad those inside
      // the padded input (a ceil_mode window can still run past the end padding).
      int64_t count = 1;
      for (int i = 0; i < 3; ++i) count *= include_pad ? w.padded[i] : w.hi[i] - w.lo[i];
      py[o] = count > 0 ? static_cast<T>(sum / static_cast<double>(count)) : std::numeric_limits<T>::quiet_NaN();
    });
  });
}

void lp_pool_kernel(KernelContext& ctx) {
  if (has_half_io(ctx)) return via_float32(ctx, lp_pool_kernel);
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output(0);
  const Geo3 g = pool_geometry(ctx, x);
  const int64_t planes = x.dim(0) * x.dim(1), s_in = g.in_size();
  const double pw = static_cast<double>(ctx.attr_int("p"));
  if (pw <= 0) ctx.fail("p must be positive");
  if (y.numel() == 0) return;
  dispatch_float(x.dtype(), ctx, [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* py = y.data<T>();
    for_each_window(planes, g, [&](int64_t p, int64_t o, const Window& w) {
      const T* xp = px + p * s_in;
      double sum = 0;
      for (int64_t k0 = w.lo[0]; k0 < w.hi[0]; ++k0) {
        const int64_t i0 = w.start[0] + k0 * g.d[0];
        for (int64_t k1 = w.lo[1]; k1 < w.hi[1]; ++k1) {
          const T* row = xp + (i0 * g.in[1] + w.start[1] + k1 * g.d[1]) * g.in[2];
          for (int64_t k2 = w.lo[2]; k2 < w.hi[2]; ++k2)
            sum += std::pow(std::fabs(static_cast<double>(row[w.start[2] + k2 * g.d[2]])), pw);
        }
      }
      py[o] = static_cast<T>(std::pow(sum, 1.0 / pw));
    });
  });
}

/// Global pools: one value per (n, c) plane from `reduce(plane pointer, size)`.
template <typename Reduce>
Kernel global_pool(Reduce reduce) {
  return [reduce](KernelContext& ctx) {
    if (has_half_io(ctx)) return via_float32(ctx, global_pool(reduce));
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    if (x.rank() < 2) ctx.fail("X must have rank >= 2");
    std::vector<int64_t> want(x.rank(), 1);
    want[0] = x.dim(0);
    want[1] = x.dim(1);
    require_dims(ctx, y, want);
    const int64_t planes = x.dim(0) * x.dim(1);
    const int64_t size = planes ? x.numel() / planes : 0;
    dispatch_float(x.dtype(), ctx, [&](auto tag) {
      using T = decltype(tag);
      const T* px = x.data<T>();
      T* py = y.data<T>();
      parallel_for(planes, std::max<int64_t>(1, 32768 / std::max<int64_t>(size, 1)), [&](int64_t p0, int64_t p1) {
        for (int64_t p = p0; p < p1; ++p) py[p] = static_cast<T>(reduce(ctx, px + p * size, size));
      });
    });
  };
}

/// MaxUnpool as the ONNX reference defines it: X's values land at their indices in a zeroed
/// tensor of the unpooled dims (indices count over that whole tensor, batch and channel included);
/// with output_shape, that tensor is the leading corner of a zeroed output of that shape.
void max_unpool_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& idx = ctx.input(1);
  Tensor& y = ctx.output(0);
  if (x.rank() < 3) ctx.fail("X must have rank >= 3 (N, C, spatial...)");
  if (idx.dims() != x.dims()) ctx.fail("I " + dims_str(idx.dims()) + " does not have X's shape " + dims_str(x.dims()));
  std::vector<int64_t> inner{x.dim(0), x.dim(1)};
  const std::vector<int64_t> spatial = unpooled_dims(ctx, std::vector<int64_t>(x.dims().begin() + 2, x.dims().end()));
  inner.insert(inner.end(), spatial.begin(), spatial.end());
  if (!ctx.has_input(2) && y.dims() != inner)
    ctx.fail("output has shape " + dims_str(y.dims()) + ", expected " + dims_str(inner));
  if (y.rank() != inner.size()) ctx.fail("output_shape does not have X's rank");
  for (size_t i = 0; i < inner.size(); ++i)
    if (y.dim(i) < inner[i])
      ctx.fail("output_shape " + dims_str(y.dims()) + " is smaller than the unpooled " + dims_str(inner));
  std::memset(y.raw(), 0, y.nbytes());
  const int64_t total = checked_numel(inner);
  const size_t esize = dtype_size(x.dtype());
  const char* px = static_cast<const char*>(x.raw());
  char* py = static_cast<char*>(y.raw());
  const int64_t* pi = idx.data<int64_t>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    int64_t at = pi[i];
    if (at < 0 || at >= total)
      ctx.fail("index " + std::to_string(at) + " is out of range for the unpooled " + dims_str(inner));
    // The unpooled position, then its place in the (possibly larger) output.
    int64_t off = 0, stride = 1;
    for (size_t d = inner.size(); d-- > 0;) {
      off += (at % inner[d]) * stride;
      at /= inner[d];
      stride *= y.dim(d);
    }
    std::memcpy(py + static_cast<size_t>(off) * esize, px + static_cast<size_t>(i) * esize, esize);
  }
}

}  // namespace

void register_pool_kernels(KernelRegistry& r) {
  // for_each_window visits every output (and MaxPool's Indices); the global pools each plane.
  r.add("MaxPool", max_pool_kernel, "", Writes::Every);
  r.add("AveragePool", average_pool_kernel, "", Writes::Every);
  r.add("LpPool", lp_pool_kernel, "", Writes::Every);
  r.add("MaxUnpool", max_unpool_kernel, "", Writes::Every);
  r.add("GlobalAveragePool", global_pool([](const KernelContext&, const auto* x, int64_t n) {
          double s = 0;
          for (int64_t i = 0; i < n; ++i) s += x[i];
          return n ? s / static_cast<double>(n) : std::nan("");
        }),
        "", Writes::Every);
  r.add("GlobalMaxPool", global_pool([](const KernelContext&, const auto* x, int64_t n) {
          double m = -std::numeric_limits<double>::infinity();
          for (int64_t i = 0; i < n; ++i) {
            const double v = x[i];
            if (v != v) return v;  // NaN propagates
            m = v > m ? v : m;
          }
          return m;
        }),
        "", Writes::Every);
  r.add("GlobalLpPool", global_pool([](const KernelContext& ctx, const auto* x, int64_t n) {
          const double p = static_cast<double>(ctx.attr_int("p"));
          if (p <= 0) ctx.fail("p must be positive");
          double s = 0;
          for (int64_t i = 0; i < n; ++i) s += std::pow(std::fabs(static_cast<double>(x[i])), p);
          return std::pow(s, 1.0 / p);
        }),
        "", Writes::Every);
}

}  // namespace fusec::cpu
