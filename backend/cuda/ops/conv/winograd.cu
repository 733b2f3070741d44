// Winograd F(4x4, 3x3) convolution; see winograd.cuh. The transforms are Lavin and Gray's
// ("Fast Algorithms for Convolutional Neural Networks", 2015), interpolation points 0, ±1, ±2.
#include "backend/cuda/ops/conv/winograd.cuh"

#include <algorithm>
#include <climits>

#include "backend/cuda/core/common.cuh"
#include "backend/cuda/ops/gemm/sgemm_core.cuh"

namespace fusec::cuda {

namespace {

constexpr int kXi = 36;  // positions of a transformed 6x6 tile: the GEMMs of one conv

// B^T x for one 6-vector (the input transform, applied to columns then rows).
__device__ __forceinline__ void bt6(const float (&d)[6], float (&o)[6]) {
  o[0] = 4.0f * d[0] - 5.0f * d[2] + d[4];
  o[1] = -4.0f * (d[1] + d[2]) + d[3] + d[4];
  o[2] = 4.0f * (d[1] - d[2]) - d[3] + d[4];
  o[3] = 2.0f * (d[3] - d[1]) - d[2] + d[4];
  o[4] = 2.0f * (d[1] - d[3]) - d[2] + d[4];
  o[5] = 4.0f * d[1] - 5.0f * d[3] + d[5];
}

// A^T x for one 6-vector (the output transform).
__device__ __forceinline__ void at6(const float (&m)[6], float (&o)[4]) {
  const float p12 = m[1] + m[2], m12 = m[1] - m[2], p34 = m[3] + m[4], m34 = m[3] - m[4];
  o[0] = m[0] + p12 + p34;
  o[1] = m12 + 2.0f * m34;
  o[2] = p12 + 4.0f * p34;
  o[3] = m12 + 8.0f * m34 + m[5];
}

// One thread per (channel, tile): its 6x6 window (zeros in the padding) to the 36 planes of V.
// Channel-major, consecutive threads take consecutive tiles of one channel, so their windows'
// rows overlap in L1 and their stores to V[ξ][c][t] are consecutive; tile-major, consecutive
// channels of one tile, for stores to V[ξ][t][c].
template <bool TILE_MAJOR>
__global__ void __launch_bounds__(256) winograd_input_kernel(const float* __restrict__ x, float* __restrict__ v, int c,
                                                             int h, int w, int th, int tw, int T) {
  const int total = c * T;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
    const int t = TILE_MAJOR ? i / c : i % T, ch = TILE_MAJOR ? i - t * c : i / T;
    const int tx = t % tw, r = t / tw, ty = r % th, n = r / th;
    const float* src = x + (int64_t(n) * c + ch) * h * w;
    const int h0 = ty * 4 - 1, w0 = tx * 4 - 1;
    float d[6][6];
#pragma unroll
    for (int a = 0; a < 6; ++a)
#pragma unroll
      for (int b = 0; b < 6; ++b) {
        const int hh = h0 + a, ww = w0 + b;
        d[a][b] = unsigned(hh) < unsigned(h) && unsigned(ww) < unsigned(w) ? __ldg(src + hh * w + ww) : 0.0f;
      }
    float cols[6][6];  // B^T d, column by column
#pragma unroll
    for (int b = 0; b < 6; ++b) {
      const float col[6] = {d[0][b], d[1][b], d[2][b], d[3][b], d[4][b], d[5][b]};
      float o[6];
      bt6(col, o);
#pragma unroll
      for (int a = 0; a < 6; ++a) cols[a][b] = o[a];
    }
    const int plane = c * T;
    float* dst = v + (TILE_MAJOR ? t * c + ch : ch * T + t);
#pragma unroll
    for (int a = 0; a < 6; ++a) {
      float o[6];
      bt6(cols[a], o);
#pragma unroll
      for (int b = 0; b < 6; ++b) dst[(a * 6 + b) * plane] = o[b];
    }
  }
}

// A block of 32 items (output channel, tile) and six warps: warp b loads column b of the items'
// 6x6 products and folds it to A^T M[:, b]; then warp a < 4 folds row a of that to the items'
// output rows and runs the FusedConv epilogue on them (one 16-byte word per row where w % 4 == 0
// and y, residual are 16-byte aligned). In either layout item i's products sit at offset i of
// each plane, so every load is a warp's 32 consecutive floats. One thread per item, with 36 loads
// in a row, ran the late layers' 14x14 and 7x7 outputs (32-64 K items, under 16 warps per SM)
// far slower than cuDNN; eight lanes per item (a lane per column) slowed the 56x56 ones down with
// half-used sectors.
constexpr int kOutItems = 32;
template <bool TILE_MAJOR>
__global__ void __launch_bounds__(6 * 32)
    winograd_output_kernel(const float* __restrict__ m, const float* __restrict__ bias, const float* residual, float* y,
                           int cout, int h, int w, int th, int tw, int T, SgemmAct act, bool vec) {
  __shared__ float folded[4][6][kOutItems];
  const int total = cout * T, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int item = blockIdx.x * kOutItems + lane, i = min(item, total - 1);
  {
    const int plane = cout * T;
    const float* src = m + i + warp * plane;
    float col[6], o[4];
#pragma unroll
    for (int a = 0; a < 6; ++a) col[a] = __ldg(src + a * 6 * plane);
    at6(col, o);
#pragma unroll
    for (int a = 0; a < 4; ++a) folded[a][warp][lane] = o[a];
  }
  __syncthreads();
  const int t = TILE_MAJOR ? i / cout : i % T, k = TILE_MAJOR ? i - t * cout : i / T;
  const int tx = t % tw, r = t / tw, ty = r % th, n = r / th, hh = ty * 4 + warp;
  if (warp >= 4 || item >= total || hh >= h) return;
  float row[6], o[4];
#pragma unroll
  for (int b = 0; b < 6; ++b) row[b] = folded[warp][b][lane];
  at6(row, o);
  const float b0 = bias ? __ldg(bias + k) : 0.0f;
  const int64_t off = (int64_t(n) * cout + k) * h * w + int64_t(hh) * w + tx * 4;
  if (vec) {
    float4 z = residual ? *reinterpret_cast<const float4*>(residual + off) : make_float4(0, 0, 0, 0);
    z.x = sgemm_core::activate(o[0] + b0 + z.x, act), z.y = sgemm_core::activate(o[1] + b0 + z.y, act);
    z.z = sgemm_core::activate(o[2] + b0 + z.z, act), z.w = sgemm_core::activate(o[3] + b0 + z.w, act);
    *reinterpret_cast<float4*>(y + off) = z;
  } else {
#pragma unroll
    for (int b = 0; b < 4; ++b)
      if (tx * 4 + b < w) y[off + b] = sgemm_core::activate(o[b] + b0 + (residual ? residual[off + b] : 0.0f), act);
  }
}

// One thread per (output channel, input channel): U = G g G^T in double, rounded once. On the
// device, because every warm build plans the route again: on the host the transform of
// ResNet-50's 13 filters took a large share of the warm build.
__global__ void winograd_filter_kernel(const float* __restrict__ w, float* __restrict__ u, int cout, int c,
                                       bool tile_major) {
  const double G[6][3] = {{1.0 / 4, 0, 0},
                          {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                          {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                          {1.0 / 24, 1.0 / 12, 1.0 / 6},
                          {1.0 / 24, -1.0 / 12, 1.0 / 6},
                          {0, 0, 1}};
  const int total = cout * c;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
    const int k = i / c, ch = i - k * c;
    double g[9];
#pragma unroll
    for (int j = 0; j < 9; ++j) g[j] = w[int64_t(i) * 9 + j];
    double gg[6][3];  // G g
#pragma unroll
    for (int a = 0; a < 6; ++a)
#pragma unroll
      for (int j = 0; j < 3; ++j) gg[a][j] = G[a][0] * g[j] + G[a][1] * g[3 + j] + G[a][2] * g[6 + j];
    const int at = tile_major ? ch * cout + k : i;
#pragma unroll
    for (int a = 0; a < 6; ++a)
#pragma unroll
      for (int b = 0; b < 6; ++b)
        u[(a * 6 + b) * total + at] = static_cast<float>(gg[a][0] * G[b][0] + gg[a][1] * G[b][1] + gg[a][2] * G[b][2]);
  }
}

template <int BM, int BN, int BK, int TM, int TN, int WR, int STAGES, int MIN_BLOCKS>
bool launch_batched(const SgemmBatchedArgs& a, cudaStream_t s) {
  return sgemm_core::launch_tiled_kernel<SgemmBatchedArgs, BM, BN, BK, TM, TN, WR, STAGES, MIN_BLOCKS,
                                         sgemm_core::kBatched>(a, s);
}

struct GemmConfig {
  const char* name;
  bool (*launch)(const SgemmBatchedArgs&, cudaStream_t);
};
// The GEMM's tiles (sgemm.cu) that fit the transformed problems' sizes: ResNet-50's, at batch
// 16, run 36 GEMMs of 64 x 3136 x 64 (channel-major) down to 64 x 512 x 512 (tile-major).
//                                                    BM   BN  BK TM TN WR ST MIN
const GemmConfig kGemmConfigs[] = {
    {"64x128 t8x8 128thr 2/SM", launch_batched<64, 128, 16, 8, 8, 4, 4, 2>},
    {"128x128 t8x8 256thr 2/SM", launch_batched<128, 128, 16, 8, 8, 4, 3, 2>},
    {"128x96 t4x12 256thr 2/SM", launch_batched<128, 96, 16, 4, 12, 4, 3, 2>},
    {"64x96 t4x8 192thr 3/SM", launch_batched<64, 96, 16, 4, 8, 8, 4, 3>},
    // Layer 4's 64 x 512 x 512 GEMMs: 288 CTAs; layer 3's 256 x 256 x 256 ones: 576 CTAs, one
    // wave at 5 per SM (a 1.09th wave at 4).
    {"64x64 t4x8 128thr 4/SM", launch_batched<64, 64, 16, 4, 8, 4, 4, 4>},
    {"64x64 t4x8 128thr 5/SM", launch_batched<64, 64, 16, 4, 8, 4, 4, 5>},
};
constexpr int kGemmConfigCount = int(sizeof(kGemmConfigs) / sizeof(kGemmConfigs[0]));

size_t round256(size_t b) { return (b + 255) / 256 * 256; }

}  // namespace

const char* winograd_refusal(const WinogradShape& s, bool tile_major) {
  if (s.batch < 1 || s.c < 1 || s.h < 1 || s.w < 1 || s.cout < 1) return "an empty convolution";
  const int64_t T = s.tiles();
  if (int64_t(kXi) * std::max(s.c, s.cout) * T > INT_MAX ||
      int64_t(s.batch) * std::max(s.c, s.cout) * s.h * s.w > INT_MAX)
    return "tensors beyond 2^31 elements";
  if (int64_t(kXi) * s.c * s.cout > INT_MAX) return "a transformed filter beyond 2^31 elements";
  if (tile_major ? s.cout % 4 != 0 : T % 4 != 0)
    return tile_major ? "output channels not a multiple of 4" : "tiles not a multiple of 4";
  if (int64_t(s.c) > INT_MAX / 256 || (tile_major ? int64_t(s.cout) : T) > INT_MAX / 256)
    return "rows too long for 32-bit tile offsets";
  if ((tile_major ? T : s.cout) > 64 * 65535) return "too many GEMM rows for the grid";
  return nullptr;
}

bool launch_winograd_filter_f32(const float* w, float* u, int cout, int c, bool tile_major, cudaStream_t s) {
  if (cout < 1 || c < 1 || int64_t(kXi) * cout * c > INT_MAX || !w || !u) return false;
  winograd_filter_kernel<<<grid_for(cout * c), 256, 0, s>>>(w, u, cout, c, tile_major);
  return true;
}

int winograd_gemm_config_count() { return kGemmConfigCount; }

const char* winograd_gemm_config_name(int config) {
  return config >= 0 && config < kGemmConfigCount ? kGemmConfigs[config].name : "?";
}

size_t winograd_workspace(const WinogradShape& s) {
  const size_t T = size_t(s.tiles());
  return round256(kXi * size_t(s.c) * T * sizeof(float)) + round256(kXi * size_t(s.cout) * T * sizeof(float));
}

bool launch_winograd_f32(const WinogradArgs& a, int config, cudaStream_t s) {
  const WinogradShape& sh = a.shape;
  if (config < 0 || config >= kGemmConfigCount || winograd_refusal(sh, a.tile_major) || !a.x || !a.u || !a.y ||
      !a.workspace)
    return false;
  const int T = int(sh.tiles()), th = sh.tiles_h(), tw = sh.tiles_w();
  float* v = static_cast<float*>(a.workspace);
  float* m =
      reinterpret_cast<float*>(static_cast<char*>(a.workspace) + round256(kXi * size_t(sh.c) * T * sizeof(float)));

  SgemmBatchedArgs g;
  g.batch = kXi;
  g.K = sh.c;
  if (a.tile_major) {  // M[ξ][T][Cout] = V[ξ][T][C] · U[ξ][C][Cout]
    g.M = T, g.N = sh.cout;
    g.A = v, g.lda = sh.c, g.batch_a = int64_t(T) * sh.c;
    g.B = a.u, g.ldb = sh.cout, g.batch_b = int64_t(sh.c) * sh.cout;
    g.ldc = sh.cout;
  } else {  // M[ξ][Cout][T] = U[ξ][Cout][C] · V[ξ][C][T]
    g.M = sh.cout, g.N = T;
    g.A = a.u, g.lda = sh.c, g.batch_a = int64_t(sh.cout) * sh.c;
    g.B = v, g.ldb = T, g.batch_b = int64_t(sh.c) * T;
    g.ldc = T;
  }
  g.C = m, g.batch_c = int64_t(sh.cout) * T;
  g.ldr = g.ldc;
  if (!aligned16(a.u) || !aligned16(v)) return false;

  if (a.tile_major)
    winograd_input_kernel<true><<<grid_for(sh.c * T), 256, 0, s>>>(a.x, v, sh.c, sh.h, sh.w, th, tw, T);
  else
    winograd_input_kernel<false><<<grid_for(sh.c * T), 256, 0, s>>>(a.x, v, sh.c, sh.h, sh.w, th, tw, T);
  if (!kGemmConfigs[config].launch(g, s)) return false;
  const bool vec = sh.w % 4 == 0 && aligned16(a.y) && (!a.residual || aligned16(a.residual));
  const int out_blocks = (sh.cout * T + kOutItems - 1) / kOutItems;
  if (a.tile_major)
    winograd_output_kernel<true>
        <<<out_blocks, 6 * 32, 0, s>>>(m, a.bias, a.residual, a.y, sh.cout, sh.h, sh.w, th, tw, T, a.act, vec);
  else
    winograd_output_kernel<false>
        <<<out_blocks, 6 * 32, 0, s>>>(m, a.bias, a.residual, a.y, sh.cout, sh.h, sh.w, th, tw, T, a.act, vec);
  return true;
}

}  // namespace fusec::cuda
