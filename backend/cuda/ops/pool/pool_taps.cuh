// Window arithmetic and special values shared by the pooling kernels of both layouts (pool.cu,
// pool_nhwc.cu), so that they walk the same taps and round the same way.
#pragma once
#include <cuda_runtime.h>

namespace fusec::cuda {

template <typename A>
__device__ __forceinline__ A qnan() {
  return static_cast<A>(__int_as_float(0x7fffffff));
}
template <typename A>
__device__ __forceinline__ A neg_inf() {
  return -static_cast<A>(__int_as_float(0x7f800000));
}

__device__ __forceinline__ float lp_term(float v, int p) {
  v = fabsf(v);
  return p == 1 ? v : p == 2 ? v * v : powf(v, static_cast<float>(p));
}
__device__ __forceinline__ double lp_term(double v, int p) {
  v = fabs(v);
  return p == 1 ? v : p == 2 ? v * v : pow(v, static_cast<double>(p));
}
__device__ __forceinline__ float lp_root(float s, int p) { return p == 1 ? s : p == 2 ? sqrtf(s) : powf(s, 1.0f / p); }
__device__ __forceinline__ double lp_root(double s, int p) { return p == 1 ? s : p == 2 ? sqrt(s) : pow(s, 1.0 / p); }

/// The taps t in [0, count) with 0 <= off + t*step < limit, as [lo, hi) (the CPU's valid_range).
template <typename I>
__device__ __forceinline__ void tap_range(I count, I limit, I step, I off, I& lo, I& hi) {
  if (step == 1) {  // no dilation: skip the 64-bit divisions (dozens of instructions each)
    lo = off >= 0 ? 0 : -off;
    hi = limit - off;
  } else {
    lo = off >= 0 ? 0 : (-off + step - 1) / step;
    hi = off >= limit ? 0 : (limit - 1 - off) / step + 1;
  }
  lo = lo < count ? lo : count;
  hi = hi < lo ? lo : (hi > count ? count : hi);
}

}  // namespace fusec::cuda
