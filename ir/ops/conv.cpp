// Conv and ConvTranspose (1-D, 2-D, 3-D; groups, dilations, strides, pads, auto_pad, bias).
#include "ir/op_schema.h"
#include "ir/ops/all_ops.h"
#include "ir/ops/conv_geometry.h"

namespace fusec {

namespace {

Dim dim_or_unknown(int64_t v) { return v >= 0 ? Dim(v) : Dim(); }
int64_t static_or(const Dim& d) { return d.is_static() ? d.value : -1; }

void require_conv_types(const InferContext& c) {
  c.require_float(0);
  if (c.input_dtype(1) != c.input_dtype(0)) c.fail("X and W have different types");
  if (c.has_input(2) && c.input_dtype(2) != c.input_dtype(0)) c.fail("X and B have different types");
}

/// Spatial rank and dims of X (input xi), the weight's (input wi) dims, and the kernel
/// (kernel_shape or the weight's trailing dims). Returns false when the rank cannot be known yet.
bool conv_inputs(InferContext& c, size_t xi, size_t wi, size_t& nd, std::vector<int64_t>& in, std::vector<int64_t>& w,
                 std::vector<int64_t>& kernel) {
  const auto& xs = c.input_shape(xi);
  const auto& ws = c.input_shape(wi);
  if (!xs && !ws) return false;
  const size_t rank = xs ? xs->size() : ws->size();
  if (rank < 3) c.fail("X and W must have rank >= 3 (N, C, spatial...)");
  if (xs && ws && xs->size() != ws->size()) c.fail("X and W have different ranks");
  nd = rank - 2;
  in.assign(nd, -1);
  w.assign(rank, -1);
  if (xs)
    for (size_t i = 0; i < nd; ++i) in[i] = static_or((*xs)[i + 2]);
  if (ws)
    for (size_t i = 0; i < rank; ++i) w[i] = static_or((*ws)[i]);
  kernel.assign(w.begin() + 2, w.end());
  if (c.has_attr("kernel_shape")) {
    std::vector<int64_t> k = c.attr_ints("kernel_shape");
    if (k.size() != nd)
      c.fail("kernel_shape has " + std::to_string(k.size()) + " values for " + std::to_string(nd) + " spatial dims");
    for (size_t i = 0; i < nd; ++i) {
      if (kernel[i] >= 0 && kernel[i] != k[i]) c.fail("kernel_shape differs from the weight's shape");
      kernel[i] = k[i];
    }
  }
  if (c.attr_int("group") < 1) c.fail("group must be >= 1");
  return true;
}

}  // namespace

void infer_conv_output(InferContext& c, size_t xi, size_t wi, size_t bi, DType out_type) {
  size_t nd;
  std::vector<int64_t> in, w, kernel;
  if (!conv_inputs(c, xi, wi, nd, in, w, kernel)) {
    c.set_output(0, out_type, std::nullopt);
    return;
  }
  const int64_t group = c.attr_int("group");
  const auto& xs = c.input_shape(xi);
  const int64_t channels = xs ? static_or((*xs)[1]) : -1;
  if (channels >= 0 && w[1] >= 0 && channels != dims::mul(w[1], group, c, "W's input channels x group"))
    c.fail("X has " + std::to_string(channels) + " channels but W expects " + std::to_string(w[1]) + " x group " +
           std::to_string(group));
  if (w[0] >= 0 && w[0] % group != 0)
    c.fail("output channels (" + std::to_string(w[0]) + ") are not divisible by group");
  if (c.has_input(bi) && c.input_shape(bi)) {
    const Shape& bs = *c.input_shape(bi);
    if (bs.size() != 1 || (bs[0].is_static() && w[0] >= 0 && bs[0].value != w[0]))
      c.fail("B must be 1-D with one value per output channel, got " + shape_str(bs));
  }
  WindowGeometry g = window_geometry(c, in, kernel, false);
  Shape out{xs ? (*xs)[0] : Dim(), c.input_shape(wi) ? (*c.input_shape(wi))[0] : Dim()};
  for (size_t i = 0; i < nd; ++i) out.push_back(dim_or_unknown(g.out[i]));
  c.set_output(0, out_type, out);
}

namespace {

void infer_conv(InferContext& c) {
  require_conv_types(c);
  infer_conv_output(c, 0, 1, 2, c.input_dtype(0));
}

void infer_conv_transpose(InferContext& c) {
  require_conv_types(c);
  size_t nd;
  std::vector<int64_t> in, w, kernel;
  if (!conv_inputs(c, 0, 1, nd, in, w, kernel)) {
    c.set_output(0, c.input_dtype(0), std::nullopt);
    return;
  }
  const int64_t group = c.attr_int("group");
  const auto& xs = c.input_shape(0);
  const int64_t channels = xs ? static_or((*xs)[1]) : -1;
  if (channels >= 0 && w[0] >= 0 && channels != w[0])
    c.fail("X has " + std::to_string(channels) + " channels but W has " + std::to_string(w[0]));
  if (w[0] >= 0 && w[0] % group != 0) c.fail("input channels are not divisible by group");
  const int64_t out_channels = w[1] >= 0 ? dims::mul(w[1], group, c, "the output channels") : -1;
  if (c.has_input(2) && c.input_shape(2)) {
    const Shape& bs = *c.input_shape(2);
    if (bs.size() != 1 || (bs[0].is_static() && out_channels >= 0 && bs[0].value != out_channels))
      c.fail("B must be 1-D with one value per output channel, got " + shape_str(bs));
  }
  WindowGeometry g = conv_transpose_geometry(c, in, kernel);
  Shape out{xs ? (*xs)[0] : Dim(), dim_or_unknown(out_channels)};
  for (size_t i = 0; i < nd; ++i) out.push_back(dim_or_unknown(g.out[i]));
  c.set_output(0, c.input_dtype(0), out);
}

double weight_per_output(const std::vector<int64_t>& w) {
  double p = 1;
  for (size_t i = 1; i < w.size(); ++i) p *= static_cast<double>(w[i]);
  return p;
}

// Every output element: (Cin/group)·prod(kernel) multiply-adds, plus the bias add.
Cost cost_conv(const CostContext& c) {
  const double out = c.out_numel(0);
  return {2 * out * weight_per_output(c.in_dims[1]) + (c.has_input(2) ? out : 0), c.all_in_bytes(), c.all_out_bytes()};
}

// Every input element scatters into (Cout/group)·prod(kernel) outputs, plus the bias add.
Cost cost_conv_transpose(const CostContext& c) {
  return {2 * c.in_numel(0) * weight_per_output(c.in_dims[1]) + (c.has_input(2) ? c.out_numel(0) : 0), c.all_in_bytes(),
          c.all_out_bytes()};
}

}  // namespace

void register_conv_schemas(OpRegistry& r) {
  // Conv 1 and 11 differ only in how auto_pad is documented; one entry serves both.
  r.add("Conv")
      .since(1)
      .io(2, 3)
      .attr("auto_pad", AttrKind::String, AttrValue{std::string("NOTSET")})
      .attr("dilations", AttrKind::Ints)
      .attr("group", AttrKind::Int, AttrValue{int64_t{1}})
      .attr("kernel_shape", AttrKind::Ints)
      .attr("pads", AttrKind::Ints)
      .attr("strides", AttrKind::Ints)
      .set_infer(infer_conv)
      .set_cost(cost_conv);
  r.add("ConvTranspose")
      .since(1)
      .io(2, 3)
      .attr("auto_pad", AttrKind::String, AttrValue{std::string("NOTSET")})
      .attr("dilations", AttrKind::Ints)
      .attr("group", AttrKind::Int, AttrValue{int64_t{1}})
      .attr("kernel_shape", AttrKind::Ints)
      .attr("output_padding", AttrKind::Ints)
      .attr("output_shape", AttrKind::Ints)
      .attr("pads", AttrKind::Ints)
      .attr("strides", AttrKind::Ints)
      .set_infer(infer_conv_transpose)
      .set_cost(cost_conv_transpose);
}

}  // namespace fusec
