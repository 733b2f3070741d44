// Channels-last window pools (MaxPool, AveragePool, LpPool over 2-D and 3-D windows) for the
// planner's NHWC conv regions: DenseNet's transition AveragePools, ResNet's and GoogLeNet's
// MaxPools, a video model's MaxPool3d over N,D,H,W,C. One
// thread per output pixel and 16 bytes of its channels: a warp's loads of one tap are one run of
// adjacent channels, and every tap's result goes straight into registers, so the pool moves data
// near the copy rate (cuDNN's NHWC average pool ran DenseNet-121's at 9% of it). The taps walked,
// the divisors and NaN handling are the NCHW kernel's (pool_taps.cuh), so both layouts agree.
#include <type_traits>

#include "backend/cuda/core/common.cuh"
#include "backend/cuda/ops/movement/movement.cuh"
#include "backend/cuda/ops/pool/pool.cuh"
#include "backend/cuda/ops/pool/pool_taps.cuh"

namespace fusec::cuda {

namespace {

struct NhwcArgs {
  int32_t in_h, in_w, out_h, out_w, k_h, k_w, s_h, s_w, d_h, d_w, pb_h, pb_w, pe_h, pe_w;
  int32_t in_d, out_d, k_d, s_d, d_d, pb_d, pe_d;  // frames: 1 (and a window of 1) for 2-D pools
  int32_t vectors;                                 // channel vectors per pixel: C / V
  uint32_t n;                                      // threads: N * out_d * out_h * out_w * vectors
  FastDiv f_vectors, f_out_w, f_out_h, f_out_d;
  bool include_pad;
  int p;
};

// k3d: a window over frames too (N,D,H,W,C); without it the frame arithmetic compiles away.
template <typename T, int kKind, int V, bool k3d>
__global__ void __launch_bounds__(kBlock)
    pool_nhwc_kernel(const T* __restrict__ x, T* __restrict__ y, const __grid_constant__ NhwcArgs a) {
  const int32_t C = a.vectors * V;
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += gridDim.x * blockDim.x) {
    const uint32_t pixel = a.f_vectors.div(i);
    const int32_t vec = static_cast<int32_t>(i - pixel * a.vectors);
    const uint32_t row = a.f_out_w.div(pixel);
    const int32_t ow = static_cast<int32_t>(pixel - row * a.out_w);
    uint32_t img = a.f_out_h.div(row);
    const int32_t oh = static_cast<int32_t>(row - img * a.out_h);
    int32_t sd = 0, lo_d = 0, hi_d = 1, in_d = 1;
    if constexpr (k3d) {
      const uint32_t frame = img;
      img = a.f_out_d.div(frame);
      sd = static_cast<int32_t>(frame - img * a.out_d) * a.s_d - a.pb_d;
      tap_range<int32_t>(a.k_d, a.in_d, a.d_d, sd, lo_d, hi_d);
      in_d = a.in_d;
    }
    const int32_t sh = oh * a.s_h - a.pb_h, sw = ow * a.s_w - a.pb_w;
    int32_t lo_h, hi_h, lo_w, hi_w;
    tap_range<int32_t>(a.k_h, a.in_h, a.d_h, sh, lo_h, hi_h);
    tap_range<int32_t>(a.k_w, a.in_w, a.d_w, sw, lo_w, hi_w);
    const T* xp = x + static_cast<int64_t>(img) * in_d * a.in_h * a.in_w * C + vec * V;
    constexpr bool kMax = kKind == static_cast<int>(PoolKind::Max);
    float acc[V];
    bool nan[V];
#pragma unroll
    for (int k = 0; k < V; ++k) {
      acc[k] = kMax ? neg_inf<float>() : 0.0f;
      nan[k] = false;
    }
    for (int32_t kd = lo_d; kd < hi_d; ++kd)
      for (int32_t kh = lo_h; kh < hi_h; ++kh) {
        const T* rowp =
            xp + (static_cast<int64_t>(sd + kd * (k3d ? a.d_d : 1)) * a.in_h + sh + kh * a.d_h) * a.in_w * C;
        for (int32_t kw = lo_w; kw < hi_w; ++kw) {
          float v[V];
          load_vec<T, V>(rowp + static_cast<int64_t>(sw + kw * a.d_w) * C, v);
#pragma unroll
        for (int k = 0; k < V; ++k) {
          if constexpr (kMax) {
            nan[k] |= v[k] != v[k];
            acc[k] = v[k] > acc[k] ? v[k] : acc[k];
          } else if constexpr (kKind == static_cast<int>(PoolKind::Lp)) {
            acc[k] += lp_term(v[k], a.p);
          } else {
            acc[k] += v[k];
          }
        }
      }
    }
    float out[V];
    if constexpr (kMax) {
#pragma unroll
      for (int k = 0; k < V; ++k) out[k] = nan[k] ? qnan<float>() : acc[k];
    } else if constexpr (kKind == static_cast<int>(PoolKind::Lp)) {
#pragma unroll
      for (int k = 0; k < V; ++k) out[k] = lp_root(acc[k], a.p);
    } else {
      // Divisor: taps inside the input, or with count_include_pad inside the padded input.
      int32_t count = (hi_d - lo_d) * (hi_h - lo_h) * (hi_w - lo_w);
      if (a.include_pad) {
        int32_t plo_d = 0, phi_d = 1, plo_h, phi_h, plo_w, phi_w;
        if constexpr (k3d) tap_range<int32_t>(a.k_d, a.in_d + a.pb_d + a.pe_d, a.d_d, sd + a.pb_d, plo_d, phi_d);
        tap_range<int32_t>(a.k_h, a.in_h + a.pb_h + a.pe_h, a.d_h, sh + a.pb_h, plo_h, phi_h);
        tap_range<int32_t>(a.k_w, a.in_w + a.pb_w + a.pe_w, a.d_w, sw + a.pb_w, plo_w, phi_w);
        count = (phi_d - plo_d) * (phi_h - plo_h) * (phi_w - plo_w);
      }
#pragma unroll
      for (int k = 0; k < V; ++k) out[k] = count > 0 ? acc[k] / static_cast<float>(count) : qnan<float>();
    }
    store_vec<T, V>(y + static_cast<int64_t>(i) * V, out);
  }
}

}  // namespace

bool pool_nhwc_covers(const PoolPlan& p) {
  if (p.dtype != DType::Float32 && p.dtype != DType::Float16 && p.dtype != DType::BFloat16) return false;
  if ((p.nd != 2 && p.nd != 3) || p.channels <= 0 || p.planes % p.channels != 0) return false;
  const int64_t n = p.planes / p.channels;
  // 32-bit indexing: every input and output element, and the padded extents the taps walk (a 2-D
  // plan's frame dim is 1).
  const bool narrow =
      fits32(p.planes * p.in[0] * p.in[1] * p.in[2]) && fits32(p.planes * p.out[0] * p.out[1] * p.out[2]) && n > 0;
  bool small = true;
  for (int q = 0; q < 3; ++q) small = small && p.in[q] + p.pb[q] + p.pe[q] + p.k[q] * p.d[q] < (int64_t{1} << 30);
  return narrow && small;
}

bool launch_pool_nhwc(const PoolPlan& p, const void* x, void* y, cudaStream_t s) {
  if (!pool_nhwc_covers(p)) return false;
  NhwcArgs a{};
  a.in_h = static_cast<int32_t>(p.in[1]);
  a.in_w = static_cast<int32_t>(p.in[2]);
  a.out_h = static_cast<int32_t>(p.out[1]);
  a.out_w = static_cast<int32_t>(p.out[2]);
  a.k_h = static_cast<int32_t>(p.k[1]);
  a.k_w = static_cast<int32_t>(p.k[2]);
  a.s_h = static_cast<int32_t>(p.s[1]);
  a.s_w = static_cast<int32_t>(p.s[2]);
  a.d_h = static_cast<int32_t>(p.d[1]);
  a.d_w = static_cast<int32_t>(p.d[2]);
  a.pb_h = static_cast<int32_t>(p.pb[1]);
  a.pb_w = static_cast<int32_t>(p.pb[2]);
  a.pe_h = static_cast<int32_t>(p.pe[1]);
  a.pe_w = static_cast<int32_t>(p.pe[2]);
  a.in_d = static_cast<int32_t>(p.in[0]);
  a.out_d = static_cast<int32_t>(p.out[0]);
  a.k_d = static_cast<int32_t>(p.k[0]);
  a.s_d = static_cast<int32_t>(p.s[0]);
  a.d_d = static_cast<int32_t>(p.d[0]);
  a.pb_d = static_cast<int32_t>(p.pb[0]);
  a.pe_d = static_cast<int32_t>(p.pe[0]);
  a.include_pad = p.include_pad;
  a.p = p.p;
  const int64_t images = p.planes / p.channels;
  if (images * a.out_d * a.out_h * a.out_w == 0) return true;
  return dispatch_float_storage(p.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, double>) {
      constexpr int kVec = 16 / sizeof(T);
      const bool vectors = p.channels % kVec == 0 && aligned16(x) && aligned16(y);
      auto go = [&](auto vec_tag, auto kind_tag) {
        constexpr int V = decltype(vec_tag)::value;
        constexpr int K = decltype(kind_tag)::value;
        a.vectors = static_cast<int32_t>(p.channels / V);
        a.n = static_cast<uint32_t>(images * a.out_d * a.out_h * a.out_w * a.vectors);
        a.f_vectors = FastDiv(static_cast<uint32_t>(a.vectors));
        a.f_out_w = FastDiv(static_cast<uint32_t>(a.out_w));
        a.f_out_h = FastDiv(static_cast<uint32_t>(a.out_h));
        a.f_out_d = FastDiv(static_cast<uint32_t>(a.out_d));
        if (p.nd == 3)
          pool_nhwc_kernel<T, K, V, true>
              <<<grid_for(a.n), kBlock, 0, s>>>(static_cast<const T*>(x), static_cast<T*>(y), a);
        else
          pool_nhwc_kernel<T, K, V, false>
              <<<grid_for(a.n), kBlock, 0, s>>>(static_cast<const T*>(x), static_cast<T*>(y), a);
        check_launch("pool_nhwc_kernel");
      };
      auto by_kind = [&](auto vec_tag) {
        switch (p.kind) {
          case PoolKind::Max:
            go(vec_tag, std::integral_constant<int, 0>{});
            break;
          case PoolKind::Average:
            go(vec_tag, std::integral_constant<int, 1>{});
            break;
          case PoolKind::Lp:
            go(vec_tag, std::integral_constant<int, 2>{});
            break;
        }
      };
      if (vectors)
        by_kind(std::integral_constant<int, kVec>{});
      else
        by_kind(std::integral_constant<int, 1>{});
    }
  });
}

}  // namespace fusec::cuda
