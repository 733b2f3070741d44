#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace fusec {

// The element types fusec runs. The numeric values are ONNX TensorProto.DataType codes, so the
// importer maps them without a table; codes not listed here are rejected at import.
enum class DType : int32_t {
  Undefined = 0,
  Float32 = 1,
  UInt8 = 2,
  Int8 = 3,
  Int16 = 5,
  Int32 = 6,
  Int64 = 7,
  Bool = 9,
  Float16 = 10,
  Float64 = 11,
  BFloat16 = 16,
};

/// Size of one element in bytes (0 for Undefined).
size_t dtype_size(DType t);
/// Lower-case name as users see it: "float32", "int64", ...
const char* dtype_name(DType t);
/// DType for an ONNX TensorProto.DataType code, or Undefined if fusec does not support it.
DType dtype_from_onnx(int32_t code);
/// Name of any ONNX data type code, for error messages ("string", "complex64", ...).
std::string onnx_dtype_name(int32_t code);
bool is_float(DType t);
bool is_integer(DType t);  // signed or unsigned ints, not bool
bool is_signed(DType t);

}  // namespace fusec
