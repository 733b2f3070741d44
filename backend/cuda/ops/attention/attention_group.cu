// Attention at short sequences for query heads that share their keys (grouped-query attention,
// Llama's 32 query heads over 8 key/value heads), on tensor cores (mma.sync through mma_tile.cuh,
// the flash kernel's warp step).
//
// Why: at 128 tokens the flash kernel (attention_mma.cu) gives each block one head's 64 query rows
// and two key tiles. Its blocks spend most of their life waiting on their loads (ncu at Llama's
// shape: 2.7 warps a scheduler, none eligible 55-64% of the cycles), and every block of a group
// loads, stages and rotates the same keys, values, mask rows and tables again.
//
// Here a block takes 64 query rows of `heads` query heads that read the same key/value head. Every
// key of that head (up to 128: two 64-key tiles), its values, the mask's 64 rows (the same for every
// head) and the rotary tables' rows land once, by cp.async, and K is rotated once. Each warp owns 16
// query rows and walks the heads: its Q rows of the next head are in flight (two stages a warp)
// while it computes the current one, and nothing after the prologue waits on another warp. A warp
// loads, rotates and reads only its own Q rows, so the head loop has no block barrier.
// The step over a key tile is warp_key_tile's: masks, the causal rule, partial tiles and rows
// that see no key (zeros, as the CPU reference) behave exactly as in the flash kernel.
#include "backend/cuda/ops/attention/attention_group.cuh"

#include <algorithm>

#include "backend/cuda/core/common.cuh"
#include "backend/cuda/ops/attention/attention_mma.cuh"
#include "backend/cuda/ops/attention/mma_tile.cuh"

namespace fusec::cuda {

namespace {

using namespace mma_attn;

constexpr int kHd = 64;                            // head tile: head sizes up to 64
constexpr int kTiles = kGroupMaxKeys / kTileKeys;  // key tiles resident
constexpr int kWarps = kThreads / 32;
constexpr int kWarpQBytes = 16 * kHd * 2;  // one warp's 16 Q rows

/// Shared memory: K tiles, V tiles, two Q stages a warp, then a mask stage and a rotary stage a key
/// tile where the problem has them (byte offsets).
constexpr uint32_t kOffV = kTiles * tile_bytes<kHd>();
constexpr uint32_t kOffQ = 2 * kTiles * tile_bytes<kHd>();
constexpr uint32_t kOffMask = kOffQ + 2 * kWarps * kWarpQBytes;

template <int MASK>
constexpr uint32_t rot_offset() {
  return kOffMask + kTiles * mask_stage_bytes<MASK>();
}

template <int MASK>
constexpr size_t group_smem(bool rot) {
  return rot_offset<MASK>() + (rot ? kTiles * rot_stage_bytes<kHd>() : 0);
}

/// This warp's rows [0, valid) of a Q head (rows `stride` elements apart) into its stage at
/// shared address `dst`, swizzled as a tile's rows; chunks past the head size or the rows are zeros.
template <typename T>
__device__ __forceinline__ void load_warp_q(uint32_t dst, const T* src, int64_t stride, int valid, int chunks,
                                            int lane) {
  const int c = lane % 8, r0 = lane / 8;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = r0 + 4 * i;
    const bool ok = c < chunks && r < valid;
    cp_async16(dst + swz<kHd>(r, c), ok ? src + static_cast<int64_t>(r) * stride + 8 * c : src, ok);
  }
}

template <typename T, int MASK>
__global__ void __launch_bounds__(kThreads, 3) attention_group_kernel(AttentionArgs a, int heads) {
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  auto s_k = [base](int t) { return base + static_cast<uint32_t>(t * tile_bytes<kHd>()); };
  auto s_v = [base](int t) { return base + kOffV + static_cast<uint32_t>(t * tile_bytes<kHd>()); };
  auto s_m = [](int t) { return kOffMask + static_cast<uint32_t>(t * mask_stage_bytes<MASK>()); };
  auto s_rot = [](int t) { return rot_offset<MASK>() + static_cast<uint32_t>(t * rot_stage_bytes<kHd>()); };
  constexpr bool kStaged = MASK == kRowMaskStaged || MASK == kFullMaskStaged;

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  // Under the causal rule the last query blocks see the most keys: they start first.
  const int qb = a.causal ? static_cast<int>(gridDim.x) - 1 - static_cast<int>(blockIdx.x) : blockIdx.x;
  const int q0 = qb * kBlockRows, h0 = blockIdx.y * heads, b = blockIdx.z;
  const int hk = h0 / (a.q_heads / a.kv_heads);  // the block's heads are in one group
  const T* K = static_cast<const T*>(a.k) + b * a.ks.batch + hk * a.ks.head;
  const T* V = static_cast<const T*>(a.v) + b * a.vs.batch + hk * a.vs.head;
  const int kv_end = a.causal ? min(a.kv_len, q0 + kBlockRows) : a.kv_len;
  const int tiles = (kv_end + kTileKeys - 1) / kTileKeys;
  const bool rot = a.rot_cos != nullptr;

  // The prologue's one group: every key tile's K, V, mask rows and table rows.
  {
    const TileLoader<T, kHd> qk_load(a.head_dim / 8), v_load(a.v_head_dim / 8);
    [[maybe_unused]] const int mask_esz = a.mask_dtype == DType::Bool ? 1 : static_cast<int>(sizeof(T));
    for (int t = 0; t < tiles; ++t) {
      const int k1 = t * kTileKeys, valid = min(kTileKeys, a.kv_len - k1);
      qk_load.load(s_k(t), K + static_cast<int64_t>(k1) * a.ks.seq, a.ks.seq, valid);
      v_load.load(s_v(t), V + static_cast<int64_t>(k1) * a.vs.seq, a.vs.seq, valid);
      if constexpr (kStaged)
        stage_mask<MASK>(base + s_m(t),
                         static_cast<const unsigned char*>(a.mask) +
                             (b * a.mask_stride[0] + static_cast<int64_t>(q0) * a.mask_stride[2]) * mask_esz,
                         a.mask_stride[2] * mask_esz, mask_esz, q0, a.q_len, k1, a.kv_len);
      if (rot) stage_rot<T, kHd>(base + s_rot(t), a, b, k1, valid);
    }
  }

  const WarpPos p(q0 + 16 * warp);
  const int rows = min(16, a.q_len - p.w0);  // this warp's query rows (none past the last)
  auto q_stage = [&](int i) { return kOffQ + static_cast<uint32_t>((2 * warp + (i & 1)) * kWarpQBytes); };
  auto q_src = [&](int i) {
    return static_cast<const T*>(a.q) + b * a.qs.batch + (h0 + i) * a.qs.head + static_cast<int64_t>(p.w0) * a.qs.seq;
  };
  load_warp_q<T>(base + q_stage(0), q_src(0), a.qs.seq, rows, a.head_dim / 8, lane);
  cp_async_commit();

  [[maybe_unused]] const unsigned char* ms0 = smem + (MASK == kFullMaskStaged ? (16 * warp + p.g) * kMaskPitch : 0);
  [[maybe_unused]] const unsigned char* ms1 = MASK == kFullMaskStaged ? ms0 + 8 * kMaskPitch : ms0;
  [[maybe_unused]] float mt[2][16];  // no mask held in registers here

  for (int i = 0; i < heads; ++i) {
    // Head i + 1's rows into the other stage, which this warp last read (ldmatrix) in head i - 1.
    if (i + 1 < heads) load_warp_q<T>(base + q_stage(i + 1), q_src(i + 1), a.qs.seq, rows, a.head_dim / 8, lane);
    cp_async_commit();
    cp_async_wait<1>();  // head i's rows (and, at i = 0, the prologue) landed for this thread
    if (i == 0) {
      __syncthreads();  // ... and for every thread
      if (rot) {
        for (int t = 0; t < tiles; ++t)
          rotate_tile<T, kHd>(smem + (s_k(t) - base), RotChunks<kHd>{}, smem + s_rot(t), a.head_dim,
                              min(kTileKeys, a.kv_len - t * kTileKeys), threadIdx.x, kThreads);
        __syncthreads();  // K is rotated before any warp reads it
      }
    } else {
      __syncwarp();
    }
    if (rot) {  // this warp's Q rows, from the table rows of their positions (tile qb's stage)
      rotate_tile<T, kHd>(smem + q_stage(i), RotChunks<kHd>{}, smem + s_rot(qb) + 16 * warp * kHd * 2, a.head_dim, rows,
                          lane, 32);
      __syncwarp();
    }
    WarpRows<kHd> w;
    w.reset();
    w.load_q(base + q_stage(i), 0, lane);
    for (int t = 0; t < tiles; ++t) {
      const int k0 = t * kTileKeys;
      // Keys from k0 + lim on are excluded for every row of this warp (past the last key, or past
      // the warp's last row under the causal rule).
      int lim = min(kTileKeys, a.kv_len - k0);
      if (a.causal) lim = min(lim, p.w0 + 16 - k0);
      warp_tile<T, kHd, MASK>(w, p, a, s_k(t), s_v(t), k0, lim, mt, ms0 + s_m(t), ms1 + s_m(t));
    }
    w.store(static_cast<T*>(a.y) + b * a.ys.batch + (h0 + i) * a.ys.head, a.ys.seq, p, a.q_len, a.v_head_dim);
    __syncwarp();  // every lane's ldmatrix of this stage is done before head i + 2 lands in it
  }
  asm volatile("cp.async.wait_all;\n" ::);
}

/// The mask form the grouped kernel is compiled for (attention_group_ok has excluded the others).
MaskKind group_mask_kind(const AttentionArgs& a) {
  if (!a.mask) return kNoMask;
  return a.mask_stride[2] == 0 ? kRowMaskStaged : kFullMaskStaged;
}

template <typename T, int MASK>
void launch_mask(const AttentionArgs& a, int heads, cudaStream_t stream) {
  static const cudaError_t opted_in =
      cudaFuncSetAttribute(attention_group_kernel<T, MASK>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(group_smem<MASK>(true)));
  if (opted_in != cudaSuccess)
    throw_cuda_error(static_cast<int>(opted_in), "cudaFuncSetAttribute(attention_group)", __FILE__, __LINE__);
  const dim3 grid((a.q_len + kBlockRows - 1) / kBlockRows, a.q_heads / heads, a.batch);
  attention_group_kernel<T, MASK><<<grid, kThreads, group_smem<MASK>(a.rot_cos != nullptr), stream>>>(a, heads);
  check_launch("attention_group");
}

template <typename T>
void launch_typed(const AttentionArgs& a, int heads, cudaStream_t stream) {
  switch (group_mask_kind(a)) {
    case kRowMaskStaged:
      return launch_mask<T, kRowMaskStaged>(a, heads, stream);
    case kFullMaskStaged:
      return launch_mask<T, kFullMaskStaged>(a, heads, stream);
    default:
      return launch_mask<T, kNoMask>(a, heads, stream);
  }
}

}  // namespace

bool attention_group_ok(const AttentionArgs& a) {
  if (!attention_mma_ok(a) || std::max(a.head_dim, a.v_head_dim) > kHd) return false;
  if (a.softcap > 0.0f) return false;  // its instances carry no soft cap (the flash kernel's do)
  if (a.kv_len < 1 || a.kv_len > kGroupMaxKeys) return false;
  if (a.mask_dtype != DType::Undefined && (a.mask_stride[1] != 0 || !mask_stages(a))) return false;
  if (a.rot_cos && (!attention_mma_rotates(a) || a.q_len != a.kv_len)) return false;
  return true;
}

int attention_group_heads(const AttentionArgs& a, int want) {
  const int group = a.q_heads / std::max(1, a.kv_heads);
  for (int h = std::min(std::max(want, 1), group); h > 1; --h)
    if (group % h == 0) return h;
  return 1;
}

void launch_attention_group(const AttentionArgs& a, int heads, cudaStream_t stream) {
  if (a.batch == 0 || a.q_heads == 0 || a.q_len == 0) return;
  if (heads < 1 || (a.q_heads / a.kv_heads) % heads != 0)
    throw_cuda_error(0, "attention_group: heads a block must divide the group", __FILE__, __LINE__);
  if (a.dtype == DType::Float16)
    launch_typed<__half>(a, heads, stream);
  else
    launch_typed<__nv_bfloat16>(a, heads, stream);
}

}  // namespace fusec::cuda
