#include "backend/cuda/core/common.cuh"
#include "backend/cuda/ops/conv/pointwise_rows.cuh"
#include "backend/cuda/ops/elementwise/epilogue_act.cuh"

namespace fusec::cuda {

namespace {

constexpr int kWarps = 8;

// Rows a warp takes at once: their loads are all in flight together. One row at a time put the
// L2 latency of every row's loads, its shuffle tree and its store in series (10 µs for 16 rows).
constexpr int kRowGroup = 16;

// V: elements per load (16 bytes where K and the pointers allow, else 1). A row's products are
// summed in fp32 in lane order, then across lanes: the CPU's order differs only in rounding.
template <typename T, int V>
__global__ void __launch_bounds__(kWarps * 32) pointwise_rows_kernel(PointwiseRowsArgs a) {
  const int lane = threadIdx.x & 31;
  const int n = blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (n >= a.cout) return;
  const int cin = static_cast<int>(a.cin), chunks = cin / V, cout = static_cast<int>(a.cout);
  const int rows = static_cast<int>(a.rows);
  const T* __restrict__ w = static_cast<const T*>(a.w) + int64_t(n) * cin;
  const T* __restrict__ x = static_cast<const T*>(a.x);
  const T* __restrict__ z = static_cast<const T*>(a.z);
  T* __restrict__ y = static_cast<T*>(a.y);
  const float b = a.bias ? to_compute(static_cast<const T*>(a.bias)[n]) : 0.0f;
  for (int m0 = 0; m0 < rows; m0 += kRowGroup) {
    float s[kRowGroup];
#pragma unroll
    for (int r = 0; r < kRowGroup; ++r) s[r] = 0.0f;
    for (int c = lane; c < chunks; c += 32) {
      float wv[V];
      load_vec<T, V>(w + c * V, wv);
#pragma unroll
      for (int r = 0; r < kRowGroup; ++r) {
        if (m0 + r < rows) {
          float xv[V];
          load_vec<T, V>(x + int64_t(m0 + r) * cin + c * V, xv);
#pragma unroll
          for (int i = 0; i < V; ++i) s[r] = fmaf(xv[i], wv[i], s[r]);
        }
      }
    }
    // Every lane gets every row's total; lane r finishes row m0 + r.
    float mine = 0.0f;
#pragma unroll
    for (int r = 0; r < kRowGroup; ++r) {
      const float t = warp_sum(s[r]);
      mine = lane == r ? t : mine;
    }
    const int m = m0 + lane;
    if (lane < kRowGroup && m < rows) {
      float v = mine;
      if (a.bias) v += b;  // the reference's order: conv + bias, then the residual
      if (z) v += to_compute(z[int64_t(m) * cout + n]);
      y[int64_t(m) * cout + n] = from_compute<T>(apply_act(v, a.act));
    }
  }
}

template <typename T>
void launch_t(const PointwiseRowsArgs& a, cudaStream_t s) {
  constexpr int vec = 16 / sizeof(T);
  const unsigned grid = static_cast<unsigned>((a.cout + kWarps - 1) / kWarps);
  if (a.cin % vec == 0 && aligned16(a.x) && aligned16(a.w))
    pointwise_rows_kernel<T, vec><<<grid, kWarps * 32, 0, s>>>(a);
  else
    pointwise_rows_kernel<T, 1><<<grid, kWarps * 32, 0, s>>>(a);
}

}  // namespace

bool launch_pointwise_rows(const PointwiseRowsArgs& a, cudaStream_t s) {
  if (a.rows < 1 || a.rows > kPointwiseRowsMax || a.cin < 1 || a.cout < 1 || a.cin > INT32_MAX / 2 ||
      a.cout > INT32_MAX / 2)
    return false;
  switch (a.dtype) {
    case DType::Float32:
      launch_t<float>(a, s);
      return true;
    case DType::Float16:
      launch_t<__half>(a, s);
      return true;
    case DType::BFloat16:
      launch_t<__nv_bfloat16>(a, s);
      return true;
    default:
      return false;
  }
}

}  // namespace fusec::cuda
