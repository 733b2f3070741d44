// The cuDNN status check shared by the cuDNN-backed code (the conv family, the context).
#pragma once
#include <cudnn.h>

#include "backend/cuda/core/check.h"

namespace fusec::cuda {

[[noreturn]] inline void throw_cudnn_error(cudnnStatus_t st, const char* call, const char* file, int line) {
  const bool oom = st == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ||
                   st == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED;
  throw_library_error("cuDNN", st, cudnnGetErrorString(st), oom, call, file, line);
}

}  // namespace fusec::cuda

#define DNN_CHECK(expr)                                                                   \
  do {                                                                                    \
    cudnnStatus_t st_ = (expr);                                                           \
    if (st_ != CUDNN_STATUS_SUCCESS) ::fusec::cuda::throw_cudnn_error(st_, #expr, __FILE__, __LINE__); \
  } while (0)
