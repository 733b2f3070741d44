// Flash-style attention on CUDA cores, so the [Sq, Skv] score matrix never reaches memory.
// Accumulation is float32 for every storage type, which is also what strict fp32 (no TF32) requires.
// Two kernels here; at fp16/bf16 the tensor-core kernel of attention_mma.cu takes every case whose
// head sizes and strides are whole 16-byte chunks, and the streaming kernel the rest:
//
// Streaming (every case): one block per (64 query rows, head, batch); keys and values stream
// through shared memory 64 at a time and each row keeps a running max, sum and output (online
// softmax). Thread layout (R = 2 rows per thread: 256 threads, 8 warps): lane = 8·rg + cg. Warp w
// owns rows 4R·w + 4i + rg (i < R); for scores, lane cg owns keys cg + 8j (j < 8) of the tile, so
// a row's 64 scores live in the 8 lanes of its row group and its max and sum are three
// xor-shuffles. For P·V the same lanes own output columns 32t + 4cg + e, so each float4 read of a
// V row is one conflict-free wavefront. Rows are padded by 4 floats in shared memory: Q and K
// reads of the 8 lanes hit distinct banks.
//
// Register-tiled (fp32, head sizes up to 64, no causal rule, no mask or one shared by all query
// rows such as BERT's [B,1,1,S]; tiled_ok says exactly): the streaming kernel's P·V shuffles a
// probability per key and does few FMAs per shared load, which leaves it far below the fp32 FMA
// rate at BERT-base shapes. Here a block (64 query rows, 4 warps, 72 KiB: three blocks
// per SM) takes keys 64 at a time through cp.async: Q and the first K, then V while the scores are
// computed, and the next chunk's K in a second buffer a whole chunk ahead. Warps split the rows in
// halves and the keys (scores) or output columns (P·V) in halves; lane = 4·rg + kg. Scores: each
// thread holds a 4-row × 8-key tile of S = Q·Kᵀ, built from float4 loads along the head dim (12
// shared loads per 128 FMAs); a chunk's row maxima and sums meet across the two key-half warps in
// shared memory. The probabilities go to shared memory transposed (Pᵀ, over the spent K), and
// P·V is a second tile of 4 rows × 8 columns: per key one float4 of Pᵀ and two of V feed 32 FMAs.
// Each chunk rescales the output (online softmax), so any kv_len runs; keys past kv_len get a
// -inf bias and zero-filled V. Timed at BERT-base shapes (packed QKV, row mask), it beats the
// streaming kernel, a 256-thread block with a 4×4 tile per thread (three blocks per SM, capped at
// 80 registers) and one of 128-key chunks (two blocks per SM). Its issue slots are still far from
// always busy (a scheduler has only three warps to choose from).
#include <algorithm>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "backend/cuda/ops/attention/attention.cuh"
#include "backend/cuda/ops/attention/attention_mma.cuh"
#include "backend/cuda/ops/attention/soft_cap.cuh"
#include "backend/cuda/core/common.cuh"
#include "ir/switches.h"

namespace fusec::cuda {

namespace {

constexpr int kRows = 64;  // query rows per block
constexpr int kKeys = 64;  // keys per tile
/// R query rows per thread: a warp owns 4·R rows, a block 64 rows in 16/R warps.
template <int R>
constexpr int threads_for() {
  return kRows / (4 * R) * 32;
}

__host__ __device__ constexpr int padded(int hd) { return hd + 4; }

template <int NT, typename T>
__device__ __forceinline__ void load_tile(float* dst, const T* src, int64_t seq_stride, int rows_valid, int dim,
                                          float mul, int rows, int hd) {
  const int p = padded(hd);
  for (int idx = threadIdx.x; idx < rows * hd; idx += NT) {
    const int r = idx / hd, d = idx - r * hd;
    float v = 0.0f;
    if (r < rows_valid && d < dim) v = to_compute(src[static_cast<int64_t>(r) * seq_stride + d]) * mul;
    dst[r * p + d] = v;
  }
}

// fp32 tiles stream in with cp.async (16 bytes, zero-filled past the end), so the next tile's
// loads overlap this tile's arithmetic instead of stalling every warp at a barrier (common.cuh's
// cp_async16).
/// dim and seq_stride multiples of 4, src 16-byte aligned (checked by the launcher).
template <int NT, int HD>
__device__ __forceinline__ void load_tile_async(float* dst, const float* src, int64_t seq_stride, int rows_valid,
                                                int dim) {
  constexpr int P = padded(HD), C = HD / 4;
  for (int idx = threadIdx.x; idx < kKeys * C; idx += NT) {
    const int r = idx / C, c = idx - r * C;
    const bool ok = r < rows_valid && 4 * c < dim;
    cp_async16(dst + r * P + 4 * c, ok ? src + static_cast<int64_t>(r) * seq_stride + 4 * c : src, ok);
  }
}

/// A mask that is the same for every query row ([B, 1, 1, Skv] as BERT's): the tile's 64 values,
/// as additive floats, staged once in shared memory instead of 32 global loads per thread.
template <typename T>
__device__ __forceinline__ void load_row_mask(float* dst, const AttentionArgs& a, int64_t base, int k0) {
  if (threadIdx.x >= kKeys) return;
  const int col = k0 + threadIdx.x;
  float v = -INFINITY;
  if (col < a.kv_len) {
    const int64_t off = base + col * a.mask_stride[3];
    if (a.mask_dtype == DType::Bool)
      v = static_cast<const unsigned char*>(a.mask)[off] ? 0.0f : -INFINITY;
    else
      v = to_compute(static_cast<const T*>(a.mask)[off]);
  }
  dst[threadIdx.x] = v;
}

// Heads of 256 (Gemma's, where cuDNN's SDPA does not take the case: float32, a bool mask, a soft
// cap) hold 64 output values a row in registers and stage 200 KB a block: one block an SM.
template <typename T, int HD, bool ASYNC, int R>
__global__ void __launch_bounds__(threads_for<R>(), HD > 128 ? 1 : 3) attention_kernel(AttentionArgs a) {
  constexpr int NT = threads_for<R>();
  constexpr int P = padded(HD);
  constexpr int T4 = HD / 32;  // float4 output groups per lane
  extern __shared__ float4 smem4[];
  float* qs = reinterpret_cast<float*>(smem4);
  float* ks = qs + kRows * P;
  float* vs = ks + kKeys * P;
  float* mrow = vs + kKeys * P;  // kKeys floats: the staged row-broadcast mask

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int rg = lane >> 3, cg = lane & 7;
  const int q0 = blockIdx.x * kRows, h = blockIdx.y, b = blockIdx.z;
  const int hk = h / (a.q_heads / a.kv_heads);
  const T* Q = static_cast<const T*>(a.q) + b * a.qs.batch + h * a.qs.head + static_cast<int64_t>(q0) * a.qs.seq;
  const T* K = static_cast<const T*>(a.k) + b * a.ks.batch + hk * a.ks.head;
  const T* V = static_cast<const T*>(a.v) + b * a.vs.batch + hk * a.vs.head;

  // The scale is applied to Q once (mathematically (Q·K)·scale) instead of to every score.
  const float* Kf = reinterpret_cast<const float*>(K);
  const float* Vf = reinterpret_cast<const float*>(V);
  if constexpr (ASYNC) {  // the first K tile is in flight while Q loads
    load_tile_async<NT, HD>(ks, Kf, a.ks.seq, min(kKeys, a.kv_len), a.head_dim);
    cp_async_commit();
  }
  load_tile<NT>(qs, Q, a.qs.seq, a.q_len - q0, a.head_dim, a.scale, kRows, HD);

  float o[R][4 * T4];
  float m[R], l[R];
  int row[R];
#pragma unroll
  for (int i = 0; i < R; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
    row[i] = q0 + warp * 4 * R + 4 * i + rg;
#pragma unroll
    for (int t = 0; t < 4 * T4; ++t) o[i][t] = 0.0f;
  }
  // Under the causal rule no row of this block sees a key past its last row.
  const int kv_end = a.causal ? min(a.kv_len, q0 + kRows) : a.kv_len;
  const unsigned char* mask_b = static_cast<const unsigned char*>(a.mask);
  const T* mask_f = static_cast<const T*>(a.mask);
  const bool bool_mask = a.mask_dtype == DType::Bool;
  const int64_t mask_base = b * a.mask_stride[0] + h * a.mask_stride[1];

  const bool row_mask = a.mask && a.mask_stride[2] == 0;

  for (int k0 = 0; k0 < kv_end; k0 += kKeys) {
    const int valid = min(kKeys, a.kv_len - k0);
    __syncthreads();  // the previous tile is consumed (and Q is written, for the first)
    if constexpr (ASYNC) {
      // V of this tile loads while its scores are computed; K of this tile was issued earlier.
      load_tile_async<NT, HD>(vs, Vf + static_cast<int64_t>(k0) * a.vs.seq, a.vs.seq, valid, a.v_head_dim);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      load_tile<NT>(ks, K + static_cast<int64_t>(k0) * a.ks.seq, a.ks.seq, valid, a.head_dim, 1.0f, kKeys, HD);
      load_tile<NT>(vs, V + static_cast<int64_t>(k0) * a.vs.seq, a.vs.seq, valid, a.v_head_dim, 1.0f, kKeys, HD);
    }
    if (row_mask) load_row_mask<T>(mrow, a, mask_base, k0);
    __syncthreads();

    float s[R][8];
#pragma unroll
    for (int i = 0; i < R; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j) s[i][j] = 0.0f;
#pragma unroll 4
    for (int d = 0; d < HD; d += 4) {
      float4 qv[R], kv[8];
#pragma unroll
      for (int i = 0; i < R; ++i) qv[i] = *reinterpret_cast<const float4*>(&qs[(warp * 4 * R + 4 * i + rg) * P + d]);
#pragma unroll
      for (int j = 0; j < 8; ++j) kv[j] = *reinterpret_cast<const float4*>(&ks[(cg + 8 * j) * P + d]);
#pragma unroll
      for (int i = 0; i < R; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j)
          s[i][j] += qv[i].x * kv[j].x + qv[i].y * kv[j].y + qv[i].z * kv[j].z + qv[i].w * kv[j].w;
    }

#pragma unroll
    for (int i = 0; i < R; ++i) {
      const bool row_ok = row[i] < a.q_len;
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int col = k0 + cg + 8 * j;
        float x = a.softcap > 0.0f ? soft_cap(s[i][j], a.softcap) : s[i][j];
        if (col >= a.kv_len || (a.causal && col > row[i])) {
          x = -INFINITY;
        } else if (row_mask) {
          x += mrow[cg + 8 * j];
        } else if (a.mask && row_ok) {
          const int64_t off = mask_base + row[i] * a.mask_stride[2] + col * a.mask_stride[3];
          if (bool_mask)
            x = mask_b[off] ? x : -INFINITY;
          else
            x += to_compute(mask_f[off]);
        }
        s[i][j] = x;
        mx = fmaxf(mx, x);
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
      const float m_new = fmaxf(m[i], mx);
      // A row that has seen only excluded keys keeps exp(-inf) = 0 everywhere instead of NaN.
      const float base = m_new == -INFINITY ? 0.0f : m_new;
      const float alpha = __expf(m[i] - base);
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        s[i][j] = __expf(s[i][j] - base);
        sum += s[i][j];
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      sum += __shfl_xor_sync(0xffffffffu, sum, 4);
      l[i] = l[i] * alpha + sum;
      m[i] = m_new;
#pragma unroll
      for (int t = 0; t < 4 * T4; ++t) o[i][t] *= alpha;
    }

    if constexpr (ASYNC) {
      __syncthreads();  // every warp is done reading this K tile: the next one may land there
      if (k0 + kKeys < kv_end)
        load_tile_async<NT, HD>(ks, Kf + static_cast<int64_t>(k0 + kKeys) * a.ks.seq, a.ks.seq,
                                min(kKeys, a.kv_len - k0 - kKeys), a.head_dim);
      cp_async_commit();
      cp_async_wait<1>();  // this tile's V
      __syncthreads();
    }

    // P·V: key c's probability for row i sits in lane (row group, c % 8), register j = c / 8.
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int src = 0; src < 8; ++src) {
        const int c = src + 8 * j;
        float p[R];
#pragma unroll
        for (int i = 0; i < R; ++i) p[i] = __shfl_sync(0xffffffffu, s[i][j], (lane & ~7) | src);
#pragma unroll
        for (int t = 0; t < T4; ++t) {
          const float4 vv = *reinterpret_cast<const float4*>(&vs[c * P + 32 * t + 4 * cg]);
#pragma unroll
          for (int i = 0; i < R; ++i) {
            o[i][4 * t + 0] += p[i] * vv.x;
            o[i][4 * t + 1] += p[i] * vv.y;
            o[i][4 * t + 2] += p[i] * vv.z;
            o[i][4 * t + 3] += p[i] * vv.w;
          }
        }
      }
    }
  }

  if constexpr (ASYNC) asm volatile("cp.async.wait_all;\n" ::);  // no copy outlives the block

  T* Y = static_cast<T*>(a.y) + b * a.ys.batch + h * a.ys.head;
#pragma unroll
  for (int i = 0; i < R; ++i) {
    if (row[i] >= a.q_len) continue;
    // A row with every key excluded (l = 0) is written as zeros, as the CPU reference does.
    const float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
#pragma unroll
    for (int t = 0; t < T4; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = 32 * t + 4 * cg + e;
        if (col < a.v_head_dim) Y[row[i] * a.ys.seq + col] = from_compute<T>(o[i][4 * t + e] * inv);
      }
  }
}

int head_tile(const AttentionArgs& a) {
  const int hd = std::max(a.head_dim, a.v_head_dim);
  return hd <= 64 ? 64 : hd <= 128 ? 128 : 256;
}

template <typename T, int HD, bool ASYNC, int R>
void launch_r(const AttentionArgs& a, cudaStream_t stream) {
  constexpr size_t smem = (static_cast<size_t>(kRows + 2 * kKeys) * padded(HD) + kKeys) * sizeof(float);
  // Over 48 KiB of dynamic shared memory needs the per-function opt-in, once per instantiation.
  static const cudaError_t opted_in = cudaFuncSetAttribute(
      attention_kernel<T, HD, ASYNC, R>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (opted_in != cudaSuccess)
    throw_cuda_error(static_cast<int>(opted_in), "cudaFuncSetAttribute(attention)", __FILE__, __LINE__);
  dim3 grid((a.q_len + kRows - 1) / kRows, a.q_heads, a.batch);
  attention_kernel<T, HD, ASYNC, R><<<grid, threads_for<R>(), smem, stream>>>(a);
  check_launch("attention");
}

// Two rows per thread (8 warps per block): faster at BERT-base shapes (fp32, scripts/gpu_check.sh
// micro) than four rows per thread and 4 warps, which left the SM too few warps to hide the loads
// with.
template <typename T, int HD, bool ASYNC>
void launch_typed(const AttentionArgs& a, cudaStream_t stream) {
  launch_r<T, HD, ASYNC, 2>(a, stream);
}

/// cp.async needs 16-byte chunks: head sizes and K/V strides in whole float4s, aligned bases.
bool async_ok(const AttentionArgs& a) {
  auto al = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; };
  auto m4 = [](int64_t v) { return v % 4 == 0; };
  return a.dtype == DType::Float32 && a.head_dim % 4 == 0 && a.v_head_dim % 4 == 0 && m4(a.ks.batch) && m4(a.ks.head) &&
         m4(a.ks.seq) && m4(a.vs.batch) && m4(a.vs.head) && m4(a.vs.seq) && al(a.k) && al(a.v);
}

// ---- fp32, head sizes up to 64: register-tiled variant (see the file comment) ----
namespace tiled {

constexpr int kRows = 64;            // query rows per block
constexpr int kKeys = 64;            // keys per chunk
constexpr int kHd = 64;              // head size, zero-padded
constexpr int kThreads = 128;        // 4 warps: 2 row halves × 2 key (scores) or column (P·V) halves
constexpr int kQkPitch = kHd + 4;    // 4 lanes' K rows / 8 lanes' Q rows land on distinct banks
constexpr int kPtPitch = kRows + 8;  // Pᵀ: the 4×8 lanes' scattered score writes land on distinct banks
constexpr int kKBuf = kKeys * (kPtPitch > kQkPitch ? kPtPitch : kQkPitch);
constexpr int kQ = 0;
constexpr int kK = kQ + kRows * kQkPitch;  // two buffers: chunk c's K, then its Pᵀ, while c+1's K lands
constexpr int kV = kK + 2 * kKBuf;
constexpr int kMask = kV + kKeys * kHd;  // the chunk's additive mask row, -inf past kv_len
constexpr int kRedMax = kMask + kKeys;   // [2 key halves][kRows] partial row maxima
constexpr int kRedSum = kRedMax + 2 * kRows;
constexpr int kAlpha = kRedSum + 2 * kRows;  // per row: rescale of the running output
constexpr int kInvL = kAlpha + kRows;
// 72 KiB (and 168 registers a thread): three blocks per SM, so BERT-base's 384 blocks are all
// resident on the H100's 132 SMs at once (no tail wave) and one block's loads and barriers hide
// behind the other two blocks' arithmetic.
constexpr size_t kSmemBytes = static_cast<size_t>(kInvL + kRows) * sizeof(float);
constexpr int kBlocksPerSm = 3;

/// rows × 64 floats at `pitch`, zero-filled past rows_valid and past dim (a multiple of 4).
__device__ __forceinline__ void load_rows(float* dst, int pitch, const float* src, int64_t seq_stride, int rows,
                                          int rows_valid, int dim) {
  for (int idx = threadIdx.x; idx < rows * (kHd / 4); idx += kThreads) {
    const int r = idx / (kHd / 4), c = 4 * (idx % (kHd / 4));
    const bool ok = r < rows_valid && c < dim;
    cp_async16(dst + r * pitch + c, ok ? src + r * seq_stride + c : src, ok);
  }
}

__global__ void __launch_bounds__(kThreads, kBlocksPerSm) attention_f32_kernel(AttentionArgs a) {
  extern __shared__ float4 smem4[];
  float* sm = reinterpret_cast<float*>(smem4);
  float* qs = sm + kQ;
  float* vs = sm + kV;
  float* mrow = sm + kMask;
  float* red_max = sm + kRedMax;
  float* red_sum = sm + kRedSum;
  float* alpha_s = sm + kAlpha;
  float* inv_l = sm + kInvL;

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int wr = warp & 1, wq = warp >> 1;
  const int rg = lane >> 2, kg = lane & 3;
  // Scores: rows 32·wr + rg + 8i (i < 4), keys 32·wq + kg + 4j (j < 8) of the chunk.
  // P·V:    rows 32·wr + 4·rg + i,         columns 32·wq + 4·kg + 16t + e (t < 2).
  const int q0 = blockIdx.x * kRows, h = blockIdx.y, b = blockIdx.z;
  const int hk = h / (a.q_heads / a.kv_heads);
  const float* Q =
      static_cast<const float*>(a.q) + b * a.qs.batch + h * a.qs.head + static_cast<int64_t>(q0) * a.qs.seq;
  const float* K = static_cast<const float*>(a.k) + b * a.ks.batch + hk * a.ks.head;
  const float* V = static_cast<const float*>(a.v) + b * a.vs.batch + hk * a.vs.head;
  const int64_t mask_base = b * a.mask_stride[0] + h * a.mask_stride[1];
  auto load_k = [&](int k0) {
    if (k0 < a.kv_len)
      load_rows(sm + kK + (k0 / kKeys % 2) * kKBuf, kQkPitch, K + static_cast<int64_t>(k0) * a.ks.seq, a.ks.seq, kKeys,
                a.kv_len - k0, a.head_dim);
    cp_async_commit();  // empty past the end, so every chunk waits on the same group counts
  };
  auto load_v = [&](int k0) {
    if (k0 < a.kv_len)
      load_rows(vs, kHd, V + static_cast<int64_t>(k0) * a.vs.seq, a.vs.seq, kKeys, a.kv_len - k0, a.v_head_dim);
    cp_async_commit();
  };

  // In flight at the top of chunk c, oldest first: K of c (with Q for c = 0), V of c, K of c+1.
  load_rows(qs, kQkPitch, Q, a.qs.seq, kRows, a.q_len - q0, a.head_dim);
  load_k(0);
  load_v(0);
  load_k(kKeys);

  float m[4], l[4], o[4][8];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; ++e) o[i][e] = 0.0f;
  }

  for (int k0 = 0; k0 < a.kv_len; k0 += kKeys) {
    const int valid = min(kKeys, a.kv_len - k0);
    float* ks = sm + kK + (k0 / kKeys % 2) * kKBuf;
    float* pt = ks;  // Pᵀ [key][row], over this chunk's K once its scores are done
    if (const int t = threadIdx.x; t < kKeys) {
      float v = -INFINITY;
      if (t < valid) {
        const int64_t off = mask_base + static_cast<int64_t>(k0 + t) * a.mask_stride[3];
        if (!a.mask)
          v = 0.0f;
        else if (a.mask_dtype == DType::Bool)
          v = static_cast<const unsigned char*>(a.mask)[off] ? 0.0f : -INFINITY;
        else
          v = static_cast<const float*>(a.mask)[off];
      }
      mrow[t] = v;
    }
    cp_async_wait<2>();
    __syncthreads();

    // S = Q·Kᵀ: per float4 step of the head dim, 12 shared loads feed 128 FMAs.
    float s[4][8];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j) s[i][j] = 0.0f;
    const float* qp = qs + (32 * wr + rg) * kQkPitch;
    const float* kp = ks + (32 * wq + kg) * kQkPitch;
#pragma unroll
    for (int d = 0; d < kHd; d += 4) {
      float4 qv[4], kv[8];
#pragma unroll
      for (int i = 0; i < 4; ++i) qv[i] = *reinterpret_cast<const float4*>(qp + 8 * i * kQkPitch + d);
#pragma unroll
      for (int j = 0; j < 8; ++j) kv[j] = *reinterpret_cast<const float4*>(kp + 4 * j * kQkPitch + d);
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          s[i][j] = fmaf(qv[i].x, kv[j].x, s[i][j]);
          s[i][j] = fmaf(qv[i].y, kv[j].y, s[i][j]);
          s[i][j] = fmaf(qv[i].z, kv[j].z, s[i][j]);
          s[i][j] = fmaf(qv[i].w, kv[j].w, s[i][j]);
        }
    }

    float bias[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) bias[j] = mrow[32 * wq + kg + 4 * j];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        s[i][j] = fmaf(s[i][j], a.scale, bias[j]);
        mx = fmaxf(mx, s[i][j]);
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      if (kg == 0) red_max[wq * kRows + 32 * wr + rg + 8 * i] = mx;
    }
    __syncthreads();  // every row's partial maxima are in, and every warp is done reading K

    float alpha[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = 32 * wr + rg + 8 * i;
      const float cm = fmaxf(red_max[row], red_max[kRows + row]);
      const float m_new = fmaxf(m[i], cm);
      // A row that has seen only excluded keys keeps exp(-inf) = 0 everywhere instead of NaN.
      const float base = m_new == -INFINITY ? 0.0f : m_new;
      alpha[i] = __expf(m[i] - base);
      m[i] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float p = __expf(s[i][j] - base);
        sum += p;
        pt[(32 * wq + kg + 4 * j) * kPtPitch + row] = p;
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      if (kg == 0) red_sum[wq * kRows + row] = sum;
      if (kg == 0 && wq == 0) alpha_s[row] = alpha[i];
    }
    cp_async_wait<1>();  // this chunk's V
    __syncthreads();

#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = 32 * wr + rg + 8 * i;
      l[i] = l[i] * alpha[i] + (red_sum[row] + red_sum[kRows + row]);
    }
    const float4 al = *reinterpret_cast<const float4*>(alpha_s + 32 * wr + 4 * rg);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      o[0][e] *= al.x;
      o[1][e] *= al.y;
      o[2][e] *= al.z;
      o[3][e] *= al.w;
    }
    // O += P·V: per key, three shared loads feed 32 FMAs. Keys past kv_len have P = 0 and V = 0.
    const float* pp = pt + 32 * wr + 4 * rg;
    const float* vp = vs + 32 * wq + 4 * kg;
    const int nk = (valid + 3) & ~3;
#pragma unroll 4
    for (int k = 0; k < nk; ++k) {
      const float4 p = *reinterpret_cast<const float4*>(pp + k * kPtPitch);
      const float4 v0 = *reinterpret_cast<const float4*>(vp + k * kHd);
      const float4 v1 = *reinterpret_cast<const float4*>(vp + k * kHd + 16);
      const float pr[4] = {p.x, p.y, p.z, p.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        o[i][0] = fmaf(pr[i], v0.x, o[i][0]);
        o[i][1] = fmaf(pr[i], v0.y, o[i][1]);
        o[i][2] = fmaf(pr[i], v0.z, o[i][2]);
        o[i][3] = fmaf(pr[i], v0.w, o[i][3]);
        o[i][4] = fmaf(pr[i], v1.x, o[i][4]);
        o[i][5] = fmaf(pr[i], v1.y, o[i][5]);
        o[i][6] = fmaf(pr[i], v1.z, o[i][6]);
        o[i][7] = fmaf(pr[i], v1.w, o[i][7]);
      }
    }
    __syncthreads();  // Pᵀ and V are consumed: the next V and the K after next may land there
    load_v(k0 + kKeys);
    load_k(k0 + 2 * kKeys);
  }
  asm volatile("cp.async.wait_all;\n" ::);  // no copy outlives the block

  // A row with every key excluded (l = 0) is written as zeros, as the CPU reference does.
  if (kg == 0 && wq == 0)
#pragma unroll
    for (int i = 0; i < 4; ++i) inv_l[32 * wr + rg + 8 * i] = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
  __syncthreads();
  float* Y = static_cast<float*>(a.y) + b * a.ys.batch + h * a.ys.head;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int row = 32 * wr + 4 * rg + i;
    if (q0 + row >= a.q_len) continue;
    const float inv = inv_l[row];
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      const int col = 32 * wq + 4 * kg + 16 * t;
      if (col < a.v_head_dim)
        *reinterpret_cast<float4*>(Y + static_cast<int64_t>(q0 + row) * a.ys.seq + col) =
            make_float4(o[i][4 * t] * inv, o[i][4 * t + 1] * inv, o[i][4 * t + 2] * inv, o[i][4 * t + 3] * inv);
    }
  }
}

}  // namespace tiled

/// The register-tiled fp32 kernel's cases: head sizes up to 64 in whole float4s, 16-byte aligned
/// rows of Q, K, V and Y (cp.async in, float4 out), no causal rule, and no mask or one that is the
/// same for every query row. FUSEC_ATTN_TILED=0 keeps the streaming kernel (to compare the two).
bool tiled_ok(const AttentionArgs& a) {
  static const bool enabled = [] {
    const char* e = env_switch("FUSEC_ATTN_TILED");
    return !(e && std::string(e) == "0");
  }();
  auto al = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; };
  auto m4 = [](int64_t v) { return v % 4 == 0; };
  return enabled && async_ok(a) && a.head_dim <= tiled::kHd && a.v_head_dim <= tiled::kHd && !a.causal &&
         a.softcap == 0.0f && a.mask_stride[2] == 0 && m4(a.qs.batch) && m4(a.qs.head) && m4(a.qs.seq) &&
         m4(a.ys.batch) && m4(a.ys.head) && m4(a.ys.seq) && al(a.q) && al(a.y);
}

void launch_tiled(const AttentionArgs& a, cudaStream_t stream) {
  static const cudaError_t opted_in = cudaFuncSetAttribute(
      tiled::attention_f32_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(tiled::kSmemBytes));
  if (opted_in != cudaSuccess)
    throw_cuda_error(static_cast<int>(opted_in), "cudaFuncSetAttribute(attention)", __FILE__, __LINE__);
  dim3 grid((a.q_len + tiled::kRows - 1) / tiled::kRows, a.q_heads, a.batch);
  tiled::attention_f32_kernel<<<grid, tiled::kThreads, tiled::kSmemBytes, stream>>>(a);
  check_launch("attention");
}

/// The tensor-core kernel's cases (attention_mma.cu), pointers aside; FUSEC_ATTN_MMA=0 keeps the
/// streaming kernel at half precision (to compare the two).
bool mma_ok(const AttentionArgs& a) {
  const char* e = env_switch("FUSEC_ATTN_MMA");
  return !(e && std::string(e) == "0") && attention_mma_ok(a);
}

}  // namespace

bool attention_on_tensor_cores(const AttentionArgs& a) { return !tiled_ok(a) && mma_ok(a); }

const char* attention_variant(const AttentionArgs& a) {
  return tiled_ok(a) ? "fp32 tiled" : attention_on_tensor_cores(a) ? "tensor-core" : "streaming";
}

size_t attention_smem_bytes(const AttentionArgs& a) {
  if (tiled_ok(a)) return tiled::kSmemBytes;
  if (mma_ok(a)) return attention_mma_smem_bytes(a);
  return (static_cast<size_t>(kRows + 2 * kKeys) * padded(head_tile(a)) + kKeys) * sizeof(float);
}

std::string attention_unsupported(const AttentionArgs& a) {
  if (a.dtype != DType::Float32 && a.dtype != DType::Float16 && a.dtype != DType::BFloat16)
    return std::string("no CUDA attention kernel for ") + dtype_name(a.dtype);
  if (a.head_dim < 1 || a.v_head_dim < 1 || std::max(a.head_dim, a.v_head_dim) > kWideMaxHead)
    return "the CUDA attention kernels take head sizes 1.." + std::to_string(kWideMaxHead) + " (here " +
           std::to_string(a.head_dim) + " and " + std::to_string(a.v_head_dim) + ")";
  if (a.kv_heads < 1 || a.q_heads % a.kv_heads != 0) return "the query heads are not a multiple of the key/value heads";
  if (a.batch > 65535 || a.q_heads > 65535) return "more than 65535 batches or heads";
  if (a.mask_dtype != DType::Undefined && a.mask_dtype != DType::Bool && a.mask_dtype != a.dtype)
    return std::string("the mask is ") + dtype_name(a.mask_dtype) + ", not bool or the inputs' type";
  return "";
}

void launch_attention(const AttentionArgs& a, cudaStream_t stream) {
  if (a.batch == 0 || a.q_heads == 0 || a.q_len == 0) return;
  const int hd = head_tile(a);
  const bool ok = dispatch_float_storage(a.dtype, [&](auto t) {
    using T = decltype(t);
    if constexpr (std::is_same_v<T, double>) {
      throw_cuda_error(0, "attention: float64", __FILE__, __LINE__);
    } else if constexpr (std::is_same_v<T, float>) {
      const bool async = async_ok(a);
      if (tiled_ok(a))
        launch_tiled(a, stream);
      else if (hd == 64)
        async ? launch_typed<T, 64, true>(a, stream) : launch_typed<T, 64, false>(a, stream);
      else if (hd == 128)
        async ? launch_typed<T, 128, true>(a, stream) : launch_typed<T, 128, false>(a, stream);
      else
        async ? launch_typed<T, 256, true>(a, stream) : launch_typed<T, 256, false>(a, stream);
    } else if (mma_ok(a) && attention_mma_aligned(a)) {
      launch_attention_mma(a, stream);
    } else {
      if (hd == 64)
        launch_typed<T, 64, false>(a, stream);
      else if (hd == 128)
        launch_typed<T, 128, false>(a, stream);
      else
        launch_typed<T, 256, false>(a, stream);
    }
  });
  if (!ok) throw_cuda_error(0, "attention: unsupported dtype", __FILE__, __LINE__);
}

}  // namespace fusec::cuda
