// Byte-level helpers for the shape and generator kernels: ops that only copy or fill elements
// work on any dtype by element size, so they need no type dispatch.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "backend/cpu/kernels/common.h"

namespace fusec::cpu {

/// memcpy split over threads for large tensors (a no-op when src == dst).
inline void copy_bytes(void* dst, const void* src, size_t n) {
  if (n == 0 || dst == src) return;
  constexpr int64_t kChunk = int64_t{1} << 20;
  const int64_t chunks = (static_cast<int64_t>(n) + kChunk - 1) / kChunk;
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  parallel_for(chunks, 4, [&](int64_t b, int64_t e) {
    const int64_t lo = b * kChunk, hi = std::min<int64_t>(static_cast<int64_t>(n), e * kChunk);
    std::memcpy(d + lo, s + lo, static_cast<size_t>(hi - lo));
  });
}

/// Copies a whole tensor's bytes into `out`, which must hold exactly as many (checked, so a
/// wrong inference can never make a kernel read or write out of bounds).
inline void copy_tensor(const KernelContext& ctx, const Tensor& in, Tensor& out) {
  if (in.nbytes() != out.nbytes())
    ctx.fail("output holds " + std::to_string(out.numel()) + " elements but the input has " +
             std::to_string(in.numel()));
  copy_bytes(out.raw(), in.raw(), in.nbytes());
}

/// Sets elements [begin, end) of `dst` (element size `esize`) to the element at `value`.
inline void fill_elements(void* dst, int64_t begin, int64_t end, const void* value, size_t esize) {
  if (end <= begin) return;
  auto fill = [&](auto tag) {
    using T = decltype(tag);
    T v;
    std::memcpy(&v, value, sizeof(T));
    std::fill(static_cast<T*>(dst) + begin, static_cast<T*>(dst) + end, v);
  };
  switch (esize) {
    case 1:
      fill(uint8_t{});
      return;
    case 2:
      fill(uint16_t{});
      return;
    case 4:
      fill(uint32_t{});
      return;
    case 8:
      fill(uint64_t{});
      return;
    default:
      for (int64_t i = begin; i < end; ++i) std::memcpy(static_cast<char*>(dst) + i * esize, value, esize);
  }
}

/// Fills all of `t` with the single element at `value` (of t's dtype), in parallel.
inline void fill_tensor(Tensor& t, const void* value) {
  const size_t es = dtype_size(t.dtype());
  void* d = t.raw();
  parallel_for(t.numel(), 1 << 16, [&](int64_t b, int64_t e) { fill_elements(d, b, e, value, es); });
}

/// A one-element tensor of dtype `d` holding `v` (converted as Cast would).
inline Tensor scalar_of(DType d, double v) {
  Tensor src(DType::Float64, {});
  *src.data<double>() = v;
  Tensor out(d, {});
  convert_tensor(src, out);
  return out;
}

}  // namespace fusec::cpu
