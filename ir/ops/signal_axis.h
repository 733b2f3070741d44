// The DFT's signal axis, for shape inference (ir/ops/signal.cpp) and the CPU kernel
// (backend/cpu/kernels/signal.cpp) alike. An input of rank r ends in the dim of its real and
// imaginary parts, so ONNX takes axis in [-r, -2] ∪ [0, r-2]: -1 is that trailing dim, not a
// signal axis (fuzz finding 18: the kernel read it as one, past its buffer).
#pragma once
#include <cstdint>
#include <optional>

namespace fusec {

/// `axis` normalized to [0, rank - 2], or nullopt where it is out of range or the trailing dim.
inline std::optional<int64_t> dft_signal_axis(int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank - 1 || axis == -1) return std::nullopt;
  return axis < 0 ? axis + rank : axis;
}

}  // namespace fusec
