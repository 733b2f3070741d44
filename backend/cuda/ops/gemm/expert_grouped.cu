// ExpertMatMul at fp16 and bf16 as a grouped GEMM (expert_matmul.cuh). The per-row kernels of
// expert_matmul.cu read an expert's whole matrix once per row that picked it: at Mixtral-8x7B's
// sizes, 117 MB per token and pick. Here a routing kernel sorts the rows by expert on the device
// (counts, offsets, a permutation, and a table of 64-row tiles, each of one expert's rows), and a
// tensor-core GEMM (mma.sync m16n8k16, float32 sums) runs every tile against its expert's matrix,
// so each matrix is read once per tile of its rows and the rows' outputs are written where they
// belong (float32, and fp16/bf16 rows that do not split into 16-byte chunks, take FMA tiles
// instead). Everything stays on the device: the graph the executor captures holds both launches, and
// the GEMM's grid is sized for the most tiles any routing can make (rows / 64 + one partial tile
// per expert), its spare blocks returning at once.
#include <algorithm>

#include "backend/cuda/core/check.h"
#include "backend/cuda/core/common.cuh"
#include "backend/cuda/core/mma_sync.cuh"
#include "backend/cuda/ops/gemm/expert_matmul.cuh"

namespace fusec::cuda {

namespace {

// Two tile shapes: 64 x 64 (2 x 2 warps of 32 x 32 outputs) where an expert has few rows, and
// 128 x 128 (2 x 4 warps of 64 x 32) where the average expert fills a 128-row tile. The small tile
// read every operand once per 4096 outputs and was bound by L2 throughput at Mixtral's sizes
// (ncu: L2 93% busy, DRAM 41%); the large one reads half as much per output.
constexpr int kSmallRows = 64;
constexpr int kLargeRows = 128;
constexpr int kTileK = 32;
constexpr int kStages = 3;
constexpr int kPitchK =
    kTileK + 8;  // elements per row of a tile stored K-contiguous: 80 bytes (ldmatrix conflict-free)
constexpr int kRouteThreads = 1024;
constexpr int kMaxExperts = 4096;  // the routing kernel's three int arrays in 48 KB of shared memory

struct Tile {
  int expert, begin, count, pad;  // rows perm[begin, begin + count) of `expert`
};

struct Workspace {
  int* perm;
  Tile* tiles;
  int* total;
};

/// Rows of one expert a tile holds: the large tile once the average expert fills it.
int tile_rows(const ExpertMatMulPlan& p) { return p.rows >= kLargeRows * p.experts ? kLargeRows : kSmallRows; }

int64_t max_tiles(const ExpertMatMulPlan& p, int rows_per_tile) {
  return (p.rows + rows_per_tile - 1) / rows_per_tile + std::min(p.experts, p.rows);
}

Workspace carve(const ExpertMatMulPlan& p, void* ws) {
  char* c = static_cast<char*>(ws);
  Workspace w;
  w.perm = reinterpret_cast<int*>(c);
  c += (p.rows * 4 + 15) / 16 * 16;
  w.tiles = reinterpret_cast<Tile*>(c);
  c += max_tiles(p, kSmallRows) * int64_t{sizeof(Tile)};
  w.total = reinterpret_cast<int*>(c);
  return w;
}

template <typename I>
__device__ __forceinline__ int expert_of(const I* idx, int s, int experts) {
  const int64_t given = static_cast<int64_t>(idx[s]);
  const int64_t e = given < 0 ? given + experts : given;
  return e >= 0 && e < experts ? static_cast<int>(e) : -1;
}

/// One block: counts rows per expert, scans them (rows and tiles) in warp 0, writes the tile table,
/// then scatters each row's id to its expert's range. A bad index is reported and its row left out.
template <typename I>
__global__ void __launch_bounds__(kRouteThreads)
    route_kernel(const I* __restrict__ idx, int rows, int experts, int tile, Workspace ws, DeviceErrorSite err) {
  extern __shared__ int sh[];
  int* count = sh;
  int* row_at = sh + experts;
  int* tile_at = sh + 2 * experts;
  for (int e = threadIdx.x; e < experts; e += blockDim.x) count[e] = 0;
  __syncthreads();
  for (int s = threadIdx.x; s < rows; s += blockDim.x) {
    const int e = expert_of(idx, s, experts);
    if (e >= 0)
      atomicAdd(&count[e], 1);
    else
      report_device_error(err, kIndexOutOfAxis, s, static_cast<long long>(idx[s]), experts);
  }
  __syncthreads();
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x, per = (experts + 31) / 32;
    const int lo = min(lane * per, experts), hi = min(lo + per, experts);
    int rsum = 0, tsum = 0;
    for (int e = lo; e < hi; ++e) {
      rsum += count[e];
      tsum += (count[e] + tile - 1) / tile;
    }
    int rinc = rsum, tinc = tsum;
    for (int d = 1; d < 32; d <<= 1) {
      const int r = __shfl_up_sync(0xffffffffu, rinc, d), t = __shfl_up_sync(0xffffffffu, tinc, d);
      if (lane >= d) rinc += r, tinc += t;
    }
    int r = rinc - rsum, t = tinc - tsum;
    for (int e = lo; e < hi; ++e) {
      row_at[e] = r;
      tile_at[e] = t;
      r += count[e];
      t += (count[e] + tile - 1) / tile;
    }
    if (lane == 31) *ws.total = tinc;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < experts; e += blockDim.x)
    for (int j = 0; j * tile < count[e]; ++j)
      ws.tiles[tile_at[e] + j] = Tile{e, row_at[e] + j * tile, min(tile, count[e] - j * tile), 0};
  __syncthreads();  // row_at becomes each expert's cursor
  for (int s = threadIdx.x; s < rows; s += blockDim.x) {
    const int e = expert_of(idx, s, experts);
    if (e >= 0) ws.perm[atomicAdd(&row_at[e], 1)] = s;
  }
}

struct GemmArgs {
  int64_t k, m, repeat;
  const int* perm;
  const Tile* tiles;
  const int* total;
};

/// Block (tile blockIdx.x, columns blockIdx.y · BN): Y[perm rows] = X[perm rows / repeat] · W[e]
/// (+ B[e]), by WM x WN warps. TRANS: W[e] is [M, K], staged [n][k]; else [K, M], staged [k][n] and
/// read by ldmatrix.trans. Tiles past the K edge are zero-filled by cp.async, so partial tiles cost no
/// branch in the inner loop; K (and M without TRANS) are multiples of 8, so no 16-byte chunk
/// straddles an edge.
template <typename T, bool TRANS, int BM, int BN, int WM, int WN>
__global__ void __launch_bounds__(WM* WN * 32)
    grouped_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b, T* __restrict__ y,
                   const GemmArgs a) {
  constexpr int kThreads = WM * WN * 32, MI = BM / WM / 16, NI = BN / WN / 8;
  constexpr int kPitchN = BN + 8;  // elements per row of a tile stored N-contiguous (ldmatrix conflict-free)
  constexpr int kStageA = BM * kPitchK;
  constexpr int kStageB = TRANS ? BN * kPitchK : kTileK * kPitchN;
  constexpr int kLoadsA = BM * (kTileK / 8) / kThreads, kLoadsB = BN * (kTileK / 8) / kThreads;
  static_assert(kLoadsA * kThreads == BM * kTileK / 8 && kLoadsB * kThreads == BN * kTileK / 8, "whole chunks");
  static_assert(NI % 2 == 0, "B fragments load in pairs");
  if (static_cast<int>(blockIdx.x) >= *a.total) return;
  const Tile tile = a.tiles[blockIdx.x];
  const int64_t n0 = int64_t{blockIdx.y} * BN;
  extern __shared__ uint4 smem[];  // kStages stages of A, then of B (the large tile needs past 48 KB)
  T* sa = reinterpret_cast<T*>(smem);
  T* sb = sa + kStages * kStageA;
  const T* we = w + int64_t{tile.expert} * a.m * a.k;

  // Each thread's 16-byte chunks of each operand, fixed over the K loop.
  const T* asrc[kLoadsA];
  const T* bsrc[kLoadsB];
  bool aok[kLoadsA], bok[kLoadsB];
  int acol[kLoadsA], adst[kLoadsA], brow[kLoadsB], bdst[kLoadsB];
  for (int i = 0; i < kLoadsA; ++i) {
    const int q = threadIdx.x + i * kThreads;
    const int r = q >> 2, c = q & 3;
    aok[i] = r < tile.count;
    const int64_t g = aok[i] ? a.perm[tile.begin + r] : 0;
    asrc[i] = x + (g / a.repeat) * a.k + c * 8;
    acol[i] = c * 8;
    adst[i] = r * kPitchK + c * 8;
  }
  for (int i = 0; i < kLoadsB; ++i) {
    const int q = threadIdx.x + i * kThreads;
    if constexpr (TRANS) {
      const int r = q >> 2, c = q & 3;
      bok[i] = n0 + r < a.m;
      bsrc[i] = we + (bok[i] ? (n0 + r) * a.k : 0) + c * 8;
      brow[i] = c * 8;  // the chunk's first k
      bdst[i] = r * kPitchK + c * 8;
    } else {
      const int kr = q / (BN / 8), cn = q % (BN / 8);
      bok[i] = n0 + cn * 8 < a.m;
      bsrc[i] = we + int64_t{kr} * a.m + (bok[i] ? n0 + cn * 8 : 0);
      brow[i] = kr;
      bdst[i] = kr * kPitchN + cn * 8;
    }
  }
  auto load = [&](int stage, int64_t k0) {
    for (int i = 0; i < kLoadsA; ++i) {
      const bool v = aok[i] && k0 + acol[i] < a.k;
      cp_async16(&sa[stage * kStageA + adst[i]], v ? asrc[i] + k0 : x, v);
    }
    for (int i = 0; i < kLoadsB; ++i) {
      const bool v = bok[i] && k0 + brow[i] < a.k;
      const T* src = TRANS ? bsrc[i] + k0 : bsrc[i] + k0 * a.m;
      cp_async16(&sb[stage * kStageB + bdst[i]], v ? src : w, v);
    }
  };

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int wm = (warp / WN) * (BM / WM), wn = (warp % WN) * (BN / WN);
  float acc[MI][NI][4] = {};
  const int64_t nk = (a.k + kTileK - 1) / kTileK;
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < nk) load(s, int64_t{s} * kTileK);
    cp_async_commit();
  }
  const uint32_t sa0 = static_cast<uint32_t>(__cvta_generic_to_shared(sa));
  const uint32_t sb0 = static_cast<uint32_t>(__cvta_generic_to_shared(sb));
  int stage = 0;
  for (int64_t kt = 0; kt < nk; ++kt) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    const int64_t next = kt + kStages - 1;
    if (next < nk) load(static_cast<int>(next % kStages), next * kTileK);
    cp_async_commit();
    const uint32_t as = sa0 + stage * kStageA * 2, bs = sb0 + stage * kStageB * 2;
    stage = stage + 1 == kStages ? 0 : stage + 1;
    for (int kk = 0; kk < kTileK; kk += 16) {
      uint32_t af[MI][4], bf[NI / 2][4];
      for (int mi = 0; mi < MI; ++mi) {
        const int row = wm + mi * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
        ldsm_x4(as + (row * kPitchK + kk + (lane >> 4) * 8) * 2, af[mi]);
      }
      for (int nj = 0; nj < NI / 2; ++nj) {
        if constexpr (TRANS) {
          const int n = wn + nj * 16 + (lane & 7) + (lane >> 4) * 8;
          ldsm_x4(bs + (n * kPitchK + kk + ((lane >> 3) & 1) * 8) * 2, bf[nj]);
        } else {
          const int kr = kk + (lane & 7) + ((lane >> 3) & 1) * 8;
          ldsm_x4_trans(bs + (kr * kPitchN + wn + nj * 16 + (lane >> 4) * 8) * 2, bf[nj]);
        }
      }
      for (int mi = 0; mi < MI; ++mi)
        for (int ni = 0; ni < NI; ++ni)
          mma<T>(acc[mi][ni], af[mi], bf[ni >> 1][(ni & 1) * 2], bf[ni >> 1][(ni & 1) * 2 + 1]);
    }
  }
  cp_async_wait<0>();

  for (int mi = 0; mi < MI; ++mi)
    for (int half = 0; half < 2; ++half) {
      const int r = wm + mi * 16 + (lane >> 2) + half * 8;
      if (r >= tile.count) continue;
      T* out = y + int64_t{a.perm[tile.begin + r]} * a.m;
      for (int ni = 0; ni < NI; ++ni) {
        const int64_t col = n0 + wn + ni * 8 + (lane & 3) * 2;
        for (int j = 0; j < 2; ++j)
          if (col + j < a.m)
            out[col + j] = from_compute<T>(acc[mi][ni][half * 2 + j] +
                                           (b ? to_compute(b[int64_t{tile.expert} * a.m + col + j]) : 0.0f));
      }
    }
}

template <typename T, bool TRANS, int BM, int BN, int WM, int WN>
void launch_shape(const T* x, const T* w, const T* b, T* y, const GemmArgs& a, int64_t tiles, cudaStream_t s) {
  constexpr int kBytes = kStages * (BM * kPitchK + (TRANS ? BN * kPitchK : kTileK * (BN + 8))) * 2;
  static const cudaError_t opted_in = cudaFuncSetAttribute(grouped_kernel<T, TRANS, BM, BN, WM, WN>,
                                                           cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes);
  if (opted_in != cudaSuccess)
    throw_cuda_error(static_cast<int>(opted_in), "cudaFuncSetAttribute(expert grouped_kernel)", __FILE__, __LINE__);
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>((a.m + BN - 1) / BN));
  grouped_kernel<T, TRANS, BM, BN, WM, WN><<<grid, WM * WN * 32, kBytes, s>>>(x, w, b, y, a);
}

/// The same product on FMA units, for float32 (strict: no TF32) and for fp16/bf16 shapes whose
/// rows do not split into 16-byte chunks: 64 x 64 outputs a block of 16 x 16 threads, each 4 x 4
/// of them strided 16 apart, through 16-deep slices of X and W[e] staged in shared memory as
/// float (k-major, so a thread's four rows and four columns are each one broadcast or one
/// conflict-free read). Any K and M.
template <typename T, bool TRANS>
__global__ void __launch_bounds__(256)
    grouped_fma_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b, T* __restrict__ y,
                       const GemmArgs a) {
  constexpr int BN = 64, BK = 16, P = kSmallRows + 1;
  if (static_cast<int>(blockIdx.x) >= *a.total) return;
  const Tile tile = a.tiles[blockIdx.x];
  const int64_t n0 = int64_t{blockIdx.y} * BN;
  __shared__ float sa[BK * P];
  __shared__ float sb[BK * P];
  const T* we = w + int64_t{tile.expert} * a.m * a.k;
  const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
  // This thread's four rows of X (q = tid + 256 i: row q / 16, k q % 16), fixed over the K loop.
  const T* xrow[4];
  for (int i = 0; i < 4; ++i) {
    const int r = (tid + 256 * i) >> 4;
    xrow[i] = r < tile.count ? x + int64_t{a.perm[tile.begin + r]} / a.repeat * a.k : nullptr;
  }
  float acc[4][4] = {};
  for (int64_t k0 = 0; k0 < a.k; k0 += BK) {
    for (int i = 0; i < 4; ++i) {
      const int q = tid + 256 * i;
      const int r = q >> 4, kk = q & 15;
      const bool in_k = k0 + kk < a.k;
      sa[kk * P + r] = xrow[i] && in_k ? to_compute(xrow[i][k0 + kk]) : 0.0f;
      if constexpr (TRANS) {  // W[e] [M, K]: element (n = q / 16, k = q % 16)
        const int64_t n = n0 + r;
        sb[kk * P + r] = n < a.m && in_k ? to_compute(we[n * a.k + k0 + kk]) : 0.0f;
      } else {  // W[e] [K, M]: element (k = q / 64, n = q % 64), read along M
        const int kr = q >> 6, c = q & 63;
        const int64_t n = n0 + c;
        sb[kr * P + c] = n < a.m && k0 + kr < a.k ? to_compute(we[(k0 + kr) * a.m + n]) : 0.0f;
      }
    }
    __syncthreads();
    for (int kk = 0; kk < BK; ++kk) {
      float av[4], bv[4];
      for (int i = 0; i < 4; ++i) av[i] = sa[kk * P + ty + 16 * i];
      for (int j = 0; j < 4; ++j) bv[j] = sb[kk * P + tx + 16 * j];
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
    __syncthreads();
  }
  for (int i = 0; i < 4; ++i) {
    const int r = ty + 16 * i;
    if (r >= tile.count) continue;
    T* out = y + int64_t{a.perm[tile.begin + r]} * a.m;
    for (int j = 0; j < 4; ++j) {
      const int64_t col = n0 + tx + 16 * j;
      if (col < a.m)
        out[col] = from_compute<T>(acc[i][j] + (b ? to_compute(b[int64_t{tile.expert} * a.m + col]) : 0.0f));
    }
  }
}

template <typename T, typename I>
void launch_grouped(const ExpertMatMulPlan& p, const T* x, const T* w, const I* idx, const T* b, T* y,
                    cudaStream_t s, const DeviceErrorSite& err, void* workspace) {
  const Workspace ws = carve(p, workspace);
  const int experts = static_cast<int>(p.experts);
  const bool mma = grouped_on_tensor_cores(p) && aligned16(x) && aligned16(w);
  const int rows_per_tile = mma ? tile_rows(p) : kSmallRows;
  route_kernel<I><<<1, kRouteThreads, 3 * experts * sizeof(int), s>>>(idx, static_cast<int>(p.rows), experts,
                                                                      rows_per_tile, ws, err);
  check_launch("expert route_kernel");
  const GemmArgs a{p.k, p.m, p.repeat, ws.perm, ws.tiles, ws.total};
  const int64_t tiles = max_tiles(p, rows_per_tile);
  if (!mma) {
    const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>((p.m + 63) / 64));
    if (p.trans)
      grouped_fma_kernel<T, true><<<grid, 256, 0, s>>>(x, w, b, y, a);
    else
      grouped_fma_kernel<T, false><<<grid, 256, 0, s>>>(x, w, b, y, a);
  } else if (rows_per_tile == kLargeRows) {
    if (p.trans)
      launch_shape<T, true, 128, 128, 2, 4>(x, w, b, y, a, tiles, s);
    else
      launch_shape<T, false, 128, 128, 2, 4>(x, w, b, y, a, tiles, s);
  } else {
    if (p.trans)
      launch_shape<T, true, 64, 64, 2, 2>(x, w, b, y, a, tiles, s);
    else
      launch_shape<T, false, 64, 64, 2, 2>(x, w, b, y, a, tiles, s);
  }
  check_launch("expert grouped_kernel");
}

template <typename T>
void launch_grouped_indexed(const ExpertMatMulPlan& p, const void* x, const void* w, const void* idx, const void* b,
                            void* y, cudaStream_t s, const DeviceErrorSite& err, void* workspace) {
  const auto* xt = static_cast<const T*>(x);
  const auto* wt = static_cast<const T*>(w);
  const auto* bt = static_cast<const T*>(b);
  auto* yt = static_cast<T*>(y);
  if (p.index_type == DType::Int32)
    launch_grouped<T>(p, xt, wt, static_cast<const int32_t*>(idx), bt, yt, s, err, workspace);
  else
    launch_grouped<T>(p, xt, wt, static_cast<const int64_t*>(idx), bt, yt, s, err, workspace);
}

}  // namespace

bool expert_matmul_grouped(const ExpertMatMulPlan& p) {
  return !p.per_row && (p.dtype == DType::Float32 || p.dtype == DType::Float16 || p.dtype == DType::BFloat16) &&
         p.experts <= kMaxExperts && p.rows < (int64_t{1} << 30) && (p.m + kSmallRows - 1) / kSmallRows <= 65535;
}

bool grouped_on_tensor_cores(const ExpertMatMulPlan& p) {
  return expert_matmul_grouped(p) && (p.dtype == DType::Float16 || p.dtype == DType::BFloat16) && p.k % 8 == 0 &&
         (p.trans || p.m % 8 == 0);
}

size_t expert_matmul_workspace_bytes(const ExpertMatMulPlan& p) {
  if (!expert_matmul_grouped(p)) return 0;
  return static_cast<size_t>((p.rows * 4 + 15) / 16 * 16 + max_tiles(p, kSmallRows) * int64_t{sizeof(Tile)} + 16);
}

bool launch_expert_matmul_grouped(const ExpertMatMulPlan& p, const void* x, const void* w, const void* idx,
                                  const void* b, void* y, cudaStream_t s, const DeviceErrorSite& err,
                                  void* workspace) {
  if (!expert_matmul_grouped(p) || !workspace) return false;
  if (p.dtype == DType::Float32)
    launch_grouped_indexed<float>(p, x, w, idx, b, y, s, err, workspace);
  else if (p.dtype == DType::Float16)
    launch_grouped_indexed<__half>(p, x, w, idx, b, y, s, err, workspace);
  else
    launch_grouped_indexed<__nv_bfloat16>(p, x, w, idx, b, y, s, err, workspace);
  return true;
}

}  // namespace fusec::cuda
