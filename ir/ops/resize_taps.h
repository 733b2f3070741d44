// Resize/Upsample sampling, planned on the host once for both backends: the CPU kernel
// (backend/cpu/kernels/resize.cpp) runs its separable passes over these tables, and the CUDA
// planner (backend/cuda/ops/movement/movement_op.cpp) uploads them for its kernels, so a node
// reads the same source elements with the same weights on either.
//
// Every output coordinate x maps to a source coordinate x_ori (coordinate_transformation_mode),
// following the ONNX reference implementation.
// nearest: one source index per axis, rounded per nearest_mode, clamped to the input.
// linear / cubic: per axis,
//   out[x] = Σ_t w_t · in[clamp(f + start + t)],  f = ceil(x_ori) - 1,  ratio = x_ori - f ∈ (0, 1]
//   linear: w = [1 - ratio, ratio]; cubic: w_t = k_A(distance) over 4 taps; antialias (opset 18)
//   stretches the kernel by 1/scale when downsampling and normalizes it; exclude_outside zeroes
//   taps that fall outside the input and renormalizes.
// tf_crop_and_resize gives extrapolation_value where x_ori falls outside [0, in - 1].
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "ir/error.h"
#include "ir/ops/resize_util.h"

namespace fusec::resize {

/// The node's attributes as sampling reads them, with its scales, roi and output dims.
struct ResizeConfig {
  ResizeParams p;
  std::string mode, ctm, nearest_mode;  // mode "bilinear" (Upsample) reads as "linear"
  bool legacy = false, exclude_outside = false, antialias = false;
  double cubic_a = -0.75, extrapolation = 0.0;
};

/// `p` (from resize_params) with the node's attributes. Resize-10 and Upsample have no
/// coordinate_transformation_mode: asymmetric, with legacy nearest rounding (legacy_resize).
inline ResizeConfig resize_config(const NodeAttrs& w, int64_t opset, ResizeParams p) {
  ResizeConfig c;
  c.p = std::move(p);
  c.mode = w.attr_string("mode");
  if (c.mode == "bilinear") c.mode = "linear";
  c.legacy = legacy_resize(w.node().op_type, opset);
  if (c.legacy) {
    c.ctm = "asymmetric";
  } else {
    c.ctm = w.attr_string("coordinate_transformation_mode");
    c.nearest_mode = w.attr_string("nearest_mode");
    c.cubic_a = w.attr_float("cubic_coeff_a");
    c.exclude_outside = w.attr_int("exclude_outside") != 0;
    c.extrapolation = w.attr_float("extrapolation_value");
    if (opset >= 18) c.antialias = w.attr_int("antialias") != 0;
  }
  return c;
}

/// Source coordinate of output coordinate x along axis a; sets `outside` for tf_crop_and_resize
/// coordinates that fall off the input.
inline double source_coord(const ResizeConfig& c, size_t a, int64_t in_len, int64_t x, bool& outside) {
  const double scale = c.p.scales[a];
  const int64_t out_len = c.p.out_dims[a];
  const double in = static_cast<double>(in_len);
  // The reference's real-valued "output width" (align_corners, tf_crop_and_resize and
  // half_pixel_symmetric divide by it), not the integer output length.
  const double out_w = scale * in;
  const double xd = static_cast<double>(x);
  outside = false;
  const std::string& m = c.ctm;
  if (m == "half_pixel") return (xd + 0.5) / scale - 0.5;
  if (m == "asymmetric") return xd / scale;
  if (m == "align_corners") return out_w == 1 ? 0.0 : xd * (in - 1) / (out_w - 1);
  if (m == "pytorch_half_pixel") return out_w == 1 ? -0.5 : (xd + 0.5) / scale - 0.5;
  if (m == "tf_half_pixel_for_nn") return (xd + 0.5) / scale;
  if (m == "half_pixel_symmetric") {
    const double adjustment = static_cast<double>(out_len) / out_w;
    const double offset = in / 2 * (1 - adjustment);
    return offset + (xd + 0.5) / scale - 0.5;
  }
  if (m == "tf_crop_and_resize") {
    const double rs = c.p.roi_start[a], re = c.p.roi_end[a];
    double xo = out_w == 1 ? (re - rs) * (in - 1) / 2 : xd * (re - rs) * (in - 1) / (out_w - 1);
    xo += rs * (in - 1);
    outside = xo < 0 || xo > in - 1;
    return xo;
  }
  internal_error("unknown coordinate_transformation_mode '" + m + "'");
}

/// v clamped to an index of [0, n - 1]; NaN -> 0.
inline int64_t clamp_index(double v, int64_t n) {
  if (!(v > 0)) return 0;
  if (v >= static_cast<double>(n - 1)) return n - 1;
  return static_cast<int64_t>(v);
}

/// Input index of every output coordinate along axis a, or -1 for the extrapolation value (a
/// tf_crop_and_resize coordinate off the input, or any coordinate of an empty input axis).
inline std::vector<int64_t> nearest_map(const ResizeConfig& c, size_t a, int64_t in_len) {
  std::vector<int64_t> map(c.p.out_dims[a]);
  for (int64_t x = 0; x < c.p.out_dims[a]; ++x) {
    bool outside;
    const double xo = source_coord(c, a, in_len, x, outside);
    if (outside || in_len == 0) {
      map[x] = -1;
      continue;
    }
    double v;
    if (c.legacy) {
      // ONNX Runtime's behaviour before nearest_mode existed: ceil when downsampling, else floor.
      v = c.p.scales[a] < 1 ? std::ceil(xo) : std::floor(xo);
    } else if (xo == std::floor(xo)) {
      v = xo;
    } else {
      const double fl = std::floor(xo), ratio = xo - fl;
      const std::string& nm = c.nearest_mode;
      if (nm == "round_prefer_floor")
        v = ratio <= 0.5 ? fl : fl + 1;
      else if (nm == "round_prefer_ceil")
        v = ratio < 0.5 ? fl : fl + 1;
      else if (nm == "floor")
        v = fl;
      else
        v = fl + 1;
    }
    map[x] = clamp_index(v, in_len);
  }
  return map;
}

/// The cubic convolution kernel k_A at distance x.
inline double cubic_kernel(double x, double A) {
  x = std::fabs(x);
  if (x <= 1) return ((A + 2) * x - (A + 3)) * x * x + 1;
  if (x < 2) return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
  return 0;
}

/// Linear or cubic sampling along one axis: output coordinate x reads input indices
/// idx[x·n .. x·n + n) with weights w[...] (in float64), or the extrapolation value where outside[x].
struct ResizeTaps {
  int64_t n = 0;                 // taps per output coordinate
  std::vector<int64_t> idx;      // out_len * n input indices (clamped)
  std::vector<double> w;         // out_len * n weights
  std::vector<uint8_t> outside;  // out_len flags: write the extrapolation value
  bool identity = true;          // every output reads its own index with weight 1: nothing to do
};

inline ResizeTaps make_taps(const ResizeConfig& c, size_t a, int64_t in_len) {
  const int64_t out_len = c.p.out_dims[a];
  const bool cubic = c.mode == "cubic";
  ResizeTaps t;
  int64_t start;
  double s = 1;
  if (c.antialias) {
    // A downscale's filter widens by 1/scale. With at least one output, scale >= 1/in (the output
    // is floor(in * scale) or rounds size/in), so the width stays within the input; clamping keeps
    // a model that claims otherwise from asking for more taps than there are input elements.
    s = std::clamp(c.p.scales[a], 1.0 / static_cast<double>(std::max<int64_t>(in_len, 1)), 1.0);
    start = static_cast<int64_t>(std::floor((cubic ? -2.0 : -1.0) / s)) + 1;
  } else {
    start = cubic ? -1 : 0;
  }
  t.n = 2 - 2 * start;
  t.idx.assign(out_len * t.n, 0);
  t.w.assign(out_len * t.n, 0.0);
  t.outside.assign(out_len, 0);
  t.identity = out_len == in_len;
  std::vector<double> w(t.n);
  for (int64_t x = 0; x < out_len; ++x) {
    bool outside;
    const double xo = source_coord(c, a, in_len, x, outside);
    // A NaN or infinite coordinate (a NaN roi) reads nothing: it gets the extrapolation value.
    if (outside || !std::isfinite(xo)) {
      t.outside[x] = 1;
      t.identity = false;
      continue;
    }
    if (xo != static_cast<double>(x)) t.identity = false;
    const double f = std::ceil(xo) - 1;
    const double ratio = xo - f;  // in (0, 1]
    if (c.antialias) {
      double sum = 0;
      for (int64_t k = 0; k < t.n; ++k) {
        const double arg = (static_cast<double>(start + k) - ratio) * s;
        w[k] = cubic ? cubic_kernel(arg, c.cubic_a) : std::clamp(1 - std::fabs(arg), 0.0, 1.0);
        sum += w[k];
      }
      for (auto& v : w) v /= sum;
    } else if (cubic) {
      w[0] = cubic_kernel(1 + ratio, c.cubic_a);
      w[1] = cubic_kernel(ratio, c.cubic_a);
      w[2] = cubic_kernel(1 - ratio, c.cubic_a);
      w[3] = cubic_kernel(2 - ratio, c.cubic_a);
    } else {
      w[0] = 1 - ratio;
      w[1] = ratio;
    }
    const int64_t base = static_cast<int64_t>(f) + start;
    if (c.exclude_outside) {
      double sum = 0;
      for (int64_t k = 0; k < t.n; ++k) {
        const int64_t pos = base + k;
        if (pos < 0 || pos >= in_len) w[k] = 0;
        sum += w[k];
      }
      if (sum != 0)
        for (auto& v : w) v /= sum;
    }
    for (int64_t k = 0; k < t.n; ++k) {
      const int64_t pos = std::clamp<int64_t>(base + k, 0, std::max<int64_t>(in_len - 1, 0));
      t.idx[x * t.n + k] = pos;
      t.w[x * t.n + k] = w[k];
    }
  }
  return t;
}

}  // namespace fusec::resize
