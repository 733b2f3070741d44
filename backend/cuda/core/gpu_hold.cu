#include "backend/cuda/core/gpu_hold.cuh"

#include <cstdint>

namespace fusec::cuda {

namespace {

__global__ void hold_kernel(uint64_t ns) {
  uint64_t start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

}  // namespace

void launch_gpu_hold(cudaStream_t s, int microseconds) {
  if (microseconds > 0) hold_kernel<<<1, 1, 0, s>>>(static_cast<uint64_t>(microseconds) * 1000u);
}

}  // namespace fusec::cuda
