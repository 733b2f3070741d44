// The cuDNN status check shared by the cuDNN-backed op families (conv, channels-last pooling).
#pragma once
#include <cudnn.h>

#include "backend/cuda/core/check.h"

#define DNN_CHECK(expr)                                                                                      \
  do {                                                                                                       \
    cudnnStatus_t st_ = (expr);                                                                              \
    if (st_ != CUDNN_STATUS_SUCCESS)                                                                         \
      ::fusec::cuda::throw_library_error("cuDNN", st_, cudnnGetErrorString(st_), #expr, __FILE__, __LINE__); \
  } while (0)
