// The wgmma GEMM of hgemm.cuh: compiled for sm_90a only (CMakeLists.txt), so it holds only what
// needs Hopper's warpgroup instructions.
//
// One CTA computes a 128 x BN tile with two warpgroups of 64 rows each. Every thread copies its
// share of the next k-slices with cp.async into a ring of STAGES shared-memory slots while the
// tensor cores work on the current one; the copies write the layout wgmma reads with the 128-byte
// swizzle (16-byte chunk c of row r lands at chunk c ^ (r % 8)), so neither the copies nor the
// tensor cores meet bank conflicts. A is K-major (rows of 64 k, 128 bytes); B as ONNX stores a
// weight, [K,N], is N-major: 64-column blocks of 64 k-rows each, which wgmma reads transposed. A
// weight stored [N,K] (Gemm transB=1) is K-major like A. Out-of-range rows and k-chunks are filled
// with zeros by the copy itself (src-size 0), so ragged edges need no other code; K and N must be
// multiples of 8, as a 16-byte chunk is 8 elements.
//
// The accumulators stay in registers until the epilogue stages them in shared memory as fp32;
// from there every thread adds the bias and the residual to 8 columns, applies the activation and
// rounds once (the CPU reference's FusedMatMul order), and stores 16 bytes.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/core/common.cuh"
#include "backend/cuda/ops/elementwise/epilogue_act.cuh"
#include "backend/cuda/ops/gemm/hgemm.cuh"

namespace fusec::cuda {

namespace {

constexpr int kBM = 128, kBK = 64, kThreads = 256;
constexpr int kRowBytes = kBK * 2;  // one swizzled row: 64 elements of 2 bytes

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FUSEC_HGEMM_DEVICE 1
#endif

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

// The operand slots, or the fp32 output tile the epilogue stages in the same memory, whichever is
// larger, + alignment slack.
template <int BN, int STAGES>
constexpr int smem_bytes() {
  const int operands = STAGES * (kBM + BN) * kRowBytes, staged = kBM * (BN + kEpiPad) * 4;
  return (operands > staged ? operands : staged) + 1024;
}

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
template <Act A, typename T, int BN>
__device__ __forceinline__ void store_tile(const HgemmArgs& g, uint32_t out, int m0, int n0, int tid) {
  constexpr int kLd = BN + kEpiPad, kGroups = BN / 8;
  static_assert(kThreads % kGroups == 0, "a thread's column group must not change between its rows");
  constexpr int kStep = kThreads / kGroups, kRows = kBM / kStep, kU = kRows < 4 ? kRows : 4;
  static_assert(kRows % kU == 0, "rows are taken kU at a time");
  ActParams act = g.act;
  if constexpr (A != kAnyAct) act.act = A;
  const int c = (tid % kGroups) * 8, r0 = tid / kGroups, col = n0 + c;
  if (col >= g.N) return;  // N % 8 == 0: a group of 8 is all in or all out
  const T* res = static_cast<const T*>(g.residual);
  T* C = static_cast<T*>(g.C);
  float b[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  if (g.bias) load_vec<T, 8>(static_cast<const T*>(g.bias) + col, b);
  for (int i0 = 0; i0 < kRows && m0 + r0 + i0 * kStep < g.M; i0 += kU) {
    float v[kU][8];
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
      if (res && m0 + r < g.M) {
        float add[8];
        load_vec<T, 8>(res + int64_t(m0 + r) * g.ldr + col, add);
#pragma unroll
        for (int e = 0; e < 8; ++e) v[u][e] += add[e];
      }
    }
#pragma unroll
    for (int u = 0; u < kU; ++u)
#pragma unroll
      for (int e = 0; e < 8; ++e) v[u][e] = apply_act(v[u][e], act);
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int row = m0 + r0 + (i0 + u) * kStep;
      if (row < g.M) store_vec<T, 8>(C + int64_t(row) * g.ldc + col, v[u]);
    }
  }
}

template <int BN, int STAGES, bool BF16, bool TRANS_B, int MIN_BLOCKS>
__global__ void __launch_bounds__(kThreads, MIN_BLOCKS) hgemm_kernel(const HgemmArgs g) {
#ifdef FUSEC_HGEMM_DEVICE
  using T = std::conditional_t<BF16, __nv_bfloat16, __half>;
  constexpr int kAcc = BN / 2;
  constexpr int kStageA = kBM * kRowBytes, kStageB = BN * kRowBytes;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  uint8_t* sA = smem;
  uint8_t* sB = smem + STAGES * kStageA;

  const int tid = threadIdx.x, wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32;
  const int m0 = blockIdx.y * kBM, n0 = blockIdx.x * BN;
  const int kt_count = (g.K + kBK - 1) / kBK;
  const T* A = static_cast<const T*>(g.A);
  const T* B = static_cast<const T*>(g.B);

  // Every thread copies one 16-byte column chunk of rows r, r + step, r + 2 step, ... of each
  // operand: its sources, destinations and row bounds are worked out once here, and a slice only
  // moves the sources along k. Working them out per copy made the copies' integer arithmetic, not
  // the tensor cores, the main loop's bound. The steps are multiples of 8 rows, so every copy of a
  // thread has the same swizzle.
  constexpr int kAIters = kBM * 8 / kThreads;
  const uint32_t sA_addr = static_cast<uint32_t>(__cvta_generic_to_shared(sA));
  const uint32_t sB_addr = static_cast<uint32_t>(__cvta_generic_to_shared(sB));
  const int a_r = tid / 8, a_c = tid % 8;
  const T* a_src = A + int64_t(m0 + a_r) * g.lda + a_c * 8;          // moves along k
  const uint32_t a_step = uint32_t(kThreads / 8) * uint32_t(g.lda);  // elements; hgemm_applies bounds them
  const uint32_t a_dst = sA_addr + swz(a_r, a_c);
  uint32_t a_rows = 0;
#pragma unroll
  for (int i = 0; i < kAIters; ++i) a_rows |= uint32_t(m0 + a_r + i * (kThreads / 8) < g.M) << i;

  constexpr int kBIters = BN * 8 / kThreads;
  constexpr int kBPer = TRANS_B ? 8 : BN / 8;  // chunks per copied row
  constexpr int kBStep = kThreads / kBPer;     // rows between a thread's copies
  const int b_r = tid / kBPer, b_ch = tid % kBPer;
  const T* b_src = TRANS_B ? B + int64_t(n0 + b_r) * g.ldb + b_ch * 8 : B + int64_t(b_r) * g.ldb + n0 + b_ch * 8;
  const uint32_t b_step = uint32_t(kBStep) * uint32_t(g.ldb);
  const uint32_t b_dst = sB_addr + (TRANS_B ? swz(b_r, b_ch) : (b_ch / 8) * (kBK * kRowBytes) + swz(b_r, b_ch % 8));
  uint32_t b_rows = 0;  // TRANS_B: rows are columns of the product, fixed; else the chunk's column
#pragma unroll
  for (int i = 0; i < kBIters; ++i)
    b_rows |= uint32_t(TRANS_B ? n0 + b_r + i * kBStep < g.N : n0 + b_ch * 8 < g.N) << i;

  // A copy out of range reads nothing (src-size 0) and fills zeros, whatever its address. Slices
  // are loaded in order, so the sources simply move along k after each one.
  const int64_t b_next = TRANS_B ? kBK : int64_t(kBK) * g.ldb;
  auto load = [&](int stage, int kt) {
    const int k0 = kt * kBK;
    const bool a_k = k0 + a_c * 8 < g.K;
    const uint32_t ad = a_dst + stage * kStageA;
#pragma unroll
    for (int i = 0; i < kAIters; ++i)
      cp_async16(ad + i * (kThreads / 8) * kRowBytes, a_src + i * a_step, a_k && (a_rows >> i & 1));
    const uint32_t bd = b_dst + stage * kStageB;
#pragma unroll
    for (int i = 0; i < kBIters; ++i) {
      const bool k_ok = TRANS_B ? k0 + b_ch * 8 < g.K : k0 + b_r + i * kBStep < g.K;
      cp_async16(bd + i * kBStep * kRowBytes, b_src + i * b_step, k_ok && (b_rows >> i & 1));
    }
    a_src += kBK;
    b_src += b_next;
  };

  float acc[kAcc];
#pragma unroll
  for (int i = 0; i < kAcc; ++i) acc[i] = 0.0f;

  // Descriptors of stage 0's slots; a slice and a k-step add byte offsets / 16 to the address field.
  const uint64_t da0 = smem_desc(sA + wg * 64 * kRowBytes, 16, 1024);
  const uint64_t db0 = TRANS_B ? smem_desc(sB, 16, 1024) : smem_desc(sB, kBK * kRowBytes, 1024);
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < kt_count) load(s, s);
    cp_async_commit();
  }
  int stage = 0;
  for (int kt = 0; kt < kt_count; ++kt) {
    cp_async_wait<STAGES - 2>();
    fence_proxy_async();
    __syncthreads();
    fence_regs<kAcc>(acc);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      const uint64_t da = da0 + ((stage * kStageA + kk * 32) >> 4);
      const uint64_t db = db0 + ((stage * kStageB + (TRANS_B ? kk * 32 : kk * 16 * kRowBytes)) >> 4);
      wgmma<BN, BF16, TRANS_B ? 0 : 1>(acc, da, db);
    }
    wgmma_commit();
    wgmma_wait<1>();  // the previous slice's products are done: its slot may be refilled
    fence_regs<kAcc>(acc);
    __syncthreads();
    const int next = kt + STAGES - 1;
    if (next < kt_count) load(next % STAGES, next);
    cp_async_commit();
    stage = stage + 1 == STAGES ? 0 : stage + 1;
  }
  wgmma_wait<0>();
  fence_regs<kAcc>(acc);

  // Epilogue, in two steps: the accumulators go to shared memory as fp32 (d[4j + 2h + e] is row
  // 16*warp + lane/4 + 8h, column 8j + 2*(lane%4) + e of the warpgroup's 64 x BN block), then
  // every thread reads back 8 consecutive columns at a time, adds bias and residual, applies the
  // activation and stores 16 bytes. Applying it straight from the registers unrolled the
  // activation for every accumulator: code that ran once per warp and missed the instruction cache
  // at every instruction, several times the main loop's time.
  __syncthreads();  // every warpgroup's products are done with the operand slots
  float* out = reinterpret_cast<float*>(smem);
  constexpr int kLd = BN + kEpiPad;
  {
    const int r0 = wg * 64 + warp * 16 + lane / 4;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        *reinterpret_cast<float2*>(out + (r0 + 8 * h) * kLd + j * 8 + 2 * (lane % 4)) =
            make_float2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
  }
  __syncthreads();
  const uint32_t out_addr = static_cast<uint32_t>(__cvta_generic_to_shared(out));
  // One copy of the loop per common activation, so that its formula is inlined without the
  // per-element switch (which, with the conversions, was most of the epilogue's instructions).
  switch (g.act.act) {
    case Act::Gelu:
      return store_tile<Act::Gelu, T, BN>(g, out_addr, m0, n0, tid);
    case Act::SiLU:
      return store_tile<Act::SiLU, T, BN>(g, out_addr, m0, n0, tid);
    case Act::GeluTanh:
      return store_tile<Act::GeluTanh, T, BN>(g, out_addr, m0, n0, tid);
    case Act::Sigmoid:
      return store_tile<Act::Sigmoid, T, BN>(g, out_addr, m0, n0, tid);
    case Act::None:
      return store_tile<Act::None, T, BN>(g, out_addr, m0, n0, tid);
    default:
      return store_tile<kAnyAct, T, BN>(g, out_addr, m0, n0, tid);
  }
#endif
}

template <int BN, int STAGES, bool BF16, bool TRANS_B, int MIN_BLOCKS>
bool launch_one(const HgemmArgs& a, cudaStream_t s) {
  auto kernel = hgemm_kernel<BN, STAGES, BF16, TRANS_B, MIN_BLOCKS>;
  constexpr int bytes = smem_bytes<BN, STAGES>();
  static const cudaError_t attr = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (attr != cudaSuccess) return false;
  const dim3 grid((a.N + BN - 1) / BN, (a.M + kBM - 1) / kBM);
  if (grid.y > 65535) return false;
  kernel<<<grid, kThreads, bytes, s>>>(a);
  return true;
}

template <int BN, int STAGES, int MIN_BLOCKS>
bool launch_config(const HgemmArgs& a, cudaStream_t s) {
  if (a.bf16)
    return a.trans_b ? launch_one<BN, STAGES, true, true, MIN_BLOCKS>(a, s)
                     : launch_one<BN, STAGES, true, false, MIN_BLOCKS>(a, s);
  return a.trans_b ? launch_one<BN, STAGES, false, true, MIN_BLOCKS>(a, s)
                   : launch_one<BN, STAGES, false, false, MIN_BLOCKS>(a, s);
}

struct Config {
  const char* name;
  bool (*launch)(const HgemmArgs&, cudaStream_t);
};
// 128 x 256 (the most work per byte copied) and 128 x 128 at one CTA per SM, and 128 x 128 with two
// CTAs per SM, whose epilogues then overlap each other's products: with no warp specialization,
// that overlap is what wins on most shapes (BERT's and ConvNeXt's first MLP layers).
const Config kConfigs[] = {
    {"128x256 3st", launch_config<256, 3, 1>},
    {"128x128 4st", launch_config<128, 4, 1>},
    {"128x128 3st 2/SM", launch_config<128, 3, 2>},
    {"128x128 2st 2/SM", launch_config<128, 2, 2>},
};

__global__ void fill_kernel(void* p, int64_t n, bool bf16, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float v = hashed_uniform(i, seed);
    if (bf16)
      static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16(v);
    else
      static_cast<__half*>(p)[i] = __float2half(v);
  }
}

}  // namespace

bool hgemm_available(int device) {
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return major == 9 && minor == 0;
}

int hgemm_config_count() { return static_cast<int>(sizeof(kConfigs) / sizeof(kConfigs[0])); }

const char* hgemm_config_name(int config) {
  return config >= 0 && config < hgemm_config_count() ? kConfigs[config].name : "?";
}

bool hgemm_applies(const HgemmArgs& a) {
  // The copies step through an operand by 32-bit element offsets.
  if (int64_t(kThreads) * a.lda >= (int64_t{1} << 31) || int64_t(kThreads) * a.ldb >= (int64_t{1} << 31)) return false;
  const bool residual_ok = !a.residual || (a.ldr % 8 == 0 && aligned16(a.residual));
  return a.M > 0 && a.N > 0 && a.K > 0 && a.K % 8 == 0 && a.N % 8 == 0 && a.lda % 8 == 0 && a.ldb % 8 == 0 &&
         a.ldc % 8 == 0 && aligned16(a.A) && aligned16(a.B) && aligned16(a.C) && residual_ok &&
         (!a.bias || aligned16(a.bias));
}

bool launch_hgemm(const HgemmArgs& a, int config, cudaStream_t s) {
  if (config < 0 || config >= hgemm_config_count() || !hgemm_applies(a)) return false;
  return kConfigs[config].launch(a, s);
}

void hgemm_fill_random(void* p, int64_t n, bool bf16, uint32_t seed, cudaStream_t s) {
  if (n <= 0) return;
  const int blocks = static_cast<int>(std::min<int64_t>((n + 255) / 256, 4096));
  fill_kernel<<<blocks, 256, 0, s>>>(p, n, bf16, seed);
}

}  // namespace fusec::cuda
