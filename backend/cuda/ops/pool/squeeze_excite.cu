#include <algorithm>

#include "backend/cuda/core/common.cuh"
#include "backend/cuda/ops/elementwise/epilogue_act.cuh"
#include "backend/cuda/ops/pool/squeeze_excite.cuh"

namespace fusec::cuda {

namespace {

constexpr int kThreads = 256;
// Below this many squeezed channels a thread computes a whole gate (W2's row is that short);
// above, a warp shares each gate's row.
constexpr int64_t kThreadPerGateMax = 64;

__device__ __forceinline__ float warp_total(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/// The last block of an image: mean (in `mean`, C floats of shared memory) -> layer 1 -> hidden
/// (Cr floats) -> layer 2 -> the image's gates.
template <typename T>
__device__ void excite(const SqueezeExciteArgs& a, int img, float* mean, float* hidden) {
  const int c = static_cast<int>(a.c), cr = static_cast<int>(a.cr);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const T* __restrict__ w1 = static_cast<const T*>(a.w1);
  const T* __restrict__ w2 = static_cast<const T*>(a.w2);
  const T* __restrict__ b1 = static_cast<const T*>(a.b1);
  const T* __restrict__ b2 = static_cast<const T*>(a.b2);
  for (int r = warp; r < cr; r += warps) {
    float s = 0.0f;
    for (int k = lane; k < c; k += 32) s = fmaf(to_compute(w1[int64_t(r) * c + k]), mean[k], s);
    s = warp_total(s);
    if (lane == 0) hidden[r] = apply_act(b1 ? s + to_compute(b1[r]) : s, a.act);
  }
  __syncthreads();
  float* gates = a.gates + int64_t(img) * c;
  if (cr <= kThreadPerGateMax) {
    for (int ch = threadIdx.x; ch < c; ch += blockDim.x) {
      const T* w = w2 + int64_t(ch) * cr;
      float s = 0.0f;
      for (int k = 0; k < cr; ++k) s = fmaf(to_compute(w[k]), hidden[k], s);
      gates[ch] = apply_act(b2 ? s + to_compute(b2[ch]) : s, a.gate);
    }
  } else {
    for (int ch = warp; ch < c; ch += warps) {
      const T* w = w2 + int64_t(ch) * cr;
      float s = 0.0f;
      for (int k = lane; k < cr; k += 32) s = fmaf(to_compute(w[k]), hidden[k], s);
      s = warp_total(s);
      if (lane == 0) gates[ch] = apply_act(b2 ? s + to_compute(b2[ch]) : s, a.gate);
    }
  }
}

// grid (blocks_per_image, n). Dynamic shared memory: C + Cr floats.
template <typename T, int V, bool NHWC>
__global__ void __launch_bounds__(kThreads) squeeze_kernel(SqueezeExciteArgs a) {
  pdl_wait_then_release();
  extern __shared__ float smem[];
  __shared__ bool last;
  float* part = smem;
  float* hidden = smem + a.c;
  const int c = static_cast<int>(a.c), img = blockIdx.y, t = threadIdx.x;
  const int64_t hw = a.hw;
  for (int i = t; i < c; i += blockDim.x) part[i] = 0.0f;
  __syncthreads();
  const T* __restrict__ x = static_cast<const T*>(a.x) + int64_t(img) * hw * c;
  if (NHWC) {
    // Threads across the channel vectors of a pixel, the rest of the block down the pixels.
    const int64_t per = (hw + gridDim.x - 1) / gridDim.x;
    const int64_t p0 = blockIdx.x * per, p1 = p0 + per < hw ? p0 + per : hw;
    const int vecs = c / V, across = vecs < kThreads ? vecs : kThreads, down = kThreads / across;
    const int pl = t / across;
    if (pl < down) {
      for (int v = t % across; v < vecs; v += across) {
        float acc[V];
#pragma unroll
        for (int i = 0; i < V; ++i) acc[i] = 0.0f;
        for (int64_t p = p0 + pl; p < p1; p += down) {
          float xv[V];
          load_vec<T, V>(x + p * c + v * V, xv);
#pragma unroll
          for (int i = 0; i < V; ++i) acc[i] += xv[i];
        }
#pragma unroll
        for (int i = 0; i < V; ++i) atomicAdd(&part[v * V + i], acc[i]);
      }
    }
  } else {
    // This block's span of the image's C·hw values in memory order; a thread flushes its sum
    // when its next value belongs to another channel.
    const int64_t total = int64_t(c) * hw, per = (total + gridDim.x - 1) / gridDim.x;
    const int64_t e0 = blockIdx.x * per, e1 = e0 + per < total ? e0 + per : total;
    int cur = -1;
    float acc = 0.0f;
    for (int64_t e = e0 + t; e < e1; e += blockDim.x) {
      const int ch = static_cast<int>(e / hw);
      if (ch != cur) {
        if (cur >= 0) atomicAdd(&part[cur], acc);
        cur = ch;
        acc = 0.0f;
      }
      acc += to_compute(x[e]);
    }
    if (cur >= 0) atomicAdd(&part[cur], acc);
  }
  __syncthreads();
  float* sums = a.sums + int64_t(img) * c;
  for (int i = t; i < c; i += blockDim.x)
    if (part[i] != 0.0f) atomicAdd(&sums[i], part[i]);
  // The ticket of the image: the block that draws the last one sees every other block's sums.
  __threadfence();
  __syncthreads();
  if (t == 0) last = atomicAdd(&a.tickets[img], 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  const float inv = 1.0f / static_cast<float>(hw);
  for (int i = t; i < c; i += blockDim.x) part[i] = atomicExch(&sums[i], 0.0f) * inv;
  if (t == 0) a.tickets[img] = 0;
  __syncthreads();
  excite<T>(a, img, part, hidden);
}

// Y = X · gate, V values at a time: in channels-last memory V neighbouring channels of one pixel
// (C % V == 0), in NCHW V neighbouring pixels of one channel (hw % V == 0).
template <typename T, int V, bool NHWC>
__global__ void __launch_bounds__(kThreads) scale_kernel(SqueezeExciteArgs a) {
  pdl_wait_then_release();
  const T* __restrict__ x = static_cast<const T*>(a.x);
  T* __restrict__ y = static_cast<T*>(a.y);
  const float* __restrict__ gates = a.gates;
  const uint32_t c = static_cast<uint32_t>(a.c), hw = static_cast<uint32_t>(a.hw);
  const uint32_t vecs = static_cast<uint32_t>(a.n * a.c * a.hw / V);
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < vecs; i += gridDim.x * blockDim.x) {
    const uint32_t e = i * V;
    float xv[V];
    load_vec<T, V>(x + e, xv);
    if (NHWC) {
      const uint32_t pix = e / c, ch = e - pix * c;
      const float* g = gates + (pix / hw) * c + ch;
#pragma unroll
      for (int j = 0; j < V; ++j) xv[j] *= g[j];
    } else {
      const float g = gates[e / hw];
#pragma unroll
      for (int j = 0; j < V; ++j) xv[j] *= g;
    }
    store_vec<T, V>(y + e, xv);
  }
}

template <typename T, int V, bool NHWC>
void launch_v(const SqueezeExciteArgs& a, cudaStream_t s) {
  const size_t smem = static_cast<size_t>(a.c + a.cr) * sizeof(float);
  launch_pdl("squeeze-excite squeeze", squeeze_kernel<T, V, NHWC>,
             dim3(static_cast<unsigned>(a.blocks_per_image), static_cast<unsigned>(a.n)), dim3(kThreads), smem, s, a);
  const int64_t vecs = a.n * a.c * a.hw / V;
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>((vecs + kThreads - 1) / kThreads, 8192));
  launch_pdl("squeeze-excite scale", scale_kernel<T, V, NHWC>, dim3(grid), dim3(kThreads), 0, s, a);
}

template <typename T>
void launch_t(const SqueezeExciteArgs& a, cudaStream_t s) {
  constexpr int vec = 16 / sizeof(T);
  const bool aligned = aligned16(a.x) && aligned16(a.y);
  if (a.nhwc) {
    if (aligned && a.c % vec == 0)
      launch_v<T, vec, true>(a, s);
    else
      launch_v<T, 1, true>(a, s);
  } else {
    if (aligned && a.hw % vec == 0)
      launch_v<T, vec, false>(a, s);
    else
      launch_v<T, 1, false>(a, s);
  }
}

}  // namespace

int squeeze_excite_blocks(int64_t n, int64_t c, int64_t hw, int sms) {
  (void)c;
  const int64_t want = (2 * std::max(sms, 1) + n - 1) / std::max<int64_t>(n, 1);
  const int64_t most = std::max<int64_t>(1, (hw + 15) / 16);  // at least 16 pixels a block
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({want, most, 1024})));
}

size_t squeeze_excite_state_bytes(int64_t n, int64_t c) {
  return static_cast<size_t>(n * c) * sizeof(float) + static_cast<size_t>(n) * sizeof(unsigned);
}

bool launch_squeeze_excite(const SqueezeExciteArgs& a, cudaStream_t s) {
  if (a.n < 1 || a.c < 1 || a.cr < 1 || a.hw < 1 || a.n > 65535 || a.blocks_per_image < 1 ||
      a.n * a.c * a.hw >= (int64_t{1} << 31) - 1 || !a.sums || !a.tickets || !a.gates)
    return false;
  switch (a.dtype) {
    case DType::Float32:
      launch_t<float>(a, s);
      return true;
    case DType::Float16:
      launch_t<__half>(a, s);
      return true;
    case DType::BFloat16:
      launch_t<__nv_bfloat16>(a, s);
      return true;
    default:
      return false;
  }
}

}  // namespace fusec::cuda
