// Attention at short sequences for heads that share their keys (attention_group.cu): every key of
// a (batch, key/value head) resident in shared memory, and the query heads that read them taken
// in turn by the same block. Raced against the flash kernel (attention_mma.cu) and cuDNN's SDPA
// per problem (attention_tune.h).
#pragma once
#include <cuda_runtime.h>

#include "backend/cuda/ops/attention/attention.cuh"

namespace fusec::cuda {

/// Most keys the grouped kernel holds (two 64-key tiles).
constexpr int kGroupMaxKeys = 128;

/// Whether the grouped kernel takes these arguments, pointers aside: the tensor-core kernel's cases
/// (attention_mma_ok) with head sizes up to 64 and at most kGroupMaxKeys keys; no mask, or one that
/// is the same for every head and stages by 16-byte copies; rotary tables only where the flash
/// kernel rotates (attention_mma_rotates) and queries and keys are the same positions.
bool attention_group_ok(const AttentionArgs& a);

/// The query heads a block takes: the largest divisor of the group (q_heads / kv_heads) that is at
/// most `want` (at least 1).
int attention_group_heads(const AttentionArgs& a, int want);

/// Runs `a` with `heads` query heads a block (a divisor of the group; attention_group_heads).
/// Needs attention_group_ok and attention_mma_aligned.
void launch_attention_group(const AttentionArgs& a, int heads, cudaStream_t stream);

}  // namespace fusec::cuda
