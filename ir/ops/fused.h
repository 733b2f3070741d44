#pragma once
#include <cstdint>

namespace fusec {

/// The ai.onnx opset whose Conv/MatMul/LayerNormalization semantics the ai.fusec ops follow.
constexpr int64_t kFusedBaseOpset = 17;

}  // namespace fusec
