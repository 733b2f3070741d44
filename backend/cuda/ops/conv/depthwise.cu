// The depthwise conv's FMA kernels (depthwise.cuh): a tiled kernel for the common windows and a
// generic one for the rest, both with the FusedConv epilogue, and the configuration table that
// also offers the banded tensor-core kernel (depthwise_mma.cu) at fp16 and bf16.
//
// The tiled kernel. A thread computes PW neighbouring output pixels of one row for one vector of
// NV channels (16 or 8 bytes: 8 or 4 halves, 4 or 2 floats). For each window row it reads the
// (PW - 1)·S + KW input pixels its outputs need once each, as vectors, and adds each into every
// output whose window covers it: with the window width KW and the W stride S known at compile
// time, the accumulators are indexed by constants and stay in registers. A 7x7 stride-1 conv with
// PW = 8 reads 14 input vectors per window row for 8 outputs, where one output at a time would
// read 7 per output. The weights of one window row (KW vectors, fp32) are loaded once per row from
// the route's [R][S][K] copy, which stays in L1: a layer's weights are a few KB.
//
// A block is a slice of channel vectors (threadIdx.x, up to 128 bytes of a pixel, so that a warp's
// loads fill whole cache lines) times a patch of rows x strips of output pixels (threadIdx.y). The
// block's threads run through the window rows together, so an input row that several output rows
// of the patch need is read from DRAM once and then hits L1; the host shapes the patch
// (depthwise_tiles) to read the fewest halo pixels per output. The tuner picks among vector width,
// PW and block size: PW = 8 with 16-byte vectors holds 64 accumulators and a window row's weights
// in registers, and 128-thread blocks then keep more warps resident than 256-thread ones.
//
// The window's height, the H stride and the H dilation are runtime values: only W's shape decides
// which input vector feeds which accumulator. The tiled kernel wants M = 1 and C a multiple of
// the vector; anything else (odd C, M > 1, wider windows, W dilation, strides past 2) runs on the
// generic kernel: one output pixel and four channels a thread, scalar loads, every tap read from
// memory (L1 serves the overlap).
//
// The epilogue is the other fused epilogues': conv + bias, then the residual, then apply_act
// (epilogue_act.cuh, backend/formulas.h's fused-epilogue family), in fp32, one rounding to the
// storage type at the store. Both kernels are launched with programmatic dependent launch, as the
// other short memory-bound kernels are (common.cuh).
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "backend/cuda/core/check.h"
#include "backend/cuda/core/common.cuh"
#include "backend/cuda/ops/conv/depthwise.cuh"
#include "backend/cuda/ops/conv/depthwise_mma.cuh"
#include "backend/cuda/ops/elementwise/epilogue_act.cuh"

namespace fusec::cuda {

namespace {

/// What both kernels read: pointers, dims as int (depthwise_refusal checks they fit), the block
/// tiling of the tiled kernel, the thread count of the generic one.
struct DwParams {
  const void* x;
  const float* w;
  const void* bias;
  const void* z;
  void* y;
  int h, w_in, c, k, m, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl;
  ActParams act;
  int sb, th, tiles_w, tiles_h;  // tiled: strips per patch row, rows per patch, patches across and down
  int tw;                        // shared-memory kernel: columns per patch (th: its rows)
  int slices;                    // tiled: blocks across the channels
  int groups;                    // generic: channel groups of 4 per pixel
  int64_t total;                 // generic: pixels x groups
};

/// An unsigned type of B bytes for one vector access.
template <int B>
struct Raw;
template <>
struct Raw<16> {
  using type = uint4;
};
template <>
struct Raw<8> {
  using type = uint2;
};
template <>
struct Raw<4> {
  using type = unsigned;
};

template <typename T, int NV>
struct alignas(sizeof(T) * NV) Vec {
  T v[NV];
};

/// NV elements of T at p (sizeof(T)·NV aligned) as floats, through the read-only cache.
template <typename T, int NV>
__device__ __forceinline__ void load_ro(const T* p, float (&out)[NV]) {
  using R = typename Raw<sizeof(T) * NV>::type;
  const R r = __ldg(reinterpret_cast<const R*>(p));
  Vec<T, NV> q;
  memcpy(&q, &r, sizeof r);
#pragma unroll
  for (int i = 0; i < NV; ++i) out[i] = to_compute(q.v[i]);
}

/// The same with an ordinary load: the residual may be the output's own buffer.
template <typename T, int NV>
__device__ __forceinline__ void load_rw(const T* p, float (&out)[NV]) {
  const Vec<T, NV> q = *reinterpret_cast<const Vec<T, NV>*>(p);
#pragma unroll
  for (int i = 0; i < NV; ++i) out[i] = to_compute(q.v[i]);
}

/// NV fp32 weights at p: 16-byte loads (8-byte for NV = 2).
template <int NV>
__device__ __forceinline__ void load_weights(const float* p, float (&out)[NV]) {
  if constexpr (NV % 4 == 0) {
#pragma unroll
    for (int i = 0; i < NV; i += 4) {
      const float4 v = __ldg(reinterpret_cast<const float4*>(p + i));
      out[i] = v.x, out[i + 1] = v.y, out[i + 2] = v.z, out[i + 3] = v.w;
    }
  } else {
    static_assert(NV == 2, "weight vectors of 2, 4 or 8 floats");
    const float2 v = __ldg(reinterpret_cast<const float2*>(p));
    out[0] = v.x, out[1] = v.y;
  }
}

template <typename T, int NV, int KW, int S, int PW>
__global__ void __launch_bounds__(256) depthwise_tiled_kernel(DwParams p) {
  pdl_wait_then_release();
  // Channel slices vary fastest: a pixel's slices share cache sectors at their edges, and are read
  // together that way.
  const int c0 = ((blockIdx.x % p.slices) * blockDim.x + threadIdx.x) * NV;
  int tile = blockIdx.x / p.slices;
  const int tile_w = tile % p.tiles_w;
  tile /= p.tiles_w;
  const int tile_h = tile % p.tiles_h;
  const int n = tile / p.tiles_h;
  const int oh = tile_h * p.th + threadIdx.y / p.sb;
  const int ow0 = (tile_w * p.sb + threadIdx.y % p.sb) * PW;
  if (c0 >= p.k || oh >= p.oh || ow0 >= p.ow) return;

  const T* x = static_cast<const T*>(p.x);
  float acc[PW][NV];
#pragma unroll
  for (int j = 0; j < PW; ++j)
#pragma unroll
    for (int v = 0; v < NV; ++v) acc[j][v] = 0.0f;
  const int iw0 = ow0 * S - p.pl;
  for (int r = 0; r < p.kh; ++r) {
    const int ih = oh * p.sh - p.pt + r * p.dh;
    if (static_cast<unsigned>(ih) >= static_cast<unsigned>(p.h)) continue;  // zero padding
    const T* xrow = x + (static_cast<int64_t>(n) * p.h + ih) * p.w_in * p.k + c0;
    float wv[KW][NV];
#pragma unroll
    for (int s = 0; s < KW; ++s) load_weights<NV>(p.w + (r * KW + s) * p.k + c0, wv[s]);
#pragma unroll
    for (int ci = 0; ci < (PW - 1) * S + KW; ++ci) {
      const int iw = iw0 + ci;
      float xv[NV];
      if (static_cast<unsigned>(iw) < static_cast<unsigned>(p.w_in)) {
        load_ro<T, NV>(xrow + static_cast<int64_t>(iw) * p.k, xv);
      } else {
#pragma unroll
        for (int v = 0; v < NV; ++v) xv[v] = 0.0f;
      }
      // Input column ci feeds output j through tap s where ci = j·S + s.
#pragma unroll
      for (int s = 0; s < KW; ++s) {
        const int d = ci - s;
        if (d >= 0 && d % S == 0 && d / S < PW)
#pragma unroll
          for (int v = 0; v < NV; ++v) acc[d / S][v] = fmaf(xv[v], wv[s][v], acc[d / S][v]);
      }
    }
  }

  float bv[NV];
  if (p.bias) {
    load_ro<T, NV>(static_cast<const T*>(p.bias) + c0, bv);
  } else {
#pragma unroll
    for (int v = 0; v < NV; ++v) bv[v] = 0.0f;
  }
  const int64_t row = (static_cast<int64_t>(n) * p.oh + oh) * p.ow;
  with_act(p.act, [&](auto act) {
#pragma unroll
    for (int j = 0; j < PW; ++j) {
      if (ow0 + j >= p.ow) break;
      const int64_t o = (row + ow0 + j) * p.k + c0;
      float out[NV];
#pragma unroll
      for (int v = 0; v < NV; ++v) out[v] = acc[j][v] + bv[v];
      if (p.z) {
        float zv[NV];
        load_rw<T, NV>(static_cast<const T*>(p.z) + o, zv);
#pragma unroll
        for (int v = 0; v < NV; ++v) out[v] += zv[v];
      }
#pragma unroll
      for (int v = 0; v < NV; ++v) out[v] = apply_act_as<decltype(act)::value>(out[v], p.act);
      store_vec<T, NV>(static_cast<T*>(p.y) + o, out);
    }
  });
}

// The shared-memory kernel, for stride 1 without dilation, M = 1 and slices of 32 channels. A
// block stages the input patch its th x tw outputs read ((th + KH - 1) x (tw + KW - 1) pixels of
// its 32 channels, converted to fp32 once, zeros for the padding) and the slice's weights in
// shared memory. A thread then computes 2 x PC outputs of one channel pair: for each window row
// it holds KW weight pairs, and each of the 2 x (PC + KW - 1) input pairs it reads feeds every
// output whose window covers it, all operands 8-byte shared loads that a half-warp (16 channel
// pairs, 128 bytes) reads without bank conflicts. The tiled kernel above reads each input vector
// once per output row from L1 and converts it each time (ncu: 3.4 instructions per FMA at
// ConvNeXt's first 7x7). Neither wins everywhere: the route's tuner times both per shape.
constexpr int kSmemChannels = 32, kSmemRows = 2;

/// The outputs a thread of the shared-memory kernel computes along a row of a patch tw wide.
constexpr int smem_strip(int tw) { return tw % 8 == 0 ? 8 : 7; }

/// Shared memory of the kernel for a patch of th x tw outputs of a kh x kw window, in bytes.
size_t smem_bytes(int th, int tw, int kh, int kw) {
  return sizeof(float) * kSmemChannels * (size_t(th + kh - 1) * (tw + kw - 1) + size_t(kh) * kw);
}

// TW, the patch's width, and PC, the outputs per thread along it, are compile-time: PC is 8, or 7
// for a 14-wide patch, which tiles the maps of ImageNet CNNs (multiples of 7) where a 16-wide one
// computed 30% more outputs than a 56x56 map has. The staging loop's pixel index is then a
// division by a constant, and 4 of its loads are in flight; ncu had the staging at 36% of the
// kernel's warp samples at ConvNeXt's first 7x7, but these two changes alone moved the 16x16
// patch's time by 1% (docs/benchmarks.md).
template <typename T, int KW, int TW, int PC>
__global__ void __launch_bounds__(256) depthwise_smem_kernel(DwParams p) {
  static_assert(TW % PC == 0, "a patch is whole strips");
  constexpr int cols = TW + KW - 1, quads = kSmemChannels / 4;
  extern __shared__ float4 smem4[];
  float* xs = reinterpret_cast<float*>(smem4);  // [rows][cols][32]: the input patch
  pdl_wait_then_release();
  const int rows = p.th + p.kh - 1;
  float* ws = xs + rows * cols * kSmemChannels;  // [kh][KW][32]: the slice's weights
  int b = blockIdx.x;
  const int c0 = (b % p.slices) * kSmemChannels;
  b /= p.slices;
  const int oh0 = (b % p.tiles_h) * p.th;
  b /= p.tiles_h;
  const int ow0 = (b % p.tiles_w) * TW;
  const int n = b / p.tiles_w;
  const T* x = static_cast<const T*>(p.x) + static_cast<int64_t>(n) * p.h * p.w_in * p.k + c0;
  // 4 channels (one vector of T) per thread and step; neighbouring threads take one pixel's 32.
  const int total = rows * cols * quads;
#pragma unroll 4
  for (int q = threadIdx.x; q < total; q += blockDim.x) {
    const int pix = q / quads, cq = (q % quads) * 4;
    const int r = pix / cols, ih = oh0 - p.pt + r, iw = ow0 - p.pl + (pix - r * cols);
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (static_cast<unsigned>(ih) < static_cast<unsigned>(p.h) && static_cast<unsigned>(iw) < static_cast<unsigned>(p.w_in))
      load_vec<T, 4>(x + (static_cast<int64_t>(ih) * p.w_in + iw) * p.k + cq, v);
    reinterpret_cast<float4*>(xs)[q] = make_float4(v[0], v[1], v[2], v[3]);
  }
  for (int q = threadIdx.x; q < p.kh * KW * quads; q += blockDim.x) {
    const int tap = q / quads, cq = (q % quads) * 4;
    reinterpret_cast<float4*>(ws)[q] = __ldg(reinterpret_cast<const float4*>(p.w + tap * p.k + c0 + cq));
  }
  __syncthreads();

  const int pair = threadIdx.x % (kSmemChannels / 2), spatial = threadIdx.x / (kSmemChannels / 2);
  constexpr int strips = TW / PC;
  const int lr = (spatial / strips) * kSmemRows, lc = (spatial % strips) * PC;
  float2 acc[kSmemRows][PC];
#pragma unroll
  for (int i = 0; i < kSmemRows; ++i)
#pragma unroll
    for (int j = 0; j < PC; ++j) acc[i][j] = make_float2(0.0f, 0.0f);
  for (int r = 0; r < p.kh; ++r) {
    float2 wv[KW];
#pragma unroll
    for (int s = 0; s < KW; ++s) wv[s] = reinterpret_cast<const float2*>(ws + (r * KW + s) * kSmemChannels)[pair];
#pragma unroll
    for (int i = 0; i < kSmemRows; ++i) {
      const float2* row = reinterpret_cast<const float2*>(xs + ((lr + i + r) * cols + lc) * kSmemChannels) + pair;
#pragma unroll
      for (int ci = 0; ci < PC + KW - 1; ++ci) {
        const float2 xv = row[ci * (kSmemChannels / 2)];
        // Input column ci feeds output j through tap s = ci - j.
#pragma unroll
        for (int s = 0; s < KW; ++s) {
          const int j = ci - s;
          if (j >= 0 && j < PC) {
            acc[i][j].x = fmaf(xv.x, wv[s].x, acc[i][j].x);
            acc[i][j].y = fmaf(xv.y, wv[s].y, acc[i][j].y);
          }
        }
      }
    }
  }

  const int c = c0 + 2 * pair;
  float bv[2] = {0.0f, 0.0f};
  if (p.bias) load_vec<T, 2>(static_cast<const T*>(p.bias) + c, bv);
  with_act(p.act, [&](auto act) {
    constexpr Act A = decltype(act)::value;
#pragma unroll
    for (int i = 0; i < kSmemRows; ++i) {
      const int oh = oh0 + lr + i;
      if (oh >= p.oh) break;
#pragma unroll
      for (int j = 0; j < PC; ++j) {
        const int ow = ow0 + lc + j;
        if (ow >= p.ow) break;
        const int64_t o = ((static_cast<int64_t>(n) * p.oh + oh) * p.ow + ow) * p.k + c;
        float out[2] = {acc[i][j].x + bv[0], acc[i][j].y + bv[1]};
        if (p.z) {
          float zv[2];
          load_vec<T, 2>(static_cast<const T*>(p.z) + o, zv);
          out[0] += zv[0], out[1] += zv[1];
        }
        out[0] = apply_act_as<A>(out[0], p.act), out[1] = apply_act_as<A>(out[1], p.act);
        store_vec<T, 2>(static_cast<T*>(p.y) + o, out);
      }
    }
  });
}

constexpr int kGenericChannels = 4;

template <typename T>
__global__ void __launch_bounds__(256) depthwise_generic_kernel(DwParams p) {
  pdl_wait_then_release();
  const T* x = static_cast<const T*>(p.x);
  const T* bias = static_cast<const T*>(p.bias);
  const T* z = static_cast<const T*>(p.z);
  T* y = static_cast<T*>(p.y);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < p.total; i += int64_t(gridDim.x) * blockDim.x) {
    const int k0 = static_cast<int>(i % p.groups) * kGenericChannels;
    int64_t pix = i / p.groups;
    const int ow = static_cast<int>(pix % p.ow);
    pix /= p.ow;
    const int oh = static_cast<int>(pix % p.oh);
    const int64_t n = pix / p.oh;
    const int lanes = min(kGenericChannels, p.k - k0);
    float acc[kGenericChannels] = {};
    for (int r = 0; r < p.kh; ++r) {
      const int ih = oh * p.sh - p.pt + r * p.dh;
      if (static_cast<unsigned>(ih) >= static_cast<unsigned>(p.h)) continue;
      for (int s = 0; s < p.kw; ++s) {
        const int iw = ow * p.sw - p.pl + s * p.dw;
        if (static_cast<unsigned>(iw) >= static_cast<unsigned>(p.w_in)) continue;
        const T* xp = x + ((n * p.h + ih) * p.w_in + iw) * p.c;
        const float* wp = p.w + (r * p.kw + s) * p.k + k0;
#pragma unroll
        for (int v = 0; v < kGenericChannels; ++v)
          if (v < lanes) acc[v] = fmaf(to_compute(xp[p.m == 1 ? k0 + v : (k0 + v) / p.m]), __ldg(wp + v), acc[v]);
      }
    }
    const int64_t o = ((n * p.oh + oh) * p.ow + ow) * p.k + k0;
#pragma unroll
    for (int v = 0; v < kGenericChannels; ++v) {
      if (v >= lanes) break;
      float out = acc[v];
      if (bias) out += to_compute(bias[k0 + v]);
      if (z) out += to_compute(z[o + v]);
      y[o + v] = from_compute<T>(apply_act(out, p.act));
    }
  }
}

// ---- configurations ----

struct Config {
  const char* name;  // the tuning cache's identity: keep stable
  int vec_bytes;     // 0: the generic kernel, or the shared-memory one when patch_rows > 0
  int pixels;        // PW
  int threads;       // per block, at most: fewer where the kernel holds many registers, for occupancy
  int patch_rows = 0, patch_cols = 0;  // the shared-memory kernel's output patch
  int mma_channels = 0, mma_row_tiles = 0, mma_col_tiles = 0;  // the banded tensor-core kernel's tile
  bool banded() const { return mma_channels > 0; }
  DepthwiseMmaTile mma_tile() const {
    DepthwiseMmaTile t;
    t.channels = mma_channels, t.row_tiles = mma_row_tiles, t.col_tiles = mma_col_tiles;
    return t;
  }
};

constexpr Config kConfigs[] = {
    {"generic", 0, 1, 256},
    {"v16 p4 b256", 16, 4, 256},
    {"v16 p8 b256", 16, 8, 256},
    {"v8 p4 b256", 8, 4, 256},
    {"v8 p8 b256", 8, 8, 256},
    {"v16 p4 b128", 16, 4, 128},
    {"v16 p8 b128", 16, 8, 128},
    {"v8 p4 b128", 8, 4, 128},
    {"v8 p8 b128", 8, 8, 128},
    {"smem 4x8", 0, 0, 0, 4, 8},
    {"smem 8x8", 0, 0, 0, 8, 8},
    {"smem 8x16", 0, 0, 0, 8, 16},
    {"smem 16x16", 0, 0, 0, 16, 16},
    {"smem 14x14", 0, 0, 0, 14, 14},
    // Channel pairs, 2-byte storage only: ShuffleNetV2's 58 and 116 channels, which no 8-byte
    // vector divides, would otherwise take the generic kernel, one channel group per thread.
    {"v4 p4 b256", 4, 4, 256},
    {"v4 p8 b256", 4, 8, 256},
    // The banded kernel on tensor cores (depthwise_mma.cuh), fp16 and bf16: channels, then output
    // rows x columns a block. 56, 28, 14 and 7 wide maps (ImageNet CNNs' stages) each have a tile.
    {"mma c8 16x56", 0, 0, 0, 0, 0, 8, 1, 7},
    {"mma c8 32x56", 0, 0, 0, 0, 0, 8, 2, 7},
    {"mma c8 32x32", 0, 0, 0, 0, 0, 8, 2, 4},
    {"mma c16 16x56", 0, 0, 0, 0, 0, 16, 1, 7},
    {"mma c16 16x32", 0, 0, 0, 0, 0, 16, 1, 4},
    {"mma c16 16x16", 0, 0, 0, 0, 0, 16, 1, 2},
    {"mma c16 16x8", 0, 0, 0, 0, 0, 16, 1, 1},
    // 2 pixels a thread, at W stride 2 only: twice the threads of the 4-pixel strips. On an H100
    // they ran MobileNetV3's and EfficientNet's stride-2 convs 7-14% faster than every other
    // configuration, and no stride-1 shape (nor 1 pixel a thread, on any shape) faster
    // (GpuDepthwise.Bandwidth, docs/benchmarks.md).
    {"v16 p2 b256", 16, 2, 256},
    {"v8 p2 b256", 8, 2, 256},
};
constexpr int kConfigCount = static_cast<int>(sizeof(kConfigs) / sizeof(kConfigs[0]));

bool fits_int(int64_t v) { return v >= 0 && v <= INT32_MAX; }

/// The tiled kernel's block shape and grid for config cf; false when the grid does not fit.
bool depthwise_tiles(const DepthwiseShape& s, int elem_bytes, const Config& cf, DwParams* p, dim3* grid, dim3* block) {
  const int64_t nv = cf.vec_bytes / elem_bytes, groups = s.channels_out() / nv;
  const int64_t gmax = 128 / cf.vec_bytes;
  // Channel vectors per block: a divisor of the groups (no idle threads) unless only a small one
  // exists, then the whole 128 bytes and an idle part in the last slice.
  int64_t gx = std::min(groups, gmax);
  while (groups % gx != 0) --gx;
  if (2 * gx < std::min(groups, gmax)) gx = std::min(groups, gmax);
  const int64_t slices = (groups + gx - 1) / gx;
  const int64_t strips = (s.ow + cf.pixels - 1) / cf.pixels;
  // Smaller blocks for a small conv (ConvNeXt's and MobileNet's late layers), so that there are
  // at least two per multiprocessor.
  const int64_t threads = s.batch * s.oh * strips * slices * gx;
  const int64_t budget = std::clamp<int64_t>(threads / (2 * std::max(1, s.multiprocessors)), 32, cf.threads);
  const int64_t ty_max = std::max<int64_t>(1, budget / gx);
  // The patch of rows x strips that reads the fewest input pixels (its halo included) per output
  // it computes, counting the idle threads of partial patches at the edges.
  const int64_t win_h = (s.kh - 1) * s.dil_h + 1, win_w = s.kw;
  int64_t best_sb = 1;
  double best = 0;
  for (int64_t sb = 1; sb <= std::min(strips, ty_max); ++sb) {
    const int64_t th = std::min(s.oh, ty_max / sb), cols = sb * cf.pixels;
    const double halo =
        double((th - 1) * s.stride_h + win_h) * double((cols - 1) * s.stride_w + win_w) / double(th * cols);
    const double waste =
        double((strips + sb - 1) / sb * sb) * double((s.oh + th - 1) / th * th) / double(strips * s.oh);
    if (sb == 1 || halo * waste < best) best = halo * waste, best_sb = sb;
  }
  const int64_t sb = best_sb, th = std::min(s.oh, ty_max / sb);
  const int64_t tiles_w = (strips + sb - 1) / sb, tiles_h = (s.oh + th - 1) / th;
  const int64_t blocks = s.batch * tiles_w * tiles_h;
  if (!fits_int(blocks * slices)) return false;
  p->sb = static_cast<int>(sb), p->th = static_cast<int>(th);
  p->tiles_w = static_cast<int>(tiles_w), p->tiles_h = static_cast<int>(tiles_h);
  p->slices = static_cast<int>(slices);
  *grid = dim3(static_cast<unsigned>(blocks * slices));
  *block = dim3(static_cast<unsigned>(gx), static_cast<unsigned>(sb * th));
  return true;
}

/// One window's kernel at the asked W stride; a configuration that only pays at stride 2 has no
/// stride-1 instance (half the kernels to compile).
template <typename T, int NV, int K, int PW, bool kStride2Only>
void launch_window(const DwParams& p, int sw, dim3 grid, dim3 block, cudaStream_t s) {
  auto go = [&](auto kernel) { launch_pdl("depthwise_tiled_kernel", kernel, grid, block, 0, s, p); };
  if (sw == 2) return go(depthwise_tiled_kernel<T, NV, K, 2, PW>);
  if constexpr (!kStride2Only) {
    if (sw == 1) return go(depthwise_tiled_kernel<T, NV, K, 1, PW>);
  }
  internal_error("the tiled depthwise conv was asked for a stride it has no kernel for");
}

template <typename T, int NV, int PW, bool kStride2Only = false>
void launch_tiled(const DwParams& p, int kw, int sw, dim3 grid, dim3 block, cudaStream_t s) {
  switch (kw) {
    case 3:
      return launch_window<T, NV, 3, PW, kStride2Only>(p, sw, grid, block, s);
    case 5:
      return launch_window<T, NV, 5, PW, kStride2Only>(p, sw, grid, block, s);
    case 7:
      return launch_window<T, NV, 7, PW, kStride2Only>(p, sw, grid, block, s);
    default:
      internal_error("the tiled depthwise conv was asked for a window it has no kernel for");
  }
}

/// The vector width in elements and the pixels per thread as template arguments.
template <typename T>
void launch_tiled_config(const Config& cf, const DwParams& p, int kw, int sw, dim3 grid, dim3 block, cudaStream_t s) {
  constexpr int kWide = 16 / sizeof(T), kNarrow = 8 / sizeof(T);
  if (cf.vec_bytes == 16 && cf.pixels == 4) return launch_tiled<T, kWide, 4>(p, kw, sw, grid, block, s);
  if (cf.vec_bytes == 16 && cf.pixels == 8) return launch_tiled<T, kWide, 8>(p, kw, sw, grid, block, s);
  if (cf.vec_bytes == 8 && cf.pixels == 4) return launch_tiled<T, kNarrow, 4>(p, kw, sw, grid, block, s);
  if (cf.vec_bytes == 8 && cf.pixels == 8) return launch_tiled<T, kNarrow, 8>(p, kw, sw, grid, block, s);
  if (cf.vec_bytes == 16 && cf.pixels == 2) return launch_tiled<T, kWide, 2, true>(p, kw, sw, grid, block, s);
  if (cf.vec_bytes == 8 && cf.pixels == 2) return launch_tiled<T, kNarrow, 2, true>(p, kw, sw, grid, block, s);
  if constexpr (sizeof(T) == 2) {
    if (cf.vec_bytes == 4 && cf.pixels == 4) return launch_tiled<T, 2, 4>(p, kw, sw, grid, block, s);
    if (cf.vec_bytes == 4 && cf.pixels == 8) return launch_tiled<T, 2, 8>(p, kw, sw, grid, block, s);
  }
  internal_error("a depthwise configuration without a kernel");
}

/// Whether the shared-memory kernel takes the shape (the window's height bounded so that a patch
/// of the largest configuration stays within the opt-in shared memory).
bool smem_kernel_takes(const DepthwiseShape& s) {
  return s.m == 1 && s.stride_h == 1 && s.stride_w == 1 && s.dil_h == 1 && s.dil_w == 1 &&
         (s.kw == 3 || s.kw == 5 || s.kw == 7) && s.kh <= 7 && s.channels_out() % kSmemChannels == 0;
}

/// The grid of the shared-memory kernel for config cf; false when it does not fit.
bool smem_tiles(const DepthwiseShape& s, const Config& cf, DwParams* p, dim3* grid, dim3* block) {
  const int64_t tiles_h = (s.oh + cf.patch_rows - 1) / cf.patch_rows, tiles_w = (s.ow + cf.patch_cols - 1) / cf.patch_cols;
  const int64_t slices = s.channels_out() / kSmemChannels, blocks = s.batch * tiles_h * tiles_w * slices;
  if (!fits_int(blocks)) return false;
  p->th = cf.patch_rows, p->tw = cf.patch_cols;  // tw: the kernel's TW, checked at the launch
  p->tiles_h = static_cast<int>(tiles_h), p->tiles_w = static_cast<int>(tiles_w), p->slices = static_cast<int>(slices);
  *grid = dim3(static_cast<unsigned>(blocks));
  *block = dim3((kSmemChannels / 2) * (cf.patch_rows / kSmemRows) * (cf.patch_cols / smem_strip(cf.patch_cols)));
  return true;
}

template <typename T, int KW, int TW>
void launch_smem_kw(const DwParams& p, dim3 grid, dim3 block, cudaStream_t s) {
  auto kernel = depthwise_smem_kernel<T, KW, TW, smem_strip(TW)>;
  // The largest patch a configuration of this width stages (16 rows, kh <= 7).
  allow_dynamic_smem(reinterpret_cast<const void*>(kernel), static_cast<int>(smem_bytes(16, TW, 7, KW)),
                     "depthwise_smem_kernel (shared memory past 48 KB)");
  launch_pdl("depthwise_smem_kernel", kernel, grid, block, smem_bytes(p.th, TW, p.kh, KW), s, p);
}

template <typename T, int KW>
void launch_smem_tw(const DwParams& p, dim3 grid, dim3 block, cudaStream_t s) {
  switch (p.tw) {
    case 8:
      return launch_smem_kw<T, KW, 8>(p, grid, block, s);
    case 14:
      return launch_smem_kw<T, KW, 14>(p, grid, block, s);
    case 16:
      return launch_smem_kw<T, KW, 16>(p, grid, block, s);
    default:
      internal_error("the shared-memory depthwise conv was asked for a patch width it has no kernel for");
  }
}

template <typename T>
void launch_smem(const DwParams& p, dim3 grid, dim3 block, cudaStream_t s) {
  switch (p.kw) {
    case 3:
      return launch_smem_tw<T, 3>(p, grid, block, s);
    case 5:
      return launch_smem_tw<T, 5>(p, grid, block, s);
    case 7:
      return launch_smem_tw<T, 7>(p, grid, block, s);
    default:
      internal_error("the shared-memory depthwise conv was asked for a window it has no kernel for");
  }
}

}  // namespace

const char* depthwise_refusal(const DepthwiseShape& s, DType dtype) {
  if (dtype != DType::Float32 && dtype != DType::Float16 && dtype != DType::BFloat16)
    return "the depthwise conv stores float32, float16 or bfloat16 only";
  if (s.batch < 1 || s.c < 1 || s.m < 1 || s.oh < 1 || s.ow < 1 || s.kh < 1 || s.kw < 1 || s.stride_h < 1 ||
      s.stride_w < 1 || s.dil_h < 1 || s.dil_w < 1 || s.pad_top < 0 || s.pad_left < 0)
    return "an empty depthwise conv";
  for (int64_t v : {s.batch, s.h, s.w, s.c, s.channels_out(), s.oh, s.ow, s.kh * s.kw * s.channels_out(), s.stride_h,
                    s.stride_w, s.dil_h, s.dil_w, s.pad_top, s.pad_left, s.oh * s.stride_h + s.kh * s.dil_h,
                    s.ow * s.stride_w + s.kw * s.dil_w})
    if (!fits_int(v)) return "a depthwise conv past 32-bit dims";
  return nullptr;
}

int depthwise_config_count() { return kConfigCount; }

const char* depthwise_config_name(int config) {
  return config >= 0 && config < kConfigCount ? kConfigs[config].name : "none";
}

bool depthwise_config_applies(const DepthwiseShape& s, DType dtype, int config) {
  if (config < 0 || config >= kConfigCount || depthwise_refusal(s, dtype)) return false;
  const Config& cf = kConfigs[config];
  if (cf.banded()) return depthwise_mma_takes(s, dtype, cf.mma_tile());
  if (cf.patch_rows > 0) {
    DwParams p{};
    dim3 grid, block;
    return smem_kernel_takes(s) && smem_tiles(s, cf, &p, &grid, &block);
  }
  if (cf.vec_bytes == 0) return true;
  const int es = static_cast<int>(dtype_size(dtype));
  if (cf.vec_bytes / es < 2) return false;  // the weights are read in pairs at least
  if (s.m != 1 || s.dil_w != 1 || (s.kw != 3 && s.kw != 5 && s.kw != 7) || (s.stride_w != 1 && s.stride_w != 2) ||
      s.channels_out() % (cf.vec_bytes / es) != 0 || (cf.pixels == 2 && s.stride_w != 2))
    return false;
  DwParams p{};
  dim3 grid, block;
  return depthwise_tiles(s, es, cf, &p, &grid, &block);
}

bool launch_depthwise(const DepthwiseArgs& a, int config, cudaStream_t stream) {
  if (!depthwise_config_applies(a.s, a.dtype, config) || !a.x || !a.w || !a.y) return false;
  const DepthwiseShape& s = a.s;
  const Config& cf = kConfigs[config];
  if (cf.banded()) return launch_depthwise_mma(a, cf.mma_tile(), stream);
  DwParams p{};
  p.x = a.x, p.w = a.w, p.bias = a.bias, p.z = a.z, p.y = a.y;
  p.h = static_cast<int>(s.h), p.w_in = static_cast<int>(s.w), p.c = static_cast<int>(s.c);
  p.k = static_cast<int>(s.channels_out()), p.m = static_cast<int>(s.m);
  p.oh = static_cast<int>(s.oh), p.ow = static_cast<int>(s.ow);
  p.kh = static_cast<int>(s.kh), p.kw = static_cast<int>(s.kw);
  p.sh = static_cast<int>(s.stride_h), p.sw = static_cast<int>(s.stride_w);
  p.dh = static_cast<int>(s.dil_h), p.dw = static_cast<int>(s.dil_w);
  p.pt = static_cast<int>(s.pad_top), p.pl = static_cast<int>(s.pad_left);
  p.act = a.act;
  if (cf.patch_rows > 0) {
    // Vectors of 4 elements in, pairs out: x 4-element aligned, y, z and the bias 2-element.
    const int es = static_cast<int>(dtype_size(a.dtype));
    if (!aligned_to(a.x, 4 * es) || !aligned_to(a.w, 16)) return false;
    for (const void* q : {static_cast<const void*>(a.y), a.z, a.bias})
      if (q && !aligned_to(q, 2 * es)) return false;
    dim3 grid, block;
    if (!smem_tiles(s, cf, &p, &grid, &block)) return false;
    return dispatch_float_storage(a.dtype, [&](auto tag) {
      using T = decltype(tag);
      if constexpr (!std::is_same_v<T, double>) launch_smem<T>(p, grid, block, stream);
    });
  }
  if (cf.vec_bytes == 0) {
    p.groups = (p.k + kGenericChannels - 1) / kGenericChannels;
    p.total = s.batch * s.oh * s.ow * p.groups;
    return dispatch_float_storage(a.dtype, [&](auto tag) {
      using T = decltype(tag);
      if constexpr (!std::is_same_v<T, double>)
        launch_pdl("depthwise_generic_kernel", depthwise_generic_kernel<T>, dim3(grid_for(p.total)), dim3(kBlock), 0,
                   stream, p);
    });
  }
  for (const void* q : {a.x, static_cast<const void*>(a.y), a.z, a.bias})
    if (q && !aligned_to(q, cf.vec_bytes)) return false;
  if (!aligned_to(a.w, 16)) return false;
  dim3 grid, block;
  if (!depthwise_tiles(s, static_cast<int>(dtype_size(a.dtype)), cf, &p, &grid, &block)) return false;
  const int kw = p.kw, sw = p.sw;
  return dispatch_float_storage(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, double>) launch_tiled_config<T>(cf, p, kw, sw, grid, block, stream);
  });
}

}  // namespace fusec::cuda
