// Resize / Upsample kernels. The coordinate arithmetic (coordinate_transformation_mode,
// nearest_mode, cubic coefficients, exclude_outside, roi) runs once on the host at plan time in
// float64 exactly as the CPU reference does, and becomes small per-axis tables on the device:
// nearest reads one source index per axis, linear/cubic blend up to 4 taps per resampled axis.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/ops/movement/movement.cuh"
#include "ir/dtype.h"

namespace fusec::cuda {

struct ResizeNearestPlan {
  int esize = 0, rank = 0;
  int64_t out_dims[kMoveMaxRank] = {}, in_strides[kMoveMaxRank] = {};
  int64_t map_offset[kMoveMaxRank] = {};  // into `maps`; -1: the axis keeps its coordinates
  const int32_t* maps = nullptr;          // device: source index per output coordinate, -1 = extrapolate
  int64_t numel = 0, in_numel = 0;
  uint64_t extrapolation_bits = 0;  // in the storage type
};
void launch_resize_nearest(const ResizeNearestPlan& p, const void* x, void* y, cudaStream_t s);

constexpr int kResizeMaxAxes = 3;

struct ResizeInterpPlan {
  DType dtype = DType::Float32;  // float storage type
  int rank = 0, naxes = 0;
  int64_t out_dims[kMoveMaxRank] = {}, in_strides[kMoveMaxRank] = {};
  int slot[kMoveMaxRank] = {};  // resampled axis slot, or -1 for an axis that keeps its coordinates
  int taps[kResizeMaxAxes] = {};
  int64_t stride[kResizeMaxAxes] = {};      // input stride of each resampled axis
  int64_t tap_offset[kResizeMaxAxes] = {};  // into idx/w: out_len * taps entries per axis
  int64_t out_offset[kResizeMaxAxes] = {};  // into outside: out_len entries per axis
  const int32_t* idx = nullptr;             // device tables
  const float* w = nullptr;
  const uint8_t* outside = nullptr;
  float extrapolation = 0;
  int64_t numel = 0;
};
/// Returns false for a non-float storage type.
[[nodiscard]] bool launch_resize_interp(const ResizeInterpPlan& p, const void* x, void* y, cudaStream_t s);

}  // namespace fusec::cuda
