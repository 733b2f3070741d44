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

// The geometry below is shared by the CPU reference (in double) and the CUDA kernel
// (backend/cuda/ops/movement/grid_sample.cu, in float), so the GPU's taps are the reference's.
#if defined(__CUDACC__)
#define FUSEC_GRID_SAMPLE_HD __host__ __device__
#else
#define FUSEC_GRID_SAMPLE_HD
#endif

/// A normalized coordinate in [-1, 1] as a position along an axis of `size` elements: -1 and 1 are
/// the centers of the end elements with align_corners, their outer edges without.
template <typename F>
FUSEC_GRID_SAMPLE_HD inline F denormalize(F g, int64_t size, bool align_corners) {
  const F n = static_cast<F>(size);
  return align_corners ? (g + 1) / 2 * (n - 1) : ((g + 1) * n - 1) / 2;
}

/// AffineGrid's base coordinate of element i of an axis of `size` (opset 20): the centers of the end
/// elements at -1 and 1 with align_corners (a lone element at -1, as ONNX's reference puts it), the
/// element centers inside [-1, 1] without.
template <typename F>
FUSEC_GRID_SAMPLE_HD inline F affine_base(int64_t i, int64_t size, bool align_corners) {
  if (align_corners) return size > 1 ? F(-1) + static_cast<F>(2 * i) / static_cast<F>(size - 1) : F(-1);
  return F(-1) + static_cast<F>(2 * i + 1) / static_cast<F>(size);
}

/// The bounds that reflection mirrors at: the end elements' centers with align_corners, their
/// outer edges without.
template <typename F>
FUSEC_GRID_SAMPLE_HD inline F reflect_lo(bool align_corners) {
  return align_corners ? F(0) : F(-0.5);
}
template <typename F>
FUSEC_GRID_SAMPLE_HD inline F reflect_hi(int64_t size, bool align_corners) {
  return align_corners ? static_cast<F>(size - 1) : static_cast<F>(size) - F(0.5);
}

/// x mirrored at lo and hi, again and again, until it lies between them.
template <typename F>
FUSEC_GRID_SAMPLE_HD inline F reflect(F x, F lo, F hi) {
  const F span = hi - lo;
  if (!(span > 0)) return lo;
  if (x >= lo && x <= hi) return x;
  const bool below = x < lo;
  const F d = below ? lo - x : x - hi;
  const F turns = std::floor(d / span);
  const F r = d - turns * span;
  const bool even = std::fmod(turns, F(2)) == 0;
  return below == even ? lo + r : hi - r;
}

/// Keys' cubic convolution weights (a = -0.75, as the ONNX reference and PyTorch use) for taps at
/// offsets -1, 0, 1, 2 from floor(x), t = x - floor(x), into w[0..3].
template <typename F>
FUSEC_GRID_SAMPLE_HD inline void cubic_weights(F t, F* w) {
  constexpr F a = F(-0.75);
  auto near = [](F d) { return ((a + 2) * d - (a + 3)) * d * d + 1; };       // |d| <= 1
  auto far = [](F d) { return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a; };  // 1 < |d| < 2
  w[0] = far(t + 1), w[1] = near(t), w[2] = near(1 - t), w[3] = far(2 - t);
}

}  // namespace fusec::grid_sample
