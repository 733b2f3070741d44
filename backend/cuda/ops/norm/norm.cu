// Normalization kernels.
//
// Row normalizations (LayerNormalization, SkipLayerNorm, LayerNormGelu, RMSNorm, and
// InstanceNormalization, whose rows are the [N*C] spatial planes) share one kernel template: a row
// is read once into registers (16-byte vector loads when the row length and the pointers allow),
// the mean is reduced, then the squared deviations from that mean are reduced from the registers
// (an exact two-pass variance that costs no second trip to memory, so long rows with a large mean
// keep their digits, as the CPU reference's double two-pass does), and the row is written from the
// registers. The sums run over x - x[0] of the row, so a mean far from zero does not cost the
// float32 accumulator the digits of the spread.
// Short rows get a group of 4 to 32 lanes of a warp each, sized so that a lane loads about three
// vectors (no shared memory, no block barrier): ConvNeXt's rows of 96 to 384 halves left most of a
// warp idle and a single load in flight per lane at one warp a row. Longer rows, or few rows, get
// a block each. Rows too long for registers (over 16 values a thread at 1024 threads) re-read
// the row from global memory (L2 holds it) in three passes.
// A row norm is latency-bound at transformer sizes (BERT-base's 2048 rows of 768 halves fit in
// half a wave): it waits on the row's loads, then two reductions, then gamma and beta, then the
// stores. So each mode (LayerNorm with and without beta, RMSNorm, LayerNorm + GELU) is its own
// kernel, and rows of a warp or more load gamma and beta with x (docs/benchmarks.md, "Row norms at
// transformer sizes", has what that saved).
#include <algorithm>
#include "backend/cuda/core/common.cuh"
#include "backend/cuda/ops/norm/norm.cuh"
#include "backend/formulas.h"

namespace fusec::cuda {

namespace {

/// Sum over an aligned group of `width` lanes (a power of two up to 32). Every lane of the warp
/// takes part, whichever row it has.
__device__ __forceinline__ float group_sum(float v, int width) {
  for (int o = width >> 1; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/// Sum over the threads of one row: a lane group (blockDim.x <= 32) or the whole block
/// (blockDim.y == 1 then, so the barriers are block-uniform). Every thread gets the total.
__device__ __forceinline__ float row_sum(float v, float* smem) {
  if (blockDim.x <= 32) return group_sum(v, blockDim.x);
  v = warp_sum(v);
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  __syncthreads();  // the previous call's readers are done with smem
  if (lane == 0) smem[w] = v;
  __syncthreads();
  return warp_sum(lane < nw ? smem[lane] : 0.f);
}

// LayerNormGelu's GELU, in float: the erf form is the CPU reference's (fused.cpp); the tanh form
// rounds √(2/π) to the nearest float, one unit above the CPU's.
__device__ __forceinline__ float apply_act(float x, NormAct act) {
  if (act == NormAct::GeluErf) return formulas::gelu_erf_f32(x);
  if (act == NormAct::GeluTanh) return formulas::gelu_tanh_f32(x);
  return x;
}

__device__ __forceinline__ void store_stat(void* p, DType t, int64_t i, float v) {
  switch (t) {
    case DType::Float16:
      static_cast<__half*>(p)[i] = __float2half_rn(v);
      break;
    case DType::BFloat16:
      static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
      break;
    case DType::Float64:
      static_cast<double*>(p)[i] = v;
      break;
    default:
      static_cast<float*>(p)[i] = v;
      break;
  }
}

/// What the row kernel computes, fixed at compile time so that each kernel holds only its own
/// code: a warp runs a row norm's instructions once, so a kernel carrying the other modes' code
/// (GELU's above all) stalled on instruction fetch, and a beta that may be absent cost
/// LayerNorm 10-15% against one known to be there.
enum class RowMode : int { Layer = 0, LayerNoBias = 1, Rms = 2, LayerAct = 3 };

// Threads a block of a kPre kernel may have: x, gamma and beta held at once take more registers
// than 1024 threads leave a thread (64), and at 64 the compiler moved them to the stack.
constexpr int kRowPreThreads = 256;

/// One row per (blockDim.x)-thread group: blockDim = (4..32, rows per block) or (threads, 1).
/// Each thread holds K chunks of V values, chunk c = threadIdx.x + k * blockDim.x. kPre loads
/// gamma and beta with x, before the reductions, so that their latency is not paid after them;
/// it pays where a row has a warp or more (lane groups re-read gamma for every row, and their
/// extra loads cost more than the latency they hide).
template <typename T, int V, int K, RowMode M, bool kPre>
__global__ void __launch_bounds__(kPre ? kRowPreThreads : 1024) row_norm_kernel(RowNormArgs a) {
  constexpr bool kRms = M == RowMode::Rms;
  pdl_wait_then_release();
  __shared__ float smem[32];
  int64_t row = blockIdx.x * int64_t(blockDim.y) + threadIdx.y;
  // A lane group past the last row computes the last row again and stores nothing: its lanes
  // still take part in the warp's shuffles. (Block rows: the whole block is past, and returns.)
  const bool past = row >= a.rows;
  if (past && blockDim.x > 32) return;
  if (past) row = a.rows - 1;
  const int tid = threadIdx.x, tpr = blockDim.x;
  const int64_t n = a.n;
  const int chunks = static_cast<int>(n / V);
  const T* x = static_cast<const T*>(a.x) + row * n;
  const T* sk = a.skip ? static_cast<const T*>(a.skip) + (row % a.skip_rows) * n : nullptr;
  const T* gamma = static_cast<const T*>(a.gamma);
  const T* beta = static_cast<const T*>(a.beta);
  // kPre is only launched with gamma and beta per column (InstanceNorm's are per row).
  const bool per_column = kPre || a.affine_channels == 0;
  const bool has_beta = M == RowMode::Layer || (M == RowMode::LayerAct && beta != nullptr);

  using P = Pack<T, V>;
  P px[K], pg[K], pb[K];
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int c = tid + k * tpr;
    if (c < chunks) {
      px[k] = *reinterpret_cast<const P*>(x + int64_t(c) * V);
      if (kPre) {
        pg[k] = *reinterpret_cast<const P*>(gamma + int64_t(c) * V);
        pb[k] = has_beta ? *reinterpret_cast<const P*>(beta + int64_t(c) * V) : P{};
      }
    }
  }
  float v[K][V];
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int c = tid + k * tpr;
#pragma unroll
    for (int i = 0; i < V; ++i) v[k][i] = c < chunks ? to_compute(px[k].v[i]) : 0.f;
    if (sk && c < chunks) {
      float s[V];
      load_vec<T, V>(sk + int64_t(c) * V, s);
#pragma unroll
      for (int i = 0; i < V; ++i) v[k][i] += s[i];
    }
  }
  if (a.sum_out) {
    T* so = static_cast<T*>(a.sum_out) + row * n;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int c = tid + k * tpr;
      if (c < chunks && !past) store_vec<T, V>(so + int64_t(c) * V, v[k]);
    }
  }

  float mean = 0.f, sq = 0.f, shift = 0.f;
  if constexpr (!kRms) {
    // The row's first value (its group's first lane holds it as v[0][0]; a block row reads it).
    if (tpr <= 32)
      shift = __shfl_sync(0xffffffffu, v[0][0], (threadIdx.y * tpr) & 31);
    else
      shift = sk ? to_compute(x[0]) + to_compute(sk[0]) : to_compute(x[0]);
#pragma unroll
    for (int k = 0; k < K; ++k) {
      if (tid + k * tpr < chunks)
#pragma unroll
        for (int i = 0; i < V; ++i) v[k][i] -= shift;
    }
    float sum = 0.f;
#pragma unroll
    for (int k = 0; k < K; ++k)
#pragma unroll
      for (int i = 0; i < V; ++i) sum += v[k][i];
    mean = row_sum(sum, smem) / static_cast<float>(n);
#pragma unroll
    for (int k = 0; k < K; ++k) {
      if (tid + k * tpr < chunks) {
#pragma unroll
        for (int i = 0; i < V; ++i) {
          const float d = v[k][i] - mean;
          sq += d * d;
        }
      }
    }
  } else {
#pragma unroll
    for (int k = 0; k < K; ++k)
#pragma unroll
      for (int i = 0; i < V; ++i) sq += v[k][i] * v[k][i];  // padding is 0
  }
  sq = row_sum(sq, smem);
  const float inv = rsqrtf(sq / static_cast<float>(n) + a.eps);
  if (tid == 0 && !past) {
    if (a.mean_out) store_stat(a.mean_out, a.stat_dtype, row, shift + mean);
    if (a.inv_std_out) store_stat(a.inv_std_out, a.stat_dtype, row, inv);
  }
  if (past) return;  // after the last shuffle

  // Per-row parameters: one channel a row, or (GroupNormalization) a channel every affine_span
  // values, whole packs each (choose() keeps V within a span).
  const bool span_channels = !per_column && a.affine_span != 0 && a.affine_span != n;
  float g_row = 0.f, b_row = 0.f;
  if (!per_column && !span_channels) {
    const int64_t ch = row % a.affine_channels;
    g_row = to_compute(gamma[ch]);
    b_row = beta ? to_compute(beta[ch]) : 0.f;
  }
  T* y = static_cast<T*>(a.y) + row * n;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int c = tid + k * tpr;
    if (c >= chunks) continue;
    float g[V], b[V];
    if (per_column) {
      if (!kPre) {
        pg[k] = *reinterpret_cast<const P*>(gamma + int64_t(c) * V);
        pb[k] = has_beta ? *reinterpret_cast<const P*>(beta + int64_t(c) * V) : P{};
      }
#pragma unroll
      for (int i = 0; i < V; ++i) g[i] = to_compute(pg[k].v[i]), b[i] = to_compute(pb[k].v[i]);
    } else {
      float gc = g_row, bc = b_row;
      if (span_channels) {
        const int64_t ch = (row * (n / a.affine_span) + int64_t(c) * V / a.affine_span) % a.affine_channels;
        gc = to_compute(gamma[ch]);
        bc = beta ? to_compute(beta[ch]) : 0.f;
      }
#pragma unroll
      for (int i = 0; i < V; ++i) g[i] = gc, b[i] = bc;
    }
    float o[V];
#pragma unroll
    for (int i = 0; i < V; ++i) {
      if constexpr (kRms) {
        o[i] = v[k][i] * inv * g[i];
      } else {
        const float t = (v[k][i] - mean) * inv * g[i] + b[i];
        o[i] = M == RowMode::LayerAct ? apply_act(t, a.act) : t;
      }
    }
    store_vec<T, V>(y + int64_t(c) * V, o);
  }
}

/// Rows longer than the registers hold: one block per row, three passes over global memory.
template <typename T>
__global__ void __launch_bounds__(1024) row_norm_long_kernel(RowNormArgs a) {
  __shared__ float smem[32];
  const int64_t row = blockIdx.x;
  const int tid = threadIdx.x, tpr = blockDim.x;
  const int64_t n = a.n;
  const T* x = static_cast<const T*>(a.x) + row * n;
  const T* sk = a.skip ? static_cast<const T*>(a.skip) + (row % a.skip_rows) * n : nullptr;
  T* so = a.sum_out ? static_cast<T*>(a.sum_out) + row * n : nullptr;
  auto val = [&](int64_t j) { return sk ? to_compute(x[j]) + to_compute(sk[j]) : to_compute(x[j]); };

  float mean = 0.f, sq = 0.f;
  const float shift = a.rms ? 0.f : val(0);
  if (!a.rms) {
    float sum = 0.f;
    for (int64_t j = tid; j < n; j += tpr) {
      const float t = val(j);
      if (so) so[j] = from_compute<T>(t);
      sum += t - shift;
    }
    mean = row_sum(sum, smem) / static_cast<float>(n);
    for (int64_t j = tid; j < n; j += tpr) {
      const float d = (val(j) - shift) - mean;
      sq += d * d;
    }
  } else {
    for (int64_t j = tid; j < n; j += tpr) {
      const float t = val(j);
      if (so) so[j] = from_compute<T>(t);
      sq += t * t;
    }
  }
  sq = row_sum(sq, smem);
  const float inv = 1.0f / sqrtf(sq / static_cast<float>(n) + a.eps);
  if (tid == 0) {
    if (a.mean_out) store_stat(a.mean_out, a.stat_dtype, row, shift + mean);
    if (a.inv_std_out) store_stat(a.inv_std_out, a.stat_dtype, row, inv);
  }
  const T* gamma = static_cast<const T*>(a.gamma);
  const T* beta = static_cast<const T*>(a.beta);
  const int64_t span = a.affine_span ? a.affine_span : n;
  T* y = static_cast<T*>(a.y) + row * n;
  for (int64_t j = tid; j < n; j += tpr) {
    const int64_t at = a.affine_channels ? (row * (n / span) + j / span) % a.affine_channels : j;
    const float g = to_compute(gamma[at]);
    const float b = beta ? to_compute(beta[at]) : 0.f;
    const float t = val(j);
    y[j] = from_compute<T>(apply_act(a.rms ? t * inv * g : ((t - shift) - mean) * inv * g + b, a.act));
  }
}

struct RowCfg {
  int v = 1, k = 1, tpr = 32, rows_per_block = 1;
  bool long_row = false;
  bool pre = false;  // gamma and beta loaded with x (row_norm_kernel's kPre)
};

int pick_k(int64_t need) {
  for (int k : {1, 2, 3, 4, 6, 8, 16})
    if (k >= need) return k;
  return 16;
}

// Values a thread keeps in registers: 32 floats stay clear of spills at 1024 threads per block.
constexpr int kRowRegs = 32;
// Vectors a lane keeps in a lane group. At BERT's rows of 768 halves (H200), 32 lanes x 3 vectors
// ran faster than both 16 x 6 and a 96-thread block x 1: more vectors a lane serialize the sums,
// and a block row pays its barriers.
constexpr int kRowVectors = 3;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

RowCfg choose(const RowNormArgs& a) {
  RowCfg c;
  const int vec = 16 / static_cast<int>(dtype_size(a.dtype));
  const bool aligned = aligned16(a.x) && aligned16(a.y) && aligned16(a.skip) && aligned16(a.sum_out) &&
                       (a.affine_channels || (aligned16(a.gamma) && aligned16(a.beta)));
  c.v = a.n % vec == 0 && (a.affine_span == 0 || a.affine_span % vec == 0) && aligned ? vec : 1;
  const int64_t chunks = a.n / c.v;
  const int max_k = kRowRegs / c.v < 16 ? kRowRegs / c.v : 16;  // 32 scalars would spill at 1024 threads
  // Few rows cannot fill the GPU one warp each: spread each row over a block instead.
  const bool few_rows = a.rows < 2 * static_cast<int64_t>(a.multiprocessors);
  if (chunks <= 32 * kRowVectors && !(few_rows && chunks > 64)) {
    // The smallest power-of-two group (4 to 32 lanes) that gives a lane at most 3 vectors.
    int tpr = 4;
    while (tpr < 32 && ceil_div(chunks, tpr) > kRowVectors) tpr *= 2;
    c.tpr = tpr;
    c.rows_per_block = 128 / tpr;
    c.k = pick_k(ceil_div(chunks, tpr));
  } else if (chunks <= 1024 * max_k) {
    // Few rows leave most SMs idle, so a row's latency is the run's: rows of up to 128 vectors get
    // one vector a thread (the MLP's 16 rows of 1024 fp16 ran faster at 128 threads x 1 vector than
    // at 64 x 2; at fp32, 256 x 1 was slower than 128 x 2). Many rows take two vectors a thread:
    // BERT-large's 2048 rows of 1024 halves and Llama's of 2048 ran fastest at 64 and 128 threads.
    const int64_t per_thread = few_rows && chunks <= 128 ? 1 : 2;
    int64_t t = ceil_div(ceil_div(chunks, per_thread), 32) * 32;
    t = t < 64 ? 64 : t > 1024 ? 1024 : t;
    c.tpr = static_cast<int>(t);
    c.k = pick_k(ceil_div(chunks, t));
  } else {
    c.long_row = true;
    c.tpr = 1024;
    return c;
  }
  c.pre = c.tpr >= 32 && c.tpr * c.rows_per_block <= kRowPreThreads && c.k <= 4 && !a.affine_channels &&
          a.act == NormAct::None;
  return c;
}

/// The row kernel for (M, kPre) with K vectors a thread; nullptr where none is built.
template <typename T, int V, RowMode M, bool kPre>
auto row_kernel_for(int k) -> void (*)(RowNormArgs) {
  switch (k) {
    case 1:
      return row_norm_kernel<T, V, 1, M, kPre>;
    case 2:
      return row_norm_kernel<T, V, 2, M, kPre>;
    case 3:
      return row_norm_kernel<T, V, 3, M, kPre>;
    case 4:
      return row_norm_kernel<T, V, 4, M, kPre>;
    default:
      break;
  }
  if constexpr (!kPre && V * 8 <= kRowRegs) {
    if (k == 6) return row_norm_kernel<T, V, 6, M, false>;
    if (k == 8) return row_norm_kernel<T, V, 8, M, false>;
  }
  // Scalar rows (odd widths) keep up to 16 values a thread.
  if constexpr (!kPre && V * 16 <= kRowRegs) {
    if (k == 16) return row_norm_kernel<T, V, 16, M, false>;
  }
  return nullptr;
}

template <typename T, int V>
void launch_vk(const RowCfg& c, const RowNormArgs& a, cudaStream_t s) {
  const dim3 block(c.tpr, c.rows_per_block);
  const unsigned grid = static_cast<unsigned>(ceil_div(a.rows, c.rows_per_block));
  void (*kernel)(RowNormArgs) = nullptr;
  if (a.act != NormAct::None && a.rms) internal_error("row norm: an activation after RMSNorm has no kernel");
  if (a.act != NormAct::None)
    kernel = row_kernel_for<T, V, RowMode::LayerAct, false>(c.k);
  else if (a.rms)
    kernel = c.pre ? row_kernel_for<T, V, RowMode::Rms, true>(c.k) : row_kernel_for<T, V, RowMode::Rms, false>(c.k);
  else if (a.beta)
    kernel = c.pre ? row_kernel_for<T, V, RowMode::Layer, true>(c.k) : row_kernel_for<T, V, RowMode::Layer, false>(c.k);
  else
    kernel = c.pre ? row_kernel_for<T, V, RowMode::LayerNoBias, true>(c.k)
                   : row_kernel_for<T, V, RowMode::LayerNoBias, false>(c.k);
  // Every k choose() makes has a kernel; one without would leave the output unwritten.
  if (!kernel)
    internal_error("row norm: no kernel for " + std::to_string(c.k) + " vectors of " + std::to_string(V) +
                   " per thread");
  launch_pdl("row_norm_kernel", kernel, dim3(grid), block, 0, s, a);
}

template <typename T>
void launch_row_norm_t(const RowNormArgs& a, cudaStream_t s) {
  const RowCfg c = choose(a);
  if (c.long_row) {
    row_norm_long_kernel<T><<<static_cast<unsigned>(a.rows), c.tpr, 0, s>>>(a);
    check_launch("row_norm_long_kernel");
  } else if (c.v == 1) {
    launch_vk<T, 1>(c, a, s);
  } else {
    launch_vk<T, 16 / sizeof(T)>(c, a, s);
  }
}

// ---- BatchNormalization (inference) ----

template <typename T, int V, typename I>
__global__ void batchnorm_kernel(const T* __restrict__ x, const T* __restrict__ scale, const T* __restrict__ bias,
                                 const T* __restrict__ mean, const T* __restrict__ var, T* __restrict__ y, I chunks,
                                 I plane_chunks, I C, float eps) {
  for (I i = blockIdx.x * I(blockDim.x) + threadIdx.x; i < chunks; i += I(gridDim.x) * blockDim.x) {
    const I c = (i / plane_chunks) % C;
    const float m = to_compute(mean[c]);
    const float sc = to_compute(scale[c]) / sqrtf(to_compute(var[c]) + eps);
    const float b = to_compute(bias[c]);
    float v[V];
    load_vec<T, V>(x + int64_t(i) * V, v);
#pragma unroll
    for (int k = 0; k < V; ++k) v[k] = (v[k] - m) * sc + b;
    store_vec<T, V>(y + int64_t(i) * V, v);
  }
}

// Channels-last: x is [N*S, C] in memory; chunk i holds V adjacent channels of one pixel.
template <typename T, int V, typename I>
__global__ void batchnorm_nhwc_kernel(const T* __restrict__ x, const T* __restrict__ scale, const T* __restrict__ bias,
                                      const T* __restrict__ mean, const T* __restrict__ var, T* __restrict__ y,
                                      I chunks, I channel_chunks, float eps) {
  for (I i = blockIdx.x * I(blockDim.x) + threadIdx.x; i < chunks; i += I(gridDim.x) * blockDim.x) {
    const I c0 = (i % channel_chunks) * V;
    float v[V];
    load_vec<T, V>(x + int64_t(i) * V, v);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const float sc = to_compute(scale[c0 + k]) / sqrtf(to_compute(var[c0 + k]) + eps);
      v[k] = (v[k] - to_compute(mean[c0 + k])) * sc + to_compute(bias[c0 + k]);
    }
    store_vec<T, V>(y + int64_t(i) * V, v);
  }
}

template <typename T, int V>
void launch_bn_nhwc_v(const T* x, const T* scale, const T* bias, const T* mean, const T* var, T* y, int64_t N,
                      int64_t C, int64_t S, float eps, cudaStream_t s) {
  const int64_t chunks = N * C * S / V;
  const unsigned grid = grid_for(chunks);
  if (chunks < (int64_t(1) << 31)) {
    batchnorm_nhwc_kernel<T, V, uint32_t>
        <<<grid, kBlock, 0, s>>>(x, scale, bias, mean, var, y, uint32_t(chunks), uint32_t(C / V), eps);
  } else {
    batchnorm_nhwc_kernel<T, V, int64_t><<<grid, kBlock, 0, s>>>(x, scale, bias, mean, var, y, chunks, C / V, eps);
  }
  check_launch("batchnorm_nhwc_kernel");
}

template <typename T, int V>
void launch_bn_v(const T* x, const T* scale, const T* bias, const T* mean, const T* var, T* y, int64_t N, int64_t C,
                 int64_t S, float eps, cudaStream_t s) {
  const int64_t chunks = N * C * S / V;
  const unsigned grid = grid_for(chunks);
  if (chunks < (int64_t(1) << 31)) {
    batchnorm_kernel<T, V, uint32_t>
        <<<grid, kBlock, 0, s>>>(x, scale, bias, mean, var, y, uint32_t(chunks), uint32_t(S / V), uint32_t(C), eps);
  } else {
    batchnorm_kernel<T, V, int64_t><<<grid, kBlock, 0, s>>>(x, scale, bias, mean, var, y, chunks, S / V, C, eps);
  }
  check_launch("batchnorm_kernel");
}

}  // namespace

bool launch_row_norm(const RowNormArgs& a, cudaStream_t s) {
  if (a.rows == 0 || a.n == 0) return true;
  switch (a.dtype) {
    case DType::Float32:
      launch_row_norm_t<float>(a, s);
      return true;
    case DType::Float16:
      launch_row_norm_t<__half>(a, s);
      return true;
    case DType::BFloat16:
      launch_row_norm_t<__nv_bfloat16>(a, s);
      return true;
    default:
      return false;
  }
}

const char* row_norm_variant(const RowNormArgs& a) {
  const RowCfg c = choose(a);
  if (c.long_row) return "block/row, 3 passes";
  if (c.tpr == 32) return c.v > 1 ? "warp/row, 16B vectors" : "warp/row";
  if (c.tpr == 16) return c.v > 1 ? "16 lanes/row, 16B vectors" : "16 lanes/row";
  if (c.tpr == 8) return c.v > 1 ? "8 lanes/row, 16B vectors" : "8 lanes/row";
  if (c.tpr == 4) return c.v > 1 ? "4 lanes/row, 16B vectors" : "4 lanes/row";
  return c.v > 1 ? "block/row, 16B vectors" : "block/row";
}

bool launch_batchnorm_inference(DType dtype, const void* x, const void* scale, const void* bias, const void* mean,
                                const void* var, void* y, int64_t N, int64_t C, int64_t S, float eps,
                                bool channels_last, cudaStream_t s) {
  if (N * C * S == 0) return true;
  bool ok = false;
  auto go = [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, double>) {
      constexpr int vec = 16 / sizeof(T);
      const T *px = static_cast<const T*>(x), *ps = static_cast<const T*>(scale), *pb = static_cast<const T*>(bias),
              *pm = static_cast<const T*>(mean), *pv = static_cast<const T*>(var);
      T* py = static_cast<T*>(y);
      const bool vectors = (channels_last ? C : S) % vec == 0 && aligned16(x) && aligned16(y);
      if (channels_last && vectors)
        launch_bn_nhwc_v<T, vec>(px, ps, pb, pm, pv, py, N, C, S, eps, s);
      else if (channels_last)
        launch_bn_nhwc_v<T, 1>(px, ps, pb, pm, pv, py, N, C, S, eps, s);
      else if (vectors)
        launch_bn_v<T, vec>(px, ps, pb, pm, pv, py, N, C, S, eps, s);
      else
        launch_bn_v<T, 1>(px, ps, pb, pm, pv, py, N, C, S, eps, s);
      ok = true;
    }
  };
  dispatch_float_storage(dtype, go);
  return ok;
}

}  // namespace fusec::cuda
