// The persistent ping-pong wgmma GEMM (hgemm_tma.h). Compiled for sm_90a only, like
// hgemm_sm90a.cu.
//
// In the other wgmma kernels a CTA's tensor cores idle through its own epilogue, and with the
// activation inside (an erf-GELU and its conversions: some 20 instructions an element) that
// epilogue is a large share of a short-K product: the transformers' first MLP layers (K = 768)
// spend about as long in it as in the products. Two CTAs on an SM overlap one's epilogue with the
// other's products, but each then has room for only 3 slices in flight, too few to hide the
// loads' latency from L2 once the other CTA is in its epilogue and this one has the tensor cores
// alone.
//
// Here one CTA per SM walks a static list of 128 x 128 tiles (tile blockIdx.x, then every
// gridDim.x-th). Each of its two computing warpgroups takes every other tile of the list whole
// (two m64n128 products per k16 step, 128 fp32 accumulators a thread), so that while one stores
// its tile the other multiplies. One producer thread loads the tiles' k-slices in list order with
// TMA into a ring of 4 slots shared by both warpgroups, across tile boundaries and through the
// epilogues; a slot's "full" barrier counts its bytes in, its "empty" barrier the four warps of
// the warpgroup that read it. The warpgroups take turns, through two more barriers: at the
// tensor cores (a warpgroup starts a tile's products once the other's are issued) and at the one
// staging area of the epilogue (the whole fp32 tile, then bias, residual, activation and
// 16-byte stores: hgemm_wgmma.cuh's store_tile).
#include <cstdint>
#include <type_traits>

#include "backend/cuda/ops/gemm/hgemm_tma.cuh"
#include "backend/cuda/ops/gemm/hgemm_tma.h"
#include "backend/cuda/ops/gemm/hgemm_wgmma.cuh"

namespace fusec::cuda {

namespace {

using namespace wgmma_gemm;

constexpr int kBN = 128, kStages = 4;
// The producer is a whole warpgroup (one thread of it issues the copies) so that registers can
// move between warpgroups: setmaxnreg acts on whole warpgroups.
constexpr int kGroups = 2, kProducer = kGroups * 128, kBlock = kProducer + 128;
constexpr int kStageA = kBM * kRowBytes, kStageB = kBN * kRowBytes;
constexpr int kStagedBytes = kBM * (kBN + kEpiPad) * 4;  // the staged fp32 tile, one for both warpgroups
constexpr int kRing = kStages * (kStageA + kStageB);
constexpr int kSmemBytes = kRing + kStagedBytes + (2 * kStages + kGroups + 1) * 8 + 1024;
static_assert(kSmemBytes <= 227 * 1024, "one CTA per SM must fit");

__device__ __forceinline__ void group_sync(int group) {
#ifdef FUSEC_HGEMM_DEVICE
  asm volatile("bar.sync %0, 128;\n" ::"r"(2 + group) : "memory");
#endif
}

// The 128 accumulators stay live through the epilogue, more than the 168 registers a thread of 384
// gets: the producer warpgroup gives most of its registers to the computing ones (40 + 2 x 232
// per thread of each warpgroup, 65536 in all).
// GATED (HgemmArgs::gated_n): each 128-column tile is a whole gated block pair (gated_layout.h),
// which the epilogue gates as store_tile describes.
template <bool BF16, bool TRANS_B, bool GATED>
__global__ void __launch_bounds__(kBlock, 1)
    hgemm_pingpong_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                          const HgemmArgs g, const TileOrder order) {
#ifdef FUSEC_HGEMM_DEVICE
  using T = std::conditional_t<BF16, __nv_bfloat16, __half>;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t sA = base, sB = base + kStages * kStageA, staged = base + kRing;
  const uint32_t full = staged + kStagedBytes, empty = full + kStages * 8, turn = empty + kStages * 8;
  const uint32_t freed = turn + kGroups * 8;

  const int tid = threadIdx.x;
  const int tiles = order.tiles_m * order.tiles_n;
  const int kt_count = (g.K + kBK - 1) / kBK;
  if (tid == kProducer) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full + 8 * s, 1);
      mbar_init(empty + 8 * s, 4);  // the reading warpgroup's warps
    }
    for (int w = 0; w < kGroups; ++w) mbar_init(turn + 8 * w, 4);
    // The staged tile has been read by every thread of the warpgroup that staged it: each thread
    // arrives after its own reads, so that the next warpgroup's stores are ordered after each of
    // them, not after one lane's arrival behind a named barrier (which compute-sanitizer's
    // racecheck does not take as ordering the other threads' reads).
    mbar_init(freed, 128);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  if (tid >= kProducer) {  // the producer warpgroup: one thread issues every copy
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
    if (tid == kProducer) {
      int pos = 0;  // the slice's place in the ring's sequence
      for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        const int2 tile = tile_at(order, t);
        const int m0 = tile.x * kBM, n0 = tile.y * kBN;
        for (int kt = 0; kt < kt_count; ++kt, ++pos) {
          const int s = pos % kStages;
          if (pos >= kStages) mbar_wait(empty + 8 * s, (pos / kStages - 1) & 1);  // the slot's last round is read
          load_slice<kBN, TRANS_B>(sA, sB, s, full + 8 * s, &map_a, &map_b, m0, n0, kt);
        }
      }
    }
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
  const int group = tid / 128, lane = tid % 32;
  float* const out = reinterpret_cast<float*>(smem + kRing);
  uint8_t* const sB_ptr = smem + kStages * kStageA;
  // The descriptors' words (smem_desc): the high word is the same for every operand; the low word
  // adds 16-byte units to the slot's address.
  const uint64_t da0 = smem_desc(smem, 16, 1024);
  const uint64_t db0 = TRANS_B ? smem_desc(sB_ptr, 16, 1024) : smem_desc(sB_ptr, kBK * kRowBytes, 1024);
  const uint32_t a_lo0 = static_cast<uint32_t>(da0), b_lo0 = static_cast<uint32_t>(db0);
  const uint32_t hi = static_cast<uint32_t>(da0 >> 32);
  float acc[2][64];
  // This warpgroup's tiles: the list's entries group, group + 2, ...; entry i's slices are at ring
  // positions i * kt_count onwards. A barrier's parity names its phase only one phase ahead, so a
  // warpgroup starts waiting on its tile's slices once the other has waited on all of the tile
  // before (turn[group] counts those), which is also what makes them take turns at the tensor
  // cores: warpgroup 0 starts, then each starts a tile when the other's products are issued.
  for (int i = group, t = blockIdx.x + group * gridDim.x; t < tiles; i += 2, t += 2 * gridDim.x) {
    if (i > 0) mbar_wait(turn + 8 * group, ((i - 1) / 2) & 1);
    const int2 tile = tile_at(order, t);
    const int m0 = tile.x * kBM, n0 = tile.y * kBN;
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int r = 0; r < 64; ++r) acc[h][r] = 0.0f;
    const int pos0 = i * kt_count;
    int s = pos0 % kStages, phase = pos0 / kStages & 1, prev = 0;
    for (int kt = 0; kt < kt_count; ++kt) {
      mbar_wait(full + 8 * s, phase);
      fence_regs<64>(acc[0]);
      fence_regs<64>(acc[1]);
      wgmma_fence();
      const uint32_t a_lo = a_lo0 + s * (kStageA >> 4), b_lo = b_lo0 + s * (kStageB >> 4);
#pragma unroll
      for (int kk = 0; kk < kBK / 16; ++kk) {
        const uint32_t b = b_lo + (TRANS_B ? kk * 2 : kk * (16 * kRowBytes >> 4));
#pragma unroll
        for (int h = 0; h < 2; ++h)
          wgmma128_words<BF16, TRANS_B ? 0 : 1>(acc[h], a_lo + h * (64 * kRowBytes >> 4) + kk * 2, hi, b, hi);
      }
      wgmma_commit();
      wgmma_wait<1>();  // the previous slice's products are done: its slot may be refilled
      fence_regs<64>(acc[0]);
      fence_regs<64>(acc[1]);
      if (kt > 0 && lane == 0) mbar_arrive(empty + 8 * prev);
      prev = s;
      if (++s == kStages) {
        s = 0;
        phase ^= 1;
      }
    }
    if (lane == 0) mbar_arrive(turn + 8 * (1 - group));  // the other warpgroup's turn
    wgmma_wait<0>();
    fence_regs<64>(acc[0]);
    fence_regs<64>(acc[1]);
    if (lane == 0) mbar_arrive(empty + 8 * prev);

    // The tiles' epilogues take turns at the staging area as their products did at the tensor
    // cores: entry i waits for entry i - 1's to have stored its tile. Staging the whole tile first
    // frees the accumulators' registers for the activations' interleaving.
    if (i > 0) mbar_wait(freed, (i - 1) & 1);
#pragma unroll
    for (int h = 0; h < 2; ++h) stage_acc<kBN>(acc[h], out, h * 128 + tid % 128);
    group_sync(group);
    store_staged<T, kBN, kBM, 128, GATED>(g, staged, m0, n0, tid % 128);
    mbar_arrive(freed);
  }
#endif
}

template <bool BF16, bool TRANS_B, bool GATED = false>
bool launch_one(const HgemmArgs& a, cudaStream_t s) {
  auto kernel = hgemm_pingpong_kernel<BF16, TRANS_B, GATED>;
  static const cudaError_t attr = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
  if (attr != cudaSuccess) return false;
  const int64_t tiles = (a.M + kBM - 1) / kBM * ((a.N + kBN - 1) / kBN);
  if (tiles > (int64_t{1} << 30)) return false;
  const int sms = resident_ctas(1, 0);
  if (sms <= 0) return false;
  CUtensorMap map_a, map_b;
  if (!make_map(&map_a, a.A, BF16, a.K, a.M, a.lda, kBM)) return false;
  if (!(TRANS_B ? make_map(&map_b, a.B, BF16, a.K, a.N, a.ldb, kBN)
                : make_map(&map_b, a.B, BF16, a.N, a.K, a.ldb, kBK)))
    return false;
  const int grid = static_cast<int>(tiles < sms ? tiles : sms);
  kernel<<<grid, kBlock, kSmemBytes, s>>>(map_a, map_b, a, tile_order(a.M, a.N, kBM, kBN, grid));
  return true;
}

}  // namespace

bool launch_hgemm_pingpong_128x128(const HgemmArgs& a, cudaStream_t s) {
  if (a.gated_n > 0) {  // a tile is a gate block and its value block; the packed weights are N-major
    static_assert(kBN == 2 * kGatedBlock, "a gated tile is one block pair");
    if (a.trans_b) return false;
    return a.bf16 ? launch_one<true, false, true>(a, s) : launch_one<false, false, true>(a, s);
  }
  return by_operands(a, [&]<bool BF16, bool TRANS_B>() { return launch_one<BF16, TRANS_B>(a, s); });
}

}  // namespace fusec::cuda
