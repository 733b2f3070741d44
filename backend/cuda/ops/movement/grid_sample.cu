// One thread per output position (batch, spatial): it finds the position's taps once, then sums
// every channel over them, so a one-channel input (RAFT's correlation lookup: a volume per pixel)
// still gives every thread a position, and writes stay coalesced along the output's last axis.
#include <cmath>
#include <type_traits>

#include "backend/cuda/core/common.cuh"
#include "backend/cuda/ops/movement/grid_sample.cuh"

namespace fusec::cuda {

namespace {

using grid_sample::Mode;
using grid_sample::Padding;

/// One axis's taps at one position; index -1 reads zero.
struct Taps {
  int count = 0;
  int64_t index[4];
  float weight[4];
  bool nan = false;  // no position at all: a NaN coordinate under border or reflection padding
};

__device__ Taps axis_taps(float g, int64_t size, const grid_sample::Config& c) {
  Taps t;
  using grid_sample::reflect;
  const float n = static_cast<float>(size);
  const float lo = grid_sample::reflect_lo<float>(c.align_corners),
              hi = grid_sample::reflect_hi<float>(size, c.align_corners);
  float x = grid_sample::denormalize(g, size, c.align_corners);
  if (c.mode == Mode::Nearest) x = rintf(x);  // halfway rounds to even
  if (isnan(x) && c.padding != Padding::Zeros) return t.nan = true, t;
  if (!(x >= lo && x <= hi)) {
    if (c.padding == Padding::Border) x = fminf(fmaxf(x, 0.0f), n - 1);
    if (c.padding == Padding::Reflection) x = isinf(x) ? NAN : reflect(x, lo, hi);
    if (isnan(x) && c.padding != Padding::Zeros) return t.nan = true, t;
  }
  if (!(x > -4 && x < n + 4)) return t;  // zeros padding, far outside: every tap reads zero
  auto fetch = [&](int64_t i) -> int64_t {
    if (c.padding == Padding::Zeros) return i >= 0 && i < size ? i : -1;
    if (c.padding == Padding::Reflection) i = static_cast<int64_t>(reflect(static_cast<float>(i), lo, hi));
    return i < 0 ? 0 : i >= size ? size - 1 : i;
  };
  const float f = floorf(x);
  const auto i0 = static_cast<int64_t>(f);
  const float u = x - f;
  if (c.mode == Mode::Nearest) {
    t.count = 1;
    t.index[0] = fetch(static_cast<int64_t>(x));
    t.weight[0] = 1;
  } else if (c.mode == Mode::Linear) {
    t.count = 2;
    t.index[0] = fetch(i0), t.index[1] = fetch(i0 + 1);
    t.weight[0] = 1 - u, t.weight[1] = u;
  } else {
    t.count = 4;
    grid_sample::cubic_weights(u, t.weight);
    for (int k = 0; k < 4; ++k) t.index[k] = fetch(i0 - 1 + k);
  }
  return t;
}

template <typename T, typename G, int kAxes>
__global__ void __launch_bounds__(kBlock)
    grid_sample_kernel(const T* __restrict__ x, const G* __restrict__ grid, T* __restrict__ y,
                       const __grid_constant__ GridSampleArgs a) {
  const int64_t positions = a.batch * a.out_plane;
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < positions;
       p += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = p / a.out_plane, o = p - n * a.out_plane;
    // grid[n, o, :] lists the coordinates innermost axis first (x, then y, then z).
    Taps t[kAxes];
    bool nan = false;
#pragma unroll
    for (int i = 0; i < kAxes; ++i) {
      t[i] = axis_taps(to_compute(grid[p * kAxes + (kAxes - 1 - i)]), a.in_size[i], a.config);
      nan = nan || t[i].nan;
    }
    int64_t stride[kAxes];
    stride[kAxes - 1] = 1;
#pragma unroll
    for (int i = kAxes - 1; i > 0; --i) stride[i - 1] = stride[i] * a.in_size[i];
    const T* plane = x + n * a.channels * a.in_plane;
    T* out = y + n * a.channels * a.out_plane + o;
    for (int64_t ch = 0; ch < a.channels; ++ch, plane += a.in_plane, out += a.out_plane) {
      float acc = 0;
      if (nan) {
        acc = NAN;
      } else if constexpr (kAxes == 2) {
        for (int j = 0; j < t[0].count; ++j) {
          if (t[0].index[j] < 0) continue;
          const T* row = plane + t[0].index[j] * stride[0];
          float r = 0;
          for (int k = 0; k < t[1].count; ++k)
            if (t[1].index[k] >= 0) r += t[1].weight[k] * to_compute(row[t[1].index[k]]);
          acc += t[0].weight[j] * r;
        }
      } else {
        for (int j = 0; j < t[0].count; ++j) {
          if (t[0].index[j] < 0) continue;
          for (int k = 0; k < t[1].count; ++k) {
            if (t[1].index[k] < 0) continue;
            const T* row = plane + t[0].index[j] * stride[0] + t[1].index[k] * stride[1];
            float r = 0;
            for (int l = 0; l < t[2].count; ++l)
              if (t[2].index[l] >= 0) r += t[2].weight[l] * to_compute(row[t[2].index[l]]);
            acc += t[0].weight[j] * t[1].weight[k] * r;
          }
        }
      }
      *out = from_compute<T>(acc);
    }
  }
}

// AffineGrid: one thread per output position, its r coordinates from theta's r rows.
template <typename T, int R>
__global__ void __launch_bounds__(kBlock)
    affine_grid_kernel(const T* __restrict__ theta, T* __restrict__ y, AffineGridArgs a) {
  const int64_t positions = a.batch * a.d * a.h * a.w;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < positions;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t w = i % a.w, row = i / a.w, h = row % a.h, n = row / a.h / a.d;
    const float base[3] = {grid_sample::affine_base<float>(w, a.w, a.align_corners),
                           grid_sample::affine_base<float>(h, a.h, a.align_corners),
                           R == 3 ? grid_sample::affine_base<float>(row / a.h % a.d, a.d, a.align_corners) : 0.0f};
    const T* m = theta + n * R * (R + 1);
#pragma unroll
    for (int k = 0; k < R; ++k) {
      float acc = to_compute(m[k * (R + 1) + R]);
#pragma unroll
      for (int j = 0; j < R; ++j) acc += to_compute(m[k * (R + 1) + j]) * base[j];
      y[i * R + k] = from_compute<T>(acc);
    }
  }
}

}  // namespace

bool launch_grid_sample(const GridSampleArgs& a, const void* x, const void* grid, void* y, cudaStream_t stream) {
  const int64_t positions = a.batch * a.out_plane;
  bool ok = false;
  dispatch_float_storage(a.x_dtype, [&](auto xt) {
    using T = decltype(xt);
    dispatch_float_storage(a.grid_dtype, [&](auto gt) {
      using G = decltype(gt);
      if constexpr (!std::is_same_v<T, double> && !std::is_same_v<G, double>) {
        ok = a.axes == 2 || a.axes == 3;
        if (!ok || positions == 0 || a.channels == 0) return;
        auto* xp = static_cast<const T*>(x);
        auto* gp = static_cast<const G*>(grid);
        auto* yp = static_cast<T*>(y);
        if (a.axes == 2)
          grid_sample_kernel<T, G, 2><<<grid_for(positions), kBlock, 0, stream>>>(xp, gp, yp, a);
        else
          grid_sample_kernel<T, G, 3><<<grid_for(positions), kBlock, 0, stream>>>(xp, gp, yp, a);
        check_launch("grid_sample_kernel");
      }
    });
  });
  return ok;
}

bool launch_affine_grid(const AffineGridArgs& a, const void* theta, void* y, cudaStream_t stream) {
  if (a.axes != 2 && a.axes != 3) return false;
  return dispatch_float_storage(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    const int64_t positions = a.batch * a.d * a.h * a.w;
    if (positions == 0) return;
    auto* tp = static_cast<const T*>(theta);
    auto* yp = static_cast<T*>(y);
    if (a.axes == 2)
      affine_grid_kernel<T, 2><<<grid_for(positions), kBlock, 0, stream>>>(tp, yp, a);
    else
      affine_grid_kernel<T, 3><<<grid_for(positions), kBlock, 0, stream>>>(tp, yp, a);
    check_launch("affine_grid_kernel");
  });
}

}  // namespace fusec::cuda
