// Resize (opset 10, 11, 13, 18, 19) and its deprecated ancestor Upsample (7-10).
//
// Output dims follow the ONNX reference: floor(in * scale) from `scales`, or `sizes` directly
// (adjusted by keep_aspect_ratio_policy at opset 18+). Unknown scales/sizes at import give the
// right rank with unknown dims on the resized axes.
#include <cmath>

#include "ir/dim_math.h"
#include "ir/op_schema.h"
#include "ir/ops/all_ops.h"
#include "ir/ops/resize_util.h"

namespace fusec {

namespace {

using resize::ResizeInputs;

/// An optional operand: absent, known (possibly empty = absent), or present but unknown.
struct Operand {
  bool unknown = false;
  const Tensor* value = nullptr;  // set when known and non-empty
};

Operand operand(const InferContext& c, int i) {
  Operand o;
  if (i < 0 || !c.has_input(static_cast<size_t>(i))) return o;
  if (const Tensor* v = c.input_value(static_cast<size_t>(i))) {
    if (v->numel() > 0) o.value = v;
    return o;
  }
  // Unknown value; a static shape of zero elements still says "not given".
  const auto& s = c.input_shape(static_cast<size_t>(i));
  if (s && is_static(*s) && checked_numel(static_dims(*s)) == 0) return o;
  o.unknown = true;
  return o;
}

void check_modes(const InferContext& c, bool legacy) {
  const std::string op = c.node().op_type;
  const std::string mode = c.attr_string("mode");
  const bool ok =
      mode == "nearest" || mode == "linear" || (!legacy && mode == "cubic") || (op == "Upsample" && mode == "bilinear");
  if (!ok) c.unsupported("unsupported mode '" + mode + "'");
  if (legacy) return;
  const std::string ctm = c.attr_string("coordinate_transformation_mode");
  const bool ctm_ok = ctm == "half_pixel" || ctm == "pytorch_half_pixel" || ctm == "align_corners" ||
                      ctm == "asymmetric" || ctm == "tf_crop_and_resize" ||
                      (ctm == "tf_half_pixel_for_nn" && c.opset() < 13) ||
                      (ctm == "half_pixel_symmetric" && c.opset() >= 18);
  if (!ctm_ok) c.unsupported("unsupported coordinate_transformation_mode '" + ctm + "'");
  const std::string nm = c.attr_string("nearest_mode");
  if (nm != "round_prefer_floor" && nm != "round_prefer_ceil" && nm != "floor" && nm != "ceil")
    c.unsupported("unsupported nearest_mode '" + nm + "'");
}

void infer_resize(InferContext& c) {
  const DType t = c.input_dtype(0);
  const ResizeInputs ins = resize::resize_inputs(c.node().op_type, c.opset());
  check_modes(c, resize::legacy_resize(c.node().op_type, c.opset()));
  if (ins.roi >= 0 && c.has_input(ins.roi) && !is_float(c.input_dtype(ins.roi))) c.fail("roi must be a float tensor");
  if (ins.scales >= 0 && c.has_input(ins.scales)) c.require_dtype(ins.scales, {DType::Float32});
  if (ins.sizes >= 0 && c.has_input(ins.sizes)) c.require_dtype(ins.sizes, {DType::Int64});

  std::vector<double> scales, roi;
  std::vector<int64_t> sizes;
  bool unknown = false;
  if (ins.scales_attr) {
    for (float f : c.attr_floats("scales")) scales.push_back(f);
  } else {
    Operand s = operand(c, ins.scales);
    unknown |= s.unknown;
    if (s.value) scales = resize::doubles_of(*s.value);
  }
  Operand z = operand(c, ins.sizes);
  unknown |= z.unknown;
  if (z.value) sizes = z.value->to_int64_vector();
  Operand ro = operand(c, ins.roi);
  if (ro.value) roi = resize::doubles_of(*ro.value);

  const auto& s = c.input_shape(0);
  if (!s) {
    c.set_output(0, t, std::nullopt);
    return;
  }
  const int64_t r = static_cast<int64_t>(s->size());
  if (!unknown && is_static(*s) && !ro.unknown) {
    auto p = resize::resize_params(c, c.opset(), static_dims(*s), roi, scales, sizes);
    c.set_output(0, t, shape_of(p.out_dims));
    return;
  }
  // Partial: what the known operands say about each resized axis.
  const auto axes = resize::resize_axes(c, c.opset(), r);
  const bool stretch =
      !(c.opset() >= 18 && c.node().op_type == "Resize") || c.attr_string("keep_aspect_ratio_policy") == "stretch";
  Shape out = *s;
  for (size_t i = 0; i < axes.size(); ++i) {
    const int64_t a = axes[i];
    if (!sizes.empty() && i < sizes.size() && stretch) {
      if (sizes[i] < 0) c.fail("sizes must be non-negative");
      out[a] = sizes[i];
    } else if (!scales.empty() && i < scales.size()) {
      if (scales[i] == 1.0) continue;
      if (!(scales[i] > 0)) c.fail("scales must be positive, got " + std::to_string(scales[i]));
      out[a] = (*s)[a].is_static()
                   ? Dim(dims::from_double(
                         std::floor(scales[i] * static_cast<double>((*s)[a].value)), c,
                         "output dim " + std::to_string(a) + " (scale " + dims::short_double(scales[i]) + ")"))
                   : Dim();
    } else {
      out[a] = Dim();
    }
  }
  c.set_output(0, t, out);
}

/// Nearest moves data; linear/cubic do a multiply-add per tap, axis by axis (separable), over
/// the axes whose size changes, last axis first.
Cost cost_resize(const CostContext& c) {
  const std::string mode = c.node.attr_string("mode", "nearest");
  Cost cost{0, c.all_in_bytes(), c.all_out_bytes()};
  if (mode == "nearest" || c.in_dims.empty() || c.out_dims.empty()) return cost;
  const bool antialias = c.node.attr_int("antialias", 0) != 0;
  std::vector<int64_t> cur = c.in_dims[0];
  const auto& out = c.out_dims[0];
  if (cur.size() != out.size()) return cost;
  for (size_t a = cur.size(); a-- > 0;) {
    if (cur[a] == out[a]) continue;
    double taps = mode == "cubic" ? 4 : 2;
    if (antialias && out[a] < cur[a] && out[a] > 0)
      taps = std::ceil(taps * static_cast<double>(cur[a]) / static_cast<double>(out[a]));
    cur[a] = out[a];
    double n = 1;
    for (int64_t d : cur) n *= static_cast<double>(d);
    cost.flops += 2 * taps * n;
  }
  return cost;
}

}  // namespace

void register_resize_schemas(OpRegistry& r) {
  r.add("Upsample")
      .since(7, 8)
      .io(1, 1)
      .attr("mode", AttrKind::String, AttrValue{std::string("nearest")})
      .required_attr("scales", AttrKind::Floats)
      .set_infer(infer_resize)
      .set_cost(cost_resize);
  r.add("Upsample")
      .since(9, 10)
      .io(2, 2)
      .attr("mode", AttrKind::String, AttrValue{std::string("nearest")})
      .set_infer(infer_resize)
      .set_cost(cost_resize);

  r.add("Resize")
      .since(10, 10)
      .io(2, 2)
      .attr("mode", AttrKind::String, AttrValue{std::string("nearest")})
      .set_infer(infer_resize)
      .set_cost(cost_resize);
  auto common = [](OpSchema& s) -> OpSchema& {
    return s.attr("coordinate_transformation_mode", AttrKind::String, AttrValue{std::string("half_pixel")})
        .attr("cubic_coeff_a", AttrKind::Float, AttrValue{-0.75f})
        .attr("exclude_outside", AttrKind::Int, AttrValue{int64_t{0}})
        .attr("extrapolation_value", AttrKind::Float, AttrValue{0.0f})
        .attr("mode", AttrKind::String, AttrValue{std::string("nearest")})
        .attr("nearest_mode", AttrKind::String, AttrValue{std::string("round_prefer_floor")})
        .set_infer(infer_resize)
        .set_cost(cost_resize);
  };
  // 11: scales required (may be empty when sizes is given); 13: roi and scales optional.
  common(r.add("Resize").since(11, 12).io(3, 4));
  common(r.add("Resize").since(13, 17).io(1, 4));
  common(r.add("Resize").since(18).io(1, 4))
      .attr("antialias", AttrKind::Int, AttrValue{int64_t{0}})
      .attr("axes", AttrKind::Ints)
      .attr("keep_aspect_ratio_policy", AttrKind::String, AttrValue{std::string("stretch")});
}

}  // namespace fusec
