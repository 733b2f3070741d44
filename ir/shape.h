#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ir/dtype.h"

namespace fusec {

/// One dimension: a static size (value >= 0) or a symbol ("batch", "N") whose size is bound later.
/// A dim that is neither (value < 0, empty symbol) is unknown.
struct Dim {
  int64_t value = -1;
  std::string symbol;

  Dim() = default;
  Dim(int64_t v) : value(v) {}  // NOLINT: a static dim reads naturally as a number
  static Dim sym(std::string s) {
    Dim d;
    d.symbol = std::move(s);
    return d;
  }
  bool is_static() const { return value >= 0; }
  bool operator==(const Dim& o) const { return value == o.value && symbol == o.symbol; }
  std::string str() const;
};

using Shape = std::vector<Dim>;

/// "1x3x224x224", "batchx128", "?" for unknown dims; "scalar" for rank 0.
std::string shape_str(const Shape& s);
bool is_static(const Shape& s);
/// Static dims of a fully static shape (throws Internal otherwise).
std::vector<int64_t> static_dims(const Shape& s);
Shape shape_of(const std::vector<int64_t>& dims);
/// Element count of static dims; throws BadInput on overflow past int64.
int64_t checked_numel(const std::vector<int64_t>& dims);
/// Bytes of a tensor of these dims and type; throws BadInput past int64.
int64_t checked_nbytes(const std::vector<int64_t>& dims, DType t);
std::string dims_str(const std::vector<int64_t>& dims);

/// Type of a value as inference knows it: element type and (maybe unknown) shape.
struct TypeInfo {
  DType dtype = DType::Undefined;
  std::optional<Shape> shape;  // nullopt: rank unknown
};

}  // namespace fusec
