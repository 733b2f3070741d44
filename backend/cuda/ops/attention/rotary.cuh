// ai.fusec Rotary (docs/ops.md): Y = X·cos + rotate(X)·sin per head, the cos/sin tables
// broadcast to X's head view. One thread rotates a vector of pairs of one head: (j, j + r/2) in
// the half-split form, (2i, 2i + 1) interleaved, over the head's first r values; or copies two
// vectors of the rest.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "ir/dtype.h"

namespace fusec::cuda {

constexpr int kRotaryMaxRank = 8;
constexpr int kRotaryMaxNormGroups = 8;  // runs of heads a norm spans (norm_groups), per row

struct RotaryArgs {
  DType dtype = DType::Undefined;
  int64_t heads = 0;  // rows of X's head view: numel / head
  int64_t head = 0;   // values per head (even)
  int64_t rot = 0;    // each head's first `rot` values rotate (0: all), the rest are copied; even
  bool interleaved = false;  // pairs (2i, 2i + 1) instead of (j, j + rot/2)
  // Heads of each row of the view (its dim before the last) and how many of them rotate; the
  // others are copied (ai.fusec Rotary's `rotated`, on packed QKV: V's heads).
  int64_t heads_per_row = 1, rotated_heads = 1;
  // false: the heads past rotated_heads are not written (a reader takes them from x: V's heads of
  // packed QKV, which the attention reads in place instead of from the rotated copy).
  bool copy_rest = true;
  // The head view's dims but the last ([.., H] for head_size, else X's leading dims), and each
  // table's row stride along them (in rows of `rot` values, 0 where the table broadcasts).
  int rank = 0;
  int64_t dims[kRotaryMaxRank] = {}, cos_stride[kRotaryMaxRank] = {}, sin_stride[kRotaryMaxRank] = {};
  // QK-norm: 1 RMS, 2 LayerNorm over each rotated head before it rotates, with norm_scale (and
  // norm_bias, or null) one row of `head` values, or with norm_rows one row per rotated head.
  int norm = 0;
  bool norm_rows = false;
  // norm_groups > 0: the rotated heads of a row are normalized in that many runs (OLMo 2's whole
  // projections), run i being norm_group_heads[i] heads from head norm_group_first[i] of the row.
  int norm_groups = 0;
  int32_t norm_group_first[kRotaryMaxNormGroups] = {}, norm_group_heads[kRotaryMaxNormGroups] = {};
  float norm_epsilon = 0.0f;
  const void* norm_scale = nullptr;
  const void* norm_bias = nullptr;
  const void* x = nullptr;
  const void* cos = nullptr;
  const void* sin = nullptr;
  void* y = nullptr;
};

/// Enqueues the rotation, in vectors of up to 16 bytes where the head and the pointers allow;
/// false when the dtype is not one it handles (float32, float16, bfloat16).
[[nodiscard]] bool launch_rotary(const RotaryArgs& a, cudaStream_t s);

}  // namespace fusec::cuda
