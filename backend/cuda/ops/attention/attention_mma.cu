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
#include "backend/cuda/ops/attention/mma_tile.cuh"

namespace fusec::cuda {

namespace {

using namespace mma_attn;

/// Blocks an SM must hold at once, which caps the registers: 3 at head tile 64 (about 165
/// registers, no spills; 4 spilled and ran slower at ViT-B/16's and BERT-base's shapes), 2 at 128.
template <int HD>
constexpr int kMinBlocks = HD == 64 ? 3 : 2;

template <int HD, int MASK>
constexpr size_t smem_bytes() {
  return 5 * static_cast<size_t>(tile_bytes<HD>()) + 2 * mask_stage_bytes<MASK>();  // Q, K x 2, V x 2, mask x 2
}

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

template <typename T, int HD, int MASK, int MINB, bool CAP>
__global__ void __launch_bounds__(kThreads, MINB) attention_mma_kernel(AttentionArgs a) {
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
    rotate_tile<T, HD>(smem, q_rot, nullptr, a.head_dim, min(kBlockRows, a.q_len - q0), threadIdx.x, kThreads);
    if (tiles > 0)
      rotate_tile<T, HD>(smem + (s_k(0) - s_q), RotChunks<HD>{}, smem + (s_rot - s_q), a.head_dim,
                         min(kTileKeys, a.kv_len), threadIdx.x, kThreads);
    __syncthreads();  // the tiles are whole, and the table stage may be refilled
    if (tiles > 1) stage_rot<T, HD>(s_rot, a, b, kTileKeys, min(kTileKeys, a.kv_len - kTileKeys));
    cp_async_commit();
  }

  const WarpPos p(q0 + 16 * warp);  // this warp's first query row, this thread's two
  const int w0 = p.w0;
  int64_t mask_r0 = 0, mask_r1 = 0;
  if constexpr (MASK == kRowMask || MASK == kFullMask) {
    const int64_t base = b * a.mask_stride[0] + h * a.mask_stride[1];
    mask_r0 = base + static_cast<int64_t>(min(p.r0, a.q_len - 1)) * a.mask_stride[2];
    mask_r1 = base + static_cast<int64_t>(min(p.r1, a.q_len - 1)) * a.mask_stride[2];
  }

  WarpRows<HD> w;
  w.reset();

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
                         min(kTileKeys, a.kv_len - k0), threadIdx.x, kThreads);
      __syncthreads();  // the tile is whole, and the table stage may be refilled
      if (t + 1 < tiles) stage_rot<T, HD>(s_rot, a, b, k0 + kTileKeys, min(kTileKeys, a.kv_len - k0 - kTileKeys));
      cp_async_commit();
    }
    // This thread's two rows of the staged mask (the same row for a row mask), read where the
    // scores take them: held in registers across the products, they cost the kernel a block an SM.
    [[maybe_unused]] const unsigned char* ms0 =
        smem + s_m(st) + (MASK == kFullMaskStaged ? (16 * warp + g) * kMaskPitch : 0);
    [[maybe_unused]] const unsigned char* ms1 = MASK == kFullMaskStaged ? ms0 + 8 * kMaskPitch : ms0;
    if (t == 0) w.load_q(s_q, 16 * warp, lane);

    // Keys from k0 + lim on are excluded for every row of this warp (past the last key, or past
    // the warp's last row under the causal rule). A tile of NJ·8 keys or fewer skips the rest of
    // the products: ViT's last tile holds 5 of its 64 keys. A warp past the last query row (the
    // last block of ViT's 197 rows) only loads and waits.
    int lim = min(kTileKeys, a.kv_len - k0);
    if (a.causal) lim = min(lim, w0 + 16 - k0);
    warp_tile<T, HD, MASK, CAP>(w, p, a, s_k(st), s_v(st), k0, lim, mt, ms0, ms1);
    __syncthreads();  // every warp is done with this stage: tile t + 2 may land there
  }
  asm volatile("cp.async.wait_all;\n" ::);  // no copy outlives the block (a block with no key tile)

  w.store(static_cast<T*>(a.y) + b * a.ys.batch + h * a.ys.head, a.ys.seq, p, a.q_len, a.v_head_dim);
}

int mma_head_tile(const AttentionArgs& a) { return std::max(a.head_dim, a.v_head_dim) <= 64 ? 64 : 128; }

template <typename T, int HD, int MASK, int MINB, bool CAP>
void launch_mask(const AttentionArgs& a, cudaStream_t stream) {
  // Opted in for the rotary stage too; a launch without tables asks for less.
  constexpr size_t most = smem_bytes<HD, MASK>() + rot_stage_bytes<HD>();
  const size_t smem = smem_bytes<HD, MASK>() + (a.rot_cos ? rot_stage_bytes<HD>() : 0);
  static const cudaError_t opted_in =
      cudaFuncSetAttribute(attention_mma_kernel<T, HD, MASK, MINB, CAP>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(most));
  if (opted_in != cudaSuccess)
    throw_cuda_error(static_cast<int>(opted_in), "cudaFuncSetAttribute(attention_mma)", __FILE__, __LINE__);
  const dim3 grid((a.q_len + kBlockRows - 1) / kBlockRows, a.q_heads, a.batch);
  attention_mma_kernel<T, HD, MASK, MINB, CAP><<<grid, kThreads, smem, stream>>>(a);
  check_launch("attention_mma");
}

/// The mask form the kernel is compiled for, for these arguments. Soft-capped instances exist for
/// three forms only (no mask, the staged full mask: a decoder's, and the unstaged full mask), which
/// take a row mask as a full mask whose rows are one apart by 0: the cap adds 12 instances, not 20.
MaskKind mask_kind(const AttentionArgs& a) {
  if (!a.mask) return kNoMask;
  if (a.softcap > 0.0f) return mask_stages(a) ? kFullMaskStaged : kFullMask;  // a row mask as rows of a full one
  if (a.mask_stride[2] == 0) return mask_stages(a) ? kRowMaskStaged : kRowMask;
  return mask_stages(a) ? kFullMaskStaged : kFullMask;
}

template <typename T, int HD, bool CAP>
void launch_kind(const AttentionArgs& a, cudaStream_t stream) {
  switch (mask_kind(a)) {
    case kNoMask:
      return launch_mask<T, HD, kNoMask, kMinBlocks<HD>, CAP>(a, stream);
    case kFullMaskStaged:
      return launch_mask<T, HD, kFullMaskStaged, kMinBlocks<HD>, CAP>(a, stream);
    case kFullMask:
      return launch_mask<T, HD, kFullMask, kMinBlocks<HD>, CAP>(a, stream);
    case kRowMaskStaged:
      if constexpr (!CAP) return launch_mask<T, HD, kRowMaskStaged, kMinBlocks<HD>, CAP>(a, stream);
      break;
    case kRowMask:
      if constexpr (!CAP) return launch_mask<T, HD, kRowMask, kMinBlocks<HD>, CAP>(a, stream);
      break;
  }
  throw_cuda_error(0, "attention_mma: no soft-capped instance for a row mask", __FILE__, __LINE__);
}

template <typename T, int HD>
void launch_hd(const AttentionArgs& a, cudaStream_t stream) {
  a.softcap > 0.0f ? launch_kind<T, HD, true>(a, stream) : launch_kind<T, HD, false>(a, stream);
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
