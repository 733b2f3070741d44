// NonZero and Unique: ops whose output dims depend on their input's values. Inference computes the
// selection where the value is known (constants, at import and when folding) and the CPU kernels
// (backend/cpu/kernels/selection.cpp), which size their outputs themselves, copy from the same
// computation, so the two cannot disagree (tests/cpu/test_self_sizing.cpp).
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "ir/tensor.h"

namespace fusec::selection {

/// How many elements of x are not zero (NaN counts, as in numpy; -0.0 does not).
int64_t count_nonzero(const Tensor& x);
/// The flat (C-order) offsets of x's elements that are not zero, ascending.
std::vector<int64_t> nonzero_offsets(const Tensor& x);

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
