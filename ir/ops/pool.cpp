// Pooling: MaxPool (with optional Indices), AveragePool, LpPool and their Global forms.
#include "ir/op_schema.h"
#include "ir/ops/all_ops.h"
#include "ir/ops/conv_geometry.h"

namespace fusec {

namespace {

void require_pool_type(const InferContext& c, bool allow_int8) {
  if (allow_int8)
    c.require_dtype(0, {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int8, DType::UInt8});
  else
    c.require_float(0);
}

void infer_pool(InferContext& c, bool allow_int8) {
  require_pool_type(c, allow_int8);
  const DType t = c.input_dtype(0);
  const auto& xs = c.input_shape(0);
  const std::vector<int64_t> kernel = c.attr_ints("kernel_shape");
  if (xs && xs->size() != kernel.size() + 2)
    c.fail("kernel_shape has " + std::to_string(kernel.size()) + " dims but X has rank " + std::to_string(xs->size()));
  const size_t nd = kernel.size();
  if (nd == 0) c.fail("kernel_shape is empty");
  for (int64_t k : kernel)
    if (k < 1) c.fail("kernel_shape values must be positive");
  std::vector<int64_t> in(nd, -1);
  if (xs)
    for (size_t i = 0; i < nd; ++i) in[i] = (*xs)[i + 2].is_static() ? (*xs)[i + 2].value : -1;
  const bool ceil_mode = c.schema().find_attr("ceil_mode") && c.attr_int("ceil_mode") != 0;
  WindowGeometry g = window_geometry(c, in, kernel, ceil_mode);
  Shape out{xs ? (*xs)[0] : Dim(), xs ? (*xs)[1] : Dim()};
  for (size_t i = 0; i < nd; ++i) out.push_back(g.out[i] >= 0 ? Dim(g.out[i]) : Dim());
  c.set_output(0, t, out);
  c.set_output(1, DType::Int64, out);  // MaxPool's Indices, when asked for
}

void infer_global_pool(InferContext& c) {
  c.require_float(0);
  const auto& xs = c.input_shape(0);
  if (!xs) {
    c.set_output(0, c.input_dtype(0), std::nullopt);
    return;
  }
  if (xs->size() < 2) c.fail("X must have rank >= 2 (N, C, spatial...)");
  Shape out{(*xs)[0], (*xs)[1]};
  for (size_t i = 2; i < xs->size(); ++i) out.push_back(Dim(1));
  c.set_output(0, c.input_dtype(0), out);
}

// One op per window element read.
Cost cost_pool(const CostContext& c) {
  double window = 1;
  for (int64_t k : c.node.attr_ints("kernel_shape")) window *= static_cast<double>(k);
  return {c.out_numel(0) * window, c.all_in_bytes(), c.all_out_bytes()};
}

Cost cost_global_pool(const CostContext& c) { return {c.in_numel(0), c.all_in_bytes(), c.all_out_bytes()}; }

OpSchema& window_attrs(OpSchema& s) {
  return s.attr("auto_pad", AttrKind::String, AttrValue{std::string("NOTSET")})
      .required_attr("kernel_shape", AttrKind::Ints)
      .attr("pads", AttrKind::Ints)
      .attr("strides", AttrKind::Ints);
}

// X [N, C, spatial], I (X's shape, int64), optional output_shape: the unpooled tensor.
void infer_max_unpool(InferContext& c) {
  c.require_float(0);
  c.require_dtype(1, {DType::Int64});
  const auto& xs = c.input_shape(0);
  if (c.has_input(2)) {
    c.require_dtype(2, {DType::Int64});
    if (const Tensor* shape = c.input_value(2)) {
      std::vector<int64_t> dims = shape->to_int64_vector();
      for (int64_t d : dims)
        if (d < 0) c.fail("output_shape has a negative dim: " + dims_str(dims));
      if (xs && dims.size() != xs->size())
        c.fail("output_shape " + dims_str(dims) + " does not have X's rank " + std::to_string(xs->size()));
      c.set_output(0, c.input_dtype(0), shape_of(dims));
      return;
    }
    c.set_output(0, c.input_dtype(0), xs ? std::optional<Shape>(Shape(xs->size(), Dim())) : std::nullopt);
    return;
  }
  if (!xs) return c.set_output(0, c.input_dtype(0), std::nullopt);
  if (xs->size() < 3) c.fail("X must have rank >= 3 (N, C, spatial...)");
  std::vector<int64_t> in;
  for (size_t i = 2; i < xs->size(); ++i) in.push_back((*xs)[i].is_static() ? (*xs)[i].value : -1);
  const std::vector<int64_t> out = unpooled_dims(c, in);
  Shape y{(*xs)[0], (*xs)[1]};
  for (int64_t d : out) y.push_back(d >= 0 ? Dim(d) : Dim());
  c.set_output(0, c.input_dtype(0), y);
}

}  // namespace

void register_pool_schemas(OpRegistry& r) {
  auto max_infer = [](InferContext& c) { infer_pool(c, true); };
  auto float_infer = [](InferContext& c) { infer_pool(c, false); };

  // MaxPool: 8 added storage_order and the Indices output; 10 ceil_mode and dilations; 12 int8/uint8.
  window_attrs(r.add("MaxPool").since(1, 7).io(1, 1, 1, 1)).set_infer(max_infer).set_cost(cost_pool);
  window_attrs(r.add("MaxPool").since(8, 9).io(1, 1, 1, 2))
      .attr("storage_order", AttrKind::Int, AttrValue{int64_t{0}})
      .set_infer(max_infer)
      .set_cost(cost_pool);
  window_attrs(r.add("MaxPool").since(10).io(1, 1, 1, 2))
      .attr("ceil_mode", AttrKind::Int, AttrValue{int64_t{0}})
      .attr("dilations", AttrKind::Ints)
      .attr("storage_order", AttrKind::Int, AttrValue{int64_t{0}})
      .set_infer(max_infer)
      .set_cost(cost_pool);

  // AveragePool: 7 added count_include_pad; 10 ceil_mode; 19 dilations.
  window_attrs(r.add("AveragePool").since(1, 6).io(1, 1)).set_infer(float_infer).set_cost(cost_pool);
  window_attrs(r.add("AveragePool").since(7, 9).io(1, 1))
      .attr("count_include_pad", AttrKind::Int, AttrValue{int64_t{0}})
      .set_infer(float_infer)
      .set_cost(cost_pool);
  window_attrs(r.add("AveragePool").since(10, 18).io(1, 1))
      .attr("ceil_mode", AttrKind::Int, AttrValue{int64_t{0}})
      .attr("count_include_pad", AttrKind::Int, AttrValue{int64_t{0}})
      .set_infer(float_infer)
      .set_cost(cost_pool);
  window_attrs(r.add("AveragePool").since(19).io(1, 1))
      .attr("ceil_mode", AttrKind::Int, AttrValue{int64_t{0}})
      .attr("count_include_pad", AttrKind::Int, AttrValue{int64_t{0}})
      .attr("dilations", AttrKind::Ints)
      .set_infer(float_infer)
      .set_cost(cost_pool);

  // LpPool: p became an int in 2; 18 added ceil_mode and dilations.
  window_attrs(r.add("LpPool").since(2, 17).io(1, 1))
      .attr("p", AttrKind::Int, AttrValue{int64_t{2}})
      .set_infer(float_infer)
      .set_cost(cost_pool);
  window_attrs(r.add("LpPool").since(18).io(1, 1))
      .attr("ceil_mode", AttrKind::Int, AttrValue{int64_t{0}})
      .attr("dilations", AttrKind::Ints)
      .attr("p", AttrKind::Int, AttrValue{int64_t{2}})
      .set_infer(float_infer)
      .set_cost(cost_pool);

  r.add("GlobalAveragePool").since(1).io(1, 1).set_infer(infer_global_pool).set_cost(cost_global_pool);
  r.add("GlobalMaxPool").since(1).io(1, 1).set_infer(infer_global_pool).set_cost(cost_global_pool);
  r.add("GlobalLpPool")
      .since(2)
      .io(1, 1)
      .attr("p", AttrKind::Int, AttrValue{int64_t{2}})
      .set_infer(infer_global_pool)
      .set_cost(cost_global_pool);
  // MaxUnpool 9; 11 only widened the documented index semantics.
  r.add("MaxUnpool")
      .since(9)
      .io(2, 3)
      .required_attr("kernel_shape", AttrKind::Ints)
      .attr("pads", AttrKind::Ints)
      .attr("strides", AttrKind::Ints)
      .set_infer(infer_max_unpool)
      .set_cost(cost_data_movement);
}

}  // namespace fusec
