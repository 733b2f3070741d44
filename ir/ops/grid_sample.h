// GridSample's attributes and sampling geometry, shared by the schema (ir/ops/grid_sample.cpp) and
// the CPU kernel (backend/cpu/kernels/grid_sample.cpp).
#pragma once
#include <cmath>
#include <cstdint>
#include <string>

#include "ir/op_schema.h"

namespace fusec::grid_sample {

enum class Mode { Nearest, Linear, Cubic };
enum class Padding { Zeros, Border, Reflection };

struct Config {
  Mode mode = Mode::Linear;
  Padding padding = Padding::Zeros;
  bool align_corners = false;
};

/// The node's mode, padding and alignment; an unknown value is a BadInput naming the node. Opset 16
/// spells the modes bilinear / bicubic, 20 onward linear / cubic (the N-D generalization).
inline Config check_attrs(const NodeAttrs& a, int64_t opset) {
  Config c;
  const std::string mode = a.attr_string("mode");
  const bool old = opset < 20;
  if (mode == "nearest")
    c.mode = Mode::Nearest;
  else if (mode == (old ? "bilinear" : "linear"))
    c.mode = Mode::Linear;
  else if (mode == (old ? "bicubic" : "cubic"))
    c.mode = Mode::Cubic;
  else
    a.fail("mode '" + mode + "' is not one of " + (old ? "bilinear, nearest, bicubic" : "linear, nearest, cubic") +
           " (opset " + std::to_string(opset) + ")");
  const std::string pad = a.attr_string("padding_mode");
  if (pad == "zeros")
    c.padding = Padding::Zeros;
  else if (pad == "border")
    c.padding = Padding::Border;
  else if (pad == "reflection")
    c.padding = Padding::Reflection;
  else
    a.fail("padding_mode '" + pad + "' is not one of zeros, border, reflection");
  const int64_t align = a.attr_int("align_corners");
  if (align != 0 && align != 1) a.fail("align_corners must be 0 or 1, got " + std::to_string(align));
  c.align_corners = align == 1;
  return c;
}

/// A normalized coordinate in [-1, 1] as a position along an axis of `size` elements: -1 and 1 are
/// the centers of the end elements with align_corners, their outer edges without.
inline double denormalize(double g, int64_t size, bool align_corners) {
  const double n = static_cast<double>(size);
  return align_corners ? (g + 1) / 2 * (n - 1) : ((g + 1) * n - 1) / 2;
}

/// The bounds that reflection mirrors at: the end elements' centers with align_corners, their
/// outer edges without.
inline double reflect_lo(bool align_corners) { return align_corners ? 0.0 : -0.5; }
inline double reflect_hi(int64_t size, bool align_corners) {
  return align_corners ? static_cast<double>(size - 1) : static_cast<double>(size) - 0.5;
}

/// x mirrored at lo and hi, again and again, until it lies between them.
inline double reflect(double x, double lo, double hi) {
  const double span = hi - lo;
  if (!(span > 0)) return lo;
  if (x >= lo && x <= hi) return x;
  const bool below = x < lo;
  const double d = below ? lo - x : x - hi;
  const double turns = std::floor(d / span);
  const double r = d - turns * span;
  const bool even = std::fmod(turns, 2.0) == 0;
  return below == even ? lo + r : hi - r;
}

}  // namespace fusec::grid_sample
