// Softmax, LogSoftmax and Hardmax kernels over the middle dim of an [outer, n, inner] view.
//
// Contiguous rows (inner == 1) that fit in registers (up to 32 values a thread, 1024 threads a
// row) are read once: max, then the sum of exp(x - max) from the registers, then the write; a
// warp per row for short rows (attention scores: 128 wide), a block per row otherwise. Longer
// rows, or long rows too few to fill the GPU, are split into segments: one kernel reduces each
// segment to an online (max, sum of exp) pair, a second combines a row's pairs and writes its
// segment (two reads, one write). A non-innermost axis (inner > 1) is walked down its columns,
// consecutive threads on consecutive columns so every load stays coalesced, several threads per
// column combining online (max, sum) pairs in shared memory.
// Sums of exponentials are float32 and always max-subtracted.
#include <climits>

#include "backend/cuda/core/common.cuh"
#include "backend/cuda/ops/softmax/softmax.cuh"

namespace fusec::cuda {

namespace {

template <typename R, typename F>
__device__ __forceinline__ R warp_reduce(R v, F f) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = f(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/// Reduction over the threads of one row: the warp (blockDim.x == 32) or the block (blockDim.y
/// == 1 then, so the barriers are block-uniform). Every thread gets the result.
template <typename R, typename F>
__device__ __forceinline__ R row_reduce(R v, F f, R ident, R* smem) {
  v = warp_reduce(v, f);
  if (blockDim.x == 32) return v;
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) smem[w] = v;
  __syncthreads();
  return warp_reduce(lane < nw ? smem[lane] : ident, f);
}

struct FMax {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct FAdd {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct IMin {
  __device__ int operator()(int a, int b) const { return a < b ? a : b; }
};

// ---- rows in registers ----

template <typename T, int V, int K>
__global__ void __launch_bounds__(1024) softmax_rows_kernel(SoftmaxArgs a) {
  __shared__ float sf[32];
  __shared__ int si[32];
  const int64_t row = blockIdx.x * int64_t(blockDim.y) + threadIdx.y;
  if (row >= a.outer) return;  // a whole warp (warp rows) or the whole block (block rows)
  const int tid = threadIdx.x, tpr = blockDim.x;
  const int chunks = static_cast<int>(a.n / V);
  const T* x = static_cast<const T*>(a.x) + row * a.n;
  T* y = static_cast<T*>(a.y) + row * a.n;

  float v[K][V];
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int c = tid + k * tpr;
    if (c < chunks)
      load_vec<T, V>(x + int64_t(c) * V, v[k]);
    else
#pragma unroll
      for (int i = 0; i < V; ++i) v[k][i] = -INFINITY;
  }
  float m = -INFINITY;
#pragma unroll
  for (int k = 0; k < K; ++k)
#pragma unroll
    for (int i = 0; i < V; ++i) m = fmaxf(m, v[k][i]);
  m = row_reduce(m, FMax{}, -INFINITY, sf);

  if (a.kind == SoftmaxKind::Hard) {
    // The CPU's scan keeps the first index whose value beats every earlier one: the first
    // maximum ignoring NaN, unless x[0] itself is NaN (nothing beats it then).
    int idx = INT_MAX;
#pragma unroll
    for (int k = K - 1; k >= 0; --k) {
      const int c = tid + k * tpr;
      if (c < chunks)
#pragma unroll
        for (int i = V - 1; i >= 0; --i)
          if (v[k][i] == m) idx = c * V + i;
    }
    idx = row_reduce(idx, IMin{}, INT_MAX, si);
    const float x0 = to_compute(x[0]);
    if (idx == INT_MAX || x0 != x0) idx = 0;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int c = tid + k * tpr;
      if (c >= chunks) continue;
      float o[V];
#pragma unroll
      for (int i = 0; i < V; ++i) o[i] = c * V + i == idx ? 1.f : 0.f;
      store_vec<T, V>(y + int64_t(c) * V, o);
    }
    return;
  }

  const bool soft = a.kind == SoftmaxKind::Soft;
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    if (tid + k * tpr >= chunks) continue;
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const float d = v[k][i] - m;
      const float e = expf(d);
      s += e;
      v[k][i] = soft ? e : d;
    }
  }
  s = row_reduce(s, FAdd{}, 0.f, sf);
  const float inv = 1.0f / s, ls = logf(s);
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int c = tid + k * tpr;
    if (c >= chunks) continue;
    float o[V];
#pragma unroll
    for (int i = 0; i < V; ++i) o[i] = soft ? v[k][i] * inv : v[k][i] - ls;
    store_vec<T, V>(y + int64_t(c) * V, o);
  }
}

// ---- long rows: online (max, sum) per segment, then combine and write ----

struct MS {
  float m, s;  // running maximum and sum of exp(x - m)
};

__device__ __forceinline__ MS ms_combine(MS a, MS b) {
  const float M = fmaxf(a.m, b.m);
  // Equal maxima contribute unscaled (avoids inf - inf when both are infinite).
  const float s = (a.m == M ? a.s : a.s * expf(a.m - M)) + (b.m == M ? b.s : b.s * expf(b.m - M));
  return {M, s};
}

__device__ __forceinline__ void ms_add(MS& a, float v) {
  if (v > a.m) {
    a.s = a.s * expf(a.m - v) + 1.f;
    a.m = v;
  } else {
    a.s += v == -INFINITY ? 0.f : expf(v - a.m);  // a NaN v makes the sum NaN, as on the CPU
  }
}

__device__ __forceinline__ MS warp_ms(MS a) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    MS b{__shfl_xor_sync(0xffffffffu, a.m, o), __shfl_xor_sync(0xffffffffu, a.s, o)};
    a = ms_combine(a, b);
  }
  return a;
}

/// Calls f(j, value) for every j in [j0, j1) of row x: scalars up to the first 16-byte boundary,
/// then 16-byte vectors, then a scalar tail, spread over the block's threads (any row width keeps
/// vector loads).
template <typename T, typename F>
__device__ __forceinline__ void for_segment(const T* x, int64_t j0, int64_t j1, F&& f) {
  constexpr int V = 16 / sizeof(T);
  int64_t head = static_cast<int64_t>(((16 - (reinterpret_cast<uintptr_t>(x + j0) & 15)) & 15) / sizeof(T));
  if (head > j1 - j0) head = j1 - j0;
  const int64_t b0 = j0 + head, nvec = (j1 - b0) / V;
  if (threadIdx.x < head) f(j0 + threadIdx.x, to_compute(x[j0 + threadIdx.x]));
#pragma unroll 2
  for (int64_t c = threadIdx.x; c < nvec; c += blockDim.x) {
    float v[V];
    load_vec<T, V>(x + b0 + c * V, v);
#pragma unroll
    for (int i = 0; i < V; ++i) f(b0 + c * V + i, v[i]);
  }
  for (int64_t j = b0 + nvec * V + threadIdx.x; j < j1; j += blockDim.x) f(j, to_compute(x[j]));
}

/// grid (rows, splits): segment `blockIdx.y` of row `blockIdx.x` to one (max, sum) pair.
template <typename T>
__global__ void __launch_bounds__(512) softmax_long_stats_kernel(SoftmaxArgs a, int64_t seg) {
  __shared__ float sm[32], ss[32];
  const int64_t row = blockIdx.x;
  const int64_t j0 = blockIdx.y * seg, j1 = j0 + seg < a.n ? j0 + seg : a.n;
  const T* x = static_cast<const T*>(a.x) + row * a.n;
  MS acc{-INFINITY, 0.f};
  for_segment(x, j0, j1, [&](int64_t, float v) { ms_add(acc, v); });
  acc = warp_ms(acc);
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  if (lane == 0) sm[w] = acc.m, ss[w] = acc.s;
  __syncthreads();
  if (w == 0) {
    acc = lane < nw ? MS{sm[lane], ss[lane]} : MS{-INFINITY, 0.f};
    acc = warp_ms(acc);
    if (lane == 0) static_cast<float2*>(a.workspace)[row * a.splits + blockIdx.y] = make_float2(acc.m, acc.s);
  }
}

template <typename T>
__global__ void __launch_bounds__(512) softmax_long_write_kernel(SoftmaxArgs a, int64_t seg) {
  __shared__ MS total;
  const int64_t row = blockIdx.x;
  if (threadIdx.x < 32) {
    const float2* part = static_cast<const float2*>(a.workspace) + row * a.splits;
    MS acc{-INFINITY, 0.f};
    for (int p = threadIdx.x; p < a.splits; p += 32) acc = ms_combine(acc, MS{part[p].x, part[p].y});
    acc = warp_ms(acc);
    if (threadIdx.x == 0) total = acc;
  }
  __syncthreads();
  const float m = total.m, inv = 1.0f / total.s, ls = logf(total.s);
  const bool soft = a.kind == SoftmaxKind::Soft;
  const int64_t j0 = blockIdx.y * seg, j1 = j0 + seg < a.n ? j0 + seg : a.n;
  const T* x = static_cast<const T*>(a.x) + row * a.n;
  T* y = static_cast<T*>(a.y) + row * a.n;
  auto g = [&](float v) { return soft ? expf(v - m) * inv : (v - m) - ls; };
  constexpr int V = 16 / sizeof(T);
  int64_t head = static_cast<int64_t>(((16 - (reinterpret_cast<uintptr_t>(x + j0) & 15)) & 15) / sizeof(T));
  if (head > j1 - j0) head = j1 - j0;
  const int64_t b0 = j0 + head, nvec = (j1 - b0) / V;
  // y has x's alignment in practice (same row length, aligned tensors): then stores are vectors too.
  const bool same = (reinterpret_cast<uintptr_t>(y + j0) & 15) == (reinterpret_cast<uintptr_t>(x + j0) & 15);
  if (threadIdx.x < head) y[j0 + threadIdx.x] = from_compute<T>(g(to_compute(x[j0 + threadIdx.x])));
#pragma unroll 2
  for (int64_t c = threadIdx.x; c < nvec; c += blockDim.x) {
    float v[V];
    load_vec<T, V>(x + b0 + c * V, v);
#pragma unroll
    for (int i = 0; i < V; ++i) v[i] = g(v[i]);
    if (same) {
      store_vec<T, V>(y + b0 + c * V, v);
    } else {
#pragma unroll
      for (int i = 0; i < V; ++i) y[b0 + c * V + i] = from_compute<T>(v[i]);
    }
  }
  for (int64_t j = b0 + nvec * V + threadIdx.x; j < j1; j += blockDim.x) y[j] = from_compute<T>(g(to_compute(x[j])));
}

// ---- strided axis (inner > 1) ----

/// Softmax/LogSoftmax down the columns of [outer, n, inner]: blockDim (columns, thread rows), 256
/// threads; each thread row folds every blockDim.y-th value of its column into an online (max,
/// sum) pair, the pairs combine in shared memory, and the same threads write the column.
template <typename T>
__global__ void __launch_bounds__(256) softmax_cols_kernel(SoftmaxArgs a, int64_t tiles) {
  __shared__ float sm[256], ss[256];
  const int64_t tile = blockIdx.x % tiles, o = blockIdx.x / tiles;
  const int64_t i = tile * blockDim.x + threadIdx.x;
  const bool live = i < a.inner;
  const int64_t inner = a.inner, n = a.n;
  const T* p = static_cast<const T*>(a.x) + o * n * inner + i;
  T* q = static_cast<T*>(a.y) + o * n * inner + i;
  MS acc{-INFINITY, 0.f};
  if (live)
    for (int64_t k = threadIdx.y; k < n; k += blockDim.y) ms_add(acc, to_compute(p[k * inner]));
  const int slot = threadIdx.y * blockDim.x + threadIdx.x;
  sm[slot] = acc.m;
  ss[slot] = acc.s;
  __syncthreads();
  for (int h = blockDim.y / 2; h > 0; h >>= 1) {
    if (threadIdx.y < h) {
      const MS c = ms_combine(MS{sm[slot], ss[slot]}, MS{sm[slot + h * blockDim.x], ss[slot + h * blockDim.x]});
      sm[slot] = c.m;
      ss[slot] = c.s;
    }
    __syncthreads();
  }
  if (!live) return;
  const float m = sm[threadIdx.x], inv = 1.0f / ss[threadIdx.x], ls = logf(ss[threadIdx.x]);
  const bool soft = a.kind == SoftmaxKind::Soft;
  for (int64_t k = threadIdx.y; k < n; k += blockDim.y) {
    const float d = to_compute(p[k * inner]) - m;
    q[k * inner] = from_compute<T>(soft ? expf(d) * inv : d - ls);
  }
}

/// Hardmax down the columns: one thread per column, the CPU's sequential scan.
template <typename T>
__global__ void softmax_strided_kernel(SoftmaxArgs a) {
  const int64_t inner = a.inner, n = a.n, cols = a.outer * inner;
  for (int64_t col = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; col < cols;
       col += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = col / inner, i = col - o * inner;
    const T* p = static_cast<const T*>(a.x) + o * n * inner + i;
    T* q = static_cast<T*>(a.y) + o * n * inner + i;
    if (a.kind == SoftmaxKind::Hard) {
      float best = to_compute(p[0]);
      int64_t arg = 0;
      for (int64_t k = 1; k < n; ++k) {
        const float v = to_compute(p[k * inner]);
        if (v > best) best = v, arg = k;
      }
      for (int64_t k = 0; k < n; ++k) q[k * inner] = from_compute<T>(k == arg ? 1.f : 0.f);
      continue;
    }
    MS acc{-INFINITY, 0.f};
    for (int64_t k = 0; k < n; ++k) ms_add(acc, to_compute(p[k * inner]));
    const float inv = 1.0f / acc.s, ls = logf(acc.s);
    const bool soft = a.kind == SoftmaxKind::Soft;
    for (int64_t k = 0; k < n; ++k) {
      const float d = to_compute(p[k * inner]) - acc.m;
      q[k * inner] = from_compute<T>(soft ? expf(d) * inv : d - ls);
    }
  }
}

// ---- configuration ----

constexpr int kRowRegs = 32;                  // values a thread keeps in registers
constexpr int64_t kScalarRowCap = 1024 * 16;  // longest row the register path takes without vectors
constexpr int64_t kSegment = 4096;            // smallest segment of the long-row path

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

int pick_k(int64_t need) {
  for (int k : {1, 2, 3, 4, 6, 8, 16})
    if (k >= need) return k;
  return 16;
}

enum class Path { Rows, Long, Strided };
struct Cfg {
  Path path = Path::Rows;
  int v = 1, k = 1, tpr = 32, rows_per_block = 1;
};

Cfg choose(const SoftmaxArgs& a, bool aligned) {
  Cfg c;
  if (a.inner != 1) {
    c.path = Path::Strided;
    return c;
  }
  const int vec = 16 / static_cast<int>(dtype_size(a.dtype));
  c.v = a.n % vec == 0 && aligned ? vec : 1;
  const int max_k = kRowRegs / c.v < 16 ? kRowRegs / c.v : 16;  // 32 scalars would spill at 1024 threads
  const int64_t chunks = a.n / c.v;
  const bool few_rows = a.outer < 2 * static_cast<int64_t>(a.multiprocessors);
  const bool fits = chunks <= 1024 * max_k;
  if (a.splits > 0 && (!fits || (a.outer < a.multiprocessors && a.n >= 4 * kSegment))) {
    c.path = Path::Long;
    c.tpr = 512;
    return c;
  }
  if (chunks <= 32 * max_k && !(few_rows && chunks > 64)) {
    c.tpr = 32;
    c.rows_per_block = 4;
    c.k = pick_k(ceil_div(chunks, 32));
    return c;
  }
  const int64_t per_thread = few_rows || max_k < 4 ? 2 : 4;
  int64_t t = ceil_div(ceil_div(chunks, per_thread), 32) * 32;
  t = t < 64 ? 64 : t > 1024 ? 1024 : t;
  c.tpr = static_cast<int>(t);
  c.k = pick_k(ceil_div(chunks, t));
  return c;
}

template <typename T, int V>
void launch_rows(const Cfg& c, const SoftmaxArgs& a, cudaStream_t s) {
  const dim3 block(c.tpr, c.rows_per_block);
  const unsigned grid = static_cast<unsigned>(ceil_div(a.outer, c.rows_per_block));
  switch (c.k) {
    case 1:
      softmax_rows_kernel<T, V, 1><<<grid, block, 0, s>>>(a);
      break;
    case 2:
      softmax_rows_kernel<T, V, 2><<<grid, block, 0, s>>>(a);
      break;
    case 3:
      softmax_rows_kernel<T, V, 3><<<grid, block, 0, s>>>(a);
      break;
    case 4:
      softmax_rows_kernel<T, V, 4><<<grid, block, 0, s>>>(a);
      break;
    default:
      if constexpr (V * 8 <= kRowRegs) {
        if (c.k == 6)
          softmax_rows_kernel<T, V, 6><<<grid, block, 0, s>>>(a);
        else if (c.k == 8)
          softmax_rows_kernel<T, V, 8><<<grid, block, 0, s>>>(a);
      }
      // Scalar rows (odd widths) keep up to 16 values a thread.
      if constexpr (V * 16 <= kRowRegs) {
        if (c.k == 16) softmax_rows_kernel<T, V, 16><<<grid, block, 0, s>>>(a);
      }
      break;
  }
  check_launch("softmax_rows_kernel");
}

template <typename T>
void launch_long(const SoftmaxArgs& a, cudaStream_t s) {
  const int64_t seg = ceil_div(ceil_div(a.n, a.splits), 16) * 16;
  const dim3 grid(static_cast<unsigned>(a.outer), static_cast<unsigned>(a.splits));
  softmax_long_stats_kernel<T><<<grid, 512, 0, s>>>(a, seg);
  check_launch("softmax_long_stats_kernel");
  softmax_long_write_kernel<T><<<grid, 512, 0, s>>>(a, seg);
  check_launch("softmax_long_write_kernel");
}

template <typename T>
void launch_t(const SoftmaxArgs& a, cudaStream_t s) {
  const Cfg c = choose(a, aligned16(a.x) && aligned16(a.y));
  constexpr int vec = 16 / sizeof(T);
  switch (c.path) {
    case Path::Strided:
      if (a.kind == SoftmaxKind::Hard) {
        softmax_strided_kernel<T><<<grid_for(a.outer * a.inner), kBlock, 0, s>>>(a);
        check_launch("softmax_strided_kernel");
      } else {
        int bx = 1;  // up to 32 consecutive columns, the rest of the 256 threads along the axis
        while (bx < 32 && bx < a.inner) bx <<= 1;
        const int64_t tiles = ceil_div(a.inner, bx);
        softmax_cols_kernel<T><<<static_cast<unsigned>(tiles * a.outer), dim3(bx, 256 / bx), 0, s>>>(a, tiles);
        check_launch("softmax_cols_kernel");
      }
      break;
    case Path::Long:
      launch_long<T>(a, s);
      break;
    case Path::Rows:
      if (c.v == 1)
        launch_rows<T, 1>(c, a, s);
      else
        launch_rows<T, vec>(c, a, s);
      break;
  }
}

}  // namespace

void softmax_plan(SoftmaxArgs& a) {
  a.splits = 0;
  if (a.inner != 1 || a.kind == SoftmaxKind::Hard || a.n <= kScalarRowCap / 2) return;
  // Enough blocks to fill the GPU twice over, segments no shorter than kSegment.
  int64_t splits = ceil_div(2 * static_cast<int64_t>(a.multiprocessors), a.outer > 0 ? a.outer : 1);
  const int64_t most = ceil_div(a.n, kSegment);
  if (splits > most) splits = most;
  if (splits > 1024) splits = 1024;
  a.splits = static_cast<int>(splits < 1 ? 1 : splits);
}

size_t softmax_workspace_bytes(const SoftmaxArgs& a) {
  return a.splits > 0 ? static_cast<size_t>(a.outer) * a.splits * sizeof(float2) : 0;
}

bool softmax_supported(const SoftmaxArgs& a) {
  if (a.dtype != DType::Float32 && a.dtype != DType::Float16 && a.dtype != DType::BFloat16) return false;
  if (a.outer > INT_MAX || a.n > INT_MAX) return false;
  // Hardmax has no long-row path.
  return !(a.kind == SoftmaxKind::Hard && a.inner == 1 && a.n > kScalarRowCap);
}

bool launch_softmax(const SoftmaxArgs& a, cudaStream_t s) {
  if (a.outer == 0 || a.n == 0 || a.inner == 0) return true;
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

const char* softmax_variant(const SoftmaxArgs& a) {
  const Cfg c = choose(a, true);
  switch (c.path) {
    case Path::Strided:
      return a.kind == SoftmaxKind::Hard ? "strided axis, thread/column" : "strided axis, block/column tile";
    case Path::Long:
      return "long rows, split + combine";
    default:
      return c.tpr == 32 ? "warp/row" : "block/row";
  }
}

}  // namespace fusec::cuda
