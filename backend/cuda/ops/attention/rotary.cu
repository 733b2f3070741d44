// Rotary position embedding (rotary.cuh). Memory-bound: each thread loads V values from both
// halves of one head of X and of its cos/sin rows, and writes both halves of Y, so every access
// is a full vector and a head's two halves are read once.
#include "backend/cuda/ops/attention/rotary.cuh"

#include "backend/cuda/core/common.cuh"

namespace fusec::cuda {

namespace {

template <typename T, int V>
__global__ void __launch_bounds__(kBlock) rotary_kernel(const __grid_constant__ RotaryArgs a) {
  pdl_wait_then_release();
  const T* x = static_cast<const T*>(a.x);
  const T* cs = static_cast<const T*>(a.cos);
  const T* sn = static_cast<const T*>(a.sin);
  T* y = static_cast<T*>(a.y);
  const int64_t half = a.head / 2, per_head = half / V, n = a.heads * per_head;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / per_head;
    const int64_t j = (i - row * per_head) * V;
    const int64_t xo = row * a.head + j;
    float x1[V], x2[V], c1[V], c2[V], s1[V], s2[V], y1[V], y2[V];
    load_vec<T, V>(x + xo, x1);
    load_vec<T, V>(x + xo + half, x2);
    if (a.rotated_heads < a.heads_per_row && row % a.heads_per_row >= a.rotated_heads) {
      store_vec<T, V>(y + xo, x1);
      store_vec<T, V>(y + xo + half, x2);
      continue;
    }
    int64_t co = 0, so = 0, rem = row;
    for (int d = a.rank - 1; d >= 0; --d) {
      const int64_t q = rem / a.dims[d];
      const int64_t idx = rem - q * a.dims[d];
      co += idx * a.cos_stride[d];
      so += idx * a.sin_stride[d];
      rem = q;
    }
    co = co * a.head + j;
    so = so * a.head + j;
    load_vec<T, V>(cs + co, c1);
    load_vec<T, V>(cs + co + half, c2);
    load_vec<T, V>(sn + so, s1);
    load_vec<T, V>(sn + so + half, s2);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      y1[k] = x1[k] * c1[k] + (-x2[k]) * s1[k];
      y2[k] = x2[k] * c2[k] + x1[k] * s2[k];
    }
    store_vec<T, V>(y + xo, y1);
    store_vec<T, V>(y + xo + half, y2);
  }
}

bool aligned_to(const void* p, int bytes) { return reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(bytes) == 0; }

template <typename T>
void launch_typed(const RotaryArgs& a, cudaStream_t s) {
  const int64_t half = a.head / 2;
  auto fits = [&](int v) {
    const int bytes = v * static_cast<int>(sizeof(T));
    return half % v == 0 && aligned_to(a.x, bytes) && aligned_to(a.y, bytes) && aligned_to(a.cos, bytes) &&
           aligned_to(a.sin, bytes);
  };
  auto go = [&](auto kernel, int v) {
    const int64_t n = a.heads * (half / v);
    launch_pdl("rotary", kernel, dim3(grid_for(n)), dim3(kBlock), 0, s, a);
  };
  constexpr int kWide = 16 / sizeof(T);
  if (fits(kWide))
    go(rotary_kernel<T, kWide>, kWide);
  else if (fits(kWide / 2))
    go(rotary_kernel<T, kWide / 2>, kWide / 2);
  else
    go(rotary_kernel<T, 1>, 1);
}

}  // namespace

bool launch_rotary(const RotaryArgs& a, cudaStream_t s) {
  if (a.heads == 0 || a.head == 0) return true;
  switch (a.dtype) {
    case DType::Float32:
      launch_typed<float>(a, s);
      return true;
    case DType::Float16:
      launch_typed<__half>(a, s);
      return true;
    case DType::BFloat16:
      launch_typed<__nv_bfloat16>(a, s);
      return true;
    default:
      return false;
  }
}

}  // namespace fusec::cuda
