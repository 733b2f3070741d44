// NonZero and Unique: ops whose output dims depend on their input's values. Inference computes the
// selection where the value is known (constants, at import and when folding) and the CPU kernels
// (backend/cpu/kernels/selection.cpp), which size their outputs themselves, copy from the same
// computation, so the two cannot disagree (tests/cpu/test_self_sizing.cpp).
#pragma once
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "ir/error.h"
#include "ir/tensor.h"

namespace fusec::selection {

/// How many elements of x are not zero (NaN counts, as in numpy; -0.0 does not).
int64_t count_nonzero(const Tensor& x);
/// The flat (C-order) offsets of x's elements that are not zero, ascending.
std::vector<int64_t> nonzero_offsets(const Tensor& x);

namespace detail {
/// Calls f(i) for each element i in [begin, end) of x whose bits, under `mask`, are not all zero.
template <typename U, typename F>
void scan_bits(const Tensor& x, int64_t begin, int64_t end, U mask, F&& f) {
  const char* p = static_cast<const char*>(x.raw());
  for (int64_t i = begin; i < end; ++i) {
    U v;
    std::memcpy(&v, p + static_cast<size_t>(i) * sizeof(U), sizeof(U));  // a view may be unaligned
    if (v & mask) f(i);
  }
}
}  // namespace detail

/// Calls f(i) for each flat offset i in [begin, end) whose element of x is not zero, ascending (a
/// piece of the scan, for callers that split it over threads). Read as bits, one load and test an
/// element: a float is zero when every bit but its sign is (-0.0 is zero, NaN is not), any other
/// type when every bit is. (Read through as_double, each element cost a type switch and a
/// conversion.)
template <typename F>
void for_each_nonzero(const Tensor& x, int64_t begin, int64_t end, F&& f) {
  const bool fl = is_float(x.dtype());
  switch (dtype_size(x.dtype())) {
    case 1:
      return detail::scan_bits<uint8_t>(x, begin, end, 0xFF, f);
    case 2:
      return detail::scan_bits<uint16_t>(x, begin, end, fl ? 0x7FFF : 0xFFFF, f);
    case 4:
      return detail::scan_bits<uint32_t>(x, begin, end, fl ? 0x7FFFFFFFu : 0xFFFFFFFFu, f);
    case 8:
      return detail::scan_bits<uint64_t>(x, begin, end, fl ? 0x7FFFFFFFFFFFFFFFull : ~0ull, f);
    default:
      internal_error(std::string("NonZero over ") + dtype_name(x.dtype()));
  }
}

/// Unique's answer over x's slices along `axis` (already normalized), or over its elements when
/// there is no axis: for each distinct slice, in ascending order when `sorted` (slices compare
/// element by element, in C order), else in order of first appearance, where it first appears and
/// how often; and for each of x's slices, which distinct slice it is.
struct Unique {
  std::vector<int64_t> first, counts, inverse;
  int64_t outer = 1, d = 0, inner = 1;  // x seen as [outer, d, inner] around the axis
};
Unique unique(const Tensor& x, std::optional<int64_t> axis, bool sorted);

}  // namespace fusec::selection
