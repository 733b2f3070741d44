// LpNormalization: y = x / ||x||_p along one axis (p 1 or 2), a slice whose norm is 0 giving 0, as
// the CPU reference (backend/cpu/kernels/normalization.cpp) computes it: the norm in double, the
// quotient rounded once to the storage type (through float32 for 16-bit storage).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "ir/dtype.h"

namespace fusec::cuda {

/// Over [outer, len, inner], normalizing along len; float32, float16, bfloat16 and float64. False
/// for another storage type.
[[nodiscard]] bool launch_lp_norm(const void* x, void* y, DType t, int64_t outer, int64_t len, int64_t inner, bool l1,
                                  cudaStream_t s);

}  // namespace fusec::cuda
