// Run precision (`--precision`), shared by every backend that can lower it. fp32 is strict IEEE
// float (TF32 off); tf32 lets GEMMs and convolutions use TF32 tensor cores; fp16/bf16 store float
// activations and weights in half types while accumulations and statistics stay in float32.
#pragma once
#include <string>

#include "ir/dtype.h"

namespace fusec {

enum class Precision { FP32, TF32, FP16, BF16 };

/// "fp32", "tf32", "fp16", "bf16".
const char* precision_name(Precision p);
/// Parses a --precision value; BadInput naming the valid ones otherwise.
Precision parse_precision(const std::string& s);
/// The device storage type of a float32 value at this precision (float32 itself for fp32/tf32).
DType storage_dtype(Precision p, DType onnx_dtype);

}  // namespace fusec
