// cuDNN's fused scaled-dot-product attention (flash attention on tensor cores, fp16/bf16) built
// through the cuDNN frontend's graph API. The frontend is a large header-only library, so it is
// kept inside sdpa_cudnn.cpp behind this small interface; without its headers at build time
// (FUSEC_HAVE_CUDNN_FRONTEND undefined) create() says so and the own kernel runs instead.
#pragma once
#include <memory>
#include <string>

#include "backend/cuda/ops/attention/attention.cuh"
#include "backend/cuda/core/context.h"

namespace fusec::cuda {

class CudnnSdpa {
 public:
  /// A built plan for these shapes, strides and mask, or nullptr with *why (a dtype, head size or
  /// mask form cuDNN does not take, or no engine that supports it on this GPU).
  static std::unique_ptr<CudnnSdpa> create(const AttentionArgs& a, Context& ctx, std::string* why);
  virtual ~CudnnSdpa() = default;
  virtual size_t workspace_bytes() const = 0;
  /// Runs on `stream` with the pointers in `a` (same shapes as at create()).
  virtual void launch(const AttentionArgs& a, void* workspace, cudaStream_t stream) = 0;
};

}  // namespace fusec::cuda
