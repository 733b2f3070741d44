// CPU kernels for Conv and ConvTranspose.
//
// Conv, per image n and group g:   Y[n, g] (Mg × S_out) = W[g] (Mg × Cg·K) · col (Cg·K × S_out)
// where col = im2col(X[n, g]) (skipped for 1×1 stride-1 unpadded kernels, where col is X itself),
// with the bias written into Y first and accumulated onto. Depthwise convolutions (one input
// channel per group) run a direct loop instead, since their GEMM would be one row deep.
//
// ConvTranspose, per n and g:      col (Mg·K × S_in) = W[g]ᵀ (Mg·K × Cg) · X[n, g] (Cg × S_in)
// then col2im scatters-adds col into Y[n, g].
#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cpu/gemm.h"
#include "backend/cpu/kernels/common.h"
#include "backend/cpu/kernels/conv_util.h"

namespace fusec::cpu {

namespace {

/// col[(c, k0, k1, k2), (o0, o1, o2)] = x[c, o·s - pb + k·d] (0 in the padding), for Cg channels.
template <typename T>
void im2col(const T* x, int64_t channels, const Geo3& g, T* col) {
  const int64_t kk = g.kernel_size(), s_in = g.in_size(), s_out = g.out_size();
  parallel_for(channels * kk, std::max<int64_t>(1, 32768 / std::max<int64_t>(s_out, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t c = r / kk, q = r % kk;
      const int64_t k2 = q % g.k[2], k1 = (q / g.k[2]) % g.k[1], k0 = q / (g.k[1] * g.k[2]);
      const T* xc = x + c * s_in;
      T* dst = col + r * s_out;
      const int64_t off2 = k2 * g.d[2] - g.pb[2];
      int64_t lo, hi;
      valid_range(g.out[2], g.in[2], g.s[2], off2, lo, hi);
      for (int64_t o0 = 0; o0 < g.out[0]; ++o0) {
        const int64_t i0 = o0 * g.s[0] - g.pb[0] + k0 * g.d[0];
        for (int64_t o1 = 0; o1 < g.out[1]; ++o1) {
          const int64_t i1 = o1 * g.s[1] - g.pb[1] + k1 * g.d[1];
          T* row = dst + (o0 * g.out[1] + o1) * g.out[2];
          if (i0 < 0 || i0 >= g.in[0] || i1 < 0 || i1 >= g.in[1]) {
            std::fill(row, row + g.out[2], T(0));
            continue;
          }
          const T* src = xc + (i0 * g.in[1] + i1) * g.in[2];
          std::fill(row, row + lo, T(0));
          if (g.s[2] == 1) {
            for (int64_t o2 = lo; o2 < hi; ++o2) row[o2] = src[o2 + off2];
          } else {
            for (int64_t o2 = lo; o2 < hi; ++o2) row[o2] = src[o2 * g.s[2] + off2];
          }
          std::fill(row + hi, row + g.out[2], T(0));
        }
      }
    }
  });
}

/// y[c, i·s - pb + k·d] += col[(c, k), i] over `channels` output channels (parallel by channel,
/// so no two threads write the same element).
template <typename T>
void col2im(const T* col, int64_t channels, const Geo3& g, T* y) {
  // Here g.in is the ConvTranspose input (col's columns) and g.out its output.
  const int64_t kk = g.kernel_size(), s_in = g.in_size(), s_out = g.out_size();
  parallel_for(channels, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      T* yc = y + c * s_out;
      for (int64_t q = 0; q < kk; ++q) {
        const int64_t k2 = q % g.k[2], k1 = (q / g.k[2]) % g.k[1], k0 = q / (g.k[1] * g.k[2]);
        const T* src = col + (c * kk + q) * s_in;
        const int64_t off2 = k2 * g.d[2] - g.pb[2];
        int64_t lo, hi;
        valid_range(g.in[2], g.out[2], g.s[2], off2, lo, hi);
        for (int64_t i0 = 0; i0 < g.in[0]; ++i0) {
          const int64_t o0 = i0 * g.s[0] - g.pb[0] + k0 * g.d[0];
          if (o0 < 0 || o0 >= g.out[0]) continue;
          for (int64_t i1 = 0; i1 < g.in[1]; ++i1) {
            const int64_t o1 = i1 * g.s[1] - g.pb[1] + k1 * g.d[1];
            if (o1 < 0 || o1 >= g.out[1]) continue;
            const T* srow = src + (i0 * g.in[1] + i1) * g.in[2];
            T* yrow = yc + (o0 * g.out[1] + o1) * g.out[2];
            if (g.s[2] == 1) {
              for (int64_t i2 = lo; i2 < hi; ++i2) yrow[i2 + off2] += srow[i2];
            } else {
              for (int64_t i2 = lo; i2 < hi; ++i2) yrow[i2 * g.s[2] + off2] += srow[i2];
            }
          }
        }
      }
    }
  });
}

/// One depthwise plane: y (S_out) = bias + sum_k w[k] · x shifted (one input channel).
template <typename T>
void depthwise_plane(const T* x, const T* w, T bias, const Geo3& g, T* y) {
  std::fill(y, y + g.out_size(), bias);
  for (int64_t k2 = 0; k2 < g.k[2]; ++k2) {
    const int64_t off2 = k2 * g.d[2] - g.pb[2];
    int64_t lo, hi;
    valid_range(g.out[2], g.in[2], g.s[2], off2, lo, hi);
    if (lo >= hi) continue;
    for (int64_t o0 = 0; o0 < g.out[0]; ++o0)
      for (int64_t k0 = 0; k0 < g.k[0]; ++k0) {
        const int64_t i0 = o0 * g.s[0] - g.pb[0] + k0 * g.d[0];
        if (i0 < 0 || i0 >= g.in[0]) continue;
        for (int64_t o1 = 0; o1 < g.out[1]; ++o1) {
          T* yrow = y + (o0 * g.out[1] + o1) * g.out[2];
          for (int64_t k1 = 0; k1 < g.k[1]; ++k1) {
            const int64_t i1 = o1 * g.s[1] - g.pb[1] + k1 * g.d[1];
            if (i1 < 0 || i1 >= g.in[1]) continue;
            const T wv = w[(k0 * g.k[1] + k1) * g.k[2] + k2];
            const T* xrow = x + (i0 * g.in[1] + i1) * g.in[2];
            if (g.s[2] == 1) {
              for (int64_t o2 = lo; o2 < hi; ++o2) yrow[o2] += wv * xrow[o2 + off2];
            } else {
              for (int64_t o2 = lo; o2 < hi; ++o2) yrow[o2] += wv * xrow[o2 * g.s[2] + off2];
            }
          }
        }
      }
  }
}

/// Runs task(i, scratch) for i in [0, tasks): one task per thread (each with its own scratch,
/// inner work serial) when there are enough small tasks, else in order with the inner work
/// parallel.
template <typename T, typename Task>
void run_tasks(int64_t tasks, double flops_per_task, size_t scratch_elems, Task&& task) {
  const int threads = num_threads();
  const bool outer = threads > 1 && tasks >= 2 * threads && (flops_per_task < 2e7 || tasks >= 4 * threads);
  if (outer) {
    parallel_for(tasks, 1, [&](int64_t t0, int64_t t1) {
      std::vector<T> scratch(scratch_elems);
      for (int64_t t = t0; t < t1; ++t) task(t, scratch.data());
    });
  } else {
    std::vector<T> scratch(scratch_elems);
    for (int64_t t = 0; t < tasks; ++t) task(t, scratch.data());
  }
}

void conv_kernel(KernelContext& ctx) {
  if (has_half_io(ctx)) return via_float32(ctx, conv_kernel);
  const Tensor& x = ctx.input(0);
  const Tensor& w = ctx.input(1);
  Tensor& y = ctx.output(0);
  if (x.rank() < 3 || w.rank() != x.rank()) ctx.fail("X and W must have the same rank >= 3");
  const int64_t N = x.dim(0), C = x.dim(1), M = w.dim(0), G = ctx.attr_int("group");
  if (G < 1 || C % G != 0 || M % G != 0 || w.dim(1) != C / G)
    ctx.fail("channels do not match: X " + dims_str(x.dims()) + ", W " + dims_str(w.dims()) + ", group " +
             std::to_string(G));
  const int64_t Cg = C / G, Mg = M / G;
  std::vector<int64_t> in(x.dims().begin() + 2, x.dims().end()), kernel(w.dims().begin() + 2, w.dims().end());
  const WindowGeometry wg = window_geometry(ctx, in, kernel, false);
  Geo3 g;
  if (!to_geo3(wg, g)) ctx.fail("Conv with more than 3 spatial dims is not supported");
  const Tensor* bias = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  if (bias && bias->numel() != M) ctx.fail("B must have one value per output channel");
  const int64_t s_in = g.in_size(), s_out = g.out_size(), kk = g.kernel_size();
  if (y.numel() == 0) return;

  dispatch_float(x.dtype(), ctx, [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    const T* pw = w.data<T>();
    const T* pb = bias ? bias->data<T>() : nullptr;
    T* py = y.data<T>();

    if (Cg == 1 && G > 1) {  // depthwise (with any channel multiplier Mg)
      parallel_for(N * M, std::max<int64_t>(1, 16384 / std::max<int64_t>(s_out * kk, 1)), [&](int64_t p0, int64_t p1) {
        for (int64_t p = p0; p < p1; ++p) {
          const int64_t n = p / M, m = p % M, c = m / Mg;
          depthwise_plane(px + (n * C + c) * s_in, pw + m * kk, pb ? pb[m] : T(0), g, py + p * s_out);
        }
      });
      return;
    }

    bool pointwise = true;
    for (int i = 0; i < 3; ++i)
      pointwise = pointwise && g.k[i] == 1 && g.s[i] == 1 && g.pb[i] == 0 && g.pe[i] == 0;
    const int64_t kdim = Cg * kk;
    const double flops = 2.0 * static_cast<double>(Mg) * static_cast<double>(s_out) * static_cast<double>(kdim);
    run_tasks<T>(N * G, flops, pointwise ? 0 : static_cast<size_t>(kdim * s_out), [&](int64_t t, T* col) {
      const int64_t n = t / G, grp = t % G;
      const T* xs = px + (n * C + grp * Cg) * s_in;
      T* ys = py + (n * M + grp * Mg) * s_out;
      if (!pointwise) im2col(xs, Cg, g, col);
      if (pb)
        for (int64_t m = 0; m < Mg; ++m) std::fill(ys + m * s_out, ys + (m + 1) * s_out, pb[grp * Mg + m]);
      gemm(false, false, Mg, s_out, kdim, T(1), pw + grp * Mg * kdim, kdim, pointwise ? xs : col, s_out,
           pb ? T(1) : T(0), ys, s_out);
    });
  });
}

void conv_transpose_kernel(KernelContext& ctx) {
  if (has_half_io(ctx)) return via_float32(ctx, conv_transpose_kernel);
  const Tensor& x = ctx.input(0);
  const Tensor& w = ctx.input(1);
  Tensor& y = ctx.output(0);
  if (x.rank() < 3 || w.rank() != x.rank()) ctx.fail("X and W must have the same rank >= 3");
  const int64_t N = x.dim(0), C = x.dim(1), G = ctx.attr_int("group");
  if (G < 1 || C % G != 0 || w.dim(0) != C)
    ctx.fail("channels do not match: X " + dims_str(x.dims()) + ", W " + dims_str(w.dims()) + ", group " +
             std::to_string(G));
  const int64_t Cg = C / G, Mg = w.dim(1), M = Mg * G;
  std::vector<int64_t> in(x.dims().begin() + 2, x.dims().end()), kernel(w.dims().begin() + 2, w.dims().end());
  const WindowGeometry wg = conv_transpose_geometry(ctx, in, kernel);
  Geo3 g;
  if (!to_geo3(wg, g)) ctx.fail("ConvTranspose with more than 3 spatial dims is not supported");
  const Tensor* bias = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  if (bias && bias->numel() != M) ctx.fail("B must have one value per output channel");
  const int64_t s_in = g.in_size(), s_out = g.out_size(), kk = g.kernel_size();
  if (y.numel() == 0) return;

  dispatch_float(x.dtype(), ctx, [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    const T* pw = w.data<T>();
    const T* pb = bias ? bias->data<T>() : nullptr;
    T* py = y.data<T>();
    bool pointwise = s_in == s_out;
    for (int i = 0; i < 3; ++i) pointwise = pointwise && g.k[i] == 1 && g.s[i] == 1 && g.pb[i] == 0;
    const int64_t rows = Mg * kk;
    const double flops = 2.0 * static_cast<double>(rows) * static_cast<double>(s_in) * static_cast<double>(Cg);
    run_tasks<T>(N * G, flops, pointwise ? 0 : static_cast<size_t>(rows * s_in), [&](int64_t t, T* col) {
      const int64_t n = t / G, grp = t % G;
      const T* xs = px + (n * C + grp * Cg) * s_in;
      T* ys = py + (n * M + grp * Mg) * s_out;
      for (int64_t m = 0; m < Mg; ++m) std::fill(ys + m * s_out, ys + (m + 1) * s_out, pb ? pb[grp * Mg + m] : T(0));
      const T* wg_ = pw + grp * Cg * rows;
      if (pointwise) {
        gemm(true, false, Mg, s_in, Cg, T(1), wg_, rows, xs, s_in, T(1), ys, s_out);
        return;
      }
      gemm(true, false, rows, s_in, Cg, T(1), wg_, rows, xs, s_in, T(0), col, s_in);
      col2im(col, Mg, g, ys);
    });
  });
}

}  // namespace

void register_conv_kernels(KernelRegistry& r) {
  r.add("Conv", conv_kernel);
  r.add("ConvTranspose", conv_transpose_kernel);
}

}  // namespace fusec::cpu
