// ScatterND, ScatterElements (and the deprecated Scatter): out = data, then each update written at
// its index (reduction "none") or combined with what is there ("add", "mul", "max", "min", by
// atomics). float16 and bfloat16 data combine in a float32 copy in the workspace, rounded once at
// the end, as the CPU reference computes them. Indices are device tensors read
// at run time: one outside [-dim, dim) writes nothing and is reported at `err` (device_error.h),
// which becomes the CPU reference's error after the run. As ONNX says, with reduction "none"
// duplicate indices leave which update lands unspecified; the CPU reference takes the last.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/core/device_error.h"
#include "backend/cuda/ops/movement/movement.cuh"
#include "ir/dtype.h"

namespace fusec::cuda {

/// How an update combines with what is there: assignment (any type), or a reduction (float32,
/// float64, int32, int64, and float16/bfloat16 through float32).
enum class ScatterReduction { None, Add, Mul, Max, Min };
const char* scatter_reduction_name(ScatterReduction r);

/// Workspace a scatter of `data_numel` elements of `t` needs: the float32 copy of 16-bit float data
/// under a reduction, else none.
size_t scatter_workspace_bytes(DType t, ScatterReduction r, int64_t data_numel);

/// ScatterND: `count` index tuples of `k` int64 entries, each naming a slice of `slice` contiguous
/// elements of data (whose first k dims are `dims`, element strides `strides`).
struct ScatterNDPlan {
  DType dtype = DType::Undefined;
  ScatterReduction reduction = ScatterReduction::None;
  int k = 0;
  int64_t dims[kMoveMaxRank] = {}, strides[kMoveMaxRank] = {};
  int64_t count = 0, slice = 0, data_numel = 0;
};
void launch_scatter_nd(const ScatterNDPlan& p, const void* data, const int64_t* indices, const void* updates, void* out,
                       cudaStream_t s, const DeviceErrorSite& err = {}, void* workspace = nullptr);

/// ScatterElements: update i (of the indices' dims `upd_dims`) goes to data's element at its own
/// coordinates with the axis coordinate replaced by its index.
struct ScatterElementsPlan {
  DType dtype = DType::Undefined, index_type = DType::Int64;
  ScatterReduction reduction = ScatterReduction::None;
  int rank = 0;
  int64_t upd_dims[kMoveMaxRank] = {}, data_strides[kMoveMaxRank] = {};  // data stride 0 on the axis
  int64_t axis_stride = 0, axis_dim = 0, numel = 0, data_numel = 0;
};
void launch_scatter_elements(const ScatterElementsPlan& p, const void* data, const void* indices, const void* updates,
                             void* out, cudaStream_t s, const DeviceErrorSite& err = {}, void* workspace = nullptr);

}  // namespace fusec::cuda
