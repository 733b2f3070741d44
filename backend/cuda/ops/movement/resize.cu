// Resize kernels: one thread per output element; per-axis tables (built on the host) give the
// source indices and weights, so the device never repeats the float64 coordinate arithmetic.
// Linear/cubic blend all resampled axes at once (a tensor product of taps) in float32 (float64
// for float64 data) where the CPU does separable passes in float64; the results agree to
// rounding. Any tf_crop_and_resize coordinate outside the input gives the extrapolation value
// (the separable passes give the same value, weights summing to one).
#include <type_traits>

#include "backend/cuda/core/common.cuh"
#include "backend/cuda/ops/movement/resize.cuh"
#include "backend/dispatch_bytes.h"

namespace fusec::cuda {

namespace {

struct NearestArgs {
  int rank;
  int64_t out_dims[kMoveMaxRank], in_strides[kMoveMaxRank], map_offset[kMoveMaxRank];
  FastDiv fd[kMoveMaxRank];
  const int32_t* maps;
  int64_t n;
};

// Narrow: output and input index in 32 bits (checked on the host). kVec consecutive outputs of
// the innermost dim per thread: one index decomposition and one packed store for all of them.
template <typename U, bool kNarrow, int kVec>
__global__ void __launch_bounds__(kBlock)
    resize_nearest_kernel(const U* __restrict__ x, U* __restrict__ y, U extrapolation,
                          const __grid_constant__ NearestArgs a) {
  using I = std::conditional_t<kNarrow, int32_t, int64_t>;
  const int last = a.rank - 1;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < a.n; i += int64_t(gridDim.x) * blockDim.x) {
    I rem = static_cast<I>(i), off = 0, c0 = 0;
    bool outside = false;
#pragma unroll
    for (int d = kMoveMaxRank - 1; d >= 0; --d) {
      if (d >= a.rank) continue;
      // fd/out_dims of the last dim count groups of kVec outputs.
      I q;
      if constexpr (kNarrow)
        q = static_cast<I>(a.fd[d].div(static_cast<uint32_t>(rem)));
      else
        q = rem / a.out_dims[d];
      const I c = rem - q * static_cast<I>(a.out_dims[d]);
      rem = q;
      if (d == last) {
        c0 = c * kVec;
        continue;
      }
      const I src = a.map_offset[d] < 0 ? c : static_cast<I>(a.maps[a.map_offset[d] + c]);
      outside |= src < 0;
      off += src * static_cast<I>(a.in_strides[d]);
    }
    Pack<U, kVec> pk;
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const I c = c0 + j;
      const I src = a.map_offset[last] < 0 ? c : static_cast<I>(a.maps[a.map_offset[last] + c]);
      pk.v[j] = outside || src < 0 ? extrapolation : x[off + src * static_cast<I>(a.in_strides[last])];
    }
    *reinterpret_cast<Pack<U, kVec>*>(y + i * kVec) = pk;
  }
}

struct InterpArgs {
  int rank, naxes;
  int64_t out_dims[kMoveMaxRank], in_strides[kMoveMaxRank];
  int slot[kMoveMaxRank];
  FastDiv fd[kMoveMaxRank];
  int taps[kResizeMaxAxes];
  int64_t stride[kResizeMaxAxes], tap_offset[kResizeMaxAxes], out_offset[kResizeMaxAxes];
  const int32_t* idx;
  const float* w;
  const uint8_t* outside;
  float extrapolation;
  int64_t n;
};

template <typename T, bool kNarrow>
__global__ void __launch_bounds__(kBlock)
    resize_interp_kernel(const T* __restrict__ x, T* __restrict__ y, const __grid_constant__ InterpArgs a) {
  using A = typename Compute<T>::type;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < a.n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t rem = i, base = 0;
    int64_t coord[kResizeMaxAxes] = {0, 0, 0};
#pragma unroll
    for (int d = kMoveMaxRank - 1; d >= 0; --d) {
      if (d >= a.rank) continue;
      int64_t q;
      if constexpr (kNarrow)
        q = a.fd[d].div(static_cast<uint32_t>(rem));
      else
        q = rem / a.out_dims[d];
      const int64_t c = rem - q * a.out_dims[d];
      rem = q;
      const int s = a.slot[d];
      if (s < 0) base += c * a.in_strides[d];
#pragma unroll
      for (int k = 0; k < kResizeMaxAxes; ++k)
        if (s == k) coord[k] = c;
    }
    bool outside = false;
    for (int k = 0; k < a.naxes; ++k) outside |= a.outside[a.out_offset[k] + coord[k]] != 0;
    if (outside) {
      y[i] = from_compute<T>(static_cast<A>(a.extrapolation));
      continue;
    }
    // Unused slots contribute one tap of weight 1 at offset 0.
    const int n0 = a.naxes > 0 ? a.taps[0] : 1, n1 = a.naxes > 1 ? a.taps[1] : 1, n2 = a.naxes > 2 ? a.taps[2] : 1;
    const int64_t t0 = a.tap_offset[0] + coord[0] * n0, t1 = a.tap_offset[1] + coord[1] * n1,
                  t2 = a.tap_offset[2] + coord[2] * n2;
    A acc = A(0);
    for (int k0 = 0; k0 < n0; ++k0) {
      const A w0 = a.naxes > 0 ? static_cast<A>(a.w[t0 + k0]) : A(1);
      const int64_t o0 = base + (a.naxes > 0 ? a.idx[t0 + k0] * a.stride[0] : 0);
      for (int k1 = 0; k1 < n1; ++k1) {
        const A w1 = a.naxes > 1 ? w0 * static_cast<A>(a.w[t1 + k1]) : w0;
        const int64_t o1 = o0 + (a.naxes > 1 ? a.idx[t1 + k1] * a.stride[1] : 0);
        for (int k2 = 0; k2 < n2; ++k2) {
          const A w2 = a.naxes > 2 ? w1 * static_cast<A>(a.w[t2 + k2]) : w1;
          const int64_t o2 = o1 + (a.naxes > 2 ? a.idx[t2 + k2] * a.stride[2] : 0);
          acc += w2 * to_compute(x[o2]);
        }
      }
    }
    y[i] = from_compute<T>(acc);
  }
}

}  // namespace

void launch_resize_nearest(const ResizeNearestPlan& p, const void* x, void* y, cudaStream_t s) {
  if (p.numel == 0) return;
  NearestArgs a{};
  a.rank = p.rank;
  // Rank 0 (one element) runs as a rank-1 view of length 1.
  const int rank = p.rank > 0 ? p.rank : 1;
  const int64_t last_len = p.rank > 0 ? p.out_dims[p.rank - 1] : 1;
  const int vec = last_len % 4 == 0 && reinterpret_cast<uintptr_t>(y) % (4 * p.esize) == 0 ? 4 : 1;
  const bool narrow = fits32(p.numel) && fits32(p.in_numel);
  a.rank = rank;
  for (int d = 0; d < rank; ++d) {
    a.out_dims[d] = p.rank > 0 ? p.out_dims[d] : 1;
    a.in_strides[d] = p.rank > 0 ? p.in_strides[d] : 1;
    a.map_offset[d] = p.rank > 0 ? p.map_offset[d] : -1;
  }
  a.out_dims[rank - 1] /= vec;
  for (int d = 0; d < rank && narrow; ++d) a.fd[d] = FastDiv(static_cast<uint32_t>(a.out_dims[d]));
  a.maps = p.maps;
  a.n = p.numel / vec;
  const bool sized = dispatch_bytes(static_cast<size_t>(p.esize), [&](auto tag) {
    using U = decltype(tag);
    U e;
    memcpy(&e, &p.extrapolation_bits, sizeof(U));
    auto* xp = static_cast<const U*>(x);
    auto* yp = static_cast<U*>(y);
    const unsigned g = grid_for(a.n);
    if (vec == 4) {
      if (narrow)
        resize_nearest_kernel<U, true, 4><<<g, kBlock, 0, s>>>(xp, yp, e, a);
      else
        resize_nearest_kernel<U, false, 4><<<g, kBlock, 0, s>>>(xp, yp, e, a);
    } else {
      if (narrow)
        resize_nearest_kernel<U, true, 1><<<g, kBlock, 0, s>>>(xp, yp, e, a);
      else
        resize_nearest_kernel<U, false, 1><<<g, kBlock, 0, s>>>(xp, yp, e, a);
    }
    check_launch("resize_nearest_kernel");
  });
  if (!sized) internal_error("resize: unsupported element size " + std::to_string(p.esize));
}

bool launch_resize_interp(const ResizeInterpPlan& p, const void* x, void* y, cudaStream_t s) {
  InterpArgs a{};
  a.rank = p.rank;
  a.naxes = p.naxes;
  const bool narrow = fits32(p.numel);
  for (int d = 0; d < p.rank; ++d) {
    a.out_dims[d] = p.out_dims[d];
    a.in_strides[d] = p.in_strides[d];
    a.slot[d] = p.slot[d];
    if (narrow) a.fd[d] = FastDiv(static_cast<uint32_t>(p.out_dims[d]));
  }
  for (int k = 0; k < kResizeMaxAxes; ++k) {
    a.taps[k] = p.taps[k];
    a.stride[k] = p.stride[k];
    a.tap_offset[k] = p.tap_offset[k];
    a.out_offset[k] = p.out_offset[k];
  }
  a.idx = p.idx;
  a.w = p.w;
  a.outside = p.outside;
  a.extrapolation = p.extrapolation;
  a.n = p.numel;
  return dispatch_float_storage(p.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (a.n == 0) return;
    auto* xp = static_cast<const T*>(x);
    auto* yp = static_cast<T*>(y);
    if (narrow)
      resize_interp_kernel<T, true><<<grid_for(a.n), kBlock, 0, s>>>(xp, yp, a);
    else
      resize_interp_kernel<T, false><<<grid_for(a.n), kBlock, 0, s>>>(xp, yp, a);
    check_launch("resize_interp_kernel");
  });
}

}  // namespace fusec::cuda
