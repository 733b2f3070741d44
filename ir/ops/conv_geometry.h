// Window geometry for Conv, ConvTranspose and the pools: strides, dilations, pads and auto_pad
// turned into per-dim begin/end padding and output sizes. Shared by the schemas (inference) and
// the CPU kernels, so both compute the same shapes. All of it is checked int64 arithmetic
// (ir/dim_math.h): pads and dilations come straight from the file, and a window whose extent wraps
// around int64 would otherwise look like a window of 1.
#pragma once
#include <string>
#include <vector>

#include "ir/dim_math.h"
#include "ir/op_schema.h"

namespace fusec {

/// Per spatial dim. Sizes of -1 are unknown (inference with symbolic dims); the kernels always
/// see known sizes.
struct WindowGeometry {
  std::vector<int64_t> in, kernel, stride, dilation, pad_begin, pad_end, out;
  size_t rank() const { return in.size(); }
};

/// An ints attribute of `n` values, or `def` repeated if the node does not set it (or the
/// schema, at this opset, does not have it).
inline std::vector<int64_t> window_ints(const NodeAttrs& a, const std::string& name, size_t n, int64_t def) {
  if (!a.schema().find_attr(name) || !a.has_attr(name)) return std::vector<int64_t>(n, def);
  std::vector<int64_t> v = a.attr_ints(name);
  if (v.size() != n)
    a.fail("attribute '" + name + "' has " + std::to_string(v.size()) + " values, expected " + std::to_string(n));
  return v;
}

inline int64_t floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }
inline int64_t ceil_div(int64_t a, int64_t b) { return -floor_div(-a, b); }

/// Geometry of a sliding window (Conv, pools) over spatial dims `in` with `kernel`.
inline WindowGeometry window_geometry(const NodeAttrs& a, const std::vector<int64_t>& in,
                                      const std::vector<int64_t>& kernel, bool ceil_mode) {
  const size_t n = in.size();
  WindowGeometry g;
  g.in = in;
  g.kernel = kernel;
  g.stride = window_ints(a, "strides", n, 1);
  g.dilation = window_ints(a, "dilations", n, 1);
  std::vector<int64_t> pads = window_ints(a, "pads", 2 * n, 0);
  g.pad_begin.assign(pads.begin(), pads.begin() + static_cast<std::ptrdiff_t>(n));
  g.pad_end.assign(pads.begin() + static_cast<std::ptrdiff_t>(n), pads.end());
  const std::string auto_pad = a.schema().find_attr("auto_pad") ? a.attr_string("auto_pad") : "NOTSET";
  if (auto_pad != "NOTSET" && auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER" && auto_pad != "VALID")
    a.fail("unknown auto_pad '" + auto_pad + "'");
  g.out.assign(n, -1);
  for (size_t i = 0; i < n; ++i) {
    if (kernel[i] < 1 && kernel[i] != -1) a.fail("kernel dims must be positive");  // -1: not known yet
    if (g.stride[i] < 1) a.fail("strides must be positive");
    if (g.dilation[i] < 1) a.fail("dilations must be positive");
    if (g.pad_begin[i] < 0 || g.pad_end[i] < 0) a.fail("pads must not be negative");
    if (in[i] < 0 || kernel[i] < 0) continue;
    const std::string dim = " in spatial dim " + std::to_string(i);
    const int64_t dk = dims::window(kernel[i], g.dilation[i], a, "the dilated window" + dim), s = g.stride[i];
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      g.out[i] = ceil_div(in[i], s);
      // (out - 1) * s < in, so only adding the window can overflow.
      const int64_t total = std::max<int64_t>(0, dims::add((g.out[i] - 1) * s - in[i], dk, a, "the padding" + dim));
      const int64_t small = total / 2, big = total - small;
      g.pad_begin[i] = auto_pad == "SAME_UPPER" ? small : big;
      g.pad_end[i] = auto_pad == "SAME_UPPER" ? big : small;
      continue;
    }
    if (auto_pad == "VALID") g.pad_begin[i] = g.pad_end[i] = 0;
    const int64_t padded = dims::add(dims::add(in[i], g.pad_begin[i], a, "the padded input" + dim), g.pad_end[i], a,
                                     "the padded input" + dim);
    const int64_t span = padded - dk;  // both non-negative: cannot overflow
    if (span < 0)
      a.fail("the window (" + std::to_string(dk) + ") is larger than the padded input (" + std::to_string(padded) +
             ")" + dim);
    if (ceil_mode && auto_pad == "NOTSET") {
      g.out[i] = ceil_div(span, s) + 1;
      // The last window must start inside the input or its begin padding.
      if (dims::mul(g.out[i] - 1, s, a, "the last window's start" + dim) >= in[i] + g.pad_begin[i]) --g.out[i];
    } else {
      g.out[i] = span / s + 1;
    }
  }
  return g;
}

/// Geometry of ConvTranspose over input spatial dims `in` with `kernel`; `out` and the pads
/// follow output_shape when given, else the pads (or auto_pad, giving in·stride).
inline WindowGeometry conv_transpose_geometry(const NodeAttrs& a, const std::vector<int64_t>& in,
                                              const std::vector<int64_t>& kernel) {
  const size_t n = in.size();
  WindowGeometry g;
  g.in = in;
  g.kernel = kernel;
  g.stride = window_ints(a, "strides", n, 1);
  g.dilation = window_ints(a, "dilations", n, 1);
  std::vector<int64_t> pads = window_ints(a, "pads", 2 * n, 0);
  g.pad_begin.assign(pads.begin(), pads.begin() + static_cast<std::ptrdiff_t>(n));
  g.pad_end.assign(pads.begin() + static_cast<std::ptrdiff_t>(n), pads.end());
  const std::vector<int64_t> out_pad = window_ints(a, "output_padding", n, 0);
  std::vector<int64_t> out_shape;
  if (a.has_attr("output_shape")) {
    out_shape = a.attr_ints("output_shape");
    // Accept the spatial dims alone or a full N, C, spatial... shape.
    if (out_shape.size() == n + 2) out_shape.erase(out_shape.begin(), out_shape.begin() + 2);
    if (out_shape.size() != n)
      a.fail("output_shape has " + std::to_string(out_shape.size()) + " values, expected " + std::to_string(n));
  }
  const std::string auto_pad = a.attr_string("auto_pad");
  if (auto_pad != "NOTSET" && auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER" && auto_pad != "VALID")
    a.fail("unknown auto_pad '" + auto_pad + "'");
  g.out.assign(n, -1);
  for (size_t i = 0; i < n; ++i) {
    if (g.stride[i] < 1) a.fail("strides must be positive");
    if (g.dilation[i] < 1) a.fail("dilations must be positive");
    if (out_pad[i] < 0) a.fail("output_padding must not be negative");
    if (kernel[i] < 1 && kernel[i] != -1) a.fail("kernel dims must be positive");
    if (in[i] < 0 || kernel[i] < 0) continue;
    const std::string dim = "the output size in spatial dim " + std::to_string(i);
    // stride * (in - 1) + output_padding + dilated window, each step checked.
    const int64_t full = dims::add(dims::add(dims::mul(g.stride[i], in[i] - 1, a, dim), out_pad[i], a, dim),
                                   dims::window(kernel[i], g.dilation[i], a, dim), a, dim);
    int64_t target = -1;
    if (!out_shape.empty())
      target = out_shape[i];
    else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER")
      target = dims::mul(in[i], g.stride[i], a, dim);
    if (target >= 0) {
      // total_padding = full - output_shape; SAME_UPPER puts the smaller half first (ONNX spec).
      const int64_t total = dims::sub(full, target, a, dim);
      const int64_t small = floor_div(total, 2), big = total - small;
      g.pad_begin[i] = auto_pad == "SAME_UPPER" ? small : big;
      g.pad_end[i] = auto_pad == "SAME_UPPER" ? big : small;
      g.out[i] = target;
    } else {
      if (auto_pad == "VALID") g.pad_begin[i] = g.pad_end[i] = 0;
      g.out[i] = dims::sub(dims::sub(full, g.pad_begin[i], a, dim), g.pad_end[i], a, dim);
    }
    if (g.out[i] < 0) a.fail("ConvTranspose output size would be negative");
  }
  return g;
}

/// MaxUnpool's spatial output dims from its input's: (in - 1)·stride + kernel - pads. -1 where
/// the input dim is unknown.
inline std::vector<int64_t> unpooled_dims(const NodeAttrs& a, const std::vector<int64_t>& in) {
  const std::vector<int64_t> k = a.attr_ints("kernel_shape");
  const size_t n = in.size();
  if (k.size() != n)
    a.fail("kernel_shape has " + std::to_string(k.size()) + " values for " + std::to_string(n) + " spatial dims");
  const std::vector<int64_t> s = window_ints(a, "strides", n, 1), p = window_ints(a, "pads", 2 * n, 0);
  std::vector<int64_t> out(n, -1);
  for (size_t i = 0; i < n; ++i) {
    if (k[i] < 1 || s[i] < 1) a.fail("kernel_shape and strides must be >= 1");
    if (in[i] < 0) continue;
    out[i] = dims::add(dims::mul(in[i] - 1, s[i], a, "the unpooled size"),
                       dims::sub(dims::sub(k[i], p[i], a, "the unpooled size"), p[i + n], a, "the unpooled size"), a,
                       "the unpooled size");
    if (out[i] < 0) a.fail("the pads leave a negative output size");
  }
  return out;
}

/// A convolution's output type (out_type, dims [N, M, spatial out...]) from X (input xi), W (input
/// wi) and the optional bias (input bi), with group, strides, pads and dilations checked as Conv
/// checks them. Conv, ConvInteger and QLinearConv share it (defined in ir/ops/conv.cpp).
void infer_conv_output(InferContext& c, size_t xi, size_t wi, size_t bi, DType out_type);

}  // namespace fusec
