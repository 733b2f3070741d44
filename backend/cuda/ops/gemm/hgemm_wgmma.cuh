// The device code both wgmma GEMM kernels share (hgemm_sm90a.cu, whose threads copy the operands
// with cp.async, and hgemm_tma_sm90a.cu, whose producer warp loads them with TMA): the warpgroup
// instructions, the shared-memory operand layout they read, and the epilogue that stages the
// accumulators in shared memory and stores the tile. Included by _sm90a.cu files alone.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/core/common.cuh"
#include "backend/cuda/ops/elementwise/epilogue_act.cuh"
#include "backend/cuda/ops/gemm/hgemm.cuh"

namespace fusec::cuda::wgmma_gemm {

// kThreads: the threads that compute (two warpgroups of 64 rows each) and run the epilogue.
constexpr int kBM = 128, kBK = 64, kThreads = 256;
constexpr int kRowBytes = kBK * 2;  // one swizzled row: 64 elements of 2 bytes

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FUSEC_HGEMM_DEVICE 1
#endif

// ---- the order tiles are taken in ---------------------------------------------------------------

// CTAs start in about the order of their index, so tiles with neighbouring indices run at the same
// time and share what they load through L2. In row-major order (every tile of one tile row, then
// the next) a wave of CTAs covers a row or two of tiles and so reads all of B: where B is larger
// than L2 (gate and up as one product, 64 MB at Llama-3.2-1B's sizes), each wave read it from
// memory again. Tiles go instead in bands of group_m tile rows, down the band's rows first, so that
// a wave covers a block of about group_m x (wave / group_m) tiles whose A rows and B columns are
// about as many bytes each (group_m * BM ~ (wave / group_m) * BN): the fewest bytes per wave.
struct TileOrder {
  int tiles_m = 1, tiles_n = 1, group_m = 1;
};

/// The order for an M x N product in BM x BN tiles, `wave` CTAs resident at once.
inline TileOrder tile_order(int64_t M, int64_t N, int bm, int bn, int wave) {
  TileOrder o;
  o.tiles_m = static_cast<int>((M + bm - 1) / bm);
  o.tiles_n = static_cast<int>((N + bn - 1) / bn);
  const double g = std::sqrt(static_cast<double>(std::max(wave, 1)) * bn / bm);
  o.group_m = std::clamp(static_cast<int>(g + 0.5), 1, std::max(o.tiles_m, 1));
  return o;
}

/// The CTAs an SM of the current device holds at once times its SMs, or `fallback` where the
/// device cannot be asked.
inline int resident_ctas(int per_sm, int fallback = 132) {
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || sms <= 0) {
    cudaGetLastError();
    return fallback;
  }
  return sms * per_sm;
}

/// Tile t of the order: its tile row (x) and tile column (y).
__device__ __forceinline__ int2 tile_at(const TileOrder& o, int t) {
  const int band = o.group_m * o.tiles_n;
  const int first = t / band * o.group_m, r = t % band;
  const int rows = min(o.group_m, o.tiles_m - first);
  return make_int2(first + r % rows, r / rows);
}

// ---- wgmma and its shared-memory operand descriptors -------------------------------------------

#define FUSEC_WGMMA_R64                                                              \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "           \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define FUSEC_WGMMA_R128                                                                   \
  FUSEC_WGMMA_R64                                                                          \
  ", "                                                                                     \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "       \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "       \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, " \
  "%111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define FUSEC_D8(i)                                                                                           \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
      "+f"(d[i + 7])
#define FUSEC_D64 \
  FUSEC_D8(0), FUSEC_D8(8), FUSEC_D8(16), FUSEC_D8(24), FUSEC_D8(32), FUSEC_D8(40), FUSEC_D8(48), FUSEC_D8(56)
#define FUSEC_D128                                                                                               \
  FUSEC_D64, FUSEC_D8(64), FUSEC_D8(72), FUSEC_D8(80), FUSEC_D8(88), FUSEC_D8(96), FUSEC_D8(104), FUSEC_D8(112), \
      FUSEC_D8(120)

// One m64 x BN x k16 product into d (BN / 2 fp32 per thread). TB: B is N-major (read transposed).
template <int BN, bool BF16, int TB>
__device__ __forceinline__ void wgmma(float* d, uint64_t a, uint64_t b) {
#ifdef FUSEC_HGEMM_DEVICE
  if constexpr (BN == 128 && !BF16)
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\nwgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {" FUSEC_WGMMA_R64
        "}, %64, %65, p, 1, 1, 0, %66;\n}\n"
        : FUSEC_D64
        : "l"(a), "l"(b), "n"(TB));
  else if constexpr (BN == 128)
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\nwgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{" FUSEC_WGMMA_R64 "}, %64, %65, p, 1, 1, 0, %66;\n}\n"
        : FUSEC_D64
        : "l"(a), "l"(b), "n"(TB));
  else if constexpr (!BF16)
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\nwgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {" FUSEC_WGMMA_R128
        "}, %128, %129, p, 1, 1, 0, %130;\n}\n"
        : FUSEC_D128
        : "l"(a), "l"(b), "n"(TB));
  else
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\nwgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
        "{" FUSEC_WGMMA_R128 "}, %128, %129, p, 1, 1, 0, %130;\n}\n"
        : FUSEC_D128
        : "l"(a), "l"(b), "n"(TB));
#endif
}

// The m64n128k16 product with each descriptor given as its two 32-bit words: a caller that keeps
// the high words (stride and swizzle) fixed moves through its slots with one 32-bit add per
// operand, where a 64-bit descriptor took a 64-bit add, moves and a carry for each.
template <bool BF16, int TB>
__device__ __forceinline__ void wgmma128_words(float* d, uint32_t a_lo, uint32_t a_hi, uint32_t b_lo, uint32_t b_hi) {
#ifdef FUSEC_HGEMM_DEVICE
  if constexpr (!BF16)
    asm volatile(
        "{\n.reg .pred p;\n.reg .b64 da, db;\nmov.b64 da, {%64, %65};\nmov.b64 db, {%66, %67};\n"
        "setp.ne.b32 p, 1, 0;\nwgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {" FUSEC_WGMMA_R64
        "}, da, db, p, 1, 1, 0, %68;\n}\n"
        : FUSEC_D64
        : "r"(a_lo), "r"(a_hi), "r"(b_lo), "r"(b_hi), "n"(TB));
  else
    asm volatile(
        "{\n.reg .pred p;\n.reg .b64 da, db;\nmov.b64 da, {%64, %65};\nmov.b64 db, {%66, %67};\n"
        "setp.ne.b32 p, 1, 0;\nwgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" FUSEC_WGMMA_R64
        "}, da, db, p, 1, 1, 0, %68;\n}\n"
        : FUSEC_D64
        : "r"(a_lo), "r"(a_hi), "r"(b_lo), "r"(b_hi), "n"(TB));
#endif
}

// A shared-memory matrix descriptor with the 128-byte swizzle. For a K-major operand, stride =
// 1024 bytes between 8-row groups (lead unused); for an N-major one, lead = bytes between
// 64-column blocks and stride = 1024 bytes between 8-k-row groups.
__device__ __forceinline__ uint64_t smem_desc(const void* p, uint32_t lead, uint32_t stride) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | static_cast<uint64_t>((lead >> 4) & 0x3FFF) << 16 |
         static_cast<uint64_t>((stride >> 4) & 0x3FFF) << 32 | uint64_t{1} << 62;
}

__device__ __forceinline__ void wgmma_fence() {
#ifdef FUSEC_HGEMM_DEVICE
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#ifdef FUSEC_HGEMM_DEVICE
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
#ifdef FUSEC_HGEMM_DEVICE
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
// Keeps the compiler from moving accumulator reads or writes across an asynchronous wgmma.
template <int R>
__device__ __forceinline__ void fence_regs(float* d) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// ---- copies -------------------------------------------------------------------------------------

// The tensor cores read shared memory through the async proxy; the copies wrote it through the
// generic one.
__device__ __forceinline__ void fence_proxy_async() {
#ifdef FUSEC_HGEMM_DEVICE
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

__device__ __forceinline__ uint32_t swz(int row, int chunk) { return row * kRowBytes + ((chunk ^ (row & 7)) << 4); }

constexpr int kEpiPad = 4;  // fp32 words after each staged output row: fewer bank conflicts

// Marks store_tile's generic instance: the activation chosen at run time.
constexpr Act kAnyAct = static_cast<Act>(-1);

// The epilogue's second step: each thread owns one group of 8 columns of the staged fp32 tile
// (kThreads is a multiple of the BN / 8 groups) and walks down its rows; per row it adds bias and
// residual, applies the activation, and stores 16 bytes. The bias is read once per tile. Rows go 4
// at a time with no branch between their loads and their activations, so that the compiler
// interleaves 32 independent activations: a row at a time, behind a branch per row, left each
// activation's dependent chain exposed. The staged tile is read with ld.shared at its shared-memory
// address `out` (through the realigned generic pointer it compiled to generic loads). Reading a
// later row's residual before an earlier row's store is safe when the residual is the output
// itself (C = R): the rows differ.
// GATED (HgemmArgs::gated_n): the tile's left half is the gate of BN / 2 outputs and its right half
// their value, so a thread reads both halves of its 8 outputs and stores act(gate) · value; there
// is no residual.
// ROWS x BN is the staged tile, NT the threads storing it (tid counts from 0 among them).
template <Act A, typename T, int BN, int ROWS = kBM, int NT = kThreads, bool GATED = false>
__device__ __forceinline__ void store_tile(const HgemmArgs& g, uint32_t out, int m0, int n0, int tid) {
  constexpr int kLd = BN + kEpiPad, kCols = GATED ? BN / 2 : BN, kGroups = kCols / 8;
  static_assert(NT % kGroups == 0, "a thread's column group must not change between its rows");
  constexpr int kStep = NT / kGroups, kRows = ROWS / kStep, kU = kRows < 4 ? kRows : 4;
  static_assert(kRows % kU == 0, "rows are taken kU at a time");
  ActParams act = g.act;
  if constexpr (A != kAnyAct) act.act = A;
  const int c = (tid % kGroups) * 8, r0 = tid / kGroups;
  const int col = GATED ? n0 / 2 + c : n0 + c;
  if (col >= (GATED ? g.gated_n : g.N)) return;  // a multiple of 8: a group of 8 is all in or all out
  const T* res = GATED ? nullptr : static_cast<const T*>(g.residual);
  T* C = static_cast<T*>(g.C);
  float b[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f}, bv[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  if (g.bias) load_vec<T, 8>(static_cast<const T*>(g.bias) + n0 + c, b);
  if (GATED && g.bias) load_vec<T, 8>(static_cast<const T*>(g.bias) + n0 + c + kCols, bv);
  for (int i0 = 0; i0 < kRows && m0 + r0 + i0 * kStep < g.M; i0 += kU) {
    float v[kU][8], w[kU][8];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int r = r0 + (i0 + u) * kStep;
      const uint32_t at = out + uint32_t(r * kLd + c) * 4;
      asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                   : "=f"(v[u][0]), "=f"(v[u][1]), "=f"(v[u][2]), "=f"(v[u][3])
                   : "r"(at)
                   : "memory");
      asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                   : "=f"(v[u][4]), "=f"(v[u][5]), "=f"(v[u][6]), "=f"(v[u][7])
                   : "r"(at + 16)
                   : "memory");
#pragma unroll
      for (int e = 0; e < 8; ++e) v[u][e] += b[e];
      if constexpr (GATED) {
        asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                     : "=f"(w[u][0]), "=f"(w[u][1]), "=f"(w[u][2]), "=f"(w[u][3])
                     : "r"(at + kCols * 4)
                     : "memory");
        asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                     : "=f"(w[u][4]), "=f"(w[u][5]), "=f"(w[u][6]), "=f"(w[u][7])
                     : "r"(at + kCols * 4 + 16)
                     : "memory");
#pragma unroll
        for (int e = 0; e < 8; ++e) w[u][e] += bv[e];
      } else if (res && m0 + r < g.M) {
        float add[8];
        load_vec<T, 8>(res + int64_t(m0 + r) * g.ldr + col, add);
#pragma unroll
        for (int e = 0; e < 8; ++e) v[u][e] += add[e];
      }
    }
#pragma unroll
    for (int u = 0; u < kU; ++u)
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        v[u][e] = apply_act(v[u][e], act);
        if constexpr (GATED) v[u][e] *= w[u][e];
      }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int row = m0 + r0 + (i0 + u) * kStep;
      if (row < g.M) store_vec<T, 8>(C + int64_t(row) * g.ldc + col, v[u]);
    }
  }
}

// One k-slice's products from the operand slots of `stage`, added into acc (BN / 2 per thread);
// returns once the previous slice's products are done, so that its slots may be refilled. The
// caller has made the slice's operands visible to the tensor cores.
template <int BN, bool BF16, bool TRANS_B>
__device__ __forceinline__ void slice_products(float* acc, uint64_t da0, uint64_t db0, int stage) {
  constexpr int kAcc = BN / 2, kStageA = kBM * kRowBytes, kStageB = BN * kRowBytes;
  fence_regs<kAcc>(acc);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kBK / 16; ++kk) {
    const uint64_t da = da0 + ((stage * kStageA + kk * 32) >> 4);
    const uint64_t db = db0 + ((stage * kStageB + (TRANS_B ? kk * 32 : kk * 16 * kRowBytes)) >> 4);
    wgmma<BN, BF16, TRANS_B ? 0 : 1>(acc, da, db);
  }
  wgmma_commit();
  wgmma_wait<1>();
  fence_regs<kAcc>(acc);
}

/// Calls launch.template operator()<BF16, TRANS_B>() for a's storage type and weight layout: each
/// kernel instance is compiled for one of the four.
template <typename Launch>
bool by_operands(const HgemmArgs& a, Launch&& launch) {
  if (a.bf16) return a.trans_b ? launch.template operator()<true, true>() : launch.template operator()<true, false>();
  return a.trans_b ? launch.template operator()<false, true>() : launch.template operator()<false, false>();
}

// The epilogue's first step: the accumulators of a warpgroup's 64 x BN block go to shared memory
// as fp32 rows of BN + kEpiPad words (d[4j + 2h + e] is row 16*warp + lane/4 + 8h, column
// 8j + 2*(lane%4) + e of the block). The caller synchronizes the computing threads before (the
// operand slots are free) and after (the tile is whole).
template <int BN>
__device__ __forceinline__ void stage_acc(const float* acc, float* out, int tid) {
  constexpr int kLd = BN + kEpiPad;
  const int wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32;
  const int r0 = wg * 64 + warp * 16 + lane / 4;
#pragma unroll
  for (int j = 0; j < BN / 8; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      *reinterpret_cast<float2*>(out + (r0 + 8 * h) * kLd + j * 8 + 2 * (lane % 4)) =
          make_float2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
}

// The epilogue's second step over the staged tile at shared address `out`: one copy of the loop
// per common activation, so that its formula is inlined without the per-element switch (which,
// with the conversions, was most of the epilogue's instructions).
template <typename T, int BN, int ROWS = kBM, int NT = kThreads, bool GATED = false>
__device__ __forceinline__ void store_staged(const HgemmArgs& g, uint32_t out, int m0, int n0, int tid) {
  switch (g.act.act) {
    case Act::Gelu:
      return store_tile<Act::Gelu, T, BN, ROWS, NT, GATED>(g, out, m0, n0, tid);
    case Act::SiLU:
      return store_tile<Act::SiLU, T, BN, ROWS, NT, GATED>(g, out, m0, n0, tid);
    case Act::GeluTanh:
      return store_tile<Act::GeluTanh, T, BN, ROWS, NT, GATED>(g, out, m0, n0, tid);
    case Act::Sigmoid:
      if constexpr (!GATED) return store_tile<Act::Sigmoid, T, BN, ROWS, NT>(g, out, m0, n0, tid);
      [[fallthrough]];
    case Act::None:
      if constexpr (!GATED) return store_tile<Act::None, T, BN, ROWS, NT>(g, out, m0, n0, tid);
      [[fallthrough]];
    default:
      return store_tile<kAnyAct, T, BN, ROWS, NT, GATED>(g, out, m0, n0, tid);
  }
}

}  // namespace fusec::cuda::wgmma_gemm
