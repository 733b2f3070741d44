#include "backend/cuda/core/common.cuh"
#include "backend/cuda/ops/elementwise/epilogue_act.cuh"
#include "backend/cuda/ops/gemm/gated_layout.h"
#include "backend/cuda/ops/gemm/gated_pass.cuh"

namespace fusec::cuda {

namespace {

constexpr int kAnyAct = -1;  // the activation chosen at run time (an int: see epilogue.cu)

// One pack of V outputs a thread: V gate values and the V value values kGatedBlock columns on, both
// read as 16 bytes where V fills them. A pack never straddles a block (kGatedBlock % V == 0, and
// n % V == 0 where V > 1).
template <typename T, int V, int A>
__global__ void gated_pass_kernel(T* __restrict__ y, const T* __restrict__ p, uint32_t rows, uint32_t packs_per_row,
                                  uint32_t ldp, ActParams a) {
  pdl_wait_then_release();
  if constexpr (A != kAnyAct) a.act = static_cast<Act>(A);
  const uint32_t packs = rows * packs_per_row;
  for (uint32_t q = blockIdx.x * blockDim.x + threadIdx.x; q < packs; q += gridDim.x * blockDim.x) {
    const uint32_t r = q / packs_per_row, j = (q - r * packs_per_row) * V;
    const T* src = p + size_t(r) * ldp + j / kGatedBlock * 2 * kGatedBlock + j % kGatedBlock;
    float g[V], v[V];
    load_vec<T, V>(src, g);
    load_vec<T, V>(src + kGatedBlock, v);
#pragma unroll
    for (int k = 0; k < V; ++k) g[k] = apply_act(g[k], a) * v[k];
    store_vec<T, V>(y + size_t(r) * packs_per_row * V + j, g);
  }
}

template <typename T, int V>
void launch(T* y, const T* p, int64_t rows, int64_t n, ActParams act, cudaStream_t s) {
  void (*kernel)(T*, const T*, uint32_t, uint32_t, uint32_t, ActParams) = gated_pass_kernel<T, V, kAnyAct>;
  if (act.act == Act::SiLU)
    kernel = gated_pass_kernel<T, V, int(Act::SiLU)>;
  else if (act.act == Act::Gelu)
    kernel = gated_pass_kernel<T, V, int(Act::Gelu)>;
  else if (act.act == Act::GeluTanh)
    kernel = gated_pass_kernel<T, V, int(Act::GeluTanh)>;
  const int64_t packs = rows * (n / V);
  launch_pdl("gated_pass_kernel", kernel, dim3(grid_for(packs)), dim3(kBlock), 0, s, y, p, static_cast<uint32_t>(rows),
             static_cast<uint32_t>(n / V), static_cast<uint32_t>(gated_packed_n(n)), act);
}

}  // namespace

bool launch_gated_pass(void* y, const void* p, DType t, int64_t rows, int64_t n, ActParams act, cudaStream_t s) {
  if (rows < 0 || n < 0 || rows * gated_packed_n(n) > INT32_MAX) return false;  // 32-bit indices
  return dispatch_float_storage(t, [&](auto tag) {
    using T = decltype(tag);
    if (rows == 0 || n == 0) return;
    constexpr int V = 16 / sizeof(T);
    if (n % V == 0 && aligned16(y) && aligned16(p))
      launch<T, V>(static_cast<T*>(y), static_cast<const T*>(p), rows, n, act, s);
    else
      launch<T, 1>(static_cast<T*>(y), static_cast<const T*>(p), rows, n, act, s);
  });
}

}  // namespace fusec::cuda
