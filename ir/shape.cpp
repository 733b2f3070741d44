#include "ir/shape.h"

#include "ir/error.h"

namespace fusec {

std::string Dim::str() const {
  if (is_static()) return std::to_string(value);
  return symbol.empty() ? "?" : symbol;
}

std::string shape_str(const Shape& s) {
  if (s.empty()) return "scalar";
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += "x";
    out += s[i].str();
  }
  return out;
}

std::string dims_str(const std::vector<int64_t>& dims) { return shape_str(shape_of(dims)); }

bool is_static(const Shape& s) {
  for (const auto& d : s)
    if (!d.is_static()) return false;
  return true;
}

std::vector<int64_t> static_dims(const Shape& s) {
  std::vector<int64_t> out;
  out.reserve(s.size());
  for (const auto& d : s) {
    if (!d.is_static()) internal_error("static_dims called on non-static shape " + shape_str(s));
    out.push_back(d.value);
  }
  return out;
}

Shape shape_of(const std::vector<int64_t>& dims) { return Shape(dims.begin(), dims.end()); }

int64_t checked_numel(const std::vector<int64_t>& dims) {
  for (int64_t d : dims)
    if (d < 0) bad_input("negative dimension " + std::to_string(d) + " in shape " + dims_str(dims));
  // The product of the non-zero dims must fit too, even when a 0 makes the tensor empty: kernels
  // compute strides as partial products, and those must not wrap either.
  int64_t n = 1;
  bool empty = false;
  for (int64_t d : dims) {
    if (d == 0) {
      empty = true;
      continue;
    }
    if (__builtin_mul_overflow(n, d, &n)) bad_input("shape " + dims_str(dims) + " has more elements than fit in int64");
  }
  return empty ? 0 : n;
}

int64_t checked_nbytes(const std::vector<int64_t>& dims, DType t) {
  int64_t bytes;
  if (__builtin_mul_overflow(checked_numel(dims), static_cast<int64_t>(dtype_size(t)), &bytes))
    bad_input("a tensor of shape " + dims_str(dims) + " has more bytes than fit in int64");
  return bytes;
}

}  // namespace fusec
