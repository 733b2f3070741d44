// TopK along one axis: the k largest (or smallest) values of each row and their int64 indices, in
// the CPU reference's order (best first, ties by the lower index, NaN above every number). One
// thread a row, k passes over it, each taking the best element after the one before: no scratch,
// for the short rows it is planned for (a mixture of experts' router over its E experts, a
// detection head's scores). Longer rows, or a larger k, run on the CPU reference.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "ir/dtype.h"

namespace fusec::cuda {

/// At most this many comparisons a row (k · axis length): one thread's work.
constexpr int64_t kTopKMaxWork = int64_t{1} << 16;

struct TopKPlan {
  DType dtype = DType::Undefined;  // float32/16, bfloat16, float64, int32, int64
  bool largest = true;
  int64_t outer = 0, n = 0, inner = 0, k = 0;  // x viewed [outer, n, inner]; outputs [outer, k, inner]
};

/// False for a dtype the kernel does not take. `indices` may be null (the output is not read).
[[nodiscard]] bool launch_topk(const TopKPlan& p, const void* x, void* values, int64_t* indices, cudaStream_t s);

}  // namespace fusec::cuda
