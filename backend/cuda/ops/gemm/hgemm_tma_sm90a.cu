// The warp-specialized wgmma GEMM (hgemm_tma.h): one producer warp loads the operands with TMA,
// two warpgroups compute. Compiled for sm_90a only, like hgemm_sm90a.cu.
//
// In the cp.async kernel every thread computes its copies' addresses and bounds and the CTA meets
// at two barriers per k-slice; on the transformers' GEMMs that kept it near half of cuBLASLt's
// speed. Here one thread of the producer warp issues a tensor-map copy per operand and slice into a
// ring of STAGES slots, each slot with two mbarriers: "full" (the copy engine counts the slot's
// bytes in) and "empty" (every computing thread arrives once its products no longer read the
// slot). The computing warpgroups wait only on "full", keep one group of products in flight, and
// never meet until the epilogue.
//
// The tensor maps use the 128-byte swizzle, which lays each 64-element k-row out exactly as the
// cp.async kernel does (chunk c of row r at c ^ (r % 8), hgemm_wgmma.cuh), so both kernels share
// the wgmma descriptors and the epilogue. Out-of-range rows, columns and k are filled with zeros by
// the copy engine; the epilogue stores only rows and columns in range.
#include <cstdint>
#include <type_traits>

#include "backend/cuda/ops/gemm/hgemm_tma.cuh"
#include "backend/cuda/ops/gemm/hgemm_tma.h"
#include "backend/cuda/ops/gemm/hgemm_wgmma.cuh"

namespace fusec::cuda {

namespace {

using namespace wgmma_gemm;

constexpr int kBlock = kThreads + 32;  // the computing warpgroups, then the producer warp

// The operand slots or the staged fp32 tile, whichever is larger, then the 2 x STAGES barriers,
// + slack to align the slots to 1024 bytes (the swizzle's period).
template <int BN, int STAGES>
constexpr int region_bytes() {
  const int operands = STAGES * (kBM + BN) * kRowBytes, staged = kBM * (BN + kEpiPad) * 4;
  return operands > staged ? operands : staged;
}
template <int BN, int STAGES>
constexpr int smem_bytes() {
  return region_bytes<BN, STAGES>() + 2 * STAGES * 8 + 1024;
}

template <int BN, int STAGES, bool BF16, bool TRANS_B, int MIN_BLOCKS, bool GATED>
__global__ void __launch_bounds__(kBlock, MIN_BLOCKS)
    hgemm_tma_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                     const HgemmArgs g, const TileOrder order) {
#ifdef FUSEC_HGEMM_DEVICE
  using T = std::conditional_t<BF16, __nv_bfloat16, __half>;
  constexpr int kAcc = BN / 2;
  constexpr int kStageA = kBM * kRowBytes;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t sA = base, sB = base + STAGES * kStageA;
  const uint32_t full = base + region_bytes<BN, STAGES>(), empty = full + STAGES * 8;

  const int tid = threadIdx.x;
  const int2 tile = tile_at(order, blockIdx.x);
  const int m0 = tile.x * kBM, n0 = tile.y * BN;
  const int kt_count = (g.K + kBK - 1) / kBK;
  if (tid == kThreads) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(full + 8 * s, 1);
      mbar_init(empty + 8 * s, kThreads);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  if (tid >= kThreads) {  // the producer warp: one thread issues every copy
    if (tid == kThreads) {
      for (int kt = 0; kt < kt_count; ++kt) {
        const int s = kt % STAGES;
        if (kt >= STAGES) mbar_wait(empty + 8 * s, (kt / STAGES - 1) & 1);  // the slot's last round is read
        load_slice<BN, TRANS_B>(sA, sB, s, full + 8 * s, &map_a, &map_b, m0, n0, kt);
      }
    }
    return;
  }

  const int wg = tid / 128;
  float acc[kAcc];
#pragma unroll
  for (int i = 0; i < kAcc; ++i) acc[i] = 0.0f;
  const uint64_t da0 = smem_desc(smem + wg * 64 * kRowBytes, 16, 1024);
  uint8_t* const sB_ptr = smem + STAGES * kStageA;
  const uint64_t db0 = TRANS_B ? smem_desc(sB_ptr, 16, 1024) : smem_desc(sB_ptr, kBK * kRowBytes, 1024);
  for (int kt = 0; kt < kt_count; ++kt) {
    const int s = kt % STAGES;
    mbar_wait(full + 8 * s, (kt / STAGES) & 1);
    slice_products<BN, BF16, TRANS_B>(acc, da0, db0, s);  // then its slot may be refilled
    if (kt > 0) mbar_arrive(empty + 8 * ((kt - 1) % STAGES));
  }
  wgmma_wait<0>();
  fence_regs<kAcc>(acc);

  // The epilogue stages the tile over the operand slots: every copy has landed (each slot's
  // "full" was waited on), and the named barrier (the producer warp has left) waits for both
  // warpgroups' products to be done reading them.
  asm volatile("bar.sync 1, %0;\n" ::"n"(kThreads) : "memory");
  float* out = reinterpret_cast<float*>(smem);
  stage_acc<BN>(acc, out, tid);
  asm volatile("bar.sync 1, %0;\n" ::"n"(kThreads) : "memory");
  store_staged<T, BN, kBM, kThreads, GATED>(g, base, m0, n0, tid);
#endif
}

template <int BN, int STAGES, bool BF16, bool TRANS_B, int MIN_BLOCKS, bool GATED = false>
bool launch_one(const HgemmArgs& a, cudaStream_t s) {
  auto kernel = hgemm_tma_kernel<BN, STAGES, BF16, TRANS_B, MIN_BLOCKS, GATED>;
  constexpr int bytes = smem_bytes<BN, STAGES>();
  static const cudaError_t attr = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (attr != cudaSuccess) return false;
  const TileOrder order = tile_order(a.M, a.N, kBM, BN, resident_ctas(MIN_BLOCKS));
  const int64_t tiles = int64_t{order.tiles_m} * order.tiles_n;
  if (tiles >= (int64_t{1} << 31)) return false;
  CUtensorMap map_a, map_b;
  if (!make_map(&map_a, a.A, BF16, a.K, a.M, a.lda, kBM)) return false;
  if (!(TRANS_B ? make_map(&map_b, a.B, BF16, a.K, a.N, a.ldb, BN) : make_map(&map_b, a.B, BF16, a.N, a.K, a.ldb, kBK)))
    return false;
  kernel<<<static_cast<unsigned>(tiles), kBlock, bytes, s>>>(map_a, map_b, a, order);
  return true;
}

template <int BN, int STAGES, int MIN_BLOCKS>
bool launch_config(const HgemmArgs& a, cudaStream_t s) {
  if (a.gated_n > 0) {  // a gated tile is a whole 128-output block; its weights are N-major
    if constexpr (BN != 2 * kGatedBlock) return false;
    if (a.trans_b) return false;
    return a.bf16 ? launch_one<BN, STAGES, true, false, MIN_BLOCKS, true>(a, s)
                  : launch_one<BN, STAGES, false, false, MIN_BLOCKS, true>(a, s);
  }
  return by_operands(
      a, [&]<bool BF16, bool TRANS_B>() { return launch_one<BN, STAGES, BF16, TRANS_B, MIN_BLOCKS>(a, s); });
}

}  // namespace

bool launch_hgemm_tma_128x128(const HgemmArgs& a, cudaStream_t s) { return launch_config<128, 3, 2>(a, s); }
bool launch_hgemm_tma_128x256(const HgemmArgs& a, cudaStream_t s) { return launch_config<256, 4, 1>(a, s); }

}  // namespace fusec::cuda
