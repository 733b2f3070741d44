// The gated pass after a library GEMM of packed gate and value columns (gated_layout.h): what the
// wgmma GEMM's gated epilogue does inside, as one pass over the product.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/ops/elementwise/epilogue.cuh"
#include "ir/dtype.h"

namespace fusec::cuda {

/// y[r, j] = act(p[r, gate column of j]) · p[r, value column of j] for r < rows, j < n: p is
/// [rows, gated_packed_n(n)], y [rows, n], both row-major and dense, of float storage type t.
/// Returns false for other dtypes.
[[nodiscard]] bool launch_gated_pass(void* y, const void* p, DType t, int64_t rows, int64_t n, ActParams act,
                                     cudaStream_t s);

}  // namespace fusec::cuda
