// MatMul's output shape, shared by the schemas of the ops that multiply as MatMul does (MatMul,
// MatMulInteger, QLinearMatMul).
#pragma once
#include <optional>

#include "ir/op_schema.h"

namespace fusec {

/// [broadcast batch..., M, N] for MatMul of inputs ai and bi (a 1-D operand's added dim dropped),
/// or nullopt while either rank is unknown; inner dims that differ fail naming the node.
std::optional<Shape> matmul_output_shape(const InferContext& c, size_t ai, size_t bi);

}  // namespace fusec
