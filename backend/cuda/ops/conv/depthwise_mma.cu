// The depthwise conv's banded tensor-core kernel (depthwise_mma.cuh).
//
// Per channel, 8 neighbouring outputs of one row take their window row r from 16 neighbouring
// input columns (32 at W stride 2): y[i][j] += Σ_k x[i·sh + r·dh][k] · B_r[k][j], where B_r is
// band-shaped, B_r[k][j] = w[r][s] where k = SW·j + s·dw and 0 elsewhere. With 16 output rows as
// the rows of the product, that is one mma.sync m16n8k16 per window row (two at W stride 2), fp16
// or bf16 operands and fp32 accumulators: the window's arithmetic leaves the FMA pipe, which the
// FMA kernels were bound by at 7×7. Most of the band's products are with zeros; the tensor cores
// have the throughput to spare.
//
// A block owns 8 or 16 channels of a patch of 16·MT output rows × 8·NT columns:
// 1. It stages the input patch the outputs need into shared memory, channel-major (a channel's
//    rows of columns, contiguous: ldmatrix's layout), zeros outside the image, from 16-byte loads
//    of each pixel's channels.
// 2. Each warp takes its channels: it loads its lanes' band fragments of every window row, built
//    once at plan time from the weights rounded to the storage type (depthwise_mma_band), then
//    runs the products, A straight from the staged rows by ldmatrix.
// 3. The sums go through shared memory back to channels-last, and the epilogue (bias, residual,
//    activation: epilogue_act.cuh, in fp32, one rounding at the store) writes 16-byte vectors.
//
// Inf and NaN. A band multiplies every column of its 16 by a weight, zero outside the window,
// and 0·inf is NaN: an infinite input would turn outputs whose windows miss it into NaN. A block
// whose patch holds a non-finite value (checked while staging) computes its outputs the direct way
// instead, in fp32 from the staged patch, as the FMA kernels do.
#include <algorithm>
#include <type_traits>

#include "backend/cuda/core/check.h"
#include "backend/cuda/core/common.cuh"
#include "backend/cuda/core/mma_sync.cuh"
#include "backend/cuda/ops/conv/depthwise_mma.cuh"
#include "backend/cuda/ops/elementwise/epilogue_act.cuh"
#include "ir/half.h"

namespace fusec::cuda {

namespace {

constexpr int kThreads = 256, kWarps = kThreads / 32;
constexpr int kMaxWindowRows = 7;
// A block's shared memory at most: two blocks per multiprocessor.
constexpr size_t kSmemCap = 100 * 1024;

struct MmaParams {
  const void* x;
  const float* w;     // [R][S][K] fp32: the direct path's
  const uint2* band;  // the band fragments (depthwise_mma_band)
  const void* bias;
  const void* z;
  void* y;
  int h, w_in, k, oh, ow, kh, kw, sh, dh, dw, pt, pl;
  ActParams act;
  int slices, tiles_w, tiles_h;
  int rows_in, plane_in;  // the staged patch: rows, and halves between channels
};

/// The staged patch's columns for NT products of 8 outputs at W stride SW (the last product's 16·SW
/// columns included), and the halves between its rows: an odd number of 16-byte groups, so that
/// the 8 rows one ldmatrix phase reads fall in different banks.
__host__ __device__ constexpr int patch_cols(int nt, int sw) { return 8 * (nt + 1) * sw; }
__host__ __device__ constexpr int patch_pitch(int nt, int sw) {
  return (patch_cols(nt, sw) / 8) % 2 == 1 ? patch_cols(nt, sw) : patch_cols(nt, sw) + 8;
}

/// Halves from the start of the staged patch to channel c's plane: a skew of 32 halves per 8
/// channels, so that the two 8-channel vectors of a 16-channel pixel stage into different banks.
__host__ __device__ constexpr int in_plane(int c, int plane) { return c * plane + (c / 8) * 32; }

/// The sums' tile, channels-last in fp32 (a pixel's channels side by side, as the epilogue reads
/// them, 16 bytes at a time): rows of 8·NT pixels, 4 floats of skew between rows.
__host__ __device__ constexpr int sums_pitch(int channels, int nt) { return 8 * nt * channels + 4; }
/// Where a pixel's 16-byte chunk of sums sits among its CH / 4: rotated by the pixel's column, so
/// that the 8 lanes of one 16-byte shared load (consecutive pixels, 32 or 64 bytes apart) read 8
/// different bank groups.
template <int CH>
__device__ __forceinline__ int sums_chunk(int col, int chunk) {
  constexpr int q = CH / 4;
  return chunk ^ ((col / (8 / q)) % q);
}
constexpr size_t sums_bytes(int channels, int mt, int nt) {
  return size_t(16 * mt) * sums_pitch(channels, nt) * sizeof(float);
}

/// Folds 16-bit values two to a word into `acc`: afterwards a half of acc has its top bit set when
/// some value had an all-ones exponent (inf or NaN). The exponent masked and plus one ulp of
/// exponent carries into the sign bit only from all ones, and never into the neighbouring half.
template <typename T>
__device__ __forceinline__ void fold_nonfinite(uint32_t w, uint32_t& acc) {
  constexpr uint32_t e = std::is_same_v<T, __half> ? 0x7C00u : 0x7F80u,
                     one = std::is_same_v<T, __half> ? 0x0400u : 0x0080u;
  acc |= (w & (e | e << 16)) + (one | one << 16);
}

/// Channel e's two columns (low half: the first) from the 8 channels of two neighbouring pixels.
__device__ __forceinline__ uint32_t column_pair(const uint4& a, const uint4& b, int e) {
  const uint32_t wa = e < 2 ? a.x : e < 4 ? a.y : e < 6 ? a.z : a.w;
  const uint32_t wb = e < 2 ? b.x : e < 4 ? b.y : e < 6 ? b.z : b.w;
  return __byte_perm(wa, wb, e % 2 == 0 ? 0x5410 : 0x7632);
}

template <typename T>
__device__ __forceinline__ float finish(float v, const T* bias, int c, const T* z, int64_t o, const ActParams& act) {
  if (bias) v += to_compute(bias[c]);
  if (z) v += to_compute(z[o]);
  return apply_act(v, act);
}

// Registers for 4 blocks a multiprocessor where a warp holds at most 16 accumulators, 3 up to 32,
// else 2 (GpuDepthwise.Bandwidth: the 32-accumulator tiles ran slower held to 64 registers).
template <typename T, int CH, int MT, int NT, int SW>
__global__ void __launch_bounds__(kThreads, SW == 2 || CH / 8 * MT * NT > 8 ? 2
                                            : CH / 8 * MT * NT > 4          ? 3
                                                                            : 4) depthwise_mma_kernel(MmaParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int kRows = 16 * MT, kCols = 8 * NT, kPitch = sums_pitch(CH, NT);
  constexpr int kPatchCols = patch_cols(NT, SW), kPatchPitch = patch_pitch(NT, SW);
  constexpr int V = CH / 8, CPW = CH / kWarps;
  static_assert(CH % kWarps == 0 && CH % 8 == 0, "whole 16-byte vectors, the same channels per warp");
  pdl_wait_then_release();
  int b = blockIdx.x;
  const int slice = b % p.slices;
  b /= p.slices;
  const int tw = b % p.tiles_w;
  b /= p.tiles_w;
  const int th = b % p.tiles_h;
  const int n = b / p.tiles_h;
  const int c0 = slice * CH, oh0 = th * kRows, ow0 = tw * kCols;
  const int ih0 = oh0 * p.sh - p.pt, iw0 = ow0 * SW - p.pl;

  // 1. Stage the patch: in[c][row][col]. A thread takes two neighbouring pixels' 16-byte vectors
  // at a time (the same vector of channels throughout), 4 pairs in flight, and writes each channel's
  // two columns as one word.
  unsigned short* in = reinterpret_cast<unsigned short*>(smem);
  const T* x = static_cast<const T*>(p.x) + static_cast<int64_t>(n) * p.h * p.w_in * p.k + c0;
  bool nonfinite;
  {
    const int v = threadIdx.x % V, pairs = kPatchCols / 2, step = kThreads / V;
    const int drow = step / pairs, dpair = step % pairs;
    int row = (threadIdx.x / V) / pairs, pair = (threadIdx.x / V) % pairs;
    uint32_t seen = 0;
    unsigned short* plane = in + in_plane(v * 8, p.plane_in);
    while (row < p.rows_in) {
      uint4 q[4][2];
      int at[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        at[u] = row < p.rows_in ? row * kPatchPitch + 2 * pair : -1;
        const int ih = ih0 + row, iw = iw0 + 2 * pair;
        const bool in_rows = row < p.rows_in && static_cast<unsigned>(ih) < static_cast<unsigned>(p.h);
        const T* src = x + (static_cast<int64_t>(ih) * p.w_in + iw) * p.k + v * 8;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          q[u][h] = make_uint4(0, 0, 0, 0);
          if (in_rows && static_cast<unsigned>(iw + h) < static_cast<unsigned>(p.w_in))
            q[u][h] = __ldg(reinterpret_cast<const uint4*>(src + h * p.k));
        }
        pair += dpair, row += drow;
        if (pair >= pairs) pair -= pairs, ++row;
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        if (at[u] < 0) break;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          fold_nonfinite<T>(q[u][h].x, seen), fold_nonfinite<T>(q[u][h].y, seen);
          fold_nonfinite<T>(q[u][h].z, seen), fold_nonfinite<T>(q[u][h].w, seen);
        }
#pragma unroll
        for (int e = 0; e < 8; ++e)
          *reinterpret_cast<uint32_t*>(plane + e * p.plane_in + at[u]) = column_pair(q[u][0], q[u][1], e);
      }
    }
    nonfinite = (seen & 0x80008000u) != 0;
  }

  const T* bias = static_cast<const T*>(p.bias);
  const T* z = static_cast<const T*>(p.z);
  T* y = static_cast<T*>(p.y);
  if (__syncthreads_or(nonfinite)) {
    // The direct way (the header comment says why), one output element a thread at a time.
    const T* patch = reinterpret_cast<const T*>(in);
    for (int i = threadIdx.x; i < CH * kRows * kCols; i += kThreads) {
      const int lc = i % CH, pix = i / CH, row = pix / kCols, col = pix % kCols;
      const int oh = oh0 + row, ow = ow0 + col;
      if (oh >= p.oh || ow >= p.ow) continue;
      float acc = 0.0f;
      for (int r = 0; r < p.kh; ++r)
        for (int s = 0; s < p.kw; ++s)
          acc = fmaf(
              to_compute(patch[in_plane(lc, p.plane_in) + (row * p.sh + r * p.dh) * kPatchPitch + col * SW + s * p.dw]),
              __ldg(p.w + (r * p.kw + s) * p.k + c0 + lc), acc);
      const int64_t o = ((static_cast<int64_t>(n) * p.oh + oh) * p.ow + ow) * p.k + c0 + lc;
      y[o] = from_compute<T>(finish(acc, bias, c0 + lc, z, o, p.act));
    }
    return;
  }

  // 2. The banded products, a warp's channels one after another.
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  float acc[CPW][MT][NT][4];
#pragma unroll
  for (int cc = 0; cc < CPW; ++cc)
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[cc][m][j][e] = 0.0f;
  const uint32_t in_s = static_cast<uint32_t>(__cvta_generic_to_shared(in));
  const int lrow = lane % 16, lcol = (lane / 16) * 8;  // ldmatrix: lanes 0-15 give the rows, 16-31 the right half
#pragma unroll
  for (int cc = 0; cc < CPW; ++cc) {
    const int lc = warp + cc * kWarps;
    // This lane's part of each B_r (depthwise_mma_band), one 8-byte load per window row and K-step.
    uint32_t band[kMaxWindowRows][SW][2];
    const uint2* bc = p.band + static_cast<int64_t>(c0 + lc) * p.kh * SW * 32 + lane;
#pragma unroll
    for (int r = 0; r < kMaxWindowRows; ++r)
#pragma unroll
      for (int q = 0; q < SW; ++q) {
        const uint2 v = r < p.kh ? __ldg(bc + (r * SW + q) * 32) : make_uint2(0, 0);
        band[r][q][0] = v.x, band[r][q][1] = v.y;
      }
    const uint32_t plane = in_s + 2u * static_cast<uint32_t>(in_plane(lc, p.plane_in));
    // Window rows outermost: the products in a row of the loop go to different accumulators.
    // Neighbouring products share half their A columns (8 of 16 at W stride 1: the right half of
    // product j is the left half of j + 1; at stride 2, product j's second K-step is j + 1's
    // first), so each 16-column fragment is read from shared memory once, not twice: ldmatrix's
    // reads were most of the shared-memory traffic this kernel is bound by.
#pragma unroll
    for (int r = 0; r < kMaxWindowRows; ++r) {
      if (r >= p.kh) break;
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        const uint32_t row = plane + 2u * static_cast<uint32_t>(((16 * m + lrow) * p.sh + r * p.dh) * kPatchPitch);
        uint32_t a[4];
        ldsm_x4(row + 2u * lcol, a);
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          if constexpr (SW == 1) {
            if (j > 0) {
              a[0] = a[2], a[1] = a[3];
              ldsm_x2(row + 2u * (8 * j + 8), a[2], a[3]);
            }
            mma<T>(acc[cc][m][j], a, band[r][0][0], band[r][0][1]);
          } else {
            uint32_t next[4];
            ldsm_x4(row + 2u * (16 * (j + 1) + lcol), next);
            mma<T>(acc[cc][m][j], a, band[r][0][0], band[r][0][1]);
            mma<T>(acc[cc][m][j], next, band[r][1][0], band[r][1][1]);
            a[0] = next[0], a[1] = next[1], a[2] = next[2], a[3] = next[3];
          }
        }
      }
    }
  }

  // 3. The sums back to channels-last through shared memory (over the patch, once every warp has
  // read it), then the epilogue in 16-byte vectors, the bias loaded once (a thread keeps its
  // channels) and the activation's switch out of the loop where there is none.
  __syncthreads();
  float* out = reinterpret_cast<float*>(smem);
#pragma unroll
  for (int cc = 0; cc < CPW; ++cc)
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const int lc = warp + cc * kWarps, col = 8 * j + 2 * t;
        float* o = out + (16 * m + g) * kPitch + col * CH + 4 * sums_chunk<CH>(col, lc / 4) + lc % 4;
        o[0] = acc[cc][m][j][0], o[CH] = acc[cc][m][j][1];
        o[8 * kPitch] = acc[cc][m][j][2], o[8 * kPitch + CH] = acc[cc][m][j][3];
      }
  __syncthreads();
  const int v = threadIdx.x % V;
  float b8[8] = {};
  if (bias) load_vec<T, 8>(bias + c0 + v * 8, b8);
  auto epilogue = [&](auto activation) {
    for (int pix = threadIdx.x / V; pix < kRows * kCols; pix += kThreads / V) {
      const int row = pix / kCols, col = pix % kCols, oh = oh0 + row, ow = ow0 + col;
      if (oh >= p.oh || ow >= p.ow) continue;
      const float* sp = out + row * kPitch + col * CH;
      const float4 lo = *reinterpret_cast<const float4*>(sp + 4 * sums_chunk<CH>(col, 2 * v));
      const float4 hi = *reinterpret_cast<const float4*>(sp + 4 * sums_chunk<CH>(col, 2 * v + 1));
      float r8[8] = {lo.x + b8[0], lo.y + b8[1], lo.z + b8[2], lo.w + b8[3],
                     hi.x + b8[4], hi.y + b8[5], hi.z + b8[6], hi.w + b8[7]};
      const int64_t o = ((static_cast<int64_t>(n) * p.oh + oh) * p.ow + ow) * p.k + c0 + v * 8;
      if (z) {
        float z8[8];
        load_vec<T, 8>(z + o, z8);
#pragma unroll
        for (int e = 0; e < 8; ++e) r8[e] += z8[e];
      }
      if constexpr (decltype(activation)::value)
#pragma unroll
        for (int e = 0; e < 8; ++e) r8[e] = apply_act(r8[e], p.act);
      store_vec<T, 8>(y + o, r8);
    }
  };
  if (p.act.act == Act::None)
    epilogue(std::false_type{});
  else
    epilogue(std::true_type{});
}

/// The staged patch's geometry and the block's shared memory for tile t.
struct Geometry {
  int rows_in = 0, plane_in = 0;
  size_t smem = 0;
};

Geometry geometry(const DepthwiseShape& s, const DepthwiseMmaTile& t) {
  Geometry g;
  const int64_t rows = (16 * int64_t(t.row_tiles) - 1) * s.stride_h + (s.kh - 1) * s.dil_h + 1;
  if (rows > 1024) {  // far past what shared memory holds
    g.smem = SIZE_MAX;
    return g;
  }
  g.rows_in = static_cast<int>(rows);
  g.plane_in = g.rows_in * patch_pitch(t.col_tiles, static_cast<int>(s.stride_w));
  const size_t in_bytes = size_t(in_plane(t.channels, g.plane_in)) * 2;
  g.smem = std::max(in_bytes, sums_bytes(t.channels, t.row_tiles, t.col_tiles));
  return g;
}

bool fits_int(int64_t v) { return v >= 0 && v <= INT32_MAX; }

template <typename T, int CH, int MT, int NT, int SW>
void launch_tile(const MmaParams& p, dim3 grid, size_t smem, cudaStream_t s) {
  static_assert(sums_bytes(CH, MT, NT) <= kSmemCap, "the sums' tile fits the shared memory asked");
  auto kernel = depthwise_mma_kernel<T, CH, MT, NT, SW>;
  allow_dynamic_smem(reinterpret_cast<const void*>(kernel), static_cast<int>(kSmemCap),
                     "depthwise_mma_kernel (shared memory past 48 KB)");
  launch_pdl("depthwise_mma_kernel", kernel, grid, dim3(kThreads), smem, s, p);
}

/// The tile's template arguments: the configurations depthwise.cu offers, and no others.
#define FUSEC_DW_MMA_TILES(X) X(8, 1, 7) X(8, 2, 7) X(8, 2, 4) X(16, 1, 7) X(16, 1, 4) X(16, 1, 2) X(16, 1, 1)

/// The tile's template arguments: the tiles depthwise.cu offers, and no others.
template <typename T, int SW>
bool launch_sw(const DepthwiseMmaTile& t, const MmaParams& p, dim3 grid, size_t smem, cudaStream_t s) {
#define FUSEC_DW_MMA_CASE(ch, mt, nt)                               \
  if (t.channels == ch && t.row_tiles == mt && t.col_tiles == nt) { \
    launch_tile<T, ch, mt, nt, SW>(p, grid, smem, s);               \
    return true;                                                    \
  }
  FUSEC_DW_MMA_TILES(FUSEC_DW_MMA_CASE)
#undef FUSEC_DW_MMA_CASE
  return false;
}

bool tile_built(const DepthwiseMmaTile& t) {
#define FUSEC_DW_MMA_CASE(ch, mt, nt) \
  if (t.channels == ch && t.row_tiles == mt && t.col_tiles == nt) return true;
  FUSEC_DW_MMA_TILES(FUSEC_DW_MMA_CASE)
#undef FUSEC_DW_MMA_CASE
  return false;
}

}  // namespace

bool depthwise_mma_shape_ok(const DepthwiseShape& s, DType dtype) {
  if ((dtype != DType::Float16 && dtype != DType::BFloat16) || depthwise_refusal(s, dtype)) return false;
  if (s.m != 1 || s.c % 8 != 0 || s.kh > kMaxWindowRows || (s.stride_h != 1 && s.stride_h != 2) ||
      (s.stride_w != 1 && s.stride_w != 2))
    return false;
  // The band: 8 outputs' windows within the 16·SW columns of one product.
  return (s.kw - 1) * s.dil_w <= 9 * s.stride_w - 1;
}

bool depthwise_mma_takes(const DepthwiseShape& s, DType dtype, const DepthwiseMmaTile& t) {
  if (!depthwise_mma_shape_ok(s, dtype) || !tile_built(t) || s.c % t.channels != 0) return false;
  const Geometry g = geometry(s, t);
  if (g.smem > kSmemCap) return false;
  const int64_t tiles_h = (s.oh + 16 * t.row_tiles - 1) / (16 * t.row_tiles);
  const int64_t tiles_w = (s.ow + 8 * t.col_tiles - 1) / (8 * t.col_tiles);
  return fits_int(s.batch * tiles_h * tiles_w * (s.c / t.channels));
}

std::vector<uint32_t> depthwise_mma_band(const DepthwiseShape& s, DType dtype, const Tensor& weights) {
  std::vector<uint32_t> band;
  if (!depthwise_mma_shape_ok(s, dtype) || weights.numel() != s.c * s.kh * s.kw) return band;
  const int sw = static_cast<int>(s.stride_w);
  band.resize(static_cast<size_t>(s.c * s.kh) * sw * 32 * 2);
  auto bits = [&](double w) -> uint32_t {
    return dtype == DType::Float16 ? float_to_half(static_cast<float>(w)) : float_to_bf16(static_cast<float>(w));
  };
  size_t at = 0;
  for (int64_t c = 0; c < s.c; ++c)
    for (int64_t r = 0; r < s.kh; ++r)
      for (int q = 0; q < sw; ++q)
        for (int lane = 0; lane < 32; ++lane)
          for (int h = 0; h < 2; ++h) {
            // The m16n8k16 B layout: this lane holds column j = lane / 4 at rows k, k + 1.
            uint32_t word = 0;
            for (int e = 0; e < 2; ++e) {
              const int64_t d = 16 * q + 8 * h + 2 * (lane % 4) + e - sw * (lane / 4);
              if (d >= 0 && d % s.dil_w == 0 && d / s.dil_w < s.kw)
                word |= bits(weights.as_double((c * s.kh + r) * s.kw + d / s.dil_w)) << (16 * e);
            }
            band[at++] = word;
          }
  return band;
}

bool launch_depthwise_mma(const DepthwiseArgs& a, const DepthwiseMmaTile& t, cudaStream_t stream) {
  const DepthwiseShape& s = a.s;
  if (!depthwise_mma_takes(s, a.dtype, t) || !a.x || !a.w || !a.band || !a.y) return false;
  for (const void* q : {a.x, static_cast<const void*>(a.y), a.z, a.bias})
    if (q && !aligned16(q)) return false;
  const Geometry g = geometry(s, t);
  MmaParams p{};
  p.x = a.x, p.w = a.w, p.bias = a.bias, p.z = a.z, p.y = a.y;
  p.band = static_cast<const uint2*>(a.band);
  p.h = static_cast<int>(s.h), p.w_in = static_cast<int>(s.w), p.k = static_cast<int>(s.c);
  p.oh = static_cast<int>(s.oh), p.ow = static_cast<int>(s.ow);
  p.kh = static_cast<int>(s.kh), p.kw = static_cast<int>(s.kw);
  p.sh = static_cast<int>(s.stride_h), p.dh = static_cast<int>(s.dil_h), p.dw = static_cast<int>(s.dil_w);
  p.pt = static_cast<int>(s.pad_top), p.pl = static_cast<int>(s.pad_left);
  p.act = a.act;
  p.slices = static_cast<int>(s.c / t.channels);
  p.tiles_w = static_cast<int>((s.ow + 8 * t.col_tiles - 1) / (8 * t.col_tiles));
  p.tiles_h = static_cast<int>((s.oh + 16 * t.row_tiles - 1) / (16 * t.row_tiles));
  p.rows_in = g.rows_in, p.plane_in = g.plane_in;
  const dim3 grid(static_cast<unsigned>(s.batch * p.tiles_h * p.tiles_w * p.slices));
  const bool wide = s.stride_w == 2;
  if (a.dtype == DType::Float16)
    return wide ? launch_sw<__half, 2>(t, p, grid, g.smem, stream) : launch_sw<__half, 1>(t, p, grid, g.smem, stream);
  return wide ? launch_sw<__nv_bfloat16, 2>(t, p, grid, g.smem, stream)
              : launch_sw<__nv_bfloat16, 1>(t, p, grid, g.smem, stream);
}

}  // namespace fusec::cuda
