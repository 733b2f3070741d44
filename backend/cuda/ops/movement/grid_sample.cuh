// GridSample: each output position reads the input where its grid entry points, with nearest,
// linear or cubic taps per spatial axis and zeros, border or reflection padding, as the CPU
// reference (backend/cpu/kernels/grid_sample.cpp) computes it, in float32 instead of float64.
// AffineGrid, which makes such grids from affine matrices, the same way.
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

/// AffineGrid: y[n, (d,) h, w, k] = theta[n, k, :] · [x, y, (z,) 1], the base coordinates of
/// grid_sample::affine_base. axes 2: y [batch, h, w, 2]; 3: y [batch, d, h, w, 3].
struct AffineGridArgs {
  DType dtype = DType::Float32;  // theta's and y's: a float storage type
  int axes = 2;
  bool align_corners = false;
  int64_t batch = 0, d = 1, h = 0, w = 0;
};

/// False for a storage type the kernel does not take (the planner checks first).
[[nodiscard]] bool launch_affine_grid(const AffineGridArgs& a, const void* theta, void* y, cudaStream_t stream);

}  // namespace fusec::cuda
