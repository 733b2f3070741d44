// Checked int64 arithmetic for dimensions. Every shape function in ir/ops/ computes output dims
// through these helpers, never with a bare `*` or `+`: a model file is untrusted, and a product or
// sum of its dims that wraps around int64 gives a small, plausible-looking shape (Tile to 0,
// Concat to 1, a Conv window of 1) that a kernel then writes past. On overflow the helper fails
// through `where`, so the error names the node: "... overflows int64 (node 'x', op Tile)".
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "ir/op_schema.h"

namespace fusec::dims {

/// Ranks derived from a value (the length of a shape tensor, an axes count) above this are refused
/// before a Shape of that many dims is built; real models stay far below it.
constexpr int64_t kMaxRank = 1024;

[[noreturn]] inline void overflow(const NodeAttrs& where, const std::string& what, int64_t a, const char* op,
                                  int64_t b) {
  where.fail(what + ": " + std::to_string(a) + " " + op + " " + std::to_string(b) + " overflows int64");
}

/// a * b; `what` says which dim is being computed ("output dim 2").
inline int64_t mul(int64_t a, int64_t b, const NodeAttrs& where, const std::string& what) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) overflow(where, what, a, "x", b);
  return r;
}

inline int64_t add(int64_t a, int64_t b, const NodeAttrs& where, const std::string& what) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) overflow(where, what, a, "+", b);
  return r;
}

inline int64_t sub(int64_t a, int64_t b, const NodeAttrs& where, const std::string& what) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) overflow(where, what, a, "-", b);
  return r;
}

/// Product of all values (1 for none). Like checked_numel, the product of the non-zero values
/// must fit as well: a shape whose partial products wrap is refused even when a 0 makes it empty.
inline int64_t product(const std::vector<int64_t>& v, const NodeAttrs& where, const std::string& what) {
  int64_t p = 1;
  bool zero = false;
  for (int64_t x : v) {
    if (x == 0)
      zero = true;
    else
      p = mul(p, x, where, what);
  }
  return zero ? 0 : p;
}

/// Sum of all values (0 for none).
inline int64_t sum(const std::vector<int64_t>& v, const NodeAttrs& where, const std::string& what) {
  int64_t s = 0;
  for (int64_t x : v) s = add(s, x, where, what);
  return s;
}

/// Extent of a dilated window: (kernel - 1) * dilation + 1, the span a kernel of `kernel` taps
/// covers; what Conv and the pools slide over the padded input.
inline int64_t window(int64_t kernel, int64_t dilation, const NodeAttrs& where, const std::string& what) {
  return add(mul(kernel - 1, dilation, where, what), 1, where, what);
}

/// A double as a short readable number ("3e+30", "2.5") for messages.
inline std::string short_double(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

/// A size computed in floating point (Resize's floor(scale * dim), a rounded aspect ratio) as a
/// dim: it must be finite and fit int64; negative sizes are refused too.
inline int64_t from_double(double v, const NodeAttrs& where, const std::string& what) {
  // 2^63 is exactly representable; every double below it converts without overflow.
  if (!std::isfinite(v) || v < 0 || v >= 9223372036854775808.0)
    where.fail(what + ": " + short_double(v) + " is not a valid dimension");
  return static_cast<int64_t>(v);
}

/// A rank taken from a value (a shape tensor's length): non-negative and at most kMaxRank.
inline size_t rank(int64_t n, const NodeAttrs& where, const std::string& what) {
  if (n < 0 || n > kMaxRank)
    where.fail(what + " " + std::to_string(n) + " is not a supported rank (0.." + std::to_string(kMaxRank) + ")");
  return static_cast<size_t>(n);
}

/// A possibly symbolic dim times a known factor: static dims are multiplied (checked), a symbol
/// times 1 stays itself, anything else becomes unknown.
inline Dim mul(const Dim& d, int64_t k, const NodeAttrs& where, const std::string& what) {
  if (k == 1) return d;
  if (d.is_static()) return Dim(mul(d.value, k, where, what));
  return Dim();
}

}  // namespace fusec::dims
