#include "profiler/cuda/occupancy.h"

#include <cuda_runtime_api.h>

#include <algorithm>

#include "backend/cuda/core/check.h"

namespace fusec::profiler {

OccupancyCalculator::OccupancyCalculator(int device) {
  cudaDeviceProp p{};
  FUSEC_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  max_threads_ = p.maxThreadsPerMultiProcessor;
  max_blocks_ = p.maxBlocksPerMultiProcessor;
  regs_ = p.regsPerMultiprocessor;
  warp_ = p.warpSize;
  smem_ = static_cast<int>(p.sharedMemPerMultiprocessor);
  reserved_smem_ = static_cast<int>(p.reservedSharedMemPerBlock);
}

double OccupancyCalculator::theoretical(const Record& r, unsigned smem_per_sm) const {
  if (r.kind != RecordKind::Kernel) return -1;
  const long threads = static_cast<long>(r.block[0]) * r.block[1] * r.block[2];
  if (threads <= 0) return -1;
  const long warps = (threads + warp_ - 1) / warp_;
  const long max_warps = max_threads_ / warp_;
  long blocks = std::min<long>(max_blocks_, max_warps / warps);
  // Registers are allocated per warp in units of 256 (8 per thread).
  if (r.registers > 0) {
    const long per_warp = (static_cast<long>(r.registers) * warp_ + 255) / 256 * 256;
    blocks = std::min(blocks, (regs_ / per_warp) / warps);
  }
  const long smem = static_cast<long>(r.static_smem) + r.dynamic_smem;
  if (smem > 0) {
    const long per_sm = smem_per_sm > 0 ? static_cast<long>(smem_per_sm) : smem_;
    const long per_block = (smem + reserved_smem_ + 127) / 128 * 128;
    blocks = std::min(blocks, per_sm / per_block);
  }
  return std::max(0L, blocks) * warps / static_cast<double>(max_warps);
}

}  // namespace fusec::profiler
