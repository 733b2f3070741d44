// The op of a node that only reinterprets its input's bytes (view_op.cpp): the executor points
// the output at the input's memory. The planner also makes one for a Transpose that is a view of
// channels-last memory (layout_rule.h's transpose_view).
#pragma once
#include <memory>

#include "backend/cuda/core/cuda_op.h"

namespace fusec::cuda {

std::unique_ptr<CudaOp> make_view_op();

}  // namespace fusec::cuda
