// Pooling kernels: windowed MaxPool / AveragePool / LpPool over 1-3 spatial dims (NCHW-style
// planes), and the global pools. Window geometry (pads, auto_pad, ceil_mode, dilations) is
// resolved on the host with the CPU's shared window arithmetic; the kernels only walk windows.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "ir/dtype.h"

namespace fusec::cuda {

enum class PoolKind : int { Max = 0, Average = 1, Lp = 2 };

/// Spatial geometry padded to 3 dims at the front (size 1, kernel 1, no padding), as the CPU's Geo3.
struct PoolPlan {
  PoolKind kind = PoolKind::Max;
  DType dtype = DType::Float32;  // storage type of X and Y
  int nd = 0;                    // real spatial dims (for the Indices storage order)
  int64_t planes = 0;            // N * C
  int64_t in[3] = {1, 1, 1}, k[3] = {1, 1, 1}, s[3] = {1, 1, 1}, d[3] = {1, 1, 1};
  int64_t pb[3] = {0, 0, 0}, pe[3] = {0, 0, 0}, out[3] = {1, 1, 1};
  bool include_pad = false;  // AveragePool count_include_pad
  bool col_major = false;    // MaxPool storage_order 1 (Indices only)
  int p = 2;                 // LpPool
  // 2-D and 3-D: X is [N, (D,) H, W, C] in memory and Y [N, (OD,) OH, OW, C] (planes = N * channels);
  // no Indices.
  bool channels_last = false;
  int64_t channels = 0;
};

/// Float storage types (float32/float16/bfloat16/float64); MaxPool also int8/uint8. `indices`
/// (int64, MaxPool only) may be null. Returns false for an unsupported dtype.
[[nodiscard]] bool launch_pool(const PoolPlan& p, const void* x, void* y, int64_t* indices, cudaStream_t s);

/// The channels-last window pools (pool_nhwc.cu): whether the plan fits them (2-D or 3-D, a float storage
/// type, 32-bit indexing), and the launch.
bool pool_nhwc_covers(const PoolPlan& p);
[[nodiscard]] bool launch_pool_nhwc(const PoolPlan& p, const void* x, void* y, cudaStream_t s);

/// Whether a max pool without Indices runs on the 2-D small-window kernel (2x2 or 3x3, stride 1
/// or 2 in both dims, no dilation) where its indices fit 32 bits, rather than the generic one.
bool max_pool2d_covers(const PoolPlan& p);

/// One value per plane of `size` elements: mean, max (NaN propagates) or Lp norm.
[[nodiscard]] bool launch_global_pool(PoolKind kind, DType t, int64_t planes, int64_t size, int p, const void* x,
                                      void* y, cudaStream_t s);

}  // namespace fusec::cuda
