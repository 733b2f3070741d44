// What every cuBLASLt user in the CUDA backend shares: the check macro, the storage type mapping
// and an algorithm's stable identity (for the tuning cache).
#pragma once
#include <cublasLt.h>

#include <string>

#include "backend/cuda/check.h"
#include "ir/dtype.h"

#define LT_CHECK(expr)                                                                                            \
  do {                                                                                                            \
    cublasStatus_t st_ = (expr);                                                                                  \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                                                             \
      ::fusec::cuda::throw_library_error("cuBLASLt", st_, cublasLtGetStatusString(st_), #expr, __FILE__, __LINE__); \
  } while (0)

namespace fusec::cuda {

/// cuBLASLt's type for a float storage dtype (Float32, Float16, BFloat16, Float64).
cudaDataType_t lt_type(DType t);

/// An algorithm's identity: its configuration attributes, which stay the same from one heuristic
/// query to the next (the opaque struct's bytes need not).
std::string lt_algo_identity(const cublasLtMatmulAlgo_t& a);

}  // namespace fusec::cuda
