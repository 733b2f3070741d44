// MatMul's product, for the kernels that reduce to it (MatMul itself, and MatMulInteger and
// QLinearMatMul on their zero-point-shifted int32 operands).
#pragma once
#include "backend/cpu/kernel.h"

namespace fusec::cpu {

/// y = a·b with numpy semantics: batch dims broadcast, a 1-D a gains a leading 1 and a 1-D b a
/// trailing 1, both dropped from y. a and b share a numeric type (float or integer; integers wrap
/// as their type does); y has the broadcast dims already. Failures name the node `where`.
/// With `b_cache` (the step's cache, given only when b is constant), a float b shared by every
/// batch is packed for the GEMM once, there.
void matmul(const NodeAttrs& where, const Tensor& a, const Tensor& b, Tensor& y, StepCache* b_cache = nullptr);

}  // namespace fusec::cpu
