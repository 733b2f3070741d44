// CPU kernels for MaxPool, AveragePool, LpPool and the Global pools. Each (n, c) plane is
// independent; planes run in parallel, and every output walks the part of its window that
// lies inside the input (padding never contributes a value).
#include <cmath>
#include <limits>

#include "backend/cpu/kernels/common.h"
#include "backend/cpu/kernels/conv_util.h"

namespace fusec::cpu {

namespace {

/// The part of one output's window inside the input: per dim, kernel taps [lo, hi) and the
/// input position of tap 0 (`start`, possibly in the padding).
struct Window {
  int64_t lo[3], hi[3], start[3];
};

inline Window window_at(const Geo3& g, int64_t o0, int64_t o1, int64_t o2) {
  Window w;
  const int64_t o[3] = {o0, o1, o2};
  for (int i = 0; i < 3; ++i) {
    w.start[i] = o[i] * g.s[i] - g.pb[i];
    valid_range(g.k[i], g.in[i], g.d[i], w.start[i], w.lo[i], w.hi[i]);
  }
  return w;
}

/// Calls f(plane, input plane pointer offset, output index, window) for every output element.
template <typename F>
void for_each_window(int64_t planes, const Geo3& g, F&& f) {
  const int64_t s_out = g.out_size();
  const int64_t per_plane = s_out * g.kernel_size();
  parallel_for(planes, std::max<int64_t>(1, 32768 / std::max<int64_t>(per_plane, 1)), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      int64_t o = p * s_out;
      for (int64_t o0 = 0; o0 < g.out[0]; ++o0)
        for (int64_t o1 = 0; o1 < g.out[1]; ++o1)
          for (int64_t o2 = 0; o2 < g.out[2]; ++o2, ++o) f(p, o, window_at(g, o0, o1, o2));
    }
  });
}

/// Geometry of a windowed pool from X's dims and the node's attributes.
Geo3 pool_geometry(const KernelContext& ctx, const Tensor& x) {
  const std::vector<int64_t> kernel = ctx.attr_ints("kernel_shape");
  if (x.rank() != kernel.size() + 2) ctx.fail("kernel_shape does not match the rank of X");
  std::vector<int64_t> in(x.dims().begin() + 2, x.dims().end());
  const bool ceil_mode = ctx.schema().find_attr("ceil_mode") && ctx.attr_int("ceil_mode") != 0;
  Geo3 g;
  if (!to_geo3(window_geometry(ctx, in, kernel, ceil_mode), g)) ctx.fail("pools over more than 3 spatial dims are not supported");
  return g;
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
    for_each_window(planes, g, [&](int64_t p, int64_t o, const Window& w) {
      const T* xp = px + p * s_in;
      T best = std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity()
                                                    : std::numeric_limits<T>::lowest();
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
            if (!found || v > best) {
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
      for (int i = 0; i < 3; ++i) {
        if (!include_pad) {
          count *= w.hi[i] - w.lo[i];
          continue;
        }
        int64_t lo, hi;
        valid_range(g.k[i], g.in[i] + g.pb[i] + g.pe[i], g.d[i], w.start[i] + g.pb[i], lo, hi);
        count *= hi - lo;
      }
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

}  // namespace

void register_pool_kernels(KernelRegistry& r) {
  r.add("MaxPool", max_pool_kernel);
  r.add("AveragePool", average_pool_kernel);
  r.add("LpPool", lp_pool_kernel);
  r.add("GlobalAveragePool", global_pool([](const KernelContext&, const auto* x, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += x[i];
    return n ? s / static_cast<double>(n) : std::nan("");
  }));
  r.add("GlobalMaxPool", global_pool([](const KernelContext&, const auto* x, int64_t n) {
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t i = 0; i < n; ++i)
      if (static_cast<double>(x[i]) > m || i == 0) m = x[i];
    return m;
  }));
  r.add("GlobalLpPool", global_pool([](const KernelContext& ctx, const auto* x, int64_t n) {
    const double p = static_cast<double>(ctx.attr_int("p"));
    if (p <= 0) ctx.fail("p must be positive");
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += std::pow(std::fabs(static_cast<double>(x[i])), p);
    return std::pow(s, 1.0 / p);
  }));
}

}  // namespace fusec::cpu
