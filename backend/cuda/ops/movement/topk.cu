// TopK kernels (topk.cuh).
#include <algorithm>
#include <type_traits>

#include "backend/cuda/core/check.h"
#include "backend/cuda/core/common.cuh"
#include "backend/cuda/ops/movement/topk.cuh"

namespace fusec::cuda {

namespace {

/// Values as the comparisons see them: half types widen to float, integers to int64.
template <typename T>
__device__ __forceinline__ auto key(T v) {
  if constexpr (std::is_integral_v<T>)
    return static_cast<int64_t>(v);
  else
    return to_compute(v);
}

template <typename C>
__device__ __forceinline__ bool is_nan(C v) {
  if constexpr (std::is_floating_point_v<C>)
    return isnan(v);
  else
    return false;
}

/// a > b with NaN above every number (the CPU reference's greater_nan_high).
template <typename C>
__device__ __forceinline__ bool greater(C a, C b) {
  if (is_nan(a)) return !is_nan(b);
  if (is_nan(b)) return false;
  return a > b;
}

/// Whether (va, ia) comes before (vc, ic) in the output: the better value, then the lower index.
template <typename C>
__device__ __forceinline__ bool before(C va, int64_t ia, C vc, int64_t ic, bool largest) {
  if (largest ? greater(va, vc) : greater(vc, va)) return true;
  if (largest ? greater(vc, va) : greater(va, vc)) return false;
  return ia < ic;
}

/// The better of two candidates (index -1: none) into (v, i).
template <typename C>
__device__ __forceinline__ void keep_better(C& v, int64_t& i, C ov, int64_t oi, bool largest) {
  if (oi >= 0 && (i < 0 || before(ov, oi, v, i, largest))) {
    v = ov;
    i = oi;
  }
}

struct Args {
  int64_t rows, n, inner, k;
  bool largest;
};

/// Where row `row` (of outer · inner rows, each n elements `inner` apart) starts in x, and where its
/// first pick goes in the outputs (pick j: `inner` · j further).
struct RowAt {
  int64_t in, out;
};
__device__ __forceinline__ RowAt row_at(const Args& a, int64_t row) {
  const int64_t o = row / a.inner, i = row - o * a.inner;
  return {o * a.n * a.inner + i, o * a.k * a.inner + i};
}

/// Whether element (v, e) is still to pick: it comes after the previous pick (index -1: none yet).
template <typename C>
__device__ __forceinline__ bool after_prev(C prev_v, int64_t prev_i, C v, int64_t e, bool largest) {
  return prev_i < 0 || before(prev_v, prev_i, v, e, largest);
}

/// Pick j of the row whose elements start at `row` (its outputs at `out`) is its element e.
template <typename T>
__device__ __forceinline__ void store_pick(const T* row, T* values, int64_t* indices, const Args& a, int64_t out,
                                           int64_t j, int64_t e) {
  const int64_t dst = out + j * a.inner;
  values[dst] = row[e * a.inner];
  if (indices) indices[dst] = e;
}

template <typename T>
__global__ void __launch_bounds__(kBlock)
    topk_kernel(const T* __restrict__ x, T* __restrict__ values, int64_t* __restrict__ indices, const Args a) {
  using C = decltype(key(T{}));
  for (int64_t row = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; row < a.rows;
       row += int64_t(gridDim.x) * blockDim.x) {
    const RowAt at = row_at(a, row);
    const T* base = x + at.in;
    C prev_v{};
    int64_t prev_i = -1;
    for (int64_t j = 0; j < a.k; ++j) {
      C best_v{};
      int64_t best_i = -1;
      for (int64_t e = 0; e < a.n; ++e) {
        const C v = key(base[e * a.inner]);
        if (after_prev(prev_v, prev_i, v, e, a.largest)) keep_better(best_v, best_i, v, e, a.largest);
      }
      store_pick(base, values, indices, a, at.out, j, best_i);
      prev_v = best_v;
      prev_i = best_i;
    }
  }
}

/// One block a row: k rounds, each a block-wide search for the best element after the one the
/// round before took (the order is total: value, then index), so nothing is marked or copied.
template <typename T>
__global__ void __launch_bounds__(kTopKRowThreads)
    topk_row_kernel(const T* __restrict__ x, T* __restrict__ values, int64_t* __restrict__ indices, const Args a) {
  using C = decltype(key(T{}));
  __shared__ C warp_v[kTopKRowThreads / 32];
  __shared__ int64_t warp_i[kTopKRowThreads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const RowAt at = row_at(a, row);
    const T* base = x + at.in;
    C prev_v{};
    int64_t prev_i = -1;
    for (int64_t j = 0; j < a.k; ++j) {
      C best_v{};
      int64_t best_i = -1;
      for (int64_t e = threadIdx.x; e < a.n; e += blockDim.x) {
        const C v = key(base[e * a.inner]);
        if (after_prev(prev_v, prev_i, v, e, a.largest)) keep_better(best_v, best_i, v, e, a.largest);
      }
      for (int d = 16; d > 0; d >>= 1)
        keep_better(best_v, best_i, __shfl_down_sync(0xffffffffu, best_v, d), __shfl_down_sync(0xffffffffu, best_i, d),
                    a.largest);
      if (lane == 0) warp_v[warp] = best_v, warp_i[warp] = best_i;
      __syncthreads();
      best_v = warp_v[0];
      best_i = warp_i[0];
      for (int w = 1; w < warps; ++w) keep_better(best_v, best_i, warp_v[w], warp_i[w], a.largest);
      __syncthreads();  // warp_v is written again next round
      if (threadIdx.x == 0) store_pick(base, values, indices, a, at.out, j, best_i);
      prev_v = best_v;
      prev_i = best_i;
    }
  }
}

template <typename T>
void launch_typed(const TopKPlan& p, const void* x, void* values, int64_t* indices, cudaStream_t s) {
  const Args a{p.outer * p.inner, p.n, p.inner, p.k, p.largest};
  const auto* xt = static_cast<const T*>(x);
  auto* vt = static_cast<T*>(values);
  if (topk_block_a_row(p)) {
    const int threads = p.n >= 8192 ? kTopKRowThreads : 256;
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(a.rows, 65535));
    topk_row_kernel<T><<<blocks, threads, 0, s>>>(xt, vt, indices, a);
    check_launch("topk_row_kernel");
  } else {
    topk_kernel<T><<<grid_for(a.rows), kBlock, 0, s>>>(xt, vt, indices, a);
    check_launch("topk_kernel");
  }
}

}  // namespace

bool launch_topk(const TopKPlan& p, const void* x, void* values, int64_t* indices, cudaStream_t s) {
  if (p.outer * p.inner == 0 || p.k == 0) return true;
  switch (p.dtype) {
    case DType::Float32:
      launch_typed<float>(p, x, values, indices, s);
      return true;
    case DType::Float16:
      launch_typed<__half>(p, x, values, indices, s);
      return true;
    case DType::BFloat16:
      launch_typed<__nv_bfloat16>(p, x, values, indices, s);
      return true;
    case DType::Float64:
      launch_typed<double>(p, x, values, indices, s);
      return true;
    case DType::Int32:
      launch_typed<int32_t>(p, x, values, indices, s);
      return true;
    case DType::Int64:
      launch_typed<int64_t>(p, x, values, indices, s);
      return true;
    default:
      return false;
  }
}

}  // namespace fusec::cuda
