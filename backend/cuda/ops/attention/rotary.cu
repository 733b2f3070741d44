// Rotary position embedding (rotary.cuh). Memory-bound: each thread loads V values from both
// halves of one head of X and of its cos/sin rows, and writes both halves of Y, so every access
// is a full vector and a head's two halves are read once. Finding a head's table row takes a
// division per dim of the head view, done as 32-bit multiply-shifts (X under 2^31 values; a larger
// X runs on the CPU): with 64-bit divisions Llama's rotation ran below the copy rate.
#include "backend/cuda/ops/attention/rotary.cuh"

#include <type_traits>

#include "backend/cuda/core/common.cuh"
#include "backend/cuda/ops/movement/movement.cuh"

namespace fusec::cuda {

namespace {

/// RotaryArgs' geometry as 32-bit indices and precomputed divisors (every offset < 2^31).
struct RotaryIndex {
  int rank = 0;
  FastDiv per_head;  // vectors of pairs per head
  FastDiv dims[kRotaryMaxRank];
  uint32_t cos_stride[kRotaryMaxRank] = {}, sin_stride[kRotaryMaxRank] = {};
  uint32_t n = 0, head = 0, heads_per_row = 1, rotated_heads = 1;
  bool copy_rest = true;
  FastDiv heads_per_row_div;
};

template <typename T, int V>
__global__ void __launch_bounds__(kBlock)
    rotary_kernel(const __grid_constant__ RotaryArgs a, const __grid_constant__ RotaryIndex q) {
  pdl_wait_then_release();
  const T* x = static_cast<const T*>(a.x);
  const T* cs = static_cast<const T*>(a.cos);
  const T* sn = static_cast<const T*>(a.sin);
  T* y = static_cast<T*>(a.y);
  const uint32_t half = q.head / 2;
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < q.n; i += gridDim.x * blockDim.x) {
    const uint32_t row = q.per_head.div(i);
    const uint32_t j = (i - row * q.per_head.d) * V;
    const uint32_t xo = row * q.head + j;
    float x1[V], x2[V], c1[V], c2[V], s1[V], s2[V], y1[V], y2[V];
    if (q.rotated_heads < q.heads_per_row && row - q.heads_per_row_div.div(row) * q.heads_per_row >= q.rotated_heads) {
      if (q.copy_rest) {
        load_vec<T, V>(x + xo, x1);
        load_vec<T, V>(x + xo + half, x2);
        store_vec<T, V>(y + xo, x1);
        store_vec<T, V>(y + xo + half, x2);
      }
      continue;
    }
    load_vec<T, V>(x + xo, x1);
    load_vec<T, V>(x + xo + half, x2);
    uint32_t co = 0, so = 0, rem = row;
    for (int d = q.rank - 1; d >= 0; --d) {
      const uint32_t quot = q.dims[d].div(rem);
      const uint32_t idx = rem - quot * q.dims[d].d;
      co += idx * q.cos_stride[d];
      so += idx * q.sin_stride[d];
      rem = quot;
    }
    co = co * q.head + j;
    so = so * q.head + j;
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

template <typename T>
void launch_typed(const RotaryArgs& a, cudaStream_t s) {
  const int64_t half = a.head / 2;
  auto fits = [&](int v) {
    const int bytes = v * static_cast<int>(sizeof(T));
    return half % v == 0 && aligned_to(a.x, bytes) && aligned_to(a.y, bytes) && aligned_to(a.cos, bytes) &&
           aligned_to(a.sin, bytes);
  };
  // 32-bit offsets (make_rotary refuses larger X): a table broadcasts to the head view, so its
  // offsets are bounded by X's.
  auto go = [&](auto v_tag) {
    constexpr int V = decltype(v_tag)::value;
    const int64_t n = a.heads * (half / V);
    RotaryIndex q;
    q.rank = a.rank;
    q.per_head = FastDiv(static_cast<uint32_t>(half / V));
    for (int d = 0; d < a.rank; ++d) {
      q.dims[d] = FastDiv(static_cast<uint32_t>(a.dims[d]));
      q.cos_stride[d] = static_cast<uint32_t>(a.cos_stride[d]);
      q.sin_stride[d] = static_cast<uint32_t>(a.sin_stride[d]);
    }
    q.n = static_cast<uint32_t>(n);
    q.head = static_cast<uint32_t>(a.head);
    q.heads_per_row = static_cast<uint32_t>(a.heads_per_row);
    q.rotated_heads = static_cast<uint32_t>(a.rotated_heads);
    q.copy_rest = a.copy_rest;
    q.heads_per_row_div = FastDiv(q.heads_per_row);
    launch_pdl("rotary", rotary_kernel<T, V>, dim3(grid_for(n)), dim3(kBlock), 0, s, a, q);
  };
  constexpr int kWide = 16 / sizeof(T);
  if (fits(kWide))
    go(std::integral_constant<int, kWide>{});
  else if (fits(kWide / 2))
    go(std::integral_constant<int, kWide / 2>{});
  else
    go(std::integral_constant<int, 1>{});
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
