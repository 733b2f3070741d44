// The grouped conv on tensor cores (grouped.cuh, configuration kGroupedMmaConfig): per group, an
// implicit GEMM of [pixels] x [R·S·Cg] by [R·S·Cg] x [Kg] on mma.sync m16n8k16, fp16 or bf16
// operands, fp32 accumulators, the FusedConv epilogue at the store.
//
// Why: the FMA kernels (grouped.cu) ran RegNetX-1.6GF's seventeen 24-wide grouped convs at about
// 9 TFLOP/s, 1.40 of its 1.92 ms (H200): an eighth of the fp32 FMA peak, with a tensor-core peak
// many times that unused.
//
// A block owns whole output rows of one image (as many as keep it near 128 pixels) for one group
// and a slice of NT·8 of its output channels:
// 1. It stages the input rows those outputs read, every input channel of the group, in shared
//    memory as stored (16-byte loads, zeros in the padding), a pixel's channels contiguous with
//    a stride of an odd number of 16-byte groups (so that ldmatrix's 8 pixels of a phase fall in
//    different banks at W stride 1); beside them its weights' slice, [channel][k], and a table of
//    where each 8-wide chunk of k starts in a pixel's window (tap (r, s) and first channel c).
// 2. Each warp takes two 16-pixel tiles (flattened row-major over the block's rows, so narrow
//    images waste little of a tile) and runs k in steps of 16: the A fragment by ldmatrix straight
//    from the staged pixels (each lane's pixel base plus the chunk's offset), the B fragments by
//    ldmatrix from the weights. Cg a multiple of 8 keeps a chunk within one tap; the chunks past
//    R·S·Cg (k padded to 16) read a zero vector, not another pixel's values: their weights are 0,
//    and 0 · inf would be NaN.
// 3. Bias, residual and activation (epilogue_act.cuh) in fp32, one rounding at the store, two
//    channels a store.
// Every product the mma takes is one the conv has (no band of zeros as in depthwise_mma.cu), so
// an infinite or NaN input reaches exactly the outputs whose windows hold it.
#include <algorithm>
#include <type_traits>

#include "backend/cuda/core/check.h"
#include "backend/cuda/core/common.cuh"
#include "backend/cuda/core/mma_sync.cuh"
#include "backend/cuda/ops/conv/grouped.cuh"
#include "backend/cuda/ops/elementwise/epilogue_act.cuh"

namespace fusec::cuda {

namespace {

constexpr int kThreads = 128, kWarps = kThreads / 32;
constexpr int kTilePixels = 16, kWarpTiles = 2;
constexpr int kBlockPixels = kThreads;  // 8 tiles: two a warp
constexpr int64_t kMaxSmem = 160 * 1024;

struct MmaParams {
  const void* x;
  const void* w;  // [G][Kg][kp]
  const void* bias;
  const void* z;
  void* y;
  int h, w_in, c, k, cg, kg, oh, ow, kw, sh, sw, dh, dw, pt, pl;
  ActParams act;
  int rows, tiles_h;           // output rows a block; blocks down an image
  int pr, pc, cs;              // staged rows, columns, halves between staged pixels
  int kp, ks;                  // k padded to 16; halves between the staged weights' rows (kp + 8)
  int chunks;                  // 8-wide chunks of k with taps in them: R·S·Cg / 8
  int koff_at, zero_at, w_at;  // halves into shared memory: the chunk table (ints), the zero vector, the weights
  int slices, groups;
};

/// The geometry both the refusal and the launch use.
struct Plan {
  int64_t rows = 0, tiles_h = 0, pr = 0, pc = 0, cs = 0, kp = 0, ks = 0, nt = 0;
  int64_t koff_at = 0, zero_at = 0, w_at = 0, smem = 0;
};

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

/// Output channels a block, in 8s: the largest of 4, 3, 2, 1 that divides the group's.
int64_t n_tiles(const GroupedShape& s) {
  const int64_t q = s.kg / 8;
  return q % 4 == 0 ? 4 : q % 3 == 0 ? 3 : q % 2 == 0 ? 2 : 1;
}

Plan plan_of(const GroupedShape& s) {
  Plan p;
  // Whole rows near kBlockPixels, spread evenly over the blocks down the image.
  const int64_t most = std::max<int64_t>(1, kBlockPixels / std::max<int64_t>(1, s.ow));
  p.tiles_h = (s.oh + most - 1) / most;
  p.rows = (s.oh + p.tiles_h - 1) / p.tiles_h;
  p.pr = (p.rows - 1) * s.stride_h + (s.kh - 1) * s.dil_h + 1;
  p.pc = (s.ow - 1) * s.stride_w + (s.kw - 1) * s.dil_w + 1;
  p.cs = round_up(s.cg, 8);
  if ((p.cs / 8) % 2 == 0) p.cs += 8;
  p.kp = round_up(s.kh * s.kw * s.cg, 16);
  p.ks = p.kp + 8;
  p.nt = n_tiles(s);
  p.zero_at = p.pr * p.pc * p.cs;
  p.koff_at = p.zero_at + 8;  // the table of ints, kp / 8 of them, in 16-byte units
  p.w_at = p.koff_at + round_up(p.kp / 8, 4) * 2;
  p.smem = (p.w_at + p.nt * 8 * p.ks) * 2;
  return p;
}

template <typename T, int NT>
__global__ void __launch_bounds__(kThreads) grouped_mma_kernel(MmaParams p) {
  pdl_wait_then_release();
  extern __shared__ __align__(16) uint16_t sm[];
  int b = blockIdx.x;
  const int slice = b % p.slices;
  b /= p.slices;
  const int g = b % p.groups;
  b /= p.groups;
  const int th = b % p.tiles_h;
  const int n = b / p.tiles_h;
  const int oh0 = th * p.rows;
  const int pixels = min(p.rows, p.oh - oh0) * p.ow;
  constexpr int bn = NT * 8;
  const int kv = p.kp / 8;

  // 1. The input rows, the weights' slice (both by cp.async), the chunk table and the zero vector.
  const T* x = static_cast<const T*>(p.x);
  const int cv = p.cg / 8, ih0 = oh0 * p.sh - p.pt;
  for (int i = threadIdx.x; i < p.pr * p.pc * cv; i += kThreads) {
    const int v = i % cv, pix = i / cv;
    const int ih = ih0 + pix / p.pc, iw = pix % p.pc - p.pl;
    const bool in = ih >= 0 && ih < p.h && iw >= 0 && iw < p.w_in;
    const T* src = in ? x + ((static_cast<int64_t>(n) * p.h + ih) * p.w_in + iw) * p.c + g * p.cg + v * 8 : x;
    cp_async16(sm + pix * p.cs + v * 8, src, in);
  }
  const uint16_t* wg = static_cast<const uint16_t*>(p.w) + (static_cast<int64_t>(g) * p.kg + slice * bn) * p.kp;
  for (int i = threadIdx.x; i < bn * kv; i += kThreads) {
    const int v = i % kv, row = i / kv;
    cp_async16(sm + p.w_at + row * p.ks + v * 8, wg + static_cast<int64_t>(row) * p.kp + v * 8, true);
  }
  cp_async_commit();
  int* koff = reinterpret_cast<int*>(sm + p.koff_at);
  for (int q = threadIdx.x; q < kv; q += kThreads) {
    int off = -1;  // past the taps: the zero vector
    if (q < p.chunks) {
      const int tap = q * 8 / p.cg, c0 = q * 8 % p.cg;
      off = ((tap / p.kw) * p.dh * p.pc + (tap % p.kw) * p.dw) * p.cs + c0;
    }
    koff[q] = off;
  }
  if (threadIdx.x < 8) sm[p.zero_at + threadIdx.x] = 0;
  cp_async_wait<0>();
  __syncthreads();

  // 2. Two 16-pixel tiles a warp at a time.
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const uint32_t s0 = static_cast<uint32_t>(__cvta_generic_to_shared(sm));
  const int arow = (lane & 7) + ((lane >> 3) & 1) * 8, asel = lane >> 4;  // ldmatrix: A's row, k half
  const int brow = (lane & 7) + (lane >> 4) * 8, bsel = (lane >> 3) & 1;  // B's channel, k half
  const int gq = lane >> 2, tq = lane & 3;                                // the accumulators' row, pair
  const int ch0 = g * p.kg + slice * bn;
  float bias[NT][2];
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e)
      bias[j][e] = p.bias ? to_compute(static_cast<const T*>(p.bias)[ch0 + j * 8 + tq * 2 + e]) : 0.0f;
  const int tiles = (pixels + kTilePixels - 1) / kTilePixels;
  for (int t0 = warp * kWarpTiles; t0 < tiles; t0 += kWarps * kWarpTiles) {
    int base[kWarpTiles];  // this lane's ldmatrix pixel, where its window starts in the staged rows
#pragma unroll
    for (int i = 0; i < kWarpTiles; ++i) {
      const int m = min((t0 + i) * kTilePixels + arow, pixels - 1);
      base[i] = ((m / p.ow) * p.sh * p.pc + (m % p.ow) * p.sw) * p.cs;
    }
    float acc[kWarpTiles][NT][4];
#pragma unroll
    for (int i = 0; i < kWarpTiles; ++i)
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
#pragma unroll 2
    for (int kk = 0; kk < kv / 2; ++kk) {
      const int off = koff[kk * 2 + asel];
      uint32_t a[kWarpTiles][4];
#pragma unroll
      for (int i = 0; i < kWarpTiles; ++i)
        ldsm_x4(s0 + 2u * static_cast<uint32_t>(off >= 0 ? base[i] + off : p.zero_at), a[i]);
      uint32_t bf[NT][2];
#pragma unroll
      for (int j = 0; j < NT; j += 2) {
        uint32_t r[4];
        const int row = min(j * 8 + brow, bn - 1);  // an odd NT's last x4 reads its tile twice
        ldsm_x4(s0 + 2u * static_cast<uint32_t>(p.w_at + row * p.ks + (kk * 2 + bsel) * 8), r);
        bf[j][0] = r[0], bf[j][1] = r[1];
        if (j + 1 < NT) bf[j + 1][0] = r[2], bf[j + 1][1] = r[3];
      }
#pragma unroll
      for (int i = 0; i < kWarpTiles; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j) mma<T>(acc[i][j], a[i], bf[j][0], bf[j][1]);
    }

    // 3. The epilogue: accumulator e of tile i, n-tile j is pixel row gq (+8 for e >= 2), channels
    // 2·tq and 2·tq + 1.
#pragma unroll
    for (int i = 0; i < kWarpTiles; ++i)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int m = (t0 + i) * kTilePixels + gq + half * 8;
        if (m >= pixels) continue;
        const int64_t at = ((static_cast<int64_t>(n) * p.oh + oh0 + m / p.ow) * p.ow + m % p.ow) * p.k + ch0 + tq * 2;
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          Pack<T, 2> z{};
          if (p.z) z = *reinterpret_cast<const Pack<T, 2>*>(static_cast<const T*>(p.z) + at + j * 8);
          Pack<T, 2> out;
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float v = acc[i][j][half * 2 + e] + bias[j][e];
            if (p.z) v += to_compute(z.v[e]);
            out.v[e] = from_compute<T>(apply_act(v, p.act));
          }
          *reinterpret_cast<Pack<T, 2>*>(static_cast<T*>(p.y) + at + j * 8) = out;
        }
      }
  }
}

}  // namespace

const char* grouped_mma_refusal(const GroupedShape& s, DType dtype) {
  if (dtype != DType::Float16 && dtype != DType::BFloat16)
    return "the tensor-core grouped conv takes float16 and bfloat16";
  if (s.groups < 2 || s.cg < 8 || s.cg % 8 != 0 || s.kg < 8 || s.kg % 8 != 0)
    return "the tensor-core grouped conv wants groups of 8k input and 8k output channels";
  if (const char* no = grouped_shape_refusal(s)) return no;
  if (plan_of(s).smem > kMaxSmem) return "the tensor-core grouped conv's input rows and weights pass shared memory";
  return nullptr;
}

int64_t grouped_mma_k_stride(const GroupedShape& s) { return round_up(s.kh * s.kw * s.cg, 16); }

bool launch_grouped_mma(const GroupedArgs& a, cudaStream_t st) {
  const GroupedShape& s = a.s;
  if (grouped_mma_refusal(s, a.dtype) || !a.w_mma) return false;
  // x and the weights by 16-byte copies; y, z and the bias by channel pairs.
  if (!aligned_to(a.x, 16) || !aligned_to(a.w_mma, 16)) return false;
  for (const void* q : {static_cast<const void*>(a.y), a.z, a.bias})
    if (q && !aligned_to(q, 4)) return false;
  const Plan pl = plan_of(s);
  MmaParams p{};
  p.x = a.x, p.w = a.w_mma, p.bias = a.bias, p.z = a.z, p.y = a.y;
  p.h = static_cast<int>(s.h), p.w_in = static_cast<int>(s.w);
  p.c = static_cast<int>(s.groups * s.cg), p.k = static_cast<int>(s.groups * s.kg);
  p.cg = static_cast<int>(s.cg), p.kg = static_cast<int>(s.kg);
  p.oh = static_cast<int>(s.oh), p.ow = static_cast<int>(s.ow), p.kw = static_cast<int>(s.kw);
  p.sh = static_cast<int>(s.stride_h), p.sw = static_cast<int>(s.stride_w);
  p.dh = static_cast<int>(s.dil_h), p.dw = static_cast<int>(s.dil_w);
  p.pt = static_cast<int>(s.pad_top), p.pl = static_cast<int>(s.pad_left);
  p.act = a.act;
  p.rows = static_cast<int>(pl.rows), p.tiles_h = static_cast<int>(pl.tiles_h);
  p.pr = static_cast<int>(pl.pr), p.pc = static_cast<int>(pl.pc), p.cs = static_cast<int>(pl.cs);
  p.kp = static_cast<int>(pl.kp), p.ks = static_cast<int>(pl.ks);
  p.chunks = static_cast<int>(s.kh * s.kw * s.cg / 8);
  p.koff_at = static_cast<int>(pl.koff_at), p.zero_at = static_cast<int>(pl.zero_at),
  p.w_at = static_cast<int>(pl.w_at);
  p.slices = static_cast<int>(s.kg / (pl.nt * 8));
  p.groups = static_cast<int>(s.groups);
  const int64_t blocks = s.batch * pl.tiles_h * s.groups * p.slices;
  if (blocks > INT32_MAX) return false;
  const size_t smem = static_cast<size_t>(pl.smem);
  auto go = [&](auto kernel) {
    if (smem > 48 * 1024)
      allow_dynamic_smem(reinterpret_cast<const void*>(kernel), static_cast<int>(kMaxSmem), "grouped_mma_kernel");
    launch_pdl("grouped_mma_kernel", kernel, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), smem, st, p);
  };
  auto by_tiles = [&](auto tag) {
    using T = decltype(tag);
    switch (pl.nt) {
      case 4:
        go(grouped_mma_kernel<T, 4>);
        break;
      case 3:
        go(grouped_mma_kernel<T, 3>);
        break;
      case 2:
        go(grouped_mma_kernel<T, 2>);
        break;
      default:
        go(grouped_mma_kernel<T, 1>);
        break;
    }
  };
  if (a.dtype == DType::Float16)
    by_tiles(__half{});
  else
    by_tiles(__nv_bfloat16{});
  return true;
}

}  // namespace fusec::cuda
