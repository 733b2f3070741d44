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
// rounds once (the CPU reference's FusedMatMul order), and stores 16 bytes (hgemm_wgmma.cuh).
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/ops/gemm/hgemm_tma.h"
#include "backend/cuda/ops/gemm/hgemm_wgmma.cuh"

namespace fusec::cuda {

namespace {

using namespace wgmma_gemm;

// The operand slots, or the fp32 output tile the epilogue stages in the same memory, whichever is
// larger, + alignment slack.
template <int BN, int STAGES>
constexpr int smem_bytes() {
  const int operands = STAGES * (kBM + BN) * kRowBytes, staged = kBM * (BN + kEpiPad) * 4;
  return (operands > staged ? operands : staged) + 1024;
}

template <int BN, int STAGES, bool BF16, bool TRANS_B, int MIN_BLOCKS>
__global__ void __launch_bounds__(kThreads, MIN_BLOCKS) hgemm_kernel(const HgemmArgs g, const TileOrder order) {
#ifdef FUSEC_HGEMM_DEVICE
  using T = std::conditional_t<BF16, __nv_bfloat16, __half>;
  constexpr int kAcc = BN / 2;
  constexpr int kStageA = kBM * kRowBytes, kStageB = BN * kRowBytes;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  uint8_t* sA = smem;
  uint8_t* sB = smem + STAGES * kStageA;

  const int tid = threadIdx.x, wg = tid / 128;
  const int2 tile = tile_at(order, blockIdx.x);
  const int m0 = tile.x * kBM, n0 = tile.y * BN;
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
    slice_products<BN, BF16, TRANS_B>(acc, da0, db0, stage);  // then its slot may be refilled
    __syncthreads();
    const int next = kt + STAGES - 1;
    if (next < kt_count) load(next % STAGES, next);
    cp_async_commit();
    stage = stage + 1 == STAGES ? 0 : stage + 1;
  }
  wgmma_wait<0>();
  fence_regs<kAcc>(acc);

  // Epilogue, in two steps: the accumulators go to shared memory as fp32, then every thread reads
  // back 8 consecutive columns at a time, adds bias and residual, applies the activation and
  // stores 16 bytes. Applying it straight from the registers unrolled the activation for every
  // accumulator: code that ran once per warp and missed the instruction cache at every
  // instruction, several times the main loop's time.
  __syncthreads();  // every warpgroup's products are done with the operand slots
  float* out = reinterpret_cast<float*>(smem);
  stage_acc<BN>(acc, out, tid);
  __syncthreads();
  store_staged<T, BN>(g, static_cast<uint32_t>(__cvta_generic_to_shared(out)), m0, n0, tid);
#endif
}

template <int BN, int STAGES, bool BF16, bool TRANS_B, int MIN_BLOCKS>
bool launch_one(const HgemmArgs& a, cudaStream_t s) {
  auto kernel = hgemm_kernel<BN, STAGES, BF16, TRANS_B, MIN_BLOCKS>;
  constexpr int bytes = smem_bytes<BN, STAGES>();
  static const cudaError_t attr = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (attr != cudaSuccess) return false;
  const TileOrder order = tile_order(a.M, a.N, kBM, BN, resident_ctas(MIN_BLOCKS));
  const int64_t tiles = int64_t{order.tiles_m} * order.tiles_n;
  if (tiles >= (int64_t{1} << 31)) return false;
  kernel<<<static_cast<unsigned>(tiles), kThreads, bytes, s>>>(a, order);
  return true;
}

template <int BN, int STAGES, int MIN_BLOCKS>
bool launch_config(const HgemmArgs& a, cudaStream_t s) {
  if (a.gated_n > 0) return false;  // gated products take the TMA-fed kernels' 128 x 128 tiles
  return by_operands(
      a, [&]<bool BF16, bool TRANS_B>() { return launch_one<BN, STAGES, BF16, TRANS_B, MIN_BLOCKS>(a, s); });
}

struct Config {
  const char* name;
  bool (*launch)(const HgemmArgs&, cudaStream_t);
};
// 128 x 256 (the most work per byte copied) and 128 x 128 at one CTA per SM, and 128 x 128 with two
// CTAs per SM, whose epilogues then overlap each other's products: with no warp specialization,
// that overlap is what wins on most shapes (BERT's and ConvNeXt's first MLP layers). Then the
// warp-specialized kernel's (hgemm_tma.h); the tuner times them all.
const Config kConfigs[] = {
    {"128x256 3st", launch_config<256, 3, 1>},
    {"128x128 4st", launch_config<128, 4, 1>},
    {"128x128 3st 2/SM", launch_config<128, 3, 2>},
    {"128x128 2st 2/SM", launch_config<128, 2, 2>},
    {"tma 128x128 3st 2/SM", launch_hgemm_tma_128x128},
    {"tma 128x256 4st", launch_hgemm_tma_128x256},
    {"pingpong 128x128 4st", launch_hgemm_pingpong_128x128},
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
  // A gated product: the packed weight's layout, no residual, and whole groups of 8 outputs.
  if (a.gated_n < 0 || (a.gated_n > 0 && (a.residual || a.trans_b || a.gated_n % 8 != 0 ||
                                          a.N != gated_packed_n(a.gated_n) || a.ldc < a.gated_n)))
    return false;
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
