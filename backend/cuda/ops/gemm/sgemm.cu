// Strict-fp32 SGEMM with the FusedMatMul epilogue; see sgemm.cuh for the contract.
//
// The tiled kernel is sgemm_core.cuh's (shared with the implicit-GEMM convolution) and the skinny
// one sgemm_skinny.cu's; this file holds the GEMM's configurations, a generic fallback and the
// launch entry points.
#include "backend/cuda/ops/gemm/sgemm.cuh"

#include <algorithm>
#include <climits>

#include "backend/cuda/core/common.cuh"
#include "backend/cuda/ops/gemm/sgemm_core.cuh"
#include "backend/cuda/ops/gemm/sgemm_skinny.cuh"

namespace fusec::cuda {

namespace {

using sgemm_core::activate;

__global__ void fill_random_kernel(float* p, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    p[i] = hashed_uniform(i, seed);
  }
}

// Any shape, stride, alignment and B layout: 64x64 tiles, 4x4 outputs per thread, plain loads.
// Slow; for what the other configurations refuse.
constexpr int kGenTile = 64, kGenK = 16;

__global__ void __launch_bounds__(256) sgemm_generic_kernel(const SgemmArgs p) {
  __shared__ float As[kGenK][kGenTile], Bs[kGenK][kGenTile];
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const int m0 = blockIdx.y * kGenTile, n0 = blockIdx.x * kGenTile;
  float acc[4][4] = {};
  for (int k0 = 0; k0 < p.K; k0 += kGenK) {
    for (int idx = tid; idx < kGenTile * kGenK; idx += 256) {
      const int ak = idx % kGenK, am = idx / kGenK;
      As[ak][am] = m0 + am < p.M && k0 + ak < p.K ? p.A[int64_t(m0 + am) * p.lda + k0 + ak] : 0.0f;
      // B stored [N,K] (trans_b) is read along k, as A is, so that neighbouring threads read
      // neighbouring words either way.
      const int bk = p.trans_b ? idx % kGenK : idx / kGenTile, bn = p.trans_b ? idx / kGenK : idx % kGenTile;
      const int64_t b_at = p.trans_b ? int64_t(n0 + bn) * p.ldb + k0 + bk : int64_t(k0 + bk) * p.ldb + n0 + bn;
      Bs[bk][bn] = k0 + bk < p.K && n0 + bn < p.N ? p.B[b_at] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kGenK; ++k)
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(As[k][ty + 16 * i], Bs[k][tx + 16 * j], acc[i][j]);
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int m = m0 + ty + 16 * i, n = n0 + tx + 16 * j;
      if (m >= p.M || n >= p.N) continue;
      float v = acc[i][j] + (p.bias ? p.bias[n] : 0.0f);
      if (p.residual) v += p.residual[int64_t(m) * p.ldr + n];
      p.C[int64_t(m) * p.ldc + n] = activate(v, p.act);
    }
}

/// Whether the tiled kernel's 16-byte accesses and 32-bit B offsets are valid for a (B [K,N] only).
bool tiled_applies(const SgemmArgs& a) {
  return !a.trans_b && a.N % 4 == 0 && a.ldb % 4 == 0 && a.ldc % 4 == 0 && aligned16(a.B) && aligned16(a.C) &&
         (!a.bias || aligned16(a.bias)) && (!a.residual || (a.ldr % 4 == 0 && aligned16(a.residual))) &&
         a.lda <= INT_MAX / 256 && a.ldb <= INT_MAX / 256;  // 32-bit offsets within a tile
}

template <int BM, int BN, int BK, int TM, int TN, int WR, int STAGES, int MIN_BLOCKS, int SPLIT = 1>
bool launch_tiled(const SgemmArgs& a, cudaStream_t s) {
  return tiled_applies(a) &&
         sgemm_core::launch_tiled_kernel<SgemmArgs, BM, BN, BK, TM, TN, WR, STAGES, MIN_BLOCKS, SPLIT>(a, s);
}

bool launch_generic(const SgemmArgs& a, cudaStream_t s) {
  if ((a.M + kGenTile - 1) / kGenTile > 65535) return false;
  sgemm_generic_kernel<<<dim3((a.N + kGenTile - 1) / kGenTile, (a.M + kGenTile - 1) / kGenTile), 256, 0, s>>>(a);
  return true;
}

struct Config {
  const char* name;
  bool (*launch)(const SgemmArgs&, cudaStream_t);
};

// name: CTA tile, per-thread tile, threads, CTAs per SM the registers are capped for. Timed
// against cuBLASLt in scripts/lab/sgemm_lab.cu: BERT-base's QKV (N = 2304) goes to 64x128 split-K
// (the tile cuBLASLt picks for FFN1, two CTAs of 4 warps per SM, so that one CTA's barrier wait is
// the other's issue slot; split over K: 1152 CTAs), which beats cuBLASLt's best. 128x192 split-K
// runs N = 768 (128 CTAs instead of 64) level with cuBLASLt. The others are for shapes where those
// leave too few CTAs; 3 CTAs of 64x128 per SM, a 32-deep K slice, 64x64 tiles at 4 per SM and
// 128x144 (which spills) won none, nor did 64x192 t8x12 at 2/SM. "2/SM" is the register cap;
// 64x128 t8x8 needs ~160 registers and so runs three CTAs per SM (ncu).
//                                                     BM   BN  BK TM  TN WR ST MIN SPLIT
const Config kConfigs[] = {
    {"128x192 t8x12 256thr", launch_tiled<128, 192, 16, 8, 12, 4, 3, 1>},
    {"128x192 t8x12 256thr splitK2", launch_tiled<128, 192, 16, 8, 12, 4, 3, 1, 2>},
    // Deeper rings for weights that stream from memory rather than L2 (as in a model).
    {"128x192 t8x12 256thr 5st", launch_tiled<128, 192, 16, 8, 12, 4, 5, 1>},
    {"128x192 t8x12 256thr 5st splitK2", launch_tiled<128, 192, 16, 8, 12, 4, 5, 1, 2>},
    {"64x128 t8x8 128thr 2/SM", launch_tiled<64, 128, 16, 8, 8, 4, 4, 2>},
    {"64x128 t8x8 128thr 2/SM splitK2", launch_tiled<64, 128, 16, 8, 8, 4, 4, 2, 2>},
    {"128x128 t8x8 256thr 2/SM", launch_tiled<128, 128, 16, 8, 8, 4, 3, 2>},
    {"128x96 t4x12 256thr 2/SM", launch_tiled<128, 96, 16, 4, 12, 4, 3, 2>},
    {"64x96 t4x8 192thr 3/SM", launch_tiled<64, 96, 16, 4, 8, 8, 4, 3>},
    // Skinny (B stored [N,K] only, sgemm_skinny.cu): 16 rows x 8 or 16 columns of C per CTA, K
    // split over a cluster of 1 or 2, a 2- or 3-stage cp.async ring. Timed against cuBLASLt's best
    // of its top 8 (scratch lab, graph launches, weights cold), M x N x K: ResNet-50's fc
    // 16x1000x2048 goes to 16x8, the MLP's 16x1024x1024 too; 16x16 takes 32x1000x2048,
    // 64x1024x1024 and 16x4096x1024; splitK2 16x1024x4096. For M = 1 cuBLASLt's GEMV stays ahead.
    // Splits of 4, 16x8 split 2 and deeper rings won none.
    // Template arguments: <columns per thread (CT), K split, ring stages>.
    {"skinny 16x8 256thr", launch_sgemm_skinny<2, 1, 2>},
    {"skinny 16x16 256thr", launch_sgemm_skinny<4, 1, 3>},
    {"skinny 16x16 256thr splitK2", launch_sgemm_skinny<4, 2, 3>},
    {"generic 64x64", launch_generic},
};
constexpr int kConfigCount = int(sizeof(kConfigs) / sizeof(kConfigs[0]));

}  // namespace

void sgemm_fill_random(float* p, int64_t n, uint32_t seed, cudaStream_t s) {
  if (n <= 0) return;
  const int64_t blocks = std::min<int64_t>((n + 255) / 256, 4096);
  fill_random_kernel<<<static_cast<unsigned>(blocks), 256, 0, s>>>(p, n, seed);
}

int sgemm_config_count() { return kConfigCount; }

const char* sgemm_config_name(int config) { return config >= 0 && config < kConfigCount ? kConfigs[config].name : "?"; }

bool launch_sgemm_f32(const SgemmArgs& a, int config, cudaStream_t s) {
  if (config < 0 || config >= kConfigCount || a.M < 0 || a.N < 0 || a.K < 0) return false;
  if (a.M == 0 || a.N == 0) return true;
  return kConfigs[config].launch(a, s);
}

}  // namespace fusec::cuda
