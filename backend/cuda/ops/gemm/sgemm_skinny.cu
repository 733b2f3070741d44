// Skinny strict-fp32 SGEMM: a few rows of A against a weight B stored [N,K] (ONNX Gemm transB=1: a
// classifier or an MLP layer at a small batch), C = act(A·Bᵀ + bias + R); see sgemm.cuh.
//
// At M = 16 the product streams B: ResNet-50's fc (N 1000, K 2048) reads 8 MB of weights for 65
// MFLOP, where tiles 64-128 rows tall waste most of their work (cuBLASLt streamed the weights far
// below the memory's speed). Every C[m][n] is the dot product of A's row m and B's row n,
// both contiguous in K, so:
//
//   CTA, 256 threads:  rows m0..m0+15 (grid y; rows past M repeat row M-1 and are not stored)
//                      x 4·CT columns n0.. (grid x; columns past N likewise)
//                      x a 1/SPLIT share of K (the CTA's rank in a cluster of SPLIT along x)
//   lane = g·8 + kl:   column group g (CT columns of its own) x K lane kl
//   a step:            256 values of k; thread (warp w, kl) takes the 16-byte word w·8 + kl of
//                      its CT rows of B and of A's 16 rows: 16·CT·4 FFMAs
//   a stage:           4 / CT steps: A's [16 rows][stage] tile and each thread's own 4 words of
//                      B, copied by cp.async into a STAGES-deep ring in shared memory
//
// Why lanes split over columns as well as K: a warp's B copy is then 4 rows x 128 contiguous
// bytes (whole sectors) and its A read 8 words that the 4 groups share (one wavefront). Why both
// operands go through cp.async: with B's words and A's rows loaded into registers, the compiler
// either spilled (16 row pointers of A, 16 words of A in flight per step) or issued B's loads
// only once A had arrived; from the ring every A read is one base address plus a constant, and
// both streams are in flight from the start. SPLIT > 1 is for long K, where a CTA's share of it
// would otherwise take many stages; below that the cluster's barriers cost more than they save.
//
// Reduction, in a fixed order (deterministic): each thread holds 16·CT partial sums; three shuffle
// halvings over a group's 8 K lanes (xor 4, 2, 1) leave lane kl with sums kl·2CT.. kl·2CT+2CT-1 of
// the flat [column][row] list; the 8 warps' sums meet in shared memory and are added in warp order;
// with SPLIT > 1 the owner of each output adds the ranks' sums in rank order through distributed
// shared memory. Then bias, residual and activation, one scalar store per output (no N % 4 rule).
#include "backend/cuda/ops/gemm/sgemm_skinny.cuh"

#include <cooperative_groups.h>

#include <cstdint>

#include "backend/cuda/core/common.cuh"
#include "backend/cuda/ops/gemm/sgemm_core.cuh"

namespace fusec::cuda {

namespace {

using sgemm_core::activate;

constexpr int kRows = 16;  // rows of A and C per CTA
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kGroups = 4;                // column groups per warp
constexpr int kLanesK = 32 / kGroups;     // lanes along K per group (the halvings assume 8)
constexpr int kStep4 = kWarps * kLanesK;  // 16-byte words of K per CTA step
static_assert(kLanesK == 8);

// Halves the partial sums v[0, 2·HALF) between this lane and the lane `mask` away: the one with
// that bit set keeps the upper half, the other the lower, each adding its partner's copy (a + b
// and b + a round alike, so both hold the same bits).
template <int HALF>
__device__ __forceinline__ void fold(float* v, int mask) {
  const bool upper = threadIdx.x & mask;
#pragma unroll
  for (int q = 0; q < HALF; ++q) {
    const float give = upper ? v[q] : v[q + HALF];
    const float keep = upper ? v[q + HALF] : v[q];
    v[q] = keep + __shfl_xor_sync(0xffffffffu, give, mask);
  }
}

template <int CT, int SPLIT, int STAGES>
__global__ void __launch_bounds__(kThreads, CT <= 2 ? 2 : 1) sgemm_skinny_kernel(const SgemmArgs p) {
  static_assert(CT == 2 || CT == 4, "a stage is 4 words of B per thread, and the halvings need 16·CT % 8 == 0");
  constexpr int C = kGroups * CT;   // columns per CTA
  constexpr int V = kRows * CT;     // partial sums per thread, [column][row]
  constexpr int OUT = kRows * C;    // outputs per CTA
  constexpr int SU = 4 / CT;        // steps per stage: 4 words of B per thread
  constexpr int ST4 = SU * kStep4;  // 16-byte words of k per stage
  extern __shared__ float4 smem[];
  float4* const a_tile = smem;                         // [STAGES][kRows][ST4]
  float4* const b_tile = smem + STAGES * kRows * ST4;  // [STAGES][SU·CT][kThreads]: own words
  __shared__ float red[kWarps][kGroups * V];
  __shared__ float part[SPLIT > 1 ? OUT : 1];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / kLanesK;
  const int wk = warp * kLanesK + lane % kLanesK;  // this thread's word within a step
  const int rank = SPLIT > 1 ? int(blockIdx.x % SPLIT) : 0;
  const int n0 = int(blockIdx.x / SPLIT) * C, m0 = int(blockIdx.y) * kRows;
  const float* B[CT];
#pragma unroll
  for (int j = 0; j < CT; ++j) B[j] = p.B + int64_t(min(n0 + g * CT + j, p.N - 1)) * p.ldb;
  // A's tile is copied by 16 threads per row, 16 words apart: a warp's copy covers 2 rows x 256
  // contiguous bytes, from one row pointer per thread.
  static_assert(kThreads == 16 * kRows);
  const float* const a_row = p.A + int64_t(m0 + min(tid / 16, p.M - 1 - m0)) * p.lda;
  // This rank's share of K, in whole steps.
  const int K4 = p.K / 4, per_rank = ((K4 + kStep4 - 1) / kStep4 + SPLIT - 1) / SPLIT;
  const int kb4 = rank * per_rank * kStep4, ke4 = min(K4, kb4 + per_rank * kStep4);

  // Copies the stage that starts at word t4 into buffer `stage`. Words past this share of K are
  // zero-filled (no source bytes, though the address stays inside the share); a stage wholly past
  // it copies nothing.
  const int last4 = max(ke4 - 1, 0);
  auto copy_stage = [&](int t4, int stage) {
    const bool any = t4 < ke4;
#pragma unroll
    for (int u = 0; u < SU; ++u)
#pragma unroll
      for (int j = 0; j < CT; ++j) {
        const int k4 = t4 + u * kStep4 + wk;
        sgemm_core::cp_async_16(reinterpret_cast<float*>(&b_tile[((stage * SU + u) * CT + j) * kThreads + tid]),
                                B[j] + 4 * min(k4, last4), k4 < ke4, any);
      }
#pragma unroll
    for (int c = 0; c < ST4 / 16; ++c) {
      const int col = tid % 16 + 16 * c, k4 = t4 + col;
      sgemm_core::cp_async_16(reinterpret_cast<float*>(&a_tile[(stage * kRows + tid / 16) * ST4 + col]),
                              a_row + 4 * min(k4, last4), k4 < ke4, any);
    }
    sgemm_core::cp_async_commit();  // even when empty: a group per stage keeps the waits' count
  };

  float acc[V];
#pragma unroll
  for (int q = 0; q < V; ++q) acc[q] = 0.0f;
#pragma unroll
  for (int st = 0; st < STAGES - 1; ++st) copy_stage(kb4 + st * ST4, st);
  for (int t4 = kb4, stage = 0; t4 < ke4; t4 += ST4, stage = (stage + 1) % STAGES) {
    copy_stage(t4 + (STAGES - 1) * ST4, (stage + STAGES - 1) % STAGES);
    sgemm_core::cp_async_wait<STAGES - 1>();  // this stage's copies have landed
    __syncthreads();                          // everyone's, for A
#pragma unroll
    for (int u = 0; u < SU; ++u) {
      if (t4 + u * kStep4 + wk >= ke4) break;
      float4 b[CT];
#pragma unroll
      for (int j = 0; j < CT; ++j) b[j] = b_tile[((stage * SU + u) * CT + j) * kThreads + tid];
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
        const float4 a = a_tile[(stage * kRows + i) * ST4 + u * kStep4 + wk];
#pragma unroll
        for (int j = 0; j < CT; ++j) {
          float& s = acc[j * kRows + i];
          s = fmaf(a.x, b[j].x, s);
          s = fmaf(a.y, b[j].y, s);
          s = fmaf(a.z, b[j].z, s);
          s = fmaf(a.w, b[j].w, s);
        }
      }
    }
    __syncthreads();  // the buffer is refilled STAGES - 1 stages on
  }
  sgemm_core::cp_async_wait<0>();

  fold<V / 2>(acc, 4);
  fold<V / 4>(acc, 2);
  fold<V / 8>(acc, 1);
#pragma unroll
  for (int r = 0; r < V / 8; ++r) red[warp][lane * (V / 8) + r] = acc[r];
  __syncthreads();

  auto store = [&](int t, float s) {
    const int m = m0 + t / C, n = n0 + t % C;
    if (m >= p.M || n >= p.N) return;
    float v = s + (p.bias ? p.bias[n] : 0.0f);
    if (p.residual) v += p.residual[int64_t(m) * p.ldr + n];
    p.C[int64_t(m) * p.ldc + n] = activate(v, p.act);
  };
  // Output t is row t / C, column t % C: neighbouring threads store neighbouring columns.
  for (int t = tid; t < OUT; t += kThreads) {
    const int c = t % C, q = (c / CT) * V + (c % CT) * kRows + t / C;
    float s = red[0][q];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) s += red[w][q];
    if constexpr (SPLIT == 1)
      store(t, s);
    else
      part[t] = s;
  }
  if constexpr (SPLIT > 1) {
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();  // every rank's sums are in its shared memory
    for (int t = tid; t < OUT; t += kThreads) {
      if (t % SPLIT != rank) continue;
      float s = *cluster.map_shared_rank(&part[t], 0);
#pragma unroll
      for (int r = 1; r < SPLIT; ++r) s += *cluster.map_shared_rank(&part[t], r);
      store(t, s);
    }
    cluster.sync();  // no CTA leaves while another still reads its sums
  }
}

}  // namespace

template <int CT, int SPLIT, int STAGES>
bool launch_sgemm_skinny(const SgemmArgs& a, cudaStream_t s) {
  constexpr int C = kGroups * CT;
  // 16-byte copies of both operands; row offsets are 64-bit, k offsets (< K) 32-bit.
  if (!a.trans_b || a.K % 4 != 0 || a.lda % 4 != 0 || a.ldb % 4 != 0 || !aligned16(a.A) || !aligned16(a.B) ||
      (a.M + kRows - 1) / kRows > 65535)
    return false;
  constexpr int smem = STAGES * (kRows + CT * kWarps * 32 / kStep4) * (4 / CT) * kStep4 * int(sizeof(float4));
  auto* kernel = sgemm_skinny_kernel<CT, SPLIT, STAGES>;
  if (smem > 48 * 1024) {
    // Once per process (the attribute is per function; fusec uses one device).
    static const cudaError_t raised = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (raised != cudaSuccess) return false;
  }
  const dim3 grid(unsigned((a.N + C - 1) / C) * SPLIT, unsigned((a.M + kRows - 1) / kRows));
  if constexpr (SPLIT == 1) {
    kernel<<<grid, kThreads, smem, s>>>(a);
    return true;
  } else {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid, cfg.blockDim = dim3(kThreads), cfg.dynamicSmemBytes = smem, cfg.stream = s;
    cudaLaunchAttribute cluster;
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim.x = SPLIT, cluster.val.clusterDim.y = 1, cluster.val.clusterDim.z = 1;
    cfg.attrs = &cluster, cfg.numAttrs = 1;
    return cudaLaunchKernelEx(&cfg, kernel, a) == cudaSuccess;
  }
}

template bool launch_sgemm_skinny<2, 1, 2>(const SgemmArgs&, cudaStream_t);
template bool launch_sgemm_skinny<4, 1, 3>(const SgemmArgs&, cudaStream_t);
template bool launch_sgemm_skinny<4, 2, 3>(const SgemmArgs&, cudaStream_t);

}  // namespace fusec::cuda
