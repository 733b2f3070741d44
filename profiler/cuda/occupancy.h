// Theoretical occupancy of a launch from what CUPTI reports (block size, registers, shared memory):
// the same arithmetic as CUDA's occupancy calculator, for kernels fusec did not compile itself
// (cuDNN's, cuBLASLt's), whose function handles it cannot ask the runtime about.
#pragma once
#include "profiler/profile.h"

namespace fusec::profiler {

class OccupancyCalculator {
 public:
  explicit OccupancyCalculator(int device);
  /// Active warps per SM / the SM's maximum, 0..1; -1 when the launch is not a kernel.
  /// `smem_per_sm`: the shared memory the launch's configuration gave each SM (0: the maximum).
  double theoretical(const Record& r, unsigned smem_per_sm) const;

 private:
  int max_threads_ = 2048, max_blocks_ = 32, regs_ = 65536, warp_ = 32;
  int smem_ = 0, reserved_smem_ = 0, max_regs_per_thread_ = 255;
};

}  // namespace fusec::profiler
