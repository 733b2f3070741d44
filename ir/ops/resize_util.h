// Resize/Upsample parameter arithmetic shared by the schema (ir/ops/resize.cpp) and the CPU
// kernel (backend/cpu/kernels/resize.cpp): which inputs hold roi/scales/sizes at each opset, the
// per-axis scale and roi, and the output dims.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "ir/dim_math.h"
#include "ir/op_schema.h"

namespace fusec::resize {

/// Where each operand lives for this op and opset (-1: not an input).
struct ResizeInputs {
  int roi = -1, scales = -1, sizes = -1;
  bool scales_attr = false;  // Upsample-7/8: scales is an attribute
};

inline ResizeInputs resize_inputs(const std::string& op, int64_t opset) {
  ResizeInputs in;
  if (op == "Upsample") {
    if (opset < 9)
      in.scales_attr = true;
    else
      in.scales = 1;
  } else if (opset < 11) {
    in.scales = 1;
  } else {
    in.roi = 1;
    in.scales = 2;
    in.sizes = 3;
  }
  return in;
}

/// Old Resize (10) and Upsample have no coordinate_transformation_mode: asymmetric, with ONNX
/// Runtime's legacy nearest rounding.
inline bool legacy_resize(const std::string& op, int64_t opset) { return op == "Upsample" || opset < 11; }

struct ResizeParams {
  std::vector<int64_t> out_dims;
  std::vector<double> scales;              // per axis; 1 where the axis is not resized
  std::vector<double> roi_start, roi_end;  // per axis, normalized coordinates; 0 and 1 by default
};

/// The axes Resize-18 acts on (all axes when the attribute is absent or the opset older).
inline std::vector<int64_t> resize_axes(const NodeAttrs& w, int64_t opset, int64_t rank) {
  std::vector<int64_t> axes;
  if (opset >= 18 && w.node().op_type == "Resize" && w.has_attr("axes")) {
    std::vector<bool> seen(rank, false);
    for (int64_t a : w.attr_ints("axes")) {
      int64_t n = normalize_axis(a, rank, w);
      if (seen[n]) w.fail("axis " + std::to_string(a) + " is repeated");
      seen[n] = true;
      axes.push_back(n);
    }
  } else {
    for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
  }
  return axes;
}

/// Computes scales and output dims the way the ONNX reference does: from `sizes` (scale =
/// size / in, with keep_aspect_ratio_policy not_larger/not_smaller picking one scale and rounding
/// half up), else output = floor(in * scale). `scales`/`sizes` empty means absent.
inline ResizeParams resize_params(const NodeAttrs& w, int64_t opset, const std::vector<int64_t>& in,
                                  const std::vector<double>& roi, const std::vector<double>& scales,
                                  const std::vector<int64_t>& sizes) {
  const int64_t r = static_cast<int64_t>(in.size());
  const auto axes = resize_axes(w, opset, r);
  const size_t n = axes.size();
  ResizeParams p;
  p.out_dims = in;
  p.scales.assign(r, 1.0);
  p.roi_start.assign(r, 0.0);
  p.roi_end.assign(r, 1.0);
  if (!scales.empty() && !sizes.empty()) w.fail("only one of 'scales' and 'sizes' may be given");
  if (!sizes.empty()) {
    if (sizes.size() != n)
      w.fail("sizes has " + std::to_string(sizes.size()) + " entries, expected " + std::to_string(n));
    for (size_t i = 0; i < n; ++i) {
      if (sizes[i] < 0) w.fail("sizes must be non-negative");
      const int64_t a = axes[i];
      p.out_dims[a] = sizes[i];
      p.scales[a] = in[a] > 0 ? static_cast<double>(sizes[i]) / static_cast<double>(in[a]) : 1.0;
    }
    const std::string policy =
        opset >= 18 && w.node().op_type == "Resize" ? w.attr_string("keep_aspect_ratio_policy") : "stretch";
    if (policy != "stretch") {
      if (policy != "not_larger" && policy != "not_smaller")
        w.fail("unknown keep_aspect_ratio_policy '" + policy + "'");
      double s = p.scales[axes.empty() ? 0 : axes[0]];
      for (int64_t a : axes) s = policy == "not_larger" ? std::min(s, p.scales[a]) : std::max(s, p.scales[a]);
      for (int64_t a : axes) {
        p.scales[a] = s;
        p.out_dims[a] =
            dims::from_double(std::floor(s * static_cast<double>(in[a]) + 0.5), w, "output dim " + std::to_string(a));
      }
    }
  } else if (!scales.empty()) {
    if (scales.size() != n)
      w.fail("scales has " + std::to_string(scales.size()) + " entries, expected " + std::to_string(n));
    for (size_t i = 0; i < n; ++i) {
      if (!(scales[i] > 0)) w.fail("scales must be positive, got " + std::to_string(scales[i]));
      const int64_t a = axes[i];
      p.scales[a] = scales[i];
      p.out_dims[a] =
          dims::from_double(std::floor(scales[i] * static_cast<double>(in[a])), w,
                            "output dim " + std::to_string(a) + " (scale " + dims::short_double(scales[i]) + ")");
    }
  } else {
    w.fail("one of 'scales' and 'sizes' must be given");
  }
  if (!roi.empty()) {
    if (roi.size() != 2 * n)
      w.fail("roi has " + std::to_string(roi.size()) + " entries, expected " + std::to_string(2 * n));
    for (size_t i = 0; i < n; ++i) {
      p.roi_start[axes[i]] = roi[i];
      p.roi_end[axes[i]] = roi[n + i];
    }
  }
  return p;
}

inline std::vector<double> doubles_of(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = t.as_double(i);
  return v;
}

}  // namespace fusec::resize
