// Linear quantization's parameters, shared by the schemas (ir/ops/quantize.cpp) and the CPU kernels
// (backend/cpu/kernels/quantize.cpp): which quantized types fusec holds, and how a scale or zero
// point lines up with the tensor it quantizes.
//
// A scale (and its zero point, which has the scale's shape) is one of
//   per tensor   a scalar or a one-element 1-D tensor;
//   per axis     1-D, one value per index of x's `axis` (opset 13 on);
//   blocked      x's rank, x's dims except ceil(d / block_size) at `axis` (opset 21 on).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ir/dtype.h"
#include "ir/op_schema.h"

namespace fusec::quant {

/// The integer types a quantized tensor may have here. ONNX also has uint16, int4, uint4 and the
/// float8 types; fusec's IR holds none of them, so a model using them is declined at import.
inline bool is_quantized_type(DType t) { return t == DType::UInt8 || t == DType::Int8 || t == DType::Int16; }

/// The range a quantized type saturates to.
inline void quantized_range(DType t, int64_t& lo, int64_t& hi) {
  switch (t) {
    case DType::UInt8:
      lo = 0, hi = 255;
      return;
    case DType::Int8:
      lo = -128, hi = 127;
      return;
    default:
      lo = -32768, hi = 32767;
      return;
  }
}

/// How a scale's elements map onto x's: x's dims seen as [outer, d, inner] around `axis`; a blocked
/// scale gives `block` consecutive indices along d one value.
struct ScaleLayout {
  enum Form { PerTensor, PerAxis, Blocked };
  Form form = PerTensor;
  int64_t d = 1, inner = 1, block = 1;

  /// The scale index of x's element i.
  int64_t index(int64_t i) const {
    if (form == PerTensor) return 0;
    const int64_t a = (i / inner) % d;
    if (form == PerAxis) return a;
    const int64_t blocks = d / block + (d % block != 0);
    return ((i / (d * inner)) * blocks + a / block) * inner + i % inner;
  }
};

/// The layout of a scale with dims `scale` for x with dims `x`, or a BadInput naming the node when
/// the scale fits none of the three forms. `axis` may be negative; `block_size` 0 means not blocked.
inline ScaleLayout scale_layout(const NodeAttrs& where, const std::vector<int64_t>& x,
                                const std::vector<int64_t>& scale, int64_t axis, int64_t block_size) {
  ScaleLayout l;
  if (block_size == 0 && scale.size() <= 1 && checked_numel(scale) == 1) return l;
  const int64_t r = static_cast<int64_t>(x.size());
  if (axis < -r || axis >= r)
    where.fail("axis " + std::to_string(axis) + " is out of range for x of rank " + std::to_string(r));
  if (axis < 0) axis += r;
  l.inner = checked_numel(std::vector<int64_t>(x.begin() + axis + 1, x.end()));
  l.d = x[axis];
  if (block_size < 0) where.fail("block_size must be >= 0, got " + std::to_string(block_size));
  if (block_size == 0) {
    if (scale.size() != 1 || scale[0] != l.d)
      where.fail("the scale " + dims_str(scale) + " is neither per tensor nor one value per index of axis " +
                 std::to_string(axis) + " (" + std::to_string(l.d) + ") of x " + dims_str(x));
    l.form = ScaleLayout::PerAxis;
    return l;
  }
  std::vector<int64_t> want = x;
  want[axis] = l.d / block_size + (l.d % block_size != 0);
  if (scale != want)
    where.fail("a blocked scale for x " + dims_str(x) + " with block_size " + std::to_string(block_size) + " on axis " +
               std::to_string(axis) + " must have dims " + dims_str(want) + ", got " + dims_str(scale));
  l.form = ScaleLayout::Blocked;
  l.block = block_size;
  return l;
}

}  // namespace fusec::quant
