// The attention tuner: at fp16/bf16 both cuDNN's SDPA and fusec's tensor-core kernel
// (attention_mma.cu) take most problems, and which is faster depends on the shape (cuDNN's
// 128-row tiles suit long sequences, the own 64-row blocks short ones). Both are timed once per
// problem as the model's CUDA graph runs them, and the answer is remembered in the tuning cache.
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

/// Whether cuDNN's SDPA (`sdpa`, built for `a`) runs `a` faster than the tensor-core kernel.
/// `packed`: K and V live in Q's tensor, `k_off` and `v_off` bytes in. `rot`: the packed rows'
/// rotation (ai.fusec Attention's tables), timed as the rotary kernel then cuDNN's SDPA against the
/// tensor-core kernel rotating as it loads; null where there is none. Under FUSEC_TUNE=0, or when
/// the timing cannot run, cuDNN's SDPA is kept.
bool cudnn_sdpa_wins(const AttentionArgs& a, CudnnSdpa& sdpa, Context& ctx, bool packed, size_t k_off, size_t v_off,
                     const RotaryArgs* rot = nullptr);

}  // namespace fusec::cuda
