// The attention tuner: at fp16/bf16 cuDNN's SDPA, fusec's tensor-core flash kernel
// (attention_mma.cu) and, at short sequences, its grouped kernel (attention_group.cu) take most
// problems, and which is fastest depends on the shape (cuDNN's 128-row tiles suit long sequences,
// the own 64-row blocks short ones, the grouped kernel heads that share their keys). They are timed
// once per problem as the model's CUDA graph runs them, and the answer is remembered in the tuning
// cache.
#pragma once
#include <cstddef>
#include <string>

#include "backend/cuda/ops/attention/attention.cuh"
#include "backend/cuda/ops/attention/rotary.cuh"
#include "backend/cuda/ops/attention/sdpa_cudnn.h"

namespace fusec::cuda {

/// Everything about an attention problem that its kernels' plans and speed depend on: types,
/// sizes, strides, the mask's broadcast, the causal rule and the scale.
std::string attention_problem_key(const AttentionArgs& a);

/// The tuner's answer for one problem: cuDNN's SDPA, the grouped kernel with `group_heads` query
/// heads a block (attention_group.cuh), or the flash kernel.
struct AttentionPick {
  bool cudnn = true;
  int group_heads = 0;  // 0: not the grouped kernel
};

/// The fastest of cuDNN's SDPA (`sdpa`, built for `a`; null where cuDNN does not take the case),
/// the tensor-core flash kernel and, where `group` is set, the grouped kernel at each of `group`'s
/// heads-a-block counts (nonzero entries). `packed`: K and V live in Q's tensor, `k_off` and
/// `v_off` bytes in. `rot`: the packed rows' rotation (ai.fusec Attention's tables), timed as the
/// rotary kernel then cuDNN's SDPA against the own kernels rotating as they load; null where there
/// is none. Under FUSEC_TUNE=0, or when the timing cannot run, cuDNN's SDPA is kept where there is
/// one, and the flash kernel otherwise.
AttentionPick pick_attention(const AttentionArgs& a, CudnnSdpa* sdpa, Context& ctx, bool packed, size_t k_off,
                             size_t v_off, const RotaryArgs* rot, const int (&group)[2]);

}  // namespace fusec::cuda
