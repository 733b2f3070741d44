// Parameter arithmetic shared by the movement ops' schemas (ir/ops/movement.cpp) and their CPU
// kernels (backend/cpu/kernels/movement.cpp), so inference and execution agree exactly.
#pragma once
#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "ir/dim_math.h"
#include "ir/op_schema.h"

namespace fusec::movement {

/// What Slice does along every axis of the input: element i of the output along axis d is input
/// element start[d] + i * step[d] (step may be negative).
struct SliceParams {
  std::vector<int64_t> start, step, out_dims;
};

/// ONNX Slice (opset 1..21): normalizes negative starts/ends, clamps them as the spec says
/// (to [0, dim] for positive steps, [0, dim-1] / [-1, dim-1] for negative steps), and computes
/// each output dim as max(0, ceil((end - start) / step)). `axes` empty means 0..n-1; `steps`
/// empty means all ones.
inline SliceParams compute_slice(const std::vector<int64_t>& dims, const std::vector<int64_t>& starts,
                                 const std::vector<int64_t>& ends, std::vector<int64_t> axes,
                                 std::vector<int64_t> steps, const NodeAttrs& where) {
  const int64_t rank = static_cast<int64_t>(dims.size());
  if (starts.size() != ends.size())
    where.fail("starts and ends have different lengths (" + std::to_string(starts.size()) + " vs " +
               std::to_string(ends.size()) + ")");
  if (axes.empty()) {
    if (static_cast<int64_t>(starts.size()) > rank) where.fail("starts has more entries than the input has dims");
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  }
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (axes.size() != starts.size() || steps.size() != starts.size())
    where.fail("starts, ends, axes and steps must have the same length");
  SliceParams p;
  p.start.assign(rank, 0);
  p.step.assign(rank, 1);
  p.out_dims = dims;
  std::vector<bool> seen(rank, false);
  for (size_t i = 0; i < starts.size(); ++i) {
    int64_t ax = normalize_axis(axes[i], rank, where);
    if (seen[ax]) where.fail("axis " + std::to_string(axes[i]) + " is repeated");
    seen[ax] = true;
    const int64_t dim = dims[ax];
    const int64_t step = steps[i];
    if (step == 0) where.fail("slice step cannot be 0");
    int64_t s = starts[i], e = ends[i];
    if (s < 0) s += dim;  // INT64_MIN + dim does not overflow
    if (e < 0) e += dim;
    int64_t len;
    if (step > 0) {
      s = std::clamp<int64_t>(s, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      len = e > s ? (e - s - 1) / step + 1 : 0;
    } else if (dim == 0) {
      len = 0;
    } else {
      s = std::clamp<int64_t>(s, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      // |step| saturates at INT64_MAX (INT64_MIN cannot be negated); s - e <= dim anyway.
      const int64_t mag = step == std::numeric_limits<int64_t>::min() ? std::numeric_limits<int64_t>::max() : -step;
      len = s > e ? (s - e - 1) / mag + 1 : 0;
    }
    p.start[ax] = len > 0 ? s : 0;
    p.step[ax] = step;
    p.out_dims[ax] = len;
  }
  return p;
}

/// Pad's `pads` ([x1_begin, x2_begin, ..., x1_end, x2_end, ...] over `axes`, or over every axis
/// when `axes` is empty) expanded to 2*rank entries.
inline std::vector<int64_t> full_pads(int64_t rank, const std::vector<int64_t>& pads, const std::vector<int64_t>& axes,
                                      const NodeAttrs& where) {
  std::vector<int64_t> out(2 * rank, 0);
  if (axes.empty()) {
    if (static_cast<int64_t>(pads.size()) != 2 * rank)
      where.fail("pads has " + std::to_string(pads.size()) +
                 " entries, expected 2 * rank = " + std::to_string(2 * rank));
    return pads;
  }
  const int64_t n = static_cast<int64_t>(axes.size());
  if (static_cast<int64_t>(pads.size()) != 2 * n)
    where.fail("pads has " + std::to_string(pads.size()) +
               " entries, expected 2 * len(axes) = " + std::to_string(2 * n));
  std::vector<bool> seen(rank, false);
  for (int64_t i = 0; i < n; ++i) {
    int64_t ax = normalize_axis(axes[i], rank, where);
    if (seen[ax]) where.fail("axis " + std::to_string(axes[i]) + " is repeated");
    seen[ax] = true;
    out[ax] = pads[i];
    out[rank + ax] = pads[n + i];
  }
  return out;
}

/// Split sizes along an axis of length `dim`: explicit `split`, or `n_outputs` parts (equal, or
/// with opset 18's num_outputs the last part smaller: ceil(dim / n) each).
inline std::vector<int64_t> split_sizes(int64_t dim, const std::vector<int64_t>& split, size_t n_outputs,
                                        bool allow_uneven, const NodeAttrs& where) {
  if (!split.empty()) {
    if (split.size() != n_outputs)
      where.fail("split has " + std::to_string(split.size()) + " entries but the node has " +
                 std::to_string(n_outputs) + " outputs");
    int64_t sum = 0;
    for (int64_t s : split) {
      if (s < 0) where.fail("split sizes must be non-negative");
      sum = dims::add(sum, s, where, "the sum of the split sizes");
    }
    if (sum != dim)
      where.fail("split sizes sum to " + std::to_string(sum) + " but the axis has length " + std::to_string(dim));
    return split;
  }
  const int64_t n = static_cast<int64_t>(n_outputs);
  if (n <= 0) where.fail("Split needs at least one output");
  if (dim % n == 0) return std::vector<int64_t>(n, dim / n);
  if (!allow_uneven)
    where.fail("axis of length " + std::to_string(dim) + " cannot be split into " + std::to_string(n) + " equal parts");
  const int64_t chunk = dim / n + (dim % n != 0);  // ceil(dim / n); dim + n - 1 could overflow
  std::vector<int64_t> out(n);
  int64_t left = dim;
  for (int64_t i = 0; i < n; ++i) {
    out[i] = std::min(chunk, left);
    left -= out[i];
  }
  return out;
}

}  // namespace fusec::movement
