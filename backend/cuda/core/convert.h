// The dtype conversion at the precision boundary, callable from host code (core/convert.cu).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "ir/dtype.h"

namespace fusec::cuda {

/// Launches the dtype conversion dst[i] = (DstT)src[i] for float32/float16/bfloat16/float64
/// (the precision boundary at graph inputs and outputs). Returns false for other dtype pairs.
[[nodiscard]] bool launch_convert_float(const void* src, DType src_t, void* dst, DType dst_t, int64_t n,
                                        cudaStream_t s);

}  // namespace fusec::cuda
