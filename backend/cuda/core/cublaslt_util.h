// What every cuBLASLt user in the CUDA backend shares: the check macro, the storage type mapping
// and an algorithm's stable identity (for the tuning cache).
#pragma once
#include <cublasLt.h>

#include <cstdint>
#include <string>
#include <vector>

#include "backend/cuda/core/check.h"
#include "ir/dtype.h"

namespace fusec::cuda {

[[noreturn]] inline void throw_cublas_error(cublasStatus_t st, const char* call, const char* file, int line) {
  throw_library_error("cuBLASLt", st, cublasLtGetStatusString(st), st == CUBLAS_STATUS_ALLOC_FAILED, call, file, line);
}

}  // namespace fusec::cuda

#define LT_CHECK(expr)                                                                     \
  do {                                                                                     \
    cublasStatus_t st_ = (expr);                                                           \
    if (st_ != CUBLAS_STATUS_SUCCESS) ::fusec::cuda::throw_cublas_error(st_, #expr, __FILE__, __LINE__); \
  } while (0)

namespace fusec::cuda {

/// cuBLASLt's type for a float storage dtype (Float32, Float16, BFloat16, Float64).
cudaDataType_t lt_type(DType t);

/// The most workspace a cuBLASLt call of the backend may ask for.
constexpr size_t kLtWorkspace = 32u << 20;

/// cuBLASLt's top `count` heuristic candidates for a described matmul, with at most `max_workspace`
/// bytes of workspace and A, B, C and D aligned to `min_alignment` bytes (empty when it has none).
std::vector<cublasLtMatmulHeuristicResult_t> lt_heuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                                          cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                                          cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                                          size_t max_workspace, uint32_t min_alignment, int count);

/// An algorithm's identity: its configuration attributes, which stay the same from one heuristic
/// query to the next (the opaque struct's bytes need not).
std::string lt_algo_identity(const cublasLtMatmulAlgo_t& a);

}  // namespace fusec::cuda
