#include "backend/cuda/core/check.h"

#include <cuda_runtime_api.h>

#include <filesystem>
#include <map>
#include <mutex>
#include <utility>

namespace fusec::cuda {

namespace {
std::string where(const char* call, const char* file, int line) {
  return std::string(call) + " at " + std::filesystem::path(file).filename().string() + ":" + std::to_string(line);
}
}  // namespace

void throw_cuda_error(int code, const char* call, const char* file, int line) {
  auto err = static_cast<cudaError_t>(code);
  cudaGetLastError();  // clear a sticky non-fatal error so later calls are not blamed for it
  std::string msg = std::string("CUDA: ") + cudaGetErrorString(err) + " (" + where(call, file, line) + ")";
  switch (err) {
    case cudaErrorMemoryAllocation:
      throw Error(ErrorKind::BadInput, "out of GPU memory: " + msg);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
    case cudaErrorUnsupportedPtxVersion:
    case cudaErrorNoKernelImageForDevice:
      throw Error(ErrorKind::BadInput, "no usable GPU: " + msg);
    default:
      throw Error(ErrorKind::Internal, msg);
  }
}

void throw_library_error(const char* library, int code, const std::string& text, bool out_of_memory, const char* call,
                         const char* file, int line) {
  std::string msg =
      std::string(library) + " error " + std::to_string(code) + ": " + text + " (" + where(call, file, line) + ")";
  if (out_of_memory) throw Error(ErrorKind::BadInput, "out of GPU memory: " + msg);
  throw Error(ErrorKind::Internal, msg);
}

void allow_dynamic_smem(const void* kernel, int bytes, const char* what) {
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, int> allowed;  // (kernel, device) -> bytes
  int dev = 0;
  if (const cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess)
    throw_cuda_error(static_cast<int>(e), what, __FILE__, __LINE__);
  std::lock_guard<std::mutex> lock(mu);
  int& most = allowed[{kernel, dev}];
  if (most >= bytes) return;
  if (const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
      e != cudaSuccess)
    throw_cuda_error(static_cast<int>(e), what, __FILE__, __LINE__);
  most = bytes;
}

}  // namespace fusec::cuda
