// LpNormalization's kernels (lp_norm.cuh): a warp per slice where the axis is the innermost dim
// (its elements contiguous, a shuffle sum), else a thread per (outer, inner) lane walking the axis
// twice, neighbouring threads on neighbouring inner positions so that every step is coalesced.
#include <cmath>

#include "backend/cuda/core/common.cuh"
#include "backend/cuda/ops/norm/lp_norm.cuh"

namespace fusec::cuda {

namespace {

template <typename T>
__device__ __forceinline__ double load_double(const T* p) {
  return static_cast<double>(to_compute(*p));
}

/// The quotient, rounded as the CPU rounds it (from_compute: through float32 for 16-bit storage).
template <typename T>
__device__ __forceinline__ T quotient(double v, double norm) {
  return from_compute<T>(norm == 0 ? 0.0 : v / norm);
}

template <typename T>
__global__ void __launch_bounds__(kBlock)
    lp_norm_rows_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t len, bool l1) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t row = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32; row < rows; row += warps) {
    const T* xr = x + row * len;
    T* yr = y + row * len;
    double acc = 0;
    for (int64_t k = lane; k < len; k += 32) {
      const double v = load_double(xr + k);
      acc += l1 ? fabs(v) : v * v;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    const double norm = l1 ? acc : sqrt(acc);
    for (int64_t k = lane; k < len; k += 32) yr[k] = quotient<T>(load_double(xr + k), norm);
  }
}

template <typename T>
__global__ void __launch_bounds__(kBlock) lp_norm_lanes_kernel(const T* __restrict__ x, T* __restrict__ y,
                                                               int64_t outer, int64_t len, int64_t inner, bool l1) {
  const int64_t lanes = outer * inner;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < lanes; t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = t / inner, j = t - o * inner;
    const T* xl = x + o * len * inner + j;
    T* yl = y + o * len * inner + j;
    double acc = 0;
    for (int64_t k = 0; k < len; ++k) {
      const double v = load_double(xl + k * inner);
      acc += l1 ? fabs(v) : v * v;
    }
    const double norm = l1 ? acc : sqrt(acc);
    for (int64_t k = 0; k < len; ++k) yl[k * inner] = quotient<T>(load_double(xl + k * inner), norm);
  }
}

}  // namespace

bool launch_lp_norm(const void* x, void* y, DType t, int64_t outer, int64_t len, int64_t inner, bool l1,
                    cudaStream_t s) {
  return dispatch_float_storage(t, [&](auto tag) {
    using T = decltype(tag);
    if (outer * len * inner == 0) return;
    auto* xp = static_cast<const T*>(x);
    auto* yp = static_cast<T*>(y);
    if (inner == 1) {
      lp_norm_rows_kernel<T><<<grid_for(outer * 32), kBlock, 0, s>>>(xp, yp, outer, len, l1);
      check_launch("lp_norm_rows_kernel");
    } else {
      lp_norm_lanes_kernel<T><<<grid_for(outer * inner), kBlock, 0, s>>>(xp, yp, outer, len, inner, l1);
      check_launch("lp_norm_lanes_kernel");
    }
  });
}

}  // namespace fusec::cuda
