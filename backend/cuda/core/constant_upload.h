// Host constants (weights) into device storage. A float32 constant that is stored in another
// float dtype (fp16, bf16) or laid out channels-last is uploaded as it is and converted on the
// device: converting and permuting ResNet-50's 26 M weights on the CPU took a large share of every
// fp16 engine build (FUSEC_BUILD_TRACE=1).
#pragma once
#include <cuda_runtime_api.h>

#include "backend/cuda/core/context.h"
#include "ir/tensor.h"

namespace fusec::cuda {

/// A float32 constant on the device into storage dtype dst_t (float32, float16 saturating at
/// ±65504, bfloat16, float64); with rs > 0 also permuted from [K, C, RS] to [K, RS, C]. False for
/// another dst_t. (convert.cu)
[[nodiscard]] bool launch_constant_from_f32(const float* src, void* dst, DType dst_t, int64_t n, int64_t c, int64_t rs,
                                            cudaStream_t s);

class ConstantUploader {
 public:
  explicit ConstantUploader(cudaStream_t stream) : stream_(stream) {}
  /// Waits for the uploads in flight (the staging buffer must outlive them).
  ~ConstantUploader();
  ConstantUploader(const ConstantUploader&) = delete;
  ConstantUploader& operator=(const ConstantUploader&) = delete;

  /// Writes `host` to dst as dtype `to` (the same number of elements), [K, C, R, S] permuted
  /// to [K, R, S, C] ([K, C, T, R, S] to [K, T, R, S, C]) when krsc. Stream-ordered on the
  /// uploader's stream; finish() waits.
  void upload(const Tensor& host, void* dst, DType to, bool krsc = false);
  void finish();

 private:
  cudaStream_t stream_;
  DeviceBuffer staging_;
};

}  // namespace fusec::cuda
