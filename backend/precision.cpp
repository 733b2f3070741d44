#include "backend/precision.h"

#include "ir/error.h"

namespace fusec {

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::FP32:
      return "fp32";
    case Precision::TF32:
      return "tf32";
    case Precision::FP16:
      return "fp16";
    case Precision::BF16:
      return "bf16";
  }
  return "?";
}

Precision parse_precision(const std::string& s) {
  if (s == "fp32") return Precision::FP32;
  if (s == "tf32") return Precision::TF32;
  if (s == "fp16") return Precision::FP16;
  if (s == "bf16") return Precision::BF16;
  bad_input("--precision must be fp32, tf32, fp16 or bf16, not '" + s + "'");
}

DType storage_dtype(Precision p, DType onnx_dtype) {
  if (onnx_dtype != DType::Float32) return onnx_dtype;
  if (p == Precision::FP16) return DType::Float16;
  if (p == Precision::BF16) return DType::BFloat16;
  return DType::Float32;
}

}  // namespace fusec
