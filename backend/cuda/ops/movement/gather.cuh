// Gather, GatherElements and GatherND. Indices are device tensors read at run time, so their
// bounds are checked on the device: an index outside [-dim, dim) writes zeros and is reported at
// `err` (device_error.h), which becomes the CPU reference's error once the run has finished.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/core/device_error.h"
#include "backend/cuda/ops/movement/movement.cuh"
#include "ir/dtype.h"

namespace fusec::cuda {

/// Gather along an axis: data viewed as [outer, dim, inner], indices flattened to `nidx`.
struct GatherPlan {
  int esize = 0;
  int64_t outer = 0, dim = 0, nidx = 0, inner = 0;  // inner in elements
  int vec = 1;                                      // widest vector (bytes) `inner` allows
  DType index_type = DType::Int64;
};
GatherPlan plan_gather(int64_t outer, int64_t dim, int64_t nidx, int64_t inner, size_t esize, DType index_type);
void launch_gather(const GatherPlan& p, const void* data, const void* indices, void* out, cudaStream_t s,
                   const DeviceErrorSite& err = {});

/// GatherElements: out (of the indices' dims) reads data at its own coordinates with the axis
/// coordinate replaced by the index.
struct GatherElementsPlan {
  int esize = 0, rank = 0;
  int64_t out_dims[kMoveMaxRank] = {}, data_strides[kMoveMaxRank] = {};  // data stride 0 on the axis
  int64_t axis_stride = 0, axis_dim = 0, numel = 0;
  DType index_type = DType::Int64;
};
void launch_gather_elements(const GatherElementsPlan& p, const void* data, const void* indices, void* out,
                            cudaStream_t s, const DeviceErrorSite& err = {});

/// GatherND: `count` index tuples of `k` int64 entries each (batch b = tuple / per_batch),
/// each selecting a contiguous slice of `slice` elements.
struct GatherNDPlan {
  int esize = 0, k = 0;
  int64_t dims[kMoveMaxRank] = {}, strides[kMoveMaxRank] = {};  // the k indexed dims of data, element strides
  int64_t count = 0, per_batch = 1, batch_stride = 0, slice = 0;
};
void launch_gather_nd(const GatherNDPlan& p, const void* data, const int64_t* indices, void* out, cudaStream_t s,
                      const DeviceErrorSite& err = {});

}  // namespace fusec::cuda
