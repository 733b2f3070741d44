// Flash attention on tensor cores (mma.sync m16n8k16, fp16/bf16 in, fp32 accumulators): fusec's
// own kernel at half precision, raced against cuDNN's SDPA per problem (attention_tune.h).
//
// Why a block is 64 query rows of one head in 4 warps (16 rows each): at the short sequences of
// encoders (BERT-base's 128, ViT's 197) 128-row blocks leave a wave and a half of blocks over the
// SMs, and a block's load latency is not hidden; 64-row blocks of BERT-base fill one wave.
//
// Per block: Q (64 x HD) and two stages of K and V tiles (64 keys x HD) in shared memory, filled
// by cp.async (zeros past the sequence or the head size), so tile t+1 loads while tile t is
// computed. Rows of 16-byte chunks are XOR-swizzled by row (chunk ^ row % 8), so the ldmatrix
// reads of 8 rows and the cp.async writes of a row's chunks hit distinct banks.
// Per warp and key tile: S = Q·Kᵀ (Q's fragments stay in registers for the whole run, K's come
// through ldmatrix), the scale and mask, an online softmax over the tile, and O += P·V with P
// taken straight from S's accumulators (an m16n8 accumulator pair is an m16k16 operand) and V
// through ldmatrix.trans. A row's max and sum live in the 4 lanes that hold it: two xor-shuffles.
// What costs per key is kept off the common tile: the mask's form is a template parameter (no
// branch per score), and only a tile that reaches past the last key or crosses a warp's causal
// diagonal looks at key positions. A tile with few keys left (ViT's last: 5 of 64) computes 16
// or 32 keys, not 64, and a warp past the last query row skips its products.
// A row that sees no key is written as zeros, as the CPU reference does.
#include "backend/cuda/ops/attention/attention_mma.cuh"

#include <algorithm>
#include <string>
#include <type_traits>

#include "backend/cuda/core/common.cuh"

namespace fusec::cuda {

namespace {

constexpr int kBlockRows = 64;  // query rows per block, 16 per warp
constexpr int kTileKeys = 64;   // keys per K/V tile
constexpr int kThreads = 128;

/// Blocks an SM must hold at once, which caps the registers: 3 at head tile 64 (about 165
/// registers, no spills; 4 spilled and ran slower at ViT-B/16's and BERT-base's shapes), 2 at 128.
template <int HD>
constexpr int kMinBlocks = HD == 64 ? 3 : 2;

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

template <int HD, int MASK>
constexpr size_t smem_bytes() {
  return 5 * static_cast<size_t>(tile_bytes<HD>()) + 2 * mask_stage_bytes<MASK>();  // Q, K x 2, V x 2, mask x 2
}

/// Byte offset of 16-byte chunk `chunk` of row `row` in a tile of HD-element rows.
template <int HD>
__device__ __forceinline__ uint32_t swz(int row, int chunk) {
  return static_cast<uint32_t>(row * (HD * 2) + ((chunk ^ (row & 7)) << 4));
}

__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

template <typename T>
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __half>)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// Two floats as one register of T pairs, `lo` in the low half.
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __half>) {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
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

/// This thread's mask terms for one key tile: key 8j + 2qd + e of rows r0 (mt[0]) and r1 (mt[1]),
/// the additive value or -inf for a false bool. Keys past the end read the last key (the caller
/// excludes them).
template <typename T, int MASK>
__device__ __forceinline__ void load_mask(float (&mt)[2][16], const AttentionArgs& a, int64_t off0, int64_t off1,
                                          int k0, int qd) {
  const bool is_bool = a.mask_dtype == DType::Bool;
  const unsigned char* mb = static_cast<const unsigned char*>(a.mask);
  const T* mf = static_cast<const T*>(a.mask);
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int64_t col = static_cast<int64_t>(min(k0 + 8 * j + 2 * qd + e, a.kv_len - 1)) * a.mask_stride[3];
      if (is_bool) {
        mt[0][2 * j + e] = mb[off0 + col] ? 0.0f : -INFINITY;
        mt[1][2 * j + e] = MASK == kRowMask ? mt[0][2 * j + e] : mb[off1 + col] ? 0.0f : -INFINITY;
      } else {
        mt[0][2 * j + e] = to_compute(mf[off0 + col]);
        mt[1][2 * j + e] = MASK == kRowMask ? mt[0][2 * j + e] : to_compute(mf[off1 + col]);
      }
    }
}

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
  const int per_chunk = 16 / esz, row_chunks = kTileKeys / per_chunk;
  const int rows = MASK == kFullMaskStaged ? kBlockRows : 1;
  for (int c = static_cast<int>(threadIdx.x); c < rows * row_chunks; c += kThreads) {
    const int row = c / row_chunks, chunk = c % row_chunks;
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
/// (the tile and the stage landed) and after (ldmatrix reads the tile).
template <typename T, int HD>
__device__ __forceinline__ void rotate_tile(unsigned char* tile, const RotChunks<HD>& rc, const unsigned char* staged,
                                            int head_dim, int valid) {
  const int pairs = head_dim / 16;
#pragma unroll
  for (int k = 0; k < RotChunks<HD>::kItems; ++k) {
    const int i = static_cast<int>(threadIdx.x) + kThreads * k, r = i / pairs, c = i % pairs;
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

template <typename T, int HD, int MASK, int MINB>
__global__ void __launch_bounds__(kThreads, MINB) attention_mma_kernel(AttentionArgs a) {
  constexpr int KS = HD / 16;  // k16 steps over the head dim
  constexpr int DN = HD / 8;   // n8 tiles over the head dim
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t s_q = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  // Stage st's K tile is at s_k(st), its V tile at s_v(st) (arithmetic, not an array: an array
  // indexed by the loop's stage lives in local memory).
  auto s_k = [s_q](int st) { return s_q + static_cast<uint32_t>((1 + st) * tile_bytes<HD>()); };
  auto s_v = [s_q](int st) { return s_q + static_cast<uint32_t>((3 + st) * tile_bytes<HD>()); };
  // Stage st's row-mask values: a byte offset from the start of shared memory (written through
  // s_q + s_m(st), read through smem + s_m(st)).
  [[maybe_unused]] auto s_m = [](int st) {
    return static_cast<uint32_t>(5 * tile_bytes<HD>() + st * mask_stage_bytes<MASK>());
  };
  constexpr bool kStaged = MASK == kRowMaskStaged || MASK == kFullMaskStaged;

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, qd = lane & 3;
  // Under the causal rule the last query blocks see the most keys: they start first.
  const int qb = a.causal ? static_cast<int>(gridDim.x) - 1 - static_cast<int>(blockIdx.x) : blockIdx.x;
  const int q0 = qb * kBlockRows, h = blockIdx.y, b = blockIdx.z;
  const int hk = h / (a.q_heads / a.kv_heads);
  const T* Q = static_cast<const T*>(a.q) + b * a.qs.batch + h * a.qs.head + static_cast<int64_t>(q0) * a.qs.seq;
  const T* K = static_cast<const T*>(a.k) + b * a.ks.batch + hk * a.ks.head;
  const T* V = static_cast<const T*>(a.v) + b * a.vs.batch + hk * a.vs.head;
  // No row of this block sees a key past its last row under the causal rule.
  const int kv_end = a.causal ? min(a.kv_len, q0 + kBlockRows) : a.kv_len;
  const int tiles = (kv_end + kTileKeys - 1) / kTileKeys;
  const TileLoader<T, HD> qk_load(a.head_dim / 8), v_load(a.v_head_dim / 8);

  [[maybe_unused]] const int mask_esz = a.mask_dtype == DType::Bool ? 1 : static_cast<int>(sizeof(T));
  // The staged mask's first row for this block: its (batch, head) row, or its first query row.
  [[maybe_unused]] const unsigned char* mask_base = nullptr;
  [[maybe_unused]] const int64_t mask_row_bytes = a.mask_stride[2] * mask_esz;
  if constexpr (kStaged)
    mask_base = static_cast<const unsigned char*>(a.mask) +
                (b * a.mask_stride[0] + h * a.mask_stride[1] + static_cast<int64_t>(q0) * a.mask_stride[2]) * mask_esz;

  // With rotary tables each K tile is rotated in shared memory once it lands, from its table rows
  // staged beside it by cp.async; Q once, from table chunks loaded while its tile is in flight.
  // Tile t + 1's K and V still go out before tile t is waited for; only its table rows wait for
  // the one table stage to be free (after tile t's rotation). Q and tile 0 are rotated before the
  // loop, with tile 1 already in flight, so that Q's chunks are not live across the loop.
  const bool rot = a.rot_cos != nullptr;
  const uint32_t s_rot = s_q + static_cast<uint32_t>(5 * tile_bytes<HD>() + 2 * mask_stage_bytes<MASK>());
  // Tile t's K and V (and mask) into stage t & 1, last read in tile t - 2, before its closing barrier.
  auto load_kv = [&](int t) {
    const int st = t & 1, k1 = t * kTileKeys;
    qk_load.load(s_k(st), K + static_cast<int64_t>(k1) * a.ks.seq, a.ks.seq, min(kTileKeys, a.kv_len - k1));
    v_load.load(s_v(st), V + static_cast<int64_t>(k1) * a.vs.seq, a.vs.seq, min(kTileKeys, a.kv_len - k1));
    if constexpr (kStaged)
      stage_mask<MASK>(s_q + s_m(st), mask_base, mask_row_bytes, mask_esz, q0, a.q_len, k1, a.kv_len);
  };
  qk_load.load(s_q, Q, a.qs.seq, min(kBlockRows, a.q_len - q0));
  if (tiles > 0) {
    load_kv(0);
    if (rot) stage_rot<T, HD>(s_rot, a, b, 0, min(kTileKeys, a.kv_len));
  }
  cp_async_commit();
  if (rot) {
    RotChunks<HD> q_rot;
    load_rot<T, HD>(q_rot, a, b, q0, min(kBlockRows, a.q_len - q0));
    if (tiles > 1) load_kv(1);
    cp_async_commit();
    cp_async_wait<1>();  // Q, tile 0 and its table rows landed for this thread
    __syncthreads();     // ... and for every thread
    rotate_tile<T, HD>(smem, q_rot, nullptr, a.head_dim, min(kBlockRows, a.q_len - q0));
    if (tiles > 0)
      rotate_tile<T, HD>(smem + (s_k(0) - s_q), RotChunks<HD>{}, smem + (s_rot - s_q), a.head_dim,
                         min(kTileKeys, a.kv_len));
    __syncthreads();  // the tiles are whole, and the table stage may be refilled
    if (tiles > 1) stage_rot<T, HD>(s_rot, a, b, kTileKeys, min(kTileKeys, a.kv_len - kTileKeys));
    cp_async_commit();
  }

  const int w0 = q0 + 16 * warp;       // this warp's first query row
  const int r0 = w0 + g, r1 = r0 + 8;  // this thread's two query rows
  constexpr float kLog2e = 1.4426950408889634f;
  int64_t mask_r0 = 0, mask_r1 = 0;
  if constexpr (MASK == kRowMask || MASK == kFullMask) {
    const int64_t base = b * a.mask_stride[0] + h * a.mask_stride[1];
    mask_r0 = base + static_cast<int64_t>(min(r0, a.q_len - 1)) * a.mask_stride[2];
    mask_r1 = base + static_cast<int64_t>(min(r1, a.q_len - 1)) * a.mask_stride[2];
  }

  uint32_t qf[KS][4];
  float o[DN][4];
#pragma unroll
  for (int n = 0; n < DN; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;

  for (int t = 0; t < tiles; ++t) {
    const int st = t & 1, k0 = t * kTileKeys;
    // Tile t + 1 into the other stage, last read in tile t - 1, before its closing barrier. With
    // tables, tile 0 and its rotation were the prologue's, and tile 1's loads are in flight.
    const bool ahead = !rot || t > 0;
    if (ahead) {
      if (t + 1 < tiles) load_kv(t + 1);
      cp_async_commit();
    }
    [[maybe_unused]] float mt[2][16];
    if constexpr (MASK == kRowMask || MASK == kFullMask)
      load_mask<T, MASK>(mt, a, mask_r0, mask_r1, k0, qd);  // in flight meanwhile
    if (ahead) {
      cp_async_wait<1>();  // tile t, its table rows (and Q) landed for this thread
      __syncthreads();     // ... and for every thread
    }
    if (rot && t > 0) {  // rotated in place before any warp reads it
      rotate_tile<T, HD>(smem + (s_k(st) - s_q), RotChunks<HD>{}, smem + (s_rot - s_q), a.head_dim,
                         min(kTileKeys, a.kv_len - k0));
      __syncthreads();  // the tile is whole, and the table stage may be refilled
      if (t + 1 < tiles) stage_rot<T, HD>(s_rot, a, b, k0 + kTileKeys, min(kTileKeys, a.kv_len - k0 - kTileKeys));
      cp_async_commit();
    }
    // This thread's two rows of the staged mask (the same row for a row mask), read where the
    // scores take them: held in registers across the products, they cost the kernel a block an SM.
    [[maybe_unused]] const unsigned char* ms0 =
        smem + s_m(st) + (MASK == kFullMaskStaged ? (16 * warp + g) * kMaskPitch : 0);
    [[maybe_unused]] const unsigned char* ms1 = MASK == kFullMaskStaged ? ms0 + 8 * kMaskPitch : ms0;
    if (t == 0) {
#pragma unroll
      for (int kk = 0; kk < KS; ++kk)
        ldsm_x4(s_q + swz<HD>(16 * warp + (lane & 7) + ((lane >> 3) & 1) * 8, 2 * kk + (lane >> 4)), qf[kk]);
    }

    // Keys from k0 + lim on are excluded for every row of this warp (past the last key, or past
    // the warp's last row under the causal rule). A tile of NJ·8 keys or fewer skips the rest of
    // the products: ViT's last tile holds 5 of its 64 keys. A warp past the last query row (the
    // last block of ViT's 197 rows) only loads and waits.
    int lim = min(kTileKeys, a.kv_len - k0);
    if (a.causal) lim = min(lim, w0 + 16 - k0);
    auto tile = [&](auto nj) {
      constexpr int NJ = decltype(nj)::value;  // n8 tiles of keys computed
      // S = Q·Kᵀ for this warp's 16 rows: n8 tile j holds keys 8j..8j+7.
      float s[NJ][4];
#pragma unroll
      for (int j = 0; j < NJ; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < KS; kk += 2)
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
          uint32_t kb[4];
          ldsm_x4(s_k(st) + swz<HD>(8 * j + (lane & 7), 2 * kk + (lane >> 3)), kb);
          mma<T>(s[j], qf[kk], kb[0], kb[1]);
          mma<T>(s[j], qf[kk + 1], kb[2], kb[3]);
        }

        // Scaled scores plus the mask. Only a tile that reaches past the last key, or one that
        // crosses this warp's causal diagonal, looks at each key's position (a warp-uniform branch).
#pragma unroll
      for (int j = 0; j < NJ; ++j) {
        if constexpr (kStaged) {
          const bool is_bool = a.mask_dtype == DType::Bool;
          const float2 v0 = staged_pair<T>(ms0, 8 * j + 2 * qd, is_bool);
          const float2 v1 = MASK == kFullMaskStaged ? staged_pair<T>(ms1, 8 * j + 2 * qd, is_bool) : v0;
          s[j][0] = fmaf(s[j][0], a.scale, v0.x);
          s[j][1] = fmaf(s[j][1], a.scale, v0.y);
          s[j][2] = fmaf(s[j][2], a.scale, v1.x);
          s[j][3] = fmaf(s[j][3], a.scale, v1.y);
        } else {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            if constexpr (MASK != kNoMask) {
              s[j][e] = fmaf(s[j][e], a.scale, mt[0][2 * j + e]);
              s[j][2 + e] = fmaf(s[j][2 + e], a.scale, mt[1][2 * j + e]);
            } else {
              s[j][e] *= a.scale;
              s[j][2 + e] *= a.scale;
            }
          }
        }
      }
      if (lim < kTileKeys || (a.causal && k0 + kTileKeys - 1 > w0)) {
#pragma unroll
        for (int j = 0; j < NJ; ++j)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int col = k0 + 8 * j + 2 * qd + e;
            const bool out = col >= a.kv_len;
            if (out || (a.causal && col > r0)) s[j][e] = -INFINITY;
            if (out || (a.causal && col > r1)) s[j][2 + e] = -INFINITY;
          }
      }
      // The tile's row maxima and the online softmax.
      float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
      for (int j = 0; j < NJ; ++j) {
        mx0 = fmaxf(mx0, fmaxf(s[j][0], s[j][1]));
        mx1 = fmaxf(mx1, fmaxf(s[j][2], s[j][3]));
      }
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
      const float n0 = fmaxf(m0, mx0), n1 = fmaxf(m1, mx1);
      // A row that has seen only excluded keys keeps exp(-inf) = 0 everywhere instead of NaN.
      const float base0 = n0 == -INFINITY ? 0.0f : n0, base1 = n1 == -INFINITY ? 0.0f : n1;
      const float alpha0 = fast_exp2((m0 - base0) * kLog2e), alpha1 = fast_exp2((m1 - base1) * kLog2e);
      m0 = n0;
      m1 = n1;
      // exp(x - max) as 2^(x·log2 e - max·log2 e), one FFMA, where no mask is added: scaled
      // products are far inside the float range. A mask's fill can be the largest finite value
      // (bf16's -3.39e38), whose product with log2 e overflows to -inf where the row must stay
      // uniform: there the difference is taken first.
      [[maybe_unused]] const float c0 = base0 * kLog2e, c1 = base1 * kLog2e;  // used without a mask
      float sum0 = 0.0f, sum1 = 0.0f;
#pragma unroll
      for (int j = 0; j < NJ; ++j) {
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
      l0 = l0 * alpha0 + sum0;  // this lane's part; the row's 4 lanes add theirs at the end
      l1 = l1 * alpha1 + sum1;
#pragma unroll
      for (int n = 0; n < DN; ++n) {
        o[n][0] *= alpha0;
        o[n][1] *= alpha0;
        o[n][2] *= alpha1;
        o[n][3] *= alpha1;
      }

      // O += P·V: keys 16kk..16kk+15 are S's n8 tiles 2kk and 2kk+1.
#pragma unroll
      for (int kk = 0; kk < NJ / 2; ++kk) {
        const uint32_t pa[4] = {pack2<T>(s[2 * kk][0], s[2 * kk][1]), pack2<T>(s[2 * kk][2], s[2 * kk][3]),
                                pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
        for (int n = 0; n < DN; n += 2) {
          uint32_t vb[4];
          ldsm_x4_trans(s_v(st) + swz<HD>(16 * kk + (lane & 7) + ((lane >> 3) & 1) * 8, n + (lane >> 4)), vb);
          mma<T>(o[n], pa, vb[0], vb[1]);
          mma<T>(o[n + 1], pa, vb[2], vb[3]);
        }
      }
    };
    if (w0 < a.q_len && lim > 0) {
      if (lim > 32)
        tile(std::integral_constant<int, 8>{});
      else if (lim > 16)
        tile(std::integral_constant<int, 4>{});
      else
        tile(std::integral_constant<int, 2>{});
    }
    __syncthreads();  // every warp is done with this stage: tile t + 2 may land there
  }
  asm volatile("cp.async.wait_all;\n" ::);  // no copy outlives the block (a block with no key tile)

  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  const float inv0 = l0 > 0.0f ? 1.0f / l0 : 0.0f, inv1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
  T* Y = static_cast<T*>(a.y) + b * a.ys.batch + h * a.ys.head;
#pragma unroll
  for (int n = 0; n < DN; ++n) {
    const int d = 8 * n + 2 * qd;
    if (8 * n >= a.v_head_dim) break;
    if (r0 < a.q_len)
      *reinterpret_cast<uint32_t*>(Y + static_cast<int64_t>(r0) * a.ys.seq + d) =
          pack2<T>(o[n][0] * inv0, o[n][1] * inv0);
    if (r1 < a.q_len)
      *reinterpret_cast<uint32_t*>(Y + static_cast<int64_t>(r1) * a.ys.seq + d) =
          pack2<T>(o[n][2] * inv1, o[n][3] * inv1);
  }
}

int mma_head_tile(const AttentionArgs& a) { return std::max(a.head_dim, a.v_head_dim) <= 64 ? 64 : 128; }

template <typename T, int HD, int MASK, int MINB>
void launch_mask(const AttentionArgs& a, cudaStream_t stream) {
  // Opted in for the rotary stage too; a launch without tables asks for less.
  constexpr size_t most = smem_bytes<HD, MASK>() + rot_stage_bytes<HD>();
  const size_t smem = smem_bytes<HD, MASK>() + (a.rot_cos ? rot_stage_bytes<HD>() : 0);
  static const cudaError_t opted_in = cudaFuncSetAttribute(
      attention_mma_kernel<T, HD, MASK, MINB>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(most));
  if (opted_in != cudaSuccess)
    throw_cuda_error(static_cast<int>(opted_in), "cudaFuncSetAttribute(attention_mma)", __FILE__, __LINE__);
  const dim3 grid((a.q_len + kBlockRows - 1) / kBlockRows, a.q_heads, a.batch);
  attention_mma_kernel<T, HD, MASK, MINB><<<grid, kThreads, smem, stream>>>(a);
  check_launch("attention_mma");
}

/// Whether the mask can be staged by 16-byte copies: contiguous keys, every row starting 16-byte
/// aligned, and whole chunks up to the last key (so no copy reads past a row).
bool mask_stages(const AttentionArgs& a) {
  const int64_t esz = a.mask_dtype == DType::Bool ? 1 : 2;
  return a.mask_stride[3] == 1 && aligned16(a.mask) && (a.mask_stride[0] * esz) % 16 == 0 &&
         (a.mask_stride[1] * esz) % 16 == 0 && (a.mask_stride[2] * esz) % 16 == 0 && (a.kv_len * esz) % 16 == 0;
}

/// The mask form the kernel is compiled for, for these arguments.
MaskKind mask_kind(const AttentionArgs& a) {
  if (!a.mask) return kNoMask;
  if (a.mask_stride[2] == 0) return mask_stages(a) ? kRowMaskStaged : kRowMask;
  return mask_stages(a) ? kFullMaskStaged : kFullMask;
}

template <typename T, int HD>
void launch_hd(const AttentionArgs& a, cudaStream_t stream) {
  switch (mask_kind(a)) {
    case kNoMask:
      return launch_mask<T, HD, kNoMask, kMinBlocks<HD>>(a, stream);
    case kRowMaskStaged:
      return launch_mask<T, HD, kRowMaskStaged, kMinBlocks<HD>>(a, stream);
    case kRowMask:
      return launch_mask<T, HD, kRowMask, kMinBlocks<HD>>(a, stream);
    case kFullMaskStaged:
      return launch_mask<T, HD, kFullMaskStaged, kMinBlocks<HD>>(a, stream);
    case kFullMask:
      return launch_mask<T, HD, kFullMask, kMinBlocks<HD>>(a, stream);
  }
}

template <int HD>
size_t smem_for(const AttentionArgs& a) {
  switch (mask_kind(a)) {
    case kNoMask:
      return smem_bytes<HD, kNoMask>();
    case kRowMaskStaged:
      return smem_bytes<HD, kRowMaskStaged>();
    case kRowMask:
      return smem_bytes<HD, kRowMask>();
    case kFullMaskStaged:
      return smem_bytes<HD, kFullMaskStaged>();
    case kFullMask:
      return smem_bytes<HD, kFullMask>();
  }
  return 0;
}

}  // namespace

bool attention_mma_ok(const AttentionArgs& a) {
  if (a.dtype != DType::Float16 && a.dtype != DType::BFloat16) return false;
  if (a.head_dim < 8 || a.v_head_dim < 8 || a.head_dim % 8 || a.v_head_dim % 8 ||
      std::max(a.head_dim, a.v_head_dim) > 128)
    return false;
  if (a.kv_heads < 1 || a.q_heads % a.kv_heads) return false;
  if (a.mask_dtype != DType::Undefined && a.mask_dtype != DType::Bool && a.mask_dtype != a.dtype) return false;
  for (const HeadStrides* s : {&a.qs, &a.ks, &a.vs, &a.ys})
    if (s->batch % 8 || s->head % 8 || s->seq % 8) return false;
  return true;
}

bool attention_mma_aligned(const AttentionArgs& a) {
  for (const void* p : {a.q, a.k, a.v, static_cast<const void*>(a.y), a.rot_cos, a.rot_sin})
    if (p && !aligned16(p)) return false;
  return true;
}

bool attention_mma_rotates(const AttentionArgs& a) {
  // Halves of whole 16-byte chunks; head sizes a multiple of 32, the ones the rotation is tested at
  // on the GPU (32, 64, 128: GpuAttention.PackedQkvRotaryTables).
  if (!attention_mma_ok(a) || a.head_dim % 32 != 0 || a.v_head_dim != a.head_dim) return false;
  for (const HeadStrides* s : {&a.cos_st, &a.sin_st})
    if (s->batch % 8 || s->seq % 8) return false;
  return true;
}

size_t attention_mma_smem_bytes(const AttentionArgs& a) {
  if (a.rot_cos)
    return mma_head_tile(a) == 64 ? smem_for<64>(a) + rot_stage_bytes<64>() : smem_for<128>(a) + rot_stage_bytes<128>();
  return mma_head_tile(a) == 64 ? smem_for<64>(a) : smem_for<128>(a);
}

void launch_attention_mma(const AttentionArgs& a, cudaStream_t stream) {
  if (a.batch == 0 || a.q_heads == 0 || a.q_len == 0) return;
  const bool wide = mma_head_tile(a) == 128;
  if (a.dtype == DType::Float16)
    wide ? launch_hd<__half, 128>(a, stream) : launch_hd<__half, 64>(a, stream);
  else
    wide ? launch_hd<__nv_bfloat16, 128>(a, stream) : launch_hd<__nv_bfloat16, 64>(a, stream);
}

}  // namespace fusec::cuda
