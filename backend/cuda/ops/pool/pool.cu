// Pooling kernels. Windowed pools run one thread per output element and walk only the taps that
// fall inside the input (padding never contributes a value, as on the CPU); 2-D max pools with a
// 2×2 or 3×3 window (ResNet's stem) take a specialized kernel with the window unrolled. The global
// pools run one warp per plane (small planes, e.g. ResNet's 7×7) or one block per plane (large
// ones). Accumulation is float32 (float64 for float64 data).
#include <type_traits>

#include "backend/cuda/core/common.cuh"
#include "backend/cuda/ops/movement/movement.cuh"
#include "backend/cuda/ops/pool/pool.cuh"
#include "backend/cuda/ops/pool/pool_taps.cuh"

namespace fusec::cuda {

namespace {

template <typename T>
constexpr bool kIsByte = std::is_same_v<T, int8_t> || std::is_same_v<T, uint8_t>;
template <typename T>
struct PoolAcc {
  using type = typename Compute<T>::type;
};
template <>
struct PoolAcc<int8_t> {
  using type = float;
};
template <>
struct PoolAcc<uint8_t> {
  using type = float;
};

template <typename T>
__device__ __forceinline__ typename PoolAcc<T>::type pload(T v) {
  if constexpr (kIsByte<T>)
    return static_cast<float>(v);
  else
    return to_compute(v);
}
template <typename T, typename A>
__device__ __forceinline__ T pstore(A v) {
  if constexpr (kIsByte<T>)
    return static_cast<T>(v);
  else
    return from_compute<T>(v);
}
/// NaN-propagating max (the first NaN seen wins; any NaN makes the result NaN).
template <typename A>
__device__ __forceinline__ A nan_max(A a, A b) {
  if (a != a) return a;
  if (b != b) return b;
  return a > b ? a : b;
}

struct WinArgs {
  int64_t in[3], k[3], s[3], d[3], pb[3], pe[3], out[3];
  int64_t n, s_in;
  FastDiv f_out[3];
  bool include_pad, col_major;
  int nd, p;
};

template <typename T, int kKind, bool kNarrow>
__global__ void __launch_bounds__(kBlock)
    pool_window_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t* __restrict__ indices,
                       const __grid_constant__ WinArgs a) {
  using A = typename PoolAcc<T>::type;
  // Narrow: input and output both index in 32 bits, so window arithmetic avoids 64-bit math.
  using I = std::conditional_t<kNarrow, int32_t, int64_t>;
  const I in0 = static_cast<I>(a.in[0]), in1 = static_cast<I>(a.in[1]), in2 = static_cast<I>(a.in[2]);
  const I d0 = static_cast<I>(a.d[0]), d1 = static_cast<I>(a.d[1]), d2 = static_cast<I>(a.d[2]);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < a.n; i += int64_t(gridDim.x) * blockDim.x) {
    I o[3], rem = static_cast<I>(i);
#pragma unroll
    for (int q = 2; q >= 0; --q) {
      I t;
      if constexpr (kNarrow)
        t = static_cast<I>(a.f_out[q].div(static_cast<uint32_t>(rem)));
      else
        t = rem / a.out[q];
      o[q] = rem - t * static_cast<I>(a.out[q]);
      rem = t;
    }
    const I plane = rem;
    I st[3], lo[3], hi[3];
#pragma unroll
    for (int q = 0; q < 3; ++q) {
      st[q] = o[q] * static_cast<I>(a.s[q]) - static_cast<I>(a.pb[q]);
      tap_range<I>(static_cast<I>(a.k[q]), static_cast<I>(a.in[q]), static_cast<I>(a.d[q]), st[q], lo[q], hi[q]);
    }
    const T* xp = x + static_cast<int64_t>(plane) * a.s_in;
    if constexpr (kKind == static_cast<int>(PoolKind::Max)) {
      if (!indices) {
        A best = neg_inf<A>();
        bool nan = false;
        for (I k0 = lo[0]; k0 < hi[0]; ++k0)
          for (I k1 = lo[1]; k1 < hi[1]; ++k1) {
            const T* row = xp + ((st[0] + k0 * d0) * in1 + st[1] + k1 * d1) * in2 + st[2];
            for (I k2 = lo[2]; k2 < hi[2]; ++k2) {
              const A v = pload(row[k2 * d2]);
              nan |= v != v;
              best = v > best ? v : best;
            }
          }
        y[i] = pstore<T>(nan ? qnan<A>() : best);
      } else {
        A best = neg_inf<A>();
        int64_t at[3] = {-1, -1, -1};
        bool found = false;
        for (I k0 = lo[0]; k0 < hi[0]; ++k0) {
          const I i0 = st[0] + k0 * d0;
          for (I k1 = lo[1]; k1 < hi[1]; ++k1) {
            const I i1 = st[1] + k1 * d1;
            const T* row = xp + (i0 * in1 + i1) * in2;
            for (I k2 = lo[2]; k2 < hi[2]; ++k2) {
              const I i2 = st[2] + k2 * d2;
              const A v = pload(row[i2]);
              if (!found || v > best || (v != v && best == best)) {  // the first NaN wins
                best = v;
                at[0] = i0;
                at[1] = i1;
                at[2] = i2;
                found = true;
              }
            }
          }
        }
        y[i] = pstore<T>(best);
        int64_t idx = -1;
        if (found) {
          if (!a.col_major) {
            idx = (at[0] * a.in[1] + at[1]) * a.in[2] + at[2];
          } else {
            idx = 0;
            int64_t mult = 1;
            for (int q = 3 - a.nd; q < 3; ++q) {
              idx += at[q] * mult;
              mult *= a.in[q];
            }
          }
          idx += static_cast<int64_t>(plane) * a.s_in;
        }
        indices[i] = idx;
      }
    } else {
      A sum = A(0);
      for (I k0 = lo[0]; k0 < hi[0]; ++k0)
        for (I k1 = lo[1]; k1 < hi[1]; ++k1) {
          const T* row = xp + ((st[0] + k0 * d0) * in1 + st[1] + k1 * d1) * in2 + st[2];
          for (I k2 = lo[2]; k2 < hi[2]; ++k2) {
            const A v = pload(row[k2 * d2]);
            if constexpr (kKind == static_cast<int>(PoolKind::Lp))
              sum += lp_term(v, a.p);
            else
              sum += v;
          }
        }
      if constexpr (kKind == static_cast<int>(PoolKind::Lp)) {
        y[i] = pstore<T>(lp_root(sum, a.p));
      } else {
        // Divisor: taps inside the input, or with count_include_pad inside the padded input (a
        // ceil_mode window can still run past the end padding).
        int64_t count = 1;
#pragma unroll
        for (int q = 0; q < 3; ++q) {
          if (a.include_pad) {
            I plo, phi;
            tap_range<I>(static_cast<I>(a.k[q]), static_cast<I>(a.in[q] + a.pb[q] + a.pe[q]), static_cast<I>(a.d[q]),
                         st[q] + static_cast<I>(a.pb[q]), plo, phi);
            count *= phi - plo;
          } else {
            count *= hi[q] - lo[q];
          }
        }
        y[i] = pstore<T>(count > 0 ? sum / static_cast<A>(count) : qnan<A>());
      }
    }
  }
}

// ---------------------------------------------------------------- 2-D max pool, small window

// ResNet-50's stem MaxPool (3×3, stride 2, pad 1) ran far below the copy rate in
// pool_window_kernel: three divisions per output for the 3-D coordinates, and tap loops with
// runtime bounds, whose loads issue one after another. Here window and stride are template
// parameters, so every tap's load is in flight at once, and each thread makes kMaxPoolRows
// vertically adjacent outputs, loading the input rows their windows share once. Vertically rather
// than horizontally adjacent: lanes stay one output column apart, so one load instruction of a warp
// touches the same few cache lines as in the generic kernel, where a thread per 2 horizontal
// outputs would spread it over twice as many lines.
constexpr int kMaxPoolRows = 2;

/// 32-bit geometry: launch_pool takes this path only where the generic kernel would be narrow.
struct MaxPool2dArgs {
  int32_t in_h, in_w, out_h, out_w, pad_h, pad_w, s_in, n;  // n: threads, planes × row groups × out_w
  int32_t groups;                                           // ceil(out_h / kMaxPoolRows)
  FastDiv f_out_w, f_groups;
};

template <typename T, int kK, int kS>
__global__ void __launch_bounds__(kBlock)
    max_pool2d_kernel(const T* __restrict__ x, T* __restrict__ y, const __grid_constant__ MaxPool2dArgs a) {
  using A = typename PoolAcc<T>::type;
  constexpr int kR = kMaxPoolRows, kInRows = (kR - 1) * kS + kK;
  // Unsigned: n < 2^31 and the grid's stride < 2^30, so i never wraps before the loop ends.
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < static_cast<uint32_t>(a.n);
       i += gridDim.x * blockDim.x) {
    const uint32_t row = a.f_out_w.div(i);
    const int ow = static_cast<int>(i - row * a.out_w);
    const int plane = static_cast<int>(a.f_groups.div(row));
    const int oh = (static_cast<int>(row) - plane * a.groups) * kR;
    const int ih0 = oh * kS - a.pad_h, iw0 = ow * kS - a.pad_w;
    const T* xp = x + plane * a.s_in;
    // A tap outside the input reads as -inf: never NaN and never above the running max, so the
    // result is the generic kernel's, which skips it (a window all in padding gives -inf in both).
    A v[kInRows][kK];
#pragma unroll
    for (int r = 0; r < kInRows; ++r) {
      const int ih = ih0 + r;
      const bool row_in = static_cast<uint32_t>(ih) < static_cast<uint32_t>(a.in_h);
#pragma unroll
      for (int c = 0; c < kK; ++c) {
        const int iw = iw0 + c;
        v[r][c] = row_in && static_cast<uint32_t>(iw) < static_cast<uint32_t>(a.in_w) ? pload(xp[ih * a.in_w + iw])
                                                                                      : neg_inf<A>();
      }
    }
#pragma unroll
    for (int o = 0; o < kR; ++o) {
      if (oh + o >= a.out_h) continue;  // the last group of an odd out_h
      // The generic kernel's tap order and comparisons, so ties (±0) resolve the same way.
      A best = neg_inf<A>();
      bool nan = false;
#pragma unroll
      for (int r = 0; r < kK; ++r)
#pragma unroll
        for (int c = 0; c < kK; ++c) {
          const A t = v[o * kS + r][c];
          nan |= t != t;
          best = t > best ? t : best;
        }
      y[(plane * a.out_h + oh + o) * a.out_w + ow] = pstore<T>(nan ? qnan<A>() : best);
    }
  }
}

/// Launches max_pool2d_kernel if the plan is a 2-D max pool it covers; false leaves it to the
/// generic kernel. `narrow`: every index fits the generic kernel's 32-bit path.
template <typename T>
bool launch_max_pool2d(const PoolPlan& p, bool narrow, const T* x, T* y, cudaStream_t s) {
  if (!narrow || !max_pool2d_covers(p)) return false;
  const int64_t k = p.k[1], st = p.s[1];
  MaxPool2dArgs a{};
  a.in_h = static_cast<int32_t>(p.in[1]), a.in_w = static_cast<int32_t>(p.in[2]);
  a.out_h = static_cast<int32_t>(p.out[1]), a.out_w = static_cast<int32_t>(p.out[2]);
  a.pad_h = static_cast<int32_t>(p.pb[1]), a.pad_w = static_cast<int32_t>(p.pb[2]);
  a.s_in = static_cast<int32_t>(p.in[1] * p.in[2]);
  a.groups = (a.out_h + kMaxPoolRows - 1) / kMaxPoolRows;
  a.n = static_cast<int32_t>(p.planes * a.groups * a.out_w);  // at most the output's size: fits
  a.f_out_w = FastDiv(static_cast<uint32_t>(a.out_w));
  a.f_groups = FastDiv(static_cast<uint32_t>(a.groups));
  auto go = [&](auto kernel) {
    kernel<<<grid_for(a.n), kBlock, 0, s>>>(x, y, a);
    check_launch("max_pool2d_kernel");
  };
  if (k == 3)
    go(st == 1 ? max_pool2d_kernel<T, 3, 1> : max_pool2d_kernel<T, 3, 2>);
  else
    go(st == 1 ? max_pool2d_kernel<T, 2, 1> : max_pool2d_kernel<T, 2, 2>);
  return true;
}

// ---------------------------------------------------------------- global pools

template <int kKind, typename A>
__device__ __forceinline__ A g_init() {
  if constexpr (kKind == static_cast<int>(PoolKind::Max))
    return neg_inf<A>();
  else
    return A(0);
}
template <int kKind, typename A>
__device__ __forceinline__ A g_add(A acc, A v, int p) {
  if constexpr (kKind == static_cast<int>(PoolKind::Max))
    return nan_max(acc, v);
  else if constexpr (kKind == static_cast<int>(PoolKind::Lp))
    return acc + lp_term(v, p);
  else
    return acc + v;
}
template <int kKind, typename A>
__device__ __forceinline__ A g_merge(A a, A b) {
  if constexpr (kKind == static_cast<int>(PoolKind::Max))
    return nan_max(a, b);
  else
    return a + b;
}
template <int kKind, typename A>
__device__ __forceinline__ A g_final(A acc, int64_t size, int p) {
  if constexpr (kKind == static_cast<int>(PoolKind::Max))
    return acc;
  else if constexpr (kKind == static_cast<int>(PoolKind::Lp))
    return lp_root(acc, p);
  else
    return acc / static_cast<A>(size);  // 0 / 0 is NaN for an empty plane, as on the CPU
}
template <int kKind, typename A>
__device__ __forceinline__ A warp_reduce(A v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = g_merge<kKind>(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

template <typename T, int kKind>
__global__ void __launch_bounds__(kBlock)
    global_pool_warp_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t planes, int64_t size, int p) {
  using A = typename Compute<T>::type;
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t plane = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32; plane < planes; plane += warps) {
    const T* xp = x + plane * size;
    A acc = g_init<kKind, A>();
    for (int64_t j = lane; j < size; j += 32) acc = g_add<kKind>(acc, to_compute(xp[j]), p);
    acc = warp_reduce<kKind>(acc);
    if (lane == 0) y[plane] = from_compute<T>(g_final<kKind>(acc, size, p));
  }
}

template <typename T, int kKind>
__global__ void __launch_bounds__(kBlock)
    global_pool_block_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t planes, int64_t size, int p) {
  using A = typename Compute<T>::type;
  __shared__ A part[kBlock / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  for (int64_t plane = blockIdx.x; plane < planes; plane += gridDim.x) {
    const T* xp = x + plane * size;
    A acc = g_init<kKind, A>();
    for (int64_t j = threadIdx.x; j < size; j += blockDim.x) acc = g_add<kKind>(acc, to_compute(xp[j]), p);
    acc = warp_reduce<kKind>(acc);
    if (lane == 0) part[warp] = acc;
    __syncthreads();
    if (warp == 0) {
      acc = lane < kBlock / 32 ? part[lane] : g_init<kKind, A>();
      acc = warp_reduce<kKind>(acc);
      if (lane == 0) y[plane] = from_compute<T>(g_final<kKind>(acc, size, p));
    }
    __syncthreads();
  }
}

template <typename F>
bool dispatch_pool_type(DType t, bool allow_bytes, F&& f) {
  if (allow_bytes && t == DType::Int8) {
    f(int8_t{});
    return true;
  }
  if (allow_bytes && t == DType::UInt8) {
    f(uint8_t{});
    return true;
  }
  return dispatch_float_storage(t, f);
}

}  // namespace

bool max_pool2d_covers(const PoolPlan& p) {
  const bool flat = p.in[0] == 1 && p.k[0] == 1 && p.pb[0] == 0 && p.pe[0] == 0;  // 2-D, or 3-D of depth 1
  const int64_t k = p.k[1], st = p.s[1];
  return flat && p.k[2] == k && p.s[2] == st && p.d[1] == 1 && p.d[2] == 1 && (k == 2 || k == 3) &&
         (st == 1 || st == 2);
}

bool launch_pool(const PoolPlan& p, const void* x, void* y, int64_t* indices, cudaStream_t s) {
  if (p.channels_last) return !indices && launch_pool_nhwc(p, x, y, s);
  WinArgs a{};
  int64_t outs = 1;
  for (int q = 0; q < 3; ++q) {
    a.in[q] = p.in[q];
    a.k[q] = p.k[q];
    a.s[q] = p.s[q];
    a.d[q] = p.d[q];
    a.pb[q] = p.pb[q];
    a.pe[q] = p.pe[q];
    a.out[q] = p.out[q];
    outs *= p.out[q];
  }
  a.n = p.planes * outs;
  a.s_in = p.in[0] * p.in[1] * p.in[2];
  a.include_pad = p.include_pad;
  a.col_major = p.col_major;
  a.nd = p.nd;
  a.p = p.p;
  bool narrow = fits32(a.n) && fits32(p.planes * a.s_in);
  for (int q = 0; q < 3; ++q) narrow = narrow && p.in[q] + p.pb[q] + p.pe[q] + p.k[q] * p.d[q] < (int64_t{1} << 30);
  if (narrow)
    for (int q = 0; q < 3; ++q) a.f_out[q] = FastDiv(static_cast<uint32_t>(p.out[q]));
  return dispatch_pool_type(p.dtype, p.kind == PoolKind::Max, [&](auto tag) {
    using T = decltype(tag);
    if (a.n == 0) return;
    auto* xp = static_cast<const T*>(x);
    auto* yp = static_cast<T*>(y);
    auto go = [&](auto kind_tag) {
      constexpr int K = decltype(kind_tag)::value;
      if constexpr (kIsByte<T> && K != static_cast<int>(PoolKind::Max)) {
        return;
      } else {
        if (K == static_cast<int>(PoolKind::Max) && !indices && launch_max_pool2d(p, narrow, xp, yp, s)) return;
        if (narrow)
          pool_window_kernel<T, K, true><<<grid_for(a.n), kBlock, 0, s>>>(xp, yp, indices, a);
        else
          pool_window_kernel<T, K, false><<<grid_for(a.n), kBlock, 0, s>>>(xp, yp, indices, a);
        check_launch("pool_window_kernel");
      }
    };
    switch (p.kind) {
      case PoolKind::Max:
        go(std::integral_constant<int, 0>{});
        break;
      case PoolKind::Average:
        go(std::integral_constant<int, 1>{});
        break;
      case PoolKind::Lp:
        go(std::integral_constant<int, 2>{});
        break;
    }
  });
}

bool launch_global_pool(PoolKind kind, DType t, int64_t planes, int64_t size, int p, const void* x, void* y,
                        cudaStream_t s) {
  return dispatch_float_storage(t, [&](auto tag) {
    using T = decltype(tag);
    if (planes == 0) return;
    auto* xp = static_cast<const T*>(x);
    auto* yp = static_cast<T*>(y);
    // A block per plane only when planes are long and few enough that warps would leave SMs idle.
    const bool block = size > 2048;
    auto go = [&](auto kind_tag) {
      constexpr int K = decltype(kind_tag)::value;
      if (block) {
        global_pool_block_kernel<T, K><<<grid_for(planes * kBlock), kBlock, 0, s>>>(xp, yp, planes, size, p);
        check_launch("global_pool_block_kernel");
      } else {
        global_pool_warp_kernel<T, K><<<grid_for(planes * 32), kBlock, 0, s>>>(xp, yp, planes, size, p);
        check_launch("global_pool_warp_kernel");
      }
    };
    switch (kind) {
      case PoolKind::Max:
        go(std::integral_constant<int, 0>{});
        break;
      case PoolKind::Average:
        go(std::integral_constant<int, 1>{});
        break;
      case PoolKind::Lp:
        go(std::integral_constant<int, 2>{});
        break;
    }
  });
}

}  // namespace fusec::cuda
