#include "backend/cuda/core/context.h"

#include <atomic>
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <unistd.h>

#include "backend/cuda/core/check.h"
#include "backend/cuda/core/cublaslt_util.h"
#include "backend/cuda/core/dnn_check.h"

namespace fusec::cuda {

DeviceBuffer::DeviceBuffer(size_t bytes, const std::string& what) : bytes_(bytes) {
  if (bytes == 0) return;
  cudaError_t err = cudaMalloc(&ptr_, bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();
    ptr_ = nullptr;
    // A sticky error from an earlier launch fails every later call: say that, not out of memory.
    if (err != cudaErrorMemoryAllocation)
      bad_input(std::string("the GPU failed before ") + what + " could be allocated: " + cudaGetErrorString(err));
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    bad_input("out of GPU memory: " + what + " needs " + std::to_string(bytes >> 20) + " MiB, " +
              std::to_string(free_b >> 20) + " MiB of " + std::to_string(total_b >> 20) + " MiB are free (" +
              cudaGetErrorString(err) + ")");
  }
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) cudaFree(ptr_);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) cudaFree(ptr_);
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

bool gpu_available(std::string* why) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    if (why) {
      *why = cudaGetErrorString(err);
      // Without any driver the runtime says "driver version is insufficient"; say what is missing.
      if ((err == cudaErrorInsufficientDriver || err == cudaErrorNoDevice) && access("/dev/nvidiactl", F_OK) != 0)
        *why = "no NVIDIA driver is loaded on this machine (" + *why + ")";
    }
    return false;
  }
  if (count == 0) {
    if (why) *why = "no CUDA device found";
    return false;
  }
  return true;
}

Context::Context(int index) : device_(index) {
  static std::atomic<uint64_t> next{1};
  id_ = next++;
  std::string why;
  if (!gpu_available(&why)) bad_input("no usable GPU: " + why + " (use --device cpu)");
  int count = 0;
  cudaGetDeviceCount(&count);
  if (index < 0 || index >= count)
    bad_input("--gpu " + std::to_string(index) + ": this machine has " + std::to_string(count) +
              " GPU(s), numbered from 0");
  FUSEC_CUDA_CHECK(cudaSetDevice(index));
  cudaDeviceProp p{};
  FUSEC_CUDA_CHECK(cudaGetDeviceProperties(&p, index));
  name_ = p.name;
  sm_ = p.major * 10 + p.minor;
  sms_ = p.multiProcessorCount;
  if (sm_ < 70)
    bad_input("GPU " + name_ + " (sm_" + std::to_string(sm_) +
              ") is too old: fusec's CUDA backend needs sm_70 or newer");
  FUSEC_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

Context::~Context() {
  cudaSetDevice(device_);
  if (stream_) cudaStreamSynchronize(stream_);
  if (cublaslt_) cublasLtDestroy(cublaslt_);
  if (cudnn_) cudnnDestroy(cudnn_);
  if (stream_) cudaStreamDestroy(stream_);
}

void Context::make_current() const { FUSEC_CUDA_CHECK(cudaSetDevice(device_)); }

cublasLtContext* Context::cublaslt() {
  if (!cublaslt_) {
    cublasStatus_t st = cublasLtCreate(&cublaslt_);
    if (st != CUBLAS_STATUS_SUCCESS)
      throw_cublas_error(st, "cublasLtCreate", __FILE__, __LINE__);
  }
  return cublaslt_;
}

cudnnContext* Context::cudnn() {
  if (!cudnn_) {
    cudnnStatus_t st = cudnnCreate(&cudnn_);
    if (st != CUDNN_STATUS_SUCCESS)
      throw_cudnn_error(st, "cudnnCreate", __FILE__, __LINE__);
    st = cudnnSetStream(cudnn_, stream_);
    if (st != CUDNN_STATUS_SUCCESS)
      throw_cudnn_error(st, "cudnnSetStream", __FILE__, __LINE__);
  }
  return cudnn_;
}

}  // namespace fusec::cuda
