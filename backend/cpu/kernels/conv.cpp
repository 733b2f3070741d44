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

/// Columns [j0, j1) of im2col: col[(c, k0, k1, k2), j - j0] = x[c, o(j)·s - pb + k·d] (0 in the
/// padding), where j runs over the flattened output positions; `channels` input channels.
template <typename T>
void im2col(const T* x, int64_t channels, const Geo3& g, int64_t j0, int64_t j1, T* col) {
  const int64_t kk = g.kernel_size(), s_in = g.in_size(), width = j1 - j0;
  parallel_for(channels * kk, std::max<int64_t>(1, 32768 / std::max<int64_t>(width, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t c = r / kk, q = r % kk;
      const int64_t k2 = q % g.k[2], k1 = (q / g.k[2]) % g.k[1], k0 = q / (g.k[1] * g.k[2]);
      const T* xc = x + c * s_in;
      T* dst = col + r * width;
      const int64_t off2 = k2 * g.d[2] - g.pb[2];
      int64_t lo, hi;
      valid_range(g.out[2], g.in[2], g.s[2], off2, lo, hi);
      // Walk the output rows (o0, o1) that [j0, j1) touches, one run of o2 at a time.
      int64_t a2 = j0 % g.out[2], a1 = (j0 / g.out[2]) % g.out[1], a0 = j0 / (g.out[2] * g.out[1]);
      for (int64_t j = j0; j < j1;) {
        const int64_t end2 = std::min(g.out[2], a2 + (j1 - j));
        T* seg = dst + (j - j0);  // seg[o2 - a2] is output position o2 of this row
        const int64_t i0 = a0 * g.s[0] - g.pb[0] + k0 * g.d[0];
        const int64_t i1 = a1 * g.s[1] - g.pb[1] + k1 * g.d[1];
        if (i0 < 0 || i0 >= g.in[0] || i1 < 0 || i1 >= g.in[1]) {
          std::fill(seg, seg + (end2 - a2), T(0));
        } else {
          const T* src = xc + (i0 * g.in[1] + i1) * g.in[2];
          const int64_t vlo = std::clamp(lo, a2, end2), vhi = std::clamp(hi, vlo, end2);
          std::fill(seg, seg + (vlo - a2), T(0));
          T* out = seg + (vlo - a2);
          if (g.s[2] == 1) {
            const T* in = src + vlo + off2;
            for (int64_t i = 0; i < vhi - vlo; ++i) out[i] = in[i];
          } else {
            for (int64_t o2 = vlo; o2 < vhi; ++o2) out[o2 - vlo] = src[o2 * g.s[2] + off2];
          }
          std::fill(seg + (vhi - a2), seg + (end2 - a2), T(0));
        }
        j += end2 - a2;
        a2 = 0;
        if (++a1 == g.out[1]) {
          a1 = 0;
          ++a0;
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
        // Only the input positions that land inside the output, in every dim: walking all of an
        // input dim and skipping the rest took billions of empty steps for an empty input with
        // a huge dim ([1, 1, 2^32, 0], fuzz finding 16).
        const int64_t off0 = k0 * g.d[0] - g.pb[0], off1 = k1 * g.d[1] - g.pb[1], off2 = k2 * g.d[2] - g.pb[2];
        int64_t lo0, hi0, lo1, hi1, lo, hi;
        valid_range(g.in[0], g.out[0], g.s[0], off0, lo0, hi0);
        valid_range(g.in[1], g.out[1], g.s[1], off1, lo1, hi1);
        valid_range(g.in[2], g.out[2], g.s[2], off2, lo, hi);
        if (lo >= hi) continue;
        for (int64_t i0 = lo0; i0 < hi0; ++i0) {
          const int64_t o0 = i0 * g.s[0] + off0;
          for (int64_t i1 = lo1; i1 < hi1; ++i1) {
            const int64_t o1 = i1 * g.s[1] + off1;
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

/// One depthwise plane: y (S_out) = bias + sum_k w[k] · x shifted (one input channel). Each
/// output row is built in blocks of kBlock values held in registers across all taps (stride 1),
/// with bounds checks only at the row's edges.
template <typename T>
void depthwise_plane(const T* x, const T* w, T bias, const Geo3& g, T* y) {
  // A block of outputs in kVecs 16-byte vectors (one register each on any x86-64).
  typedef T V __attribute__((vector_size(16)));
  constexpr int kLanes = 16 / sizeof(T), kVecs = 4, kBlock = kLanes * kVecs;
  // Per k2 tap: offset and the output range where it reads inside the row; the interior
  // [lo_all, hi_all) is where every k2 tap does.
  std::vector<int64_t> off(static_cast<size_t>(g.k[2])), lo(off.size()), hi(off.size());
  int64_t lo_all = 0, hi_all = g.out[2];
  for (int64_t k2 = 0; k2 < g.k[2]; ++k2) {
    off[k2] = k2 * g.d[2] - g.pb[2];
    valid_range(g.out[2], g.in[2], g.s[2], off[k2], lo[k2], hi[k2]);
    lo_all = std::max(lo_all, lo[k2]);
    hi_all = std::min(hi_all, hi[k2]);
  }
  hi_all = std::max(hi_all, lo_all);
  std::vector<const T*> rows;  // input rows of the (k0, k1) taps inside the input
  std::vector<const T*> wrow;  // their k2 weights
  const int64_t s2 = g.s[2];
  for (int64_t o0 = 0; o0 < g.out[0]; ++o0)
    for (int64_t o1 = 0; o1 < g.out[1]; ++o1) {
      rows.clear();
      wrow.clear();
      for (int64_t k0 = 0; k0 < g.k[0]; ++k0) {
        const int64_t i0 = o0 * g.s[0] - g.pb[0] + k0 * g.d[0];
        if (i0 < 0 || i0 >= g.in[0]) continue;
        for (int64_t k1 = 0; k1 < g.k[1]; ++k1) {
          const int64_t i1 = o1 * g.s[1] - g.pb[1] + k1 * g.d[1];
          if (i1 < 0 || i1 >= g.in[1]) continue;
          rows.push_back(x + (i0 * g.in[1] + i1) * g.in[2]);
          wrow.push_back(w + (k0 * g.k[1] + k1) * g.k[2]);
        }
      }
      T* yrow = y + (o0 * g.out[1] + o1) * g.out[2];
      // Edges, tap by tap with bounds.
      auto edge = [&](int64_t o2) {
        T acc = bias;
        for (size_t t = 0; t < rows.size(); ++t)
          for (int64_t k2 = 0; k2 < g.k[2]; ++k2)
            if (o2 >= lo[k2] && o2 < hi[k2]) acc += wrow[t][k2] * rows[t][o2 * s2 + off[k2]];
        yrow[o2] = acc;
      };
      for (int64_t o2 = 0; o2 < lo_all; ++o2) edge(o2);
      int64_t o2 = lo_all;
      if (s2 == 1) {
        for (; o2 + kBlock <= hi_all; o2 += kBlock) {
          V acc[kVecs];
          for (int v = 0; v < kVecs; ++v) acc[v] = V{} + bias;
          for (size_t t = 0; t < rows.size(); ++t)
            for (int64_t k2 = 0; k2 < g.k[2]; ++k2) {
              const T* src = rows[t] + o2 + off[k2];
              const T wv = wrow[t][k2];
              for (int v = 0; v < kVecs; ++v) {
                V xv;
                __builtin_memcpy(&xv, src + v * kLanes, sizeof(V));
                acc[v] += wv * xv;
              }
            }
          for (int v = 0; v < kVecs; ++v) __builtin_memcpy(yrow + o2 + v * kLanes, &acc[v], sizeof(V));
        }
        for (; o2 + kLanes <= hi_all; o2 += kLanes) {
          V acc = V{} + bias;
          for (size_t t = 0; t < rows.size(); ++t)
            for (int64_t k2 = 0; k2 < g.k[2]; ++k2) {
              V xv;
              __builtin_memcpy(&xv, rows[t] + o2 + off[k2], sizeof(V));
              acc += wrow[t][k2] * xv;
            }
          __builtin_memcpy(yrow + o2, &acc, sizeof(V));
        }
      }
      // The rest of the interior: no bounds checks needed.
      for (; o2 < hi_all; ++o2) {
        T acc = bias;
        for (size_t t = 0; t < rows.size(); ++t)
          for (int64_t k2 = 0; k2 < g.k[2]; ++k2) acc += wrow[t][k2] * rows[t][o2 * s2 + off[k2]];
        yrow[o2] = acc;
      }
      for (; o2 < g.out[2]; ++o2) edge(o2);
    }
}

/// Per-thread grow-only scratch (im2col columns), reused across calls so a network does not
/// fault in fresh pages for every Conv.
template <typename T>
T* thread_scratch(size_t elems) {
  thread_local std::vector<T> buf;
  if (buf.size() < elems) buf.resize(elems);
  return buf.data();
}

/// Runs task(i) for i in [0, tasks): spread over the threads (inner work then runs serially)
/// when there are at least two tasks per thread, else in order with the inner work parallel.
template <typename Task>
void run_tasks(int64_t tasks, Task&& task) {
  const int threads = num_threads();
  if (threads > 1 && tasks >= 2 * threads) {
    parallel_for(tasks, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) task(t);
    });
  } else {
    for (int64_t t = 0; t < tasks; ++t) task(t);
  }
}

void conv_kernel(KernelContext& ctx) {
  if (has_half_io(ctx)) return via_float32(ctx, conv_kernel);
  const Tensor& x = ctx.input(0);
  const Tensor& w = ctx.input(1);
  Tensor& y = ctx.output(0);
  if (x.rank() < 3 || w.rank() != x.rank()) ctx.fail("X and W must have the same rank >= 3");
  if (w.dtype() != x.dtype() || (ctx.has_input(2) && ctx.input(2).dtype() != x.dtype()))
    ctx.fail("X, W and B must have the same type");
  const int64_t N = x.dim(0), C = x.dim(1), M = w.dim(0), G = ctx.attr_int("group");
  if (G < 1 || C % G != 0 || M % G != 0 || w.dim(1) != C / G)
    ctx.fail("channels do not match: X " + dims_str(x.dims()) + ", W " + dims_str(w.dims()) + ", group " +
             std::to_string(G));
  const int64_t Cg = C / G, Mg = M / G;
  std::vector<int64_t> in(x.dims().begin() + 2, x.dims().end()), kernel(w.dims().begin() + 2, w.dims().end());
  const WindowGeometry wg = window_geometry(ctx, in, kernel, false);
  Geo3 g;
  if (!to_geo3(wg, g)) ctx.unsupported("Conv with more than 3 spatial dims is not supported");
  require_dims(ctx, y, nc_and_out(N, M, wg));
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
    for (int i = 0; i < 3; ++i) pointwise = pointwise && g.k[i] == 1 && g.s[i] == 1 && g.pb[i] == 0 && g.pe[i] == 0;
    const int64_t kdim = Cg * kk;
    // Output columns per task: im2col of one chunk (kdim × chunk) stays in L2 for the GEMM that
    // reads it, and chunks give the threads independent work. Chunks narrower than ~96 columns
    // would waste the GEMM's register tiles, so when they cannot give every thread two tasks,
    // images and groups run in order with the GEMM splitting its rows across the threads.
    int64_t chunk = s_out;
    if (!pointwise) {
      const int threads = num_threads();
      const int64_t fit = std::max<int64_t>(96, (int64_t{1} << 20) / static_cast<int64_t>(kdim * sizeof(T)));
      const int64_t even = (s_out + 4 * threads - 1) / (4 * threads);  // ~4 tasks per thread
      const int64_t c = std::max<int64_t>(96, std::min(fit, even));
      if (threads > 1 && N * G * ((s_out + c - 1) / c) >= 2 * threads)
        chunk = c;
      else
        chunk = std::min(s_out, std::max<int64_t>(256, fit));
    }
    const int64_t chunks = (s_out + chunk - 1) / chunk;
    run_tasks(N * G * chunks, [&](int64_t t) {
      const int64_t ng = t / chunks, ch = t % chunks, n = ng / G, grp = ng % G;
      const int64_t j0 = ch * chunk, j1 = std::min(s_out, j0 + chunk), width = j1 - j0;
      const T* xs = px + (n * C + grp * Cg) * s_in;
      T* ys = py + (n * M + grp * Mg) * s_out + j0;
      if (pb)
        for (int64_t m = 0; m < Mg; ++m) std::fill(ys + m * s_out, ys + m * s_out + width, pb[grp * Mg + m]);
      const T* wg_ = pw + grp * Mg * kdim;
      if (pointwise) {
        gemm(false, false, Mg, width, kdim, T(1), wg_, kdim, xs + j0, s_in, pb ? T(1) : T(0), ys, s_out);
        return;
      }
      T* col = thread_scratch<T>(static_cast<size_t>(kdim * width));
      im2col(xs, Cg, g, j0, j1, col);
      gemm(false, false, Mg, width, kdim, T(1), wg_, kdim, col, width, pb ? T(1) : T(0), ys, s_out);
    });
  });
}

void conv_transpose_kernel(KernelContext& ctx) {
  if (has_half_io(ctx)) return via_float32(ctx, conv_transpose_kernel);
  const Tensor& x = ctx.input(0);
  const Tensor& w = ctx.input(1);
  Tensor& y = ctx.output(0);
  if (x.rank() < 3 || w.rank() != x.rank()) ctx.fail("X and W must have the same rank >= 3");
  if (w.dtype() != x.dtype() || (ctx.has_input(2) && ctx.input(2).dtype() != x.dtype()))
    ctx.fail("X, W and B must have the same type");
  const int64_t N = x.dim(0), C = x.dim(1), G = ctx.attr_int("group");
  if (G < 1 || C % G != 0 || w.dim(0) != C)
    ctx.fail("channels do not match: X " + dims_str(x.dims()) + ", W " + dims_str(w.dims()) + ", group " +
             std::to_string(G));
  const int64_t Cg = C / G, Mg = w.dim(1), M = Mg * G;
  std::vector<int64_t> in(x.dims().begin() + 2, x.dims().end()), kernel(w.dims().begin() + 2, w.dims().end());
  const WindowGeometry wg = conv_transpose_geometry(ctx, in, kernel);
  Geo3 g;
  if (!to_geo3(wg, g)) ctx.unsupported("ConvTranspose with more than 3 spatial dims is not supported");
  require_dims(ctx, y, nc_and_out(N, M, wg));
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
    run_tasks(N * G, [&](int64_t t) {
      const int64_t n = t / G, grp = t % G;
      const T* xs = px + (n * C + grp * Cg) * s_in;
      T* ys = py + (n * M + grp * Mg) * s_out;
      for (int64_t m = 0; m < Mg; ++m) std::fill(ys + m * s_out, ys + (m + 1) * s_out, pb ? pb[grp * Mg + m] : T(0));
      const T* wg_ = pw + grp * Cg * rows;
      if (pointwise) {
        gemm(true, false, Mg, s_in, Cg, T(1), wg_, rows, xs, s_in, T(1), ys, s_out);
        return;
      }
      T* col = thread_scratch<T>(static_cast<size_t>(rows * s_in));
      gemm(true, false, rows, s_in, Cg, T(1), wg_, rows, xs, s_in, T(0), col, s_in);
      col2im(col, Mg, g, ys);
    });
  });
}

}  // namespace

void register_conv_kernels(KernelRegistry& r) {
  r.add("Conv", conv_kernel, "", Writes::Every);  // GEMM with beta 0 or onto the bias; depthwise rows whole
  r.add("ConvTranspose", conv_transpose_kernel, "", Writes::Every);  // bias or 0 filled, then col2im adds
}

}  // namespace fusec::cpu
