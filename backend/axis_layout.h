// How the kernels that normalize, reduce or scan along axes view a row-major tensor, planned once
// for both backends: the CPU kernels (backend/cpu/kernels/) and the CUDA planners
// (backend/cuda/ops/) call these, so the two cannot disagree on what a row is.
//
//   axis_view / softmax_view   [outer, n, inner] around one axis: Softmax, LogSoftmax, Hardmax,
//                              ArgMax/ArgMin, CumSum
//   merge_reduce_axes          size-1 dims dropped, neighbours of the same kind (reduced or
//                              kept) merged: the Reduce* family and the normalizations that reduce
//                              over arbitrary axes
#pragma once
#include <cstdint>
#include <vector>

namespace fusec {

/// A tensor viewed as [outer, n, inner]: element (o, k, i) at offset (o·n + k)·inner + i.
struct AxisView {
  int64_t outer = 1, n = 1, inner = 1;
};

/// [outer, n, inner] around `axis` (already normalized to [0, rank)): outer = the product of the
/// dims before it, n = dims[axis], inner = the product of the dims after it.
inline AxisView axis_view(const std::vector<int64_t>& dims, int64_t axis) {
  AxisView v;
  for (int64_t i = 0; i < static_cast<int64_t>(dims.size()); ++i) {
    if (i < axis)
      v.outer *= dims[static_cast<size_t>(i)];
    else if (i == axis)
      v.n *= dims[static_cast<size_t>(i)];
    else
      v.inner *= dims[static_cast<size_t>(i)];
  }
  return v;
}

/// Softmax, LogSoftmax and Hardmax normalize over n. From opset 13 along dims[axis] alone
/// (axis_view); before, the input is coerced to 2-D at `axis`: n = the product of dims[axis:],
/// inner = 1.
inline AxisView softmax_view(const std::vector<int64_t>& dims, int64_t axis, int64_t opset) {
  AxisView v;
  for (int64_t i = 0; i < static_cast<int64_t>(dims.size()); ++i) {
    const int64_t d = dims[static_cast<size_t>(i)];
    if (i < axis)
      v.outer *= d;
    else if (i == axis || opset < 13)
      v.n *= d;
    else
      v.inner *= d;
  }
  return v;
}

/// A reduction's dims after merging: dims[i] is reduced when reduced[i].
struct MergedAxes {
  std::vector<int64_t> dims;
  std::vector<bool> reduced;
};

/// `dims` reduced over the axes flagged in `reduce`, with the size-1 dims dropped (they change no
/// offset) and neighbours of the same kind merged into one dim: the fewest dims that address
/// the same elements, alternating reduced and kept. Empty for a single element (or a scalar).
inline MergedAxes merge_reduce_axes(const std::vector<int64_t>& dims, const std::vector<bool>& reduce) {
  MergedAxes m;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == 1) continue;
    if (!m.dims.empty() && m.reduced.back() == reduce[i]) {
      m.dims.back() *= dims[i];
    } else {
      m.dims.push_back(dims[i]);
      m.reduced.push_back(reduce[i]);
    }
  }
  return m;
}

}  // namespace fusec
