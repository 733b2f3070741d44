#include "backend/cuda/core/device_info.h"

#include <cuda_runtime_api.h>

namespace fusec::cuda {

std::vector<DeviceInfo> list_devices(std::string* why) {
  std::vector<DeviceInfo> out;
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    if (why) *why = cudaGetErrorString(err);
    return out;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    out.push_back({i, p.name, p.major, p.minor, p.totalGlobalMem, p.multiProcessorCount});
  }
  if (out.empty() && why) *why = "no CUDA device found";
  return out;
}

}  // namespace fusec::cuda
