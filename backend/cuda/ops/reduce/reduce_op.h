// The reduction op (kernels in reduce.cu) as the Reduce* family and the global pools plan it, in
// either memory layout of a 4-D input.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/core/cuda_op.h"
#include "backend/cuda/ops/reduce/reduce.cuh"

namespace fusec::cuda {

/// Input 0 of `c` reduced over the flagged axes (numbered as in the model, N, C, H, W) into
/// output 0, with `kind`'s kernel; nullptr with why when it cannot. A channels-last input is
/// reduced in its memory order (N, H, W, C): a 4-D result then comes out channels-last as the
/// planner stores it, and a result of lower rank (keepdims=0) is refused when its kept dims would
/// come out in another order than the model's. `label` names the op in the kernel name.
std::unique_ptr<CudaOp> plan_reduce(const PlanContext& c, ReduceKind kind, std::vector<bool> axes,
                                    const std::string& label, std::string* why);

}  // namespace fusec::cuda
