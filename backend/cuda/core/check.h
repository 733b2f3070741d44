// Error checks for every CUDA-side library call. A failure becomes a fusec::Error whose message
// names the call, the library's own text and (through the caller) the node, so the CLI prints one
// `fusec: error:` line and exits non-zero instead of crashing.
#pragma once
#include <string>

#include "ir/error.h"

namespace fusec::cuda {

/// Throws: out-of-memory and missing-device errors are the user's environment (exit 2), anything
/// else is reported as internal (exit 1) since fusec built the call.
[[noreturn]] void throw_cuda_error(int code, const char* call, const char* file, int line);
/// `out_of_memory`: the library's status code says an allocation failed (each library's check
/// decides from its own codes: throw_cudnn_error, throw_cublas_error).
[[noreturn]] void throw_library_error(const char* library, int code, const std::string& text, bool out_of_memory,
                                      const char* call, const char* file, int line);

/// Lets `kernel` take `bytes` of dynamic shared memory past the default 48 KB on the current
/// device: the attribute is per kernel and device, so it is set once for each pair (and again for a
/// larger `bytes`). Throws, naming `what`, where the device refuses.
void allow_dynamic_smem(const void* kernel, int bytes, const char* what);

}  // namespace fusec::cuda

#define FUSEC_CUDA_CHECK(expr)                                                                                     \
  do {                                                                                                             \
    auto fusec_err_ = (expr);                                                                                      \
    if (fusec_err_ != 0) ::fusec::cuda::throw_cuda_error(static_cast<int>(fusec_err_), #expr, __FILE__, __LINE__); \
  } while (0)
