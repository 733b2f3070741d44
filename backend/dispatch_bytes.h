// Element-size dispatch for the ops that only move elements (Transpose, Gather, Resize nearest,
// ...): one instantiation per element size serves every dtype of that size, on the CPU and in the
// CUDA launchers alike.
#pragma once
#include <cstddef>
#include <cstdint>

namespace fusec {

/// Calls f(U{}) with U the unsigned integer type of exactly `bytes` bytes (1, 2, 4 or 8).
/// Returns false, calling nothing, for any other size.
template <typename F>
bool dispatch_bytes(size_t bytes, F&& f) {
  switch (bytes) {
    case 1:
      f(uint8_t{});
      return true;
    case 2:
      f(uint16_t{});
      return true;
    case 4:
      f(uint32_t{});
      return true;
    case 8:
      f(uint64_t{});
      return true;
    default:
      return false;
  }
}

}  // namespace fusec
