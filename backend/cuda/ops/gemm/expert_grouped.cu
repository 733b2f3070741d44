// ExpertMatMul at fp16 and bf16 as a grouped GEMM (expert_matmul.cuh). The per-row kernels of
// expert_matmul.cu read an expert's whole matrix once per row that picked it: at Mixtral-8x7B's
// sizes, 117 MB per token and pick. Here a routing kernel sorts the rows by expert on the device
// (counts, offsets, a permutation, and a table of 64-row tiles, each of one expert's rows), and a
// tensor-core GEMM (mma.sync m16n8k16, float32 sums) runs every tile against its expert's matrix,
// so each matrix is read once per tile of its rows and the rows' outputs are written where they
// belong. Everything stays on the device: the graph the executor captures holds both launches, and
// the GEMM's grid is sized for the most tiles any routing can make (rows / 64 + one partial tile
// per expert), its spare blocks returning at once.
#include <algorithm>

#include "backend/cuda/core/check.h"
#include "backend/cuda/core/common.cuh"
#include "backend/cuda/core/mma_sync.cuh"
#include "backend/cuda/ops/gemm/expert_matmul.cuh"

namespace fusec::cuda {

namespace {

constexpr int kTileRows = 64;  // rows of one expert per tile
constexpr int kTileCols = 64;  // output columns per block
constexpr int kTileK = 32;
constexpr int kStages = 3;
constexpr int kThreads = 128;  // 2 x 2 warps of 32 x 32 outputs
constexpr int kPitchK = kTileK + 8;     // elements per row of a tile stored K-contiguous: 80 bytes,
constexpr int kPitchN = kTileCols + 8;  // or N-contiguous: 144 bytes (ldmatrix conflict-free)
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

int64_t max_tiles(const ExpertMatMulPlan& p) {
  return (p.rows + kTileRows - 1) / kTileRows + std::min(p.experts, p.rows);
}

Workspace carve(const ExpertMatMulPlan& p, void* ws) {
  char* c = static_cast<char*>(ws);
  Workspace w;
  w.perm = reinterpret_cast<int*>(c);
  c += (p.rows * 4 + 15) / 16 * 16;
  w.tiles = reinterpret_cast<Tile*>(c);
  c += max_tiles(p) * int64_t{sizeof(Tile)};
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
    route_kernel(const I* __restrict__ idx, int rows, int experts, Workspace ws, DeviceErrorSite err) {
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
      tsum += (count[e] + kTileRows - 1) / kTileRows;
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
      t += (count[e] + kTileRows - 1) / kTileRows;
    }
    if (lane == 31) *ws.total = tinc;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < experts; e += blockDim.x)
    for (int j = 0; j * kTileRows < count[e]; ++j)
      ws.tiles[tile_at[e] + j] = Tile{e, row_at[e] + j * kTileRows, min(kTileRows, count[e] - j * kTileRows), 0};
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

/// Block (tile blockIdx.x, columns blockIdx.y · 64): Y[perm rows] = X[perm rows / repeat] · W[e]
/// (+ B[e]). TRANS: W[e] is [M, K], staged [n][k]; else [K, M], staged [k][n] and read by
/// ldmatrix.trans. Tiles past the K edge are zero-filled by cp.async, so partial tiles cost no branch
/// in the inner loop; K (and M without TRANS) are multiples of 8, so no 16-byte chunk straddles an edge.
template <typename T, bool TRANS>
__global__ void __launch_bounds__(kThreads)
    grouped_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b, T* __restrict__ y,
                   const GemmArgs a) {
  if (static_cast<int>(blockIdx.x) >= *a.total) return;
  const Tile tile = a.tiles[blockIdx.x];
  const int64_t n0 = int64_t{blockIdx.y} * kTileCols;
  constexpr int kStageA = kTileRows * kPitchK;
  constexpr int kStageB = TRANS ? kTileCols * kPitchK : kTileK * kPitchN;
  __shared__ alignas(16) T sa[kStages * kStageA];
  __shared__ alignas(16) T sb[kStages * kStageB];
  const T* we = w + int64_t{tile.expert} * a.m * a.k;

  // Each thread's two 16-byte chunks of each operand, fixed over the K loop.
  const T* asrc[2];
  const T* bsrc[2];
  bool aok[2], bok[2];
  int acol[2], brow[2], adst[2], bdst[2];
  for (int i = 0; i < 2; ++i) {
    const int q = threadIdx.x + i * kThreads;
    const int r = q >> 2, c = q & 3;
    aok[i] = r < tile.count;
    const int64_t g = aok[i] ? a.perm[tile.begin + r] : 0;
    asrc[i] = x + (g / a.repeat) * a.k + c * 8;
    acol[i] = c * 8;
    adst[i] = r * kPitchK + c * 8;
    if constexpr (TRANS) {
      bok[i] = n0 + r < a.m;
      bsrc[i] = we + (bok[i] ? (n0 + r) * a.k : 0) + c * 8;
      brow[i] = c * 8;  // the chunk's first k
      bdst[i] = r * kPitchK + c * 8;
    } else {
      const int kr = q >> 3, cn = q & 7;
      bok[i] = n0 + cn * 8 < a.m;
      bsrc[i] = we + int64_t{kr} * a.m + (bok[i] ? n0 + cn * 8 : 0);
      brow[i] = kr;
      bdst[i] = kr * kPitchN + cn * 8;
    }
  }
  auto load = [&](int stage, int64_t k0) {
    for (int i = 0; i < 2; ++i) {
      const bool av = aok[i] && k0 + acol[i] < a.k;
      cp_async16(&sa[stage * kStageA + adst[i]], av ? asrc[i] + k0 : x, av);
      const bool bv = bok[i] && k0 + brow[i] < a.k;
      const T* src = TRANS ? bsrc[i] + k0 : bsrc[i] + k0 * a.m;
      cp_async16(&sb[stage * kStageB + bdst[i]], bv ? src : w, bv);
    }
  };

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int wm = (warp >> 1) * 32, wn = (warp & 1) * 32;
  float acc[2][4][4] = {};
  const int64_t nk = (a.k + kTileK - 1) / kTileK;
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < nk) load(s, int64_t{s} * kTileK);
    cp_async_commit();
  }
  const uint32_t sa0 = static_cast<uint32_t>(__cvta_generic_to_shared(sa));
  const uint32_t sb0 = static_cast<uint32_t>(__cvta_generic_to_shared(sb));
  for (int64_t kt = 0; kt < nk; ++kt) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    const int64_t next = kt + kStages - 1;
    if (next < nk) load(static_cast<int>(next % kStages), next * kTileK);
    cp_async_commit();
    const int stage = static_cast<int>(kt % kStages);
    const uint32_t as = sa0 + stage * kStageA * 2, bs = sb0 + stage * kStageB * 2;
    for (int kk = 0; kk < kTileK; kk += 16) {
      uint32_t af[2][4], bf[2][4];
      for (int mi = 0; mi < 2; ++mi) {
        const int row = wm + mi * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
        ldsm_x4(as + (row * kPitchK + kk + (lane >> 4) * 8) * 2, af[mi]);
      }
      for (int nj = 0; nj < 2; ++nj) {
        if constexpr (TRANS) {
          const int n = wn + nj * 16 + (lane & 7) + (lane >> 4) * 8;
          ldsm_x4(bs + (n * kPitchK + kk + ((lane >> 3) & 1) * 8) * 2, bf[nj]);
        } else {
          const int kr = kk + (lane & 7) + ((lane >> 3) & 1) * 8;
          ldsm_x4_trans(bs + (kr * kPitchN + wn + nj * 16 + (lane >> 4) * 8) * 2, bf[nj]);
        }
      }
      for (int mi = 0; mi < 2; ++mi)
        for (int ni = 0; ni < 4; ++ni) mma<T>(acc[mi][ni], af[mi], bf[ni >> 1][(ni & 1) * 2], bf[ni >> 1][(ni & 1) * 2 + 1]);
    }
  }
  cp_async_wait<0>();

  for (int mi = 0; mi < 2; ++mi)
    for (int half = 0; half < 2; ++half) {
      const int r = wm + mi * 16 + (lane >> 2) + half * 8;
      if (r >= tile.count) continue;
      T* out = y + int64_t{a.perm[tile.begin + r]} * a.m;
      for (int ni = 0; ni < 4; ++ni) {
        const int64_t col = n0 + wn + ni * 8 + (lane & 3) * 2;
        for (int j = 0; j < 2; ++j)
          if (col + j < a.m)
            out[col + j] = from_compute<T>(acc[mi][ni][half * 2 + j] +
                                           (b ? to_compute(b[int64_t{tile.expert} * a.m + col + j]) : 0.0f));
      }
    }
}

template <typename T, typename I>
void launch_grouped(const ExpertMatMulPlan& p, const T* x, const T* w, const I* idx, const T* b, T* y,
                    cudaStream_t s, const DeviceErrorSite& err, void* workspace) {
  const Workspace ws = carve(p, workspace);
  const int experts = static_cast<int>(p.experts);
  route_kernel<I><<<1, kRouteThreads, 3 * experts * sizeof(int), s>>>(idx, static_cast<int>(p.rows), experts, ws, err);
  check_launch("expert route_kernel");
  const GemmArgs a{p.k, p.m, p.repeat, ws.perm, ws.tiles, ws.total};
  const dim3 grid(static_cast<unsigned>(max_tiles(p)), static_cast<unsigned>((p.m + kTileCols - 1) / kTileCols));
  if (p.trans)
    grouped_kernel<T, true><<<grid, kThreads, 0, s>>>(x, w, b, y, a);
  else
    grouped_kernel<T, false><<<grid, kThreads, 0, s>>>(x, w, b, y, a);
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
  return !p.per_row && (p.dtype == DType::Float16 || p.dtype == DType::BFloat16) && p.k % 8 == 0 && (p.trans || p.m % 8 == 0) &&
         p.experts <= kMaxExperts && p.rows < (int64_t{1} << 30) && (p.m + kTileCols - 1) / kTileCols <= 65535;
}

size_t expert_matmul_workspace_bytes(const ExpertMatMulPlan& p) {
  if (!expert_matmul_grouped(p)) return 0;
  return static_cast<size_t>((p.rows * 4 + 15) / 16 * 16 + max_tiles(p) * int64_t{sizeof(Tile)} + 16);
}

bool launch_expert_matmul_grouped(const ExpertMatMulPlan& p, const void* x, const void* w, const void* idx,
                                  const void* b, void* y, cudaStream_t s, const DeviceErrorSite& err,
                                  void* workspace) {
  if (!expert_matmul_grouped(p) || !workspace || !aligned16(x) || !aligned16(w)) return false;
  if (p.dtype == DType::Float16)
    launch_grouped_indexed<__half>(p, x, w, idx, b, y, s, err, workspace);
  else
    launch_grouped_indexed<__nv_bfloat16>(p, x, w, idx, b, y, s, err, workspace);
  return true;
}

}  // namespace fusec::cuda
