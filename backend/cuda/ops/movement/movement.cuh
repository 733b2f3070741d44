// Data movement kernels (Transpose, Slice, Expand, Tile, DepthToSpace, SpaceToDepth as one strided
// copy; Concat/Split; Pad; Trilu; CumSum, CumProd) and the small index helpers the gather, pool and resize
// kernels share. Plans are built on the host at plan time; launchers only enqueue.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "ir/dtype.h"

namespace fusec::cuda {

constexpr int kMoveMaxRank = 8;

/// Division by a fixed divisor d in [1, 2^31) of a dividend n < 2^31 with one multiply-high and a
/// shift (Granlund–Montgomery round-up method): index decomposition runs once per element, and a
/// hardware-less 32-bit division costs ~20 instructions.
struct FastDiv {
  uint32_t d = 1, mul = 1, shift = 0;
  FastDiv() = default;
  explicit FastDiv(uint32_t div) : d(div ? div : 1) {
    while ((uint64_t{1} << shift) < d) ++shift;
    mul = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << shift) - d)) / d + 1);
  }
  __host__ __device__ __forceinline__ uint32_t div(uint32_t n) const {
#ifdef __CUDA_ARCH__
    return (__umulhi(n, mul) + n) >> shift;
#else
    return static_cast<uint32_t>(((static_cast<uint64_t>(n) * mul >> 32) + n) >> shift);
#endif
  }
};

/// Whether every index of a tensor of `n` elements fits the 32-bit FastDiv paths.
inline bool fits32(int64_t n) { return n >= 0 && n < (int64_t{1} << 31) - 1; }

// ---------------------------------------------------------------- strided copy

/// out[i] = in[base + Σ idx_k·strides_k] over a row-major output of `dims`, element strides
/// possibly zero (broadcast) or negative (reversed slice). Adjacent dims merge at plan time; the
/// plan then picks: one cudaMemcpyAsync, a gather over 16-byte vectors when the innermost dim
/// stays contiguous (row copies: Slice, Concat-like views, [B,S,H,D]→[B,H,S,D]), a 32×32 shared
/// memory tile when another dim is the contiguous one in the input (NCHW↔NHWC), or a plain
/// element gather otherwise.
struct StridedCopyPlan {
  enum Kind { Empty, Memcpy, Gather, Tiled };
  struct View {  // one gather over elements of `vec` bytes
    int vec = 0, rank = 0;
    int64_t dims[kMoveMaxRank] = {}, strides[kMoveMaxRank] = {};
    int64_t base = 0, numel = 0;
    bool narrow = false;  // 32-bit indexing
  };
  Kind kind = Empty;
  int esize = 0;
  int64_t numel = 0;
  int64_t memcpy_offset = 0;  // bytes, for Memcpy
  View wide, elem;            // wide: vectorized rows (when vec > esize); elem: element-wise
  // Tiled: merged dims and strides; dim `tile_k` is contiguous in the input, the last in the output.
  int rank = 0, tile_k = -1;
  int64_t dims[kMoveMaxRank] = {}, strides[kMoveMaxRank] = {};
  int64_t base = 0;

  std::string describe() const;
};

/// Plans the copy; `in_numel` bounds the input offsets (for 32-bit indexing). Throws on a rank
/// beyond kMoveMaxRank after merging only if `ok` is null; otherwise sets *ok = false.
StridedCopyPlan plan_strided_copy(const std::vector<int64_t>& dims, const std::vector<int64_t>& strides, int64_t base,
                                  size_t esize, int64_t in_numel, bool* ok);
void launch_strided_copy(const StridedCopyPlan& p, const void* src, void* dst, cudaStream_t s);

// ---------------------------------------------------------------- Concat / Split

/// Concat along an axis (or Split, its inverse) viewed as `rows` wide rows of `wide` elements in
/// which part i covers columns [offset_i, offset_i + width_i). One launch moves up to 32 parts.
struct PartsPlan {
  int esize = 0;
  int64_t rows = 0, wide = 0;
  std::vector<int64_t> width, offset;  // elements, per part
  int vec = 1;                         // widest vector (bytes) every part allows by shape
};
PartsPlan plan_parts(int64_t rows, int64_t wide, const std::vector<int64_t>& width, size_t esize);
/// Concat: parts are inputs, `whole` the output. Split: parts are outputs, `whole` the input.
void launch_concat(const PartsPlan& p, const void* const* parts, size_t n, void* whole, cudaStream_t s);
void launch_split(const PartsPlan& p, const void* whole, void* const* parts, size_t n, cudaStream_t s);

// ---------------------------------------------------------------- Pad

enum class PadMode : int { Constant = 0, Edge = 1, Reflect = 2, Wrap = 3 };
struct PadPlan {
  int esize = 0, rank = 0;
  PadMode mode = PadMode::Constant;
  int64_t out_dims[kMoveMaxRank] = {}, in_dims[kMoveMaxRank] = {}, in_strides[kMoveMaxRank] = {},
          pad_begin[kMoveMaxRank] = {};
  int64_t numel = 0;
  uint64_t value_bits = 0;  // the constant in storage type (low esize bytes)
};
/// `value` (device, one element) overrides value_bits when non-null: a runtime constant_value.
void launch_pad(const PadPlan& p, const void* src, void* dst, const void* value, cudaStream_t s);

// ---------------------------------------------------------------- Trilu

/// Keeps j - i <= k (lower) or j - i >= k (upper) in the last two dims [m, n]; zeros elsewhere.
/// `k_dev` (device int64) overrides k when non-null.
void launch_trilu(const void* src, void* dst, size_t esize, int64_t batches, int64_t m, int64_t n, bool upper,
                  int64_t k, const int64_t* k_dev, cudaStream_t s);

// ---------------------------------------------------------------- CumSum, CumProd

/// Inclusive/exclusive, forward/reverse prefix sums (or products: CumProd) along the middle of
/// [outer, len, inner] for float32/float16/bfloat16/float64 (float accumulation, double for
/// float64) and int32/int64.
[[nodiscard]] bool launch_scan(const void* src, void* dst, DType t, int64_t outer, int64_t len, int64_t inner,
                               bool exclusive, bool reverse, bool product, cudaStream_t s);

/// The bits of `v` in the storage type `t` (float types round to nearest; integers truncate;
/// bool is v != 0). False for a dtype it cannot represent.
bool scalar_bits(double v, int64_t iv, bool is_int, DType t, uint64_t* bits);

}  // namespace fusec::cuda
