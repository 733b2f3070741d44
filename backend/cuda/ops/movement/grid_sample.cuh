// GridSample: each output position reads the input where its grid entry points, with nearest,
// linear or cubic taps per spatial axis and zeros, border or reflection padding, as the CPU
// reference (backend/cpu/kernels/grid_sample.cpp) computes it, in float32 instead of float64.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "ir/dtype.h"
#include "ir/ops/grid_sample.h"

namespace fusec::cuda {

constexpr int kGridSampleMaxAxes = 3;

struct GridSampleArgs {
  DType x_dtype = DType::Float32, grid_dtype = DType::Float32;  // float storage types
  grid_sample::Config config;
  int axes = 2;  // spatial axes: 2 (NCHW) or 3 (NCDHW)
  int64_t batch = 0, channels = 0;
  int64_t in_size[kGridSampleMaxAxes] = {};  // the input's spatial dims, outermost first
  int64_t in_plane = 0, out_plane = 0;       // elements of one channel's input / output
};

/// False for a storage type the kernel does not take (the planner checks first).
[[nodiscard]] bool launch_grid_sample(const GridSampleArgs& a, const void* x, const void* grid, void* y,
                                      cudaStream_t stream);

}  // namespace fusec::cuda
