// What the TMA-fed wgmma GEMMs share (hgemm_tma_sm90a.cu, hgemm_pingpong_sm90a.cu): the mbarrier
// and tensor-map copy instructions, and the host's tensor-map encoding. Included by _sm90a.cu
// files alone.
#pragma once
#include <cuda.h>
#include <cudaTypedefs.h>

#include <cstdint>

#include "backend/cuda/ops/gemm/hgemm_wgmma.cuh"

namespace fusec::cuda::wgmma_gemm {

// ---- mbarriers and tensor-map copies -------------------------------------------------------------

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
#ifdef FUSEC_HGEMM_DEVICE
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
#endif
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
#ifdef FUSEC_HGEMM_DEVICE
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
#endif
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
#ifdef FUSEC_HGEMM_DEVICE
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
#endif
}
// Waits until the barrier's phase of this parity has completed.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
#ifdef FUSEC_HGEMM_DEVICE
  uint32_t done = 0;
  do {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(bar), "r"(parity)
                 : "memory");
  } while (!done);
#endif
}
// The box at (c0, c1) of a 2-D tensor map (c0 along the contiguous dim) into shared memory at dst;
// the copy engine counts its bytes into barrier bar.
__device__ __forceinline__ void tma_load(uint32_t dst, const CUtensorMap* map, int c0, int c1, uint32_t bar) {
#ifdef FUSEC_HGEMM_DEVICE
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
#endif
}

// Arms ring slot s's "full" barrier (at address bar) with the slot's bytes and loads k-slice kt of
// the 128 x BN tile at (m0, n0) into it: A's 128 rows of 64 k, and B's BN rows ([N,K]) or its BN
// columns as BN / 64 blocks of 64 k-rows ([K,N], N-major). Boxes count whole, zero-filled parts
// included.
template <int BN, bool TRANS_B>
__device__ __forceinline__ void load_slice(uint32_t sA, uint32_t sB, int s, uint32_t bar, const CUtensorMap* map_a,
                                           const CUtensorMap* map_b, int m0, int n0, int kt) {
  constexpr int kStageA = kBM * kRowBytes, kStageB = BN * kRowBytes;
  mbar_expect_tx(bar, kStageA + kStageB);
  const int k0 = kt * kBK;
  tma_load(sA + s * kStageA, map_a, k0, m0, bar);
  if constexpr (TRANS_B) {
    tma_load(sB + s * kStageB, map_b, k0, n0, bar);
  } else {
#pragma unroll
    for (int j = 0; j < BN / 64; ++j) tma_load(sB + s * kStageB + j * (kBK * kRowBytes), map_b, n0 + 64 * j, k0, bar);
  }
}

// cuTensorMapEncodeTiled through the runtime's driver entry point: the backend links no libcuda
// (CMakeLists.txt), so that it loads where there is no driver. Null where there is none.
inline PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      return PFN_cuTensorMapEncodeTiled_v12000{nullptr};
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

// A row-major [outer, inner] matrix of 2-byte elements with row stride ld, read in boxes of
// box_outer rows of 64 elements (128 bytes, the swizzle's row).
inline bool make_map(CUtensorMap* map, const void* p, bool bf16, int64_t inner, int64_t outer, int64_t ld,
                     uint32_t box_outer) {
  const auto encode = encode_tiled();
  if (!encode) return false;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(inner), static_cast<cuuint64_t>(outer)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(ld) * 2};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(kBK), box_outer};
  const cuuint32_t steps[2] = {1, 1};
  return encode(map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, const_cast<void*>(p),
                dims, strides, box, steps, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace fusec::cuda::wgmma_gemm
