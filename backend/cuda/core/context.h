// The CUDA context: one device, one stream and the library handles: what a kernel needs to enqueue
// work. One per compiled model, or shared by many (CudaOptions::context).
#pragma once
#include <cstddef>
#include <memory>
#include <string>

struct CUstream_st;
struct cublasLtContext;
struct cudnnContext;

namespace fusec::cuda {

using Stream = CUstream_st*;

/// RAII device allocation (cudaMalloc / cudaFree). Never managed memory.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes, const std::string& what);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) {
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return ptr_; }
  size_t size() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

class Context {
 public:
  /// Selects device `index` (fails with a clear BadInput error when there is no usable GPU or the
  /// driver is too old for this build) and creates the stream. Library handles are created lazily.
  explicit Context(int index = 0);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int device() const { return device_; }
  /// Unique per Context in this process (a cache keyed by it never outlives a reused address).
  uint64_t id() const { return id_; }
  const std::string& device_name() const { return name_; }
  int sm() const { return sm_; }  // 90 for sm_90
  int multiprocessors() const { return sms_; }
  Stream stream() const { return stream_; }
  cublasLtContext* cublaslt();
  cudnnContext* cudnn();

  /// Makes this context's device current on the calling thread.
  void make_current() const;

 private:
  int device_ = 0;
  uint64_t id_ = 0;
  std::string name_;
  int sm_ = 0, sms_ = 0;
  Stream stream_ = nullptr;
  cublasLtContext* cublaslt_ = nullptr;
  cudnnContext* cudnn_ = nullptr;
};

/// Does the machine have a usable CUDA device? `why` says what is missing when it has not.
bool gpu_available(std::string* why = nullptr);

}  // namespace fusec::cuda
