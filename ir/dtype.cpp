#include "ir/dtype.h"

namespace fusec {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::Float32:
    case DType::Int32:
      return 4;
    case DType::Float64:
    case DType::Int64:
      return 8;
    case DType::Float16:
    case DType::BFloat16:
    case DType::Int16:
      return 2;
    case DType::Int8:
    case DType::UInt8:
    case DType::Bool:
      return 1;
    case DType::Undefined:
      return 0;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::Float32:
      return "float32";
    case DType::Float16:
      return "float16";
    case DType::BFloat16:
      return "bfloat16";
    case DType::Float64:
      return "float64";
    case DType::Int8:
      return "int8";
    case DType::UInt8:
      return "uint8";
    case DType::Int16:
      return "int16";
    case DType::Int32:
      return "int32";
    case DType::Int64:
      return "int64";
    case DType::Bool:
      return "bool";
    case DType::Undefined:
      return "undefined";
  }
  return "undefined";
}

DType dtype_from_onnx(int32_t code) {
  switch (code) {
    case 1:
    case 2:
    case 3:
    case 5:
    case 6:
    case 7:
    case 9:
    case 10:
    case 11:
    case 16:
      return static_cast<DType>(code);
    default:
      return DType::Undefined;
  }
}

std::string onnx_dtype_name(int32_t code) {
  static const char* names[] = {"undefined",      "float32",  "uint8",        "int8",           "uint16",
                                "int16",          "int32",    "int64",        "string",         "bool",
                                "float16",        "float64",  "uint32",       "uint64",         "complex64",
                                "complex128",     "bfloat16", "float8e4m3fn", "float8e4m3fnuz", "float8e5m2",
                                "float8e5m2fnuz", "uint4",    "int4",         "float4e2m1",     "float8e8m0",
                                "uint2",          "int2",     "float6e2m3",   "float6e3m2"};
  if (code >= 0 && code < static_cast<int32_t>(sizeof(names) / sizeof(names[0]))) return names[code];
  return "code " + std::to_string(code);
}

bool is_float(DType t) {
  return t == DType::Float32 || t == DType::Float16 || t == DType::BFloat16 || t == DType::Float64;
}
bool is_integer(DType t) {
  return t == DType::Int8 || t == DType::UInt8 || t == DType::Int16 || t == DType::Int32 || t == DType::Int64;
}
bool is_signed(DType t) { return t != DType::UInt8 && t != DType::Bool; }

}  // namespace fusec
