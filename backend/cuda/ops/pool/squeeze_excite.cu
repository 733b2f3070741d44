#include <algorithm>
#include <type_traits>

#include "backend/cuda/core/common.cuh"
#include "backend/cuda/ops/elementwise/epilogue_act.cuh"
#include "backend/cuda/ops/pool/squeeze_excite.cuh"

namespace fusec::cuda {

namespace {

constexpr int kThreads = 256, kWarps = kThreads / 32, kSlice = kSqueezeExciteSlice;

__host__ __device__ inline int64_t slices_of(int64_t c) { return (c + kSlice - 1) / kSlice; }

/// The kernels' view of the op's state (squeeze_excite_state_bytes).
struct State {
  float* hidden;     // [n, cr]: layer 1 before B1 and the activation, summed over kernel 1's blocks
  unsigned* ticket;  // kernel 2's blocks that have read `hidden`
};

__host__ __device__ inline State state_of(const SqueezeExciteArgs& a) {
  State s;
  s.hidden = static_cast<float*>(a.state);
  s.ticket = reinterpret_cast<unsigned*>(s.hidden + a.n * a.cr);
  return s;
}

/// Pixels [p0, p1) of chunk k of `chunks`.
__device__ __forceinline__ void chunk_range(int64_t hw, int k, int chunks, int64_t* p0, int64_t* p1) {
  const int64_t per = (hw + chunks - 1) / chunks;
  *p0 = k * per;
  *p1 = *p0 + per < hw ? *p0 + per : hw;
}

/// Threads across one channels-last pixel's vectors of a slice `width` channels wide: a power of
/// two (so the block's pixel lanes are one too), those past the slice's last vector idle.
__device__ __forceinline__ int threads_per_pixel(int width, int v) {
  const int vecs = (width + v - 1) / v;
  int n = 1;
  while (n < vecs) n *= 2;
  return n;
}

/// Σ row[k] · vals[k] over k < n, with the row's loads all in flight (16 bytes at a time where
/// `vec` says the row is 16-byte aligned and n whole vectors).
template <typename T>
__device__ __forceinline__ float dot_row(const T* __restrict__ row, const float* vals, int n, bool vec) {
  constexpr int kV = 16 / sizeof(T);
  float s = 0.0f;
  if (vec) {
#pragma unroll 4
    for (int k = 0; k < n; k += kV) {
      float w[kV];
      load_vec<T, kV>(row + k, w);
#pragma unroll
      for (int i = 0; i < kV; ++i) s = fmaf(w[i], vals[k + i], s);
    }
  } else {
#pragma unroll 8
    for (int k = 0; k < n; ++k) s = fmaf(to_compute(row[k]), vals[k], s);
  }
  return s;
}

// grid (slices * squeeze_chunks, n). Each block sums its slice of channels over its pixels and
// adds its share of layer 1, W1[:, slice] · sums / hw, into the image's hidden sums: layer 1 is
// linear up to B1, so no block waits for another's sums, and kernel 2 applies B1 and the
// activation.
template <typename T, int V, bool NHWC>
__global__ void __launch_bounds__(kThreads) squeeze_kernel(SqueezeExciteArgs a) {
  pdl_wait_then_release();
  __shared__ float rows[kWarps][kSlice];  // per-warp (or per-pixel-lane) channel sums
  __shared__ float part[kSlice];
  const State st = state_of(a);
  const int c = static_cast<int>(a.c), img = blockIdx.y, t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const int slices = static_cast<int>(slices_of(a.c)), slice = blockIdx.x % slices, chunk = blockIdx.x / slices;
  const int c0 = slice * kSlice, width = c - c0 < kSlice ? c - c0 : kSlice;
  int64_t p0, p1;
  chunk_range(a.hw, chunk, a.squeeze_chunks, &p0, &p1);
  const T* __restrict__ x = static_cast<const T*>(a.x) + int64_t(img) * a.hw * c;
  if (NHWC) {
    // Threads across the slice's vectors of a pixel, the rest of the block down the pixels. The
    // pixel lanes' sums fold by shuffles inside each warp, then over the warps in shared memory
    // (atomic adds there, 32 lanes to an address, made the kernel 12 us at any size).
    const int across = threads_per_pixel(width, V), down = kThreads / across, v = t % across, pl = t / across;
    float acc[V];
#pragma unroll
    for (int i = 0; i < V; ++i) acc[i] = 0.0f;
    if (v * V < width) {
#pragma unroll 4
      for (int64_t p = p0 + pl; p < p1; p += down) {
        float xv[V];
        load_vec<T, V>(x + p * c + c0 + v * V, xv);
#pragma unroll
        for (int i = 0; i < V; ++i) acc[i] += xv[i];
      }
    }
    for (int off = across; off < 32; off *= 2)
#pragma unroll
      for (int i = 0; i < V; ++i) acc[i] += __shfl_xor_sync(0xffffffffu, acc[i], off);
    // Rows: one per warp (a warp holds several pixel lanes), or one per pixel lane (a lane spans
    // whole warps); at most kWarps either way.
    const int row = across < 32 ? warp : pl, nrows = across < 32 ? kWarps : down;
    if ((across >= 32 || lane < across) && v * V < width)
#pragma unroll
      for (int i = 0; i < V; ++i) rows[row][v * V + i] = acc[i];
    __syncthreads();
    if (t < width) {
      float s = 0.0f;
      for (int r = 0; r < nrows; ++r) s += rows[r][t];
      part[t] = s;
    }
  } else {
    // A warp down each channel's row of pixels.
    for (int ch = warp; ch < width; ch += kWarps) {
      const T* row = x + int64_t(c0 + ch) * a.hw;
      float acc = 0.0f;
#pragma unroll 4
      for (int64_t p = p0 + lane; p < p1; p += 32) acc += to_compute(row[p]);
      acc = warp_sum(acc);
      if (lane == 0) part[ch] = acc;
    }
  }
  __syncthreads();
  const int cr = static_cast<int>(a.cr);
  const T* __restrict__ w1 = static_cast<const T*>(a.w1);
  const bool vec = a.w1_rows_aligned && width % (16 / sizeof(T)) == 0;
  const float inv = 1.0f / static_cast<float>(a.hw);
  float* hidden = st.hidden + int64_t(img) * cr;
  for (int r = t; r < cr; r += kThreads)
    atomicAdd(&hidden[r], dot_row(w1 + int64_t(r) * c + c0, part, width, vec) * inv);
}

// grid (slices * scale_chunks, n). Dynamic shared memory: cr floats. A block computes its slice's
// gates, four threads to each (a quarter of W2's row apiece), then scales its pixels of the slice.
template <typename T, int V, bool NHWC>
__global__ void __launch_bounds__(kThreads) scale_kernel(SqueezeExciteArgs a) {
  static_assert(kThreads == 4 * kSlice, "four threads to a gate");
  pdl_wait_then_release();
  extern __shared__ float h[];
  __shared__ float g[kSlice];
  const int c = static_cast<int>(a.c), cr = static_cast<int>(a.cr), img = blockIdx.y, t = threadIdx.x;
  const int slices = static_cast<int>(slices_of(a.c)), slice = blockIdx.x % slices, chunk = blockIdx.x / slices;
  const int c0 = slice * kSlice, width = c - c0 < kSlice ? c - c0 : kSlice;
  int64_t p0, p1;
  chunk_range(a.hw, chunk, a.scale_chunks, &p0, &p1);
  const T* __restrict__ x = static_cast<const T*>(a.x) + int64_t(img) * a.hw * c;
  T* __restrict__ y = static_cast<T*>(a.y) + int64_t(img) * a.hw * c;
  // A thread's first pixel is loaded before the gates are computed, so that its latency overlaps
  // theirs: on a small map most threads have one or two pixels.
  const int across = threads_per_pixel(width, V), down = kThreads / across, v = t % across;
  const bool mine = NHWC && v * V < width;
  float first[V];
  if (mine && p0 + t / across < p1) load_vec<T, V>(x + (p0 + t / across) * c + c0 + v * V, first);
  const State st = state_of(a);
  const T* __restrict__ b1 = static_cast<const T*>(a.b1);
  for (int r = t; r < cr; r += kThreads) {
    const float sum = st.hidden[int64_t(img) * cr + r];
    h[r] = apply_act(b1 ? sum + to_compute(b1[r]) : sum, a.act);
  }
  __syncthreads();
  // Every block has read the hidden sums once it has drawn a ticket: the last one zeroes them for
  // the next launch, after its own work (the ticket's round trip overlaps that).
  __shared__ bool last;
  unsigned drawn = 0;
  if (t == 0) drawn = atomicAdd(st.ticket, 1u);
  {
    const T* __restrict__ w2 = static_cast<const T*>(a.w2);
    const T* __restrict__ b2 = static_cast<const T*>(a.b2);
    const int ch = t >> 2, q = t & 3, len = (cr + 3) / 4, k0 = q * len < cr ? q * len : cr;
    const int n = (k0 + len < cr ? k0 + len : cr) - k0;
    float s = ch < width ? dot_row(w2 + int64_t(c0 + ch) * cr + k0, h + k0, n, false) : 0.0f;
    s += __shfl_xor_sync(0xffffffffu, s, 1);
    s += __shfl_xor_sync(0xffffffffu, s, 2);
    if (q == 0 && ch < width) g[ch] = apply_act(b2 ? s + to_compute(b2[c0 + ch]) : s, a.gate);
  }
  __syncthreads();
  if (NHWC) {
    if (mine) {
#pragma unroll 4
      for (int64_t p = p0 + t / across; p < p1; p += down) {
        const int64_t off = p * c + c0 + v * V;
        float xv[V];
        if (p == p0 + t / across) {
#pragma unroll
          for (int i = 0; i < V; ++i) xv[i] = first[i];
        } else {
          load_vec<T, V>(x + off, xv);
        }
#pragma unroll
        for (int i = 0; i < V; ++i) xv[i] *= g[v * V + i];
        store_vec<T, V>(y + off, xv);
      }
    }
  } else {
    const uint32_t len = static_cast<uint32_t>(p1 - p0), total = len * static_cast<uint32_t>(width);
    for (uint32_t i = t; i < total; i += kThreads) {
      const uint32_t ch = i / len;
      const int64_t off = int64_t(c0 + ch) * a.hw + p0 + (i - ch * len);
      y[off] = from_compute<T>(to_compute(x[off]) * g[ch]);
    }
  }
  if (t == 0) last = drawn == gridDim.x * gridDim.y - 1;
  __syncthreads();
  if (!last) return;
  if (t == 0) *st.ticket = 0;
  for (int64_t i = t; i < a.n * cr; i += kThreads) st.hidden[i] = 0.0f;
}

template <typename T, int V, bool NHWC>
void launch_v(const SqueezeExciteArgs& a, cudaStream_t s) {
  const unsigned slices = static_cast<unsigned>(slices_of(a.c)), n = static_cast<unsigned>(a.n);
  launch_pdl("squeeze-excite squeeze", squeeze_kernel<T, V, NHWC>, dim3(slices * a.squeeze_chunks, n), dim3(kThreads),
             0, s, a);
  launch_pdl("squeeze-excite scale", scale_kernel<T, V, NHWC>, dim3(slices * a.scale_chunks, n), dim3(kThreads),
             static_cast<size_t>(a.cr) * sizeof(float), s, a);
}

template <typename T>
void launch_t(SqueezeExciteArgs a, cudaStream_t s) {
  constexpr int vec = 16 / sizeof(T);
  a.w1_rows_aligned = aligned16(a.w1) && a.c % vec == 0;
  if (a.nhwc && a.c % vec == 0 && aligned16(a.x) && aligned16(a.y))
    launch_v<T, vec, true>(a, s);
  else if (a.nhwc)
    launch_v<T, 1, true>(a, s);
  else
    launch_v<T, 1, false>(a, s);
}

}  // namespace

void squeeze_excite_chunks(int64_t n, int64_t c, int64_t hw, int sms, int* squeeze, int* scale) {
  const int64_t blocks = std::max<int64_t>(1, n * slices_of(c));
  const int64_t most = std::max<int64_t>(1, hw / 64);  // at least 64 pixels a chunk
  const int64_t waves = std::max(sms, 1);
  *squeeze = static_cast<int>(std::clamp<int64_t>((2 * waves + blocks - 1) / blocks, 1, std::min<int64_t>(most, 4096)));
  *scale = static_cast<int>(std::clamp<int64_t>((4 * waves + blocks - 1) / blocks, 1, std::min<int64_t>(most, 4096)));
}

size_t squeeze_excite_state_bytes(int64_t n, int64_t cr) {
  return static_cast<size_t>(n * cr) * sizeof(float) + sizeof(unsigned);
}

bool launch_squeeze_excite(const SqueezeExciteArgs& a, cudaStream_t s) {
  if (a.n < 1 || a.c < 1 || a.cr < 1 || a.hw < 1 || a.n > 65535 || a.squeeze_chunks < 1 || a.scale_chunks < 1 ||
      a.n * a.c * a.hw >= (int64_t{1} << 31) - 1 || a.hw * kSlice >= (int64_t{1} << 32) ||
      slices_of(a.c) * std::max(a.squeeze_chunks, a.scale_chunks) > INT32_MAX ||
      a.cr * static_cast<int64_t>(sizeof(float)) > 40 * 1024 || !a.state)
    return false;
  if (a.dtype == DType::Float64) return false;  // kernels for fp32, fp16 and bf16 storage
  return dispatch_float_storage(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, double>) launch_t<T>(a, s);
  });
}

}  // namespace fusec::cuda
