// The parts of fusec's tensor-core attention kernels (mma.sync m16n8k16, fp16/bf16 in, fp32
// accumulators) that attention_mma.cu's flash kernel and attention_group.cu's grouped kernel share:
// the swizzled 64-row tiles and their cp.async loads, the staged masks, the rotary tables' stage
// and rotation, and one warp's online-softmax step over a key tile (warp_key_tile). Only those two
// files include it.
#pragma once
#include <cstdint>
#include <type_traits>

#include "backend/cuda/core/common.cuh"
#include "backend/cuda/core/mma_sync.cuh"
#include "backend/cuda/ops/attention/attention.cuh"
#include "backend/cuda/ops/attention/soft_cap.cuh"

namespace fusec::cuda::mma_attn {

constexpr int kBlockRows = 64;  // query rows per block, 16 per warp
constexpr int kTileKeys = 64;   // keys per K/V tile
constexpr int kThreads = 128;

template <int HD>
constexpr int tile_bytes() {
  return 64 * HD * 2;
}
// kRowMask: the same for every query row. kFullMask: a row per query. kRowMaskStaged and
// kFullMaskStaged: the same, with each key tile's values (the block's 64 rows of them for a full
// mask) copied into shared memory by cp.async beside K and V, where the mask's keys are contiguous,
// its rows 16-byte aligned and its key count fills whole 16-byte chunks. Read from global memory
// per score, BERT-base's row mask held a third of the kernel's stall samples (ncu, H200), the loads
// still in flight when the scores needed them, and Llama's and GPT-2's [B, 1, S, S] masks (causal
// and padding in one) kept the kernel well behind cuDNN's at their shapes.
enum MaskKind { kNoMask = 0, kRowMask = 1, kFullMask = 2, kRowMaskStaged = 3, kFullMaskStaged = 4 };

/// Bytes between a staged full mask's rows: 64 keys of at most 2 bytes, plus 16, so that the 8 rows
/// a warp's lanes read at once start 4 banks apart.
constexpr int kMaskPitch = 144;

/// One stage of the staged mask: a row of 64 keys, or the block's 64 rows of them.
template <int MASK>
constexpr int mask_stage_bytes() {
  return MASK == kFullMaskStaged ? 64 * kMaskPitch : MASK == kRowMaskStaged ? 128 : 0;
}

/// Whether the mask can be staged by 16-byte copies: contiguous keys, every row starting 16-byte
/// aligned, and whole chunks up to the last key (so no copy reads past a row).
inline bool mask_stages(const AttentionArgs& a) {
  const int64_t esz = a.mask_dtype == DType::Bool ? 1 : 2;
  return a.mask_stride[3] == 1 && aligned16(a.mask) && (a.mask_stride[0] * esz) % 16 == 0 &&
         (a.mask_stride[1] * esz) % 16 == 0 && (a.mask_stride[2] * esz) % 16 == 0 && (a.kv_len * esz) % 16 == 0;
}

/// Byte offset of 16-byte chunk `chunk` of row `row` in a tile of HD-element rows.
template <int HD>
__device__ __forceinline__ uint32_t swz(int row, int chunk) {
  return static_cast<uint32_t>(row * (HD * 2) + ((chunk ^ (row & 7)) << 4));
}

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

/// One thread's share of a 64-row tile load: a fixed 16-byte chunk of the head dim (threadIdx.x
/// % C) in every RS-th row, so the address arithmetic is done once per block, not per copy.
template <typename T, int HD>
struct TileLoader {
  static constexpr int C = HD / 8, RS = kThreads / C, N = 64 / RS;
  static_assert(RS % 8 == 0, "a thread's rows must share their swizzle");
  int row0;
  uint32_t dst0;  // this thread's first chunk in a tile at offset 0
  bool chunk_ok;  // the chunk lies inside the head size (zeros past it)
  __device__ TileLoader(int chunks) {
    const int c = threadIdx.x % C;
    row0 = threadIdx.x / C;
    dst0 = swz<HD>(row0, c);
    chunk_ok = c < chunks;
  }
  /// Rows [0, valid) of src (rows `stride` elements apart) into the tile at `tile`; the others zero.
  __device__ __forceinline__ void load(uint32_t tile, const T* src, int64_t stride, int valid) const {
    const T* p = src + row0 * stride + (threadIdx.x % C) * 8;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const bool ok = chunk_ok && row0 + i * RS < valid;
      cp_async16(tile + dst0 + i * RS * HD * 2, ok ? p + i * RS * stride : src, ok);
    }
  }
};

/// Keys `key` and `key` + 1 (`key` even) of a staged mask row, as additive terms: the value, or
/// -inf for a false bool.
template <typename T>
__device__ __forceinline__ float2 staged_pair(const unsigned char* row, int key, bool is_bool) {
  if (is_bool) {
    const unsigned short v = *reinterpret_cast<const unsigned short*>(row + key);
    return make_float2((v & 0xff) ? 0.0f : -INFINITY, (v >> 8) ? 0.0f : -INFINITY);
  }
  const T* p = reinterpret_cast<const T*>(row) + key;
  return make_float2(to_compute(p[0]), to_compute(p[1]));
}

/// This thread's share of a key tile's staged mask: keys [k0, k0 + 64) of the row mask at `base`
/// (kRowMaskStaged), or of rows [q0, q0 + 64) of the full mask at `base`, `row_bytes` apart, each
/// row kMaskPitch apart in the stage (kFullMaskStaged). Chunks past the last key or query row are
/// zeros: those keys are excluded and those rows never stored.
template <int MASK>
__device__ __forceinline__ void stage_mask(uint32_t stage, const unsigned char* base, int64_t row_bytes, int esz,
                                           int q0, int q_len, int k0, int kv_len) {
  // A row is 4 chunks of bytes or 8 of 2-byte values: shifts, not a division (the stage runs on
  // every key tile, in the kernel's hot path).
  const int lg = esz == 1 ? 2 : 3, per_chunk = 16 / esz;
  const int rows = MASK == kFullMaskStaged ? kBlockRows : 1;
  for (int c = static_cast<int>(threadIdx.x); c < rows << lg; c += kThreads) {
    const int row = c >> lg, chunk = c & ((1 << lg) - 1);
    const int key = k0 + chunk * per_chunk;
    const bool ok = key < kv_len && q0 + row < q_len;
    cp_async16(stage + row * kMaskPitch + chunk * 16,
               ok ? base + row * row_bytes + static_cast<int64_t>(key) * esz : base, ok);
  }
}

/// Bytes of the rotary tables' stage (AttentionArgs::rot_cos): a key tile's 64 rows of cos, then of
/// sin, each row HD values.
template <int HD>
constexpr int rot_stage_bytes() {
  return 2 * 64 * HD * 2;
}

/// One thread's share of a 64-row tile's rotation (ai.fusec Rotary's rotate_half form, rotary.cu's
/// arithmetic): item k is i = threadIdx.x + kThreads·k, row i / pairs, chunk pair i % pairs (pairs =
/// D / 16: chunk c, 8 values, pairs with chunk c + pairs, the other half of the head). Its tables'
/// chunks (cos and sin at both halves) are held here, loaded ahead of the rotation.
template <int HD>
struct RotChunks {
  static constexpr int kItems = HD / 32;  // 64 rows x HD / 16 pairs over kThreads threads
  uint4 c1[kItems], c2[kItems], s1[kItems], s2[kItems];
};

/// Loads this thread's table chunks for rows [0, valid) at positions pos0 + row of batch b, from
/// global memory (Q's, once per block, issued before its tile lands).
template <typename T, int HD>
__device__ __forceinline__ void load_rot(RotChunks<HD>& rc, const AttentionArgs& a, int b, int pos0, int valid) {
  const int pairs = a.head_dim / 16, half = a.head_dim / 2;
  const T* cs = static_cast<const T*>(a.rot_cos) + b * a.cos_st.batch + pos0 * a.cos_st.seq;
  const T* sn = static_cast<const T*>(a.rot_sin) + b * a.sin_st.batch + pos0 * a.sin_st.seq;
#pragma unroll
  for (int k = 0; k < RotChunks<HD>::kItems; ++k) {
    const int i = static_cast<int>(threadIdx.x) + kThreads * k, r = i / pairs, c = i % pairs;
    if (r >= valid) continue;
    const T* cr = cs + r * a.cos_st.seq + 8 * c;
    const T* sr = sn + r * a.sin_st.seq + 8 * c;
    rc.c1[k] = __ldg(reinterpret_cast<const uint4*>(cr));
    rc.c2[k] = __ldg(reinterpret_cast<const uint4*>(cr + half));
    rc.s1[k] = __ldg(reinterpret_cast<const uint4*>(sr));
    rc.s2[k] = __ldg(reinterpret_cast<const uint4*>(sr + half));
  }
}

/// Stages a key tile's table rows [0, valid) (positions pos0 + row of batch b) into the rotary stage
/// at shared address `stage` (cos rows, then sin rows, HD values apart); the rest is not read.
template <typename T, int HD>
__device__ __forceinline__ void stage_rot(uint32_t stage, const AttentionArgs& a, int b, int pos0, int valid) {
  const int chunks = a.head_dim / 8;
  const T* cs = static_cast<const T*>(a.rot_cos) + b * a.cos_st.batch + pos0 * a.cos_st.seq;
  const T* sn = static_cast<const T*>(a.rot_sin) + b * a.sin_st.batch + pos0 * a.sin_st.seq;
  for (int i = static_cast<int>(threadIdx.x); i < 2 * valid * chunks; i += kThreads) {
    const int table = i / (valid * chunks), r = i % (valid * chunks) / chunks, c = i % chunks;
    const T* src = table ? sn + r * a.sin_st.seq : cs + r * a.cos_st.seq;
    cp_async16(stage + static_cast<uint32_t>((table * 64 + r) * HD * 2 + c * 16), src + 8 * c, true);
  }
}

/// Rotates this thread's items of rows [0, valid) of a landed tile in shared memory (`tile` its
/// generic address) with table chunks from `rc`, or, where `staged` is not null, from the rotary
/// stage at that generic address (stage_rot's layout). The caller synchronizes the block before
/// (the tile and the stage landed) and after (ldmatrix reads the tile). A warp rotating its own 16
/// rows alone passes its lane as `tid` and 32 as `nthreads` (the same HD / 32 items a thread), with
/// `tile` and `staged` at its first row and `valid` at most 16.
template <typename T, int HD>
__device__ __forceinline__ void rotate_tile(unsigned char* tile, const RotChunks<HD>& rc, const unsigned char* staged,
                                            int head_dim, int valid, int tid, int nthreads) {
  const int pairs = head_dim / 16;
#pragma unroll
  for (int k = 0; k < RotChunks<HD>::kItems; ++k) {
    const int i = tid + nthreads * k, r = i / pairs, c = i % pairs;
    if (r >= valid) continue;
    uint4 c1, c2, s1, s2;
    if (staged) {
      const unsigned char* row = staged + r * HD * 2 + c * 16;
      c1 = *reinterpret_cast<const uint4*>(row);
      c2 = *reinterpret_cast<const uint4*>(row + head_dim);  // half a head of 2-byte values on
      s1 = *reinterpret_cast<const uint4*>(row + 64 * HD * 2);
      s2 = *reinterpret_cast<const uint4*>(row + 64 * HD * 2 + head_dim);
    } else {
      c1 = rc.c1[k];
      c2 = rc.c2[k];
      s1 = rc.s1[k];
      s2 = rc.s2[k];
    }
    T* lo = reinterpret_cast<T*>(tile + swz<HD>(r, c));
    T* hi = reinterpret_cast<T*>(tile + swz<HD>(r, c + pairs));
    float x1[8], x2[8], y1[8], y2[8];
    load_vec<T, 8>(lo, x1);
    load_vec<T, 8>(hi, x2);
    const T* cl = reinterpret_cast<const T*>(&c1);
    const T* ch = reinterpret_cast<const T*>(&c2);
    const T* sl = reinterpret_cast<const T*>(&s1);
    const T* sh = reinterpret_cast<const T*>(&s2);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      y1[e] = x1[e] * to_compute(cl[e]) + (-x2[e]) * to_compute(sl[e]);
      y2[e] = x2[e] * to_compute(ch[e]) + x1[e] * to_compute(sh[e]);
    }
    store_vec<T, 8>(lo, y1);
    store_vec<T, 8>(hi, y2);
  }
}

/// This thread's place in its warp's 16 query rows: rows r0 = w0 + g and r1 = r0 + 8, key columns
/// 2·qd and 2·qd + 1 of each n8 tile.
struct WarpPos {
  int lane, g, qd, w0, r0, r1;
  __device__ WarpPos(int warp_row0) {
    lane = static_cast<int>(threadIdx.x) & 31;
    g = lane >> 2;
    qd = lane & 3;
    w0 = warp_row0;
    r0 = w0 + g;
    r1 = r0 + 8;
  }
};

/// One warp's 16 query rows across the key tiles: Q's fragments (in registers for the whole run),
/// the output accumulators, and this thread's share of each row's running max and sum.
template <int HD>
struct WarpRows {
  uint32_t qf[HD / 16][4];
  float o[HD / 8][4];
  float m0, m1, l0, l1;
  __device__ __forceinline__ void reset() {
#pragma unroll
    for (int n = 0; n < HD / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    m0 = m1 = -INFINITY;
    l0 = l1 = 0.0f;
  }
  /// Q's fragments from rows [row0, row0 + 16) of the swizzled tile at shared address `q_tile`.
  __device__ __forceinline__ void load_q(uint32_t q_tile, int row0, int lane) {
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk)
      ldsm_x4(q_tile + swz<HD>(row0 + (lane & 7) + ((lane >> 3) & 1) * 8, 2 * kk + (lane >> 4)), qf[kk]);
  }
  /// Writes the two rows (r0, r1 below q_len) to Y (rows `row_stride` apart), each divided by its sum;
  /// a row whose sum is 0 (it saw no key) as zeros.
  template <typename T>
  __device__ __forceinline__ void store(T* Y, int64_t row_stride, const WarpPos& p, int q_len, int v_head_dim) {
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    const float inv0 = l0 > 0.0f ? 1.0f / l0 : 0.0f, inv1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
#pragma unroll
    for (int n = 0; n < HD / 8; ++n) {
      const int d = 8 * n + 2 * p.qd;
      if (8 * n >= v_head_dim) break;
      if (p.r0 < q_len)
        *reinterpret_cast<uint32_t*>(Y + static_cast<int64_t>(p.r0) * row_stride + d) =
            pack2<T>(o[n][0] * inv0, o[n][1] * inv0);
      if (p.r1 < q_len)
        *reinterpret_cast<uint32_t*>(Y + static_cast<int64_t>(p.r1) * row_stride + d) =
            pack2<T>(o[n][2] * inv1, o[n][3] * inv1);
    }
  }
};

/// One warp's step over the key tile at shared addresses s_k and s_v (keys k0 on, nj·8 of them
/// computed, nj 2, 4 or 8): S = Q·Kᵀ (K through ldmatrix), the scale and mask, an online softmax over the tile,
/// and O += P·V with P taken straight from S's accumulators (an m16n8 accumulator pair is an m16k16
/// operand) and V through ldmatrix.trans. A row's max and sum live in the 4 lanes that hold it: two
/// xor-shuffles. The mask's terms come from `mt` (kRowMask, kFullMask: held in registers) or from
/// the staged rows ms0 and ms1 (the staged kinds); only a tile with `lim` under 64 keys (past the
/// last key, or the warp's causal diagonal) or one that crosses the diagonal looks at positions.
/// The key count is a warp-uniform guard over one body, not a template parameter: the kernel is
/// fetched cold after the GEMM before it (Nsight Compute on GPT-2's attention in the model: 42% of
/// the stall samples waited for an instruction), so each inlined copy of this body costs time.
/// The soft cap (CAP) is a template parameter for the same reason: as a runtime branch its code
/// grew every instance by ~580 instructions and cost GPT-2's attention 4%.
template <typename T, int HD, int MASK, bool CAP = false>
__device__ __forceinline__ void warp_key_tile(WarpRows<HD>& w, const WarpPos& p, const AttentionArgs& a, uint32_t s_k,
                                              uint32_t s_v, int k0, int lim, int nj, const float (&mt)[2][16],
                                              const unsigned char* ms0, const unsigned char* ms1) {
  constexpr int NJ = 8;
  constexpr int KS = HD / 16;  // k16 steps over the head dim
  constexpr int DN = HD / 8;   // n8 tiles over the head dim
  constexpr bool kStaged = MASK == kRowMaskStaged || MASK == kFullMaskStaged;
  constexpr float kLog2e = 1.4426950408889634f;
  // S = Q·Kᵀ for this warp's 16 rows: n8 tile j holds keys 8j..8j+7.
  float s[NJ][4];
#pragma unroll
  for (int j = 0; j < NJ; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < KS; kk += 2)
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
      if (j >= nj) break;
      uint32_t kb[4];
      ldsm_x4(s_k + swz<HD>(8 * j + (p.lane & 7), 2 * kk + (p.lane >> 3)), kb);
      mma<T>(s[j], w.qf[kk], kb[0], kb[1]);
      mma<T>(s[j], w.qf[kk + 1], kb[2], kb[3]);
    }

  // A soft cap (Gemma 2's) is taken on the scaled scores, before the mask.
  float scale = a.scale;
  if constexpr (CAP) {
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
      if (j >= nj) break;
#pragma unroll
      for (int e = 0; e < 4; ++e) s[j][e] = soft_cap(s[j][e] * a.scale, a.softcap);
    }
    scale = 1.0f;
  }
  // Scaled scores plus the mask. Only a tile that reaches past the last key, or one that
  // crosses this warp's causal diagonal, looks at each key's position (a warp-uniform branch).
#pragma unroll
  for (int j = 0; j < NJ; ++j) {
    if (j >= nj) break;
    if constexpr (kStaged) {
      const bool is_bool = a.mask_dtype == DType::Bool;
      const float2 v0 = staged_pair<T>(ms0, 8 * j + 2 * p.qd, is_bool);
      const float2 v1 = MASK == kFullMaskStaged ? staged_pair<T>(ms1, 8 * j + 2 * p.qd, is_bool) : v0;
      s[j][0] = fmaf(s[j][0], scale, v0.x);
      s[j][1] = fmaf(s[j][1], scale, v0.y);
      s[j][2] = fmaf(s[j][2], scale, v1.x);
      s[j][3] = fmaf(s[j][3], scale, v1.y);
    } else {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        if constexpr (MASK != kNoMask) {
          s[j][e] = fmaf(s[j][e], scale, mt[0][2 * j + e]);
          s[j][2 + e] = fmaf(s[j][2 + e], scale, mt[1][2 * j + e]);
        } else {
          s[j][e] *= scale;
          s[j][2 + e] *= scale;
        }
      }
    }
  }
  if (lim < kTileKeys || (a.causal && k0 + kTileKeys - 1 > p.w0)) {
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
      if (j >= nj) break;
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int col = k0 + 8 * j + 2 * p.qd + e;
        const bool out = col >= a.kv_len;
        if (out || (a.causal && col > p.r0)) s[j][e] = -INFINITY;
        if (out || (a.causal && col > p.r1)) s[j][2 + e] = -INFINITY;
      }
    }
  }
  // The tile's row maxima and the online softmax.
  float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
  for (int j = 0; j < NJ; ++j) {
    if (j >= nj) break;
    mx0 = fmaxf(mx0, fmaxf(s[j][0], s[j][1]));
    mx1 = fmaxf(mx1, fmaxf(s[j][2], s[j][3]));
  }
  mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
  mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
  mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
  mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
  const float n0 = fmaxf(w.m0, mx0), n1 = fmaxf(w.m1, mx1);
  // A row that has seen only excluded keys keeps exp(-inf) = 0 everywhere instead of NaN.
  const float base0 = n0 == -INFINITY ? 0.0f : n0, base1 = n1 == -INFINITY ? 0.0f : n1;
  const float alpha0 = fast_exp2((w.m0 - base0) * kLog2e), alpha1 = fast_exp2((w.m1 - base1) * kLog2e);
  w.m0 = n0;
  w.m1 = n1;
  // exp(x - max) as 2^(x·log2 e - max·log2 e), one FFMA, where no mask is added: scaled
  // products are far inside the float range. A mask's fill can be the largest finite value
  // (bf16's -3.39e38), whose product with log2 e overflows to -inf where the row must stay
  // uniform: there the difference is taken first.
  [[maybe_unused]] const float c0 = base0 * kLog2e, c1 = base1 * kLog2e;  // used without a mask
  float sum0 = 0.0f, sum1 = 0.0f;
#pragma unroll
  for (int j = 0; j < NJ; ++j) {
    if (j >= nj) break;
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      if constexpr (MASK == kNoMask) {
        s[j][e] = fast_exp2(fmaf(s[j][e], kLog2e, -c0));
        s[j][2 + e] = fast_exp2(fmaf(s[j][2 + e], kLog2e, -c1));
      } else {
        s[j][e] = fast_exp2((s[j][e] - base0) * kLog2e);
        s[j][2 + e] = fast_exp2((s[j][2 + e] - base1) * kLog2e);
      }
    }
    sum0 += s[j][0] + s[j][1];
    sum1 += s[j][2] + s[j][3];
  }
  w.l0 = w.l0 * alpha0 + sum0;  // this p.lane's part; the row's 4 p.lanes add theirs at the end
  w.l1 = w.l1 * alpha1 + sum1;
#pragma unroll
  for (int n = 0; n < DN; ++n) {
    w.o[n][0] *= alpha0;
    w.o[n][1] *= alpha0;
    w.o[n][2] *= alpha1;
    w.o[n][3] *= alpha1;
  }

  // O += P·V: keys 16kk..16kk+15 are S's n8 tiles 2kk and 2kk+1.
#pragma unroll
  for (int kk = 0; kk < NJ / 2; ++kk) {
    if (2 * kk >= nj) break;
    const uint32_t pa[4] = {pack2<T>(s[2 * kk][0], s[2 * kk][1]), pack2<T>(s[2 * kk][2], s[2 * kk][3]),
                            pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]), pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
    for (int n = 0; n < DN; n += 2) {
      uint32_t vb[4];
      ldsm_x4_trans(s_v + swz<HD>(16 * kk + (p.lane & 7) + ((p.lane >> 3) & 1) * 8, n + (p.lane >> 4)), vb);
      mma<T>(w.o[n], pa, vb[0], vb[1]);
      mma<T>(w.o[n + 1], pa, vb[2], vb[3]);
    }
  }
}

/// warp_key_tile over the keys [k0, k0 + lim) the warp needs (16, 32 or 64 computed).
template <typename T, int HD, int MASK, bool CAP = false>
__device__ __forceinline__ void warp_keys(WarpRows<HD>& w, const WarpPos& p, const AttentionArgs& a, uint32_t s_k,
                                          uint32_t s_v, int k0, int lim, const float (&mt)[2][16],
                                          const unsigned char* ms0, const unsigned char* ms1) {
  const int nj = lim > 32 ? 8 : lim > 16 ? 4 : 2;
  warp_key_tile<T, HD, MASK, CAP>(w, p, a, s_k, s_v, k0, lim, nj, mt, ms0, ms1);
}

// A staged full mask's term is "far" at or below kFarMask (-inf, a false bool, fp16's -65504 and
// every other finfo.min fill), and a row has "seen" a key once its running max is at least
// kSeenMax. Once every row of a warp has, a far key's term is at most e^(x - 20000) of the row's
// largest, x its scaled score: 0 in fp32 wherever |x| < 19900 (fp16 scores stay far below).
constexpr float kFarMask = -30000.0f;
constexpr float kSeenMax = -10000.0f;

/// One past the last key below `lim` at which any of a warp's 16 rows of a staged full mask (the
/// first row at `rows`) holds a term that is not far (NaN included), rounded up to 8 keys; 0 where
/// every term is far. Each lane reads half a row, 32 keys.
template <typename T>
__device__ __forceinline__ int staged_reach(const unsigned char* rows, int lane, bool is_bool, int lim) {
  const int half = lane & 1;
  const unsigned char* r = rows + (lane >> 1) * kMaskPitch;
  unsigned near = 0;  // bit c: keys 8c..8c+7 of this lane's 32
  if (is_bool) {
    const uint4 v0 = *reinterpret_cast<const uint4*>(r + 32 * half);
    const uint4 v1 = *reinterpret_cast<const uint4*>(r + 32 * half + 16);
    near =
        ((v0.x | v0.y) ? 1u : 0u) | ((v0.z | v0.w) ? 2u : 0u) | ((v1.x | v1.y) ? 4u : 0u) | ((v1.z | v1.w) ? 8u : 0u);
  } else {
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const uint4 v = *reinterpret_cast<const uint4*>(r + 64 * half + 16 * c);
      const T* e = reinterpret_cast<const T*>(&v);
      bool any = false;
#pragma unroll
      for (int i = 0; i < 8; ++i) any |= !(to_compute(e[i]) <= kFarMask);
      near |= static_cast<unsigned>(any) << c;
    }
  }
  near = __reduce_or_sync(0xffffffffu, near << (4 * half));
  if (lim < kTileKeys) near &= (1u << ((lim + 7) / 8)) - 1;  // stage zeros past the last key
  return near ? 8 * (32 - __clz(static_cast<int>(near))) : 0;
}

/// warp_key_tile over the keys [k0, k0 + lim) the warp needs, for a warp with rows below q_len and
/// keys to see. Under a staged full mask (a decoder's causal and padding mask, materialized) the
/// warp computes the tile up to the last key that is not far for its rows, in 16, 32 or 64 keys;
/// the rest, in pieces of 16 and 32, only while one of its rows has not yet seen a key (a row
/// whose every key is masked is then as before: uniform over a finite fill, zeros under -inf).
template <typename T, int HD, int MASK, bool CAP = false>
__device__ __forceinline__ void warp_tile(WarpRows<HD>& w, const WarpPos& p, const AttentionArgs& a, uint32_t s_k,
                                          uint32_t s_v, int k0, int lim, const float (&mt)[2][16],
                                          const unsigned char* ms0, const unsigned char* ms1) {
  if (p.w0 >= a.q_len || lim <= 0) return;
  // The keys go in pieces [from, from + n), through one call site (each is an inlined copy of the
  // step): the whole tile, unless a staged full mask lets the warp stop early.
  int from = 0, n = lim;
  [[maybe_unused]] int esz = 0;
  [[maybe_unused]] bool checked = true;
  if constexpr (MASK == kFullMaskStaged) {
    const bool is_bool = a.mask_dtype == DType::Bool;
    const int reach = staged_reach<T>(ms0 - p.g * kMaskPitch, p.lane, is_bool, lim);
    const int cut = reach == 0 ? 0 : reach <= 16 ? 16 : reach <= 32 ? 32 : kTileKeys;
    esz = is_bool ? 1 : 2;
    if (cut < lim) {
      n = cut;
      checked = false;
    }
  }
  for (;;) {
    if (n > 0) {
      const uint32_t off = static_cast<uint32_t>(from * HD * 2);  // a multiple of 16 rows keeps the swizzle
      warp_keys<T, HD, MASK, CAP>(w, p, a, s_k + off, s_v + off, k0 + from, min(n, lim - from), mt, ms0 + from * esz,
                                  ms1 + from * esz);
    }
    from += n;
    if (from >= lim) return;
    if (!checked) {
      checked = true;
      if (__all_sync(0xffffffffu, w.m0 >= kSeenMax && w.m1 >= kSeenMax)) return;
    }
    n = from == 0 ? kTileKeys : from;  // [16, 32), then [32, 64)
  }
}

}  // namespace fusec::cuda::mma_attn
