// Ops that create tensors from attributes or scalars: Constant, ConstantOfShape, Range.
#include <cmath>

#include "ir/dim_math.h"
#include "ir/op_schema.h"
#include "ir/ops/all_ops.h"

namespace fusec {

namespace {

// ---- Constant ----

/// The one value_* attribute a Constant carries (failing if it has none, several, or one fusec
/// cannot represent), and the type it produces.
TypeInfo constant_type(const NodeAttrs& c) {
  static const char* kAll[] = {"value",     "sparse_value", "value_float",  "value_floats",
                               "value_int", "value_ints",   "value_string", "value_strings"};
  std::string which;
  for (const char* a : kAll)
    if (c.has_attr(a)) {
      if (!which.empty()) c.fail("has both '" + which + "' and '" + a + "'; exactly one is allowed");
      which = a;
    }
  if (which.empty()) c.fail("needs one of the value attributes");
  if (which == "sparse_value") c.unsupported("sparse_value is not supported (fusec has no sparse tensors)");
  if (which == "value_string" || which == "value_strings")
    c.unsupported(which + " is not supported (fusec has no string tensors)");
  if (which == "value") {
    const Tensor* t = c.attr_tensor("value");
    return {t->dtype(), shape_of(t->dims())};
  }
  if (which == "value_float") return {DType::Float32, Shape{}};
  if (which == "value_int") return {DType::Int64, Shape{}};
  if (which == "value_floats")
    return {DType::Float32, Shape{Dim(static_cast<int64_t>(c.attr_floats("value_floats").size()))}};
  return {DType::Int64, Shape{Dim(static_cast<int64_t>(c.attr_ints("value_ints").size()))}};
}

void infer_constant(InferContext& c) {
  TypeInfo t = constant_type(c);
  c.set_output(0, t.dtype, t.shape);
}

// ---- ConstantOfShape ----

void infer_constant_of_shape(InferContext& c) {
  c.require_dtype(0, {DType::Int64});
  const Tensor* v = c.attr_tensor("value");
  if (v->numel() != 1) c.fail("value must hold exactly one element, not " + std::to_string(v->numel()));
  const DType t = v->dtype();
  const auto& s = c.input_shape(0);
  if (s && s->size() != 1) c.fail("the shape input must be 1-D, got shape " + shape_str(*s));
  if (const Tensor* dims = c.input_value(0)) {
    Shape out;
    for (int64_t d : dims->to_int64_vector()) {
      if (d < 0) c.fail("negative dimension " + std::to_string(d));
      out.push_back(Dim(d));
    }
    c.set_output(0, t, out);
  } else if (const std::vector<DimValue>* d = c.input_dims_value(0)) {
    // Some dims known or named (dim_values.h): they are the output's.
    Shape out;
    for (const DimValue& e : *d) {
      if (e.known() && *e.value < 0) c.fail("negative dimension " + std::to_string(*e.value));
      out.push_back(e.known() ? Dim(*e.value) : e.named() ? Dim::sym(e.symbol) : Dim());
    }
    c.set_output(0, t, out);
  } else if (s && (*s)[0].is_static()) {
    c.set_output(0, t, Shape(dims::rank((*s)[0].value, c, "the shape input's length"), Dim()));
  } else {
    c.set_output(0, t, std::nullopt);
  }
}

// ---- Range ----

// Longer ranges (2^40 elements, terabytes) are certainly a bad input, not a model to run.
constexpr double kMaxRange = 1099511627776.0;

void infer_range(InferContext& c) {
  const DType t = c.input_dtype(0);
  c.require_dtype(0, {DType::Float32, DType::Float64, DType::Int16, DType::Int32, DType::Int64});
  for (size_t i = 0; i < 3; ++i) {
    if (c.input_dtype(i) != t)
      c.fail(std::string("start, limit and delta must have one type; got ") + dtype_name(t) + " and " +
             dtype_name(c.input_dtype(i)));
    const auto& s = c.input_shape(i);
    if (s && !(s->empty() || (s->size() == 1 && (*s)[0].is_static() && (*s)[0].value == 1)))
      c.fail("start, limit and delta must be scalars, got shape " + shape_str(*s));
  }
  const Tensor *start = c.input_value(0), *limit = c.input_value(1), *delta = c.input_value(2);
  if (!start || !limit || !delta) {
    // Range(0, n, 1) over a named dim n (dim_values.h: arange over the batch) has n elements.
    const std::vector<DimValue>* lim = c.input_dims_value(1);
    const bool counts = start && delta && !is_float(t) && start->as_int64(0) == 0 && delta->as_int64(0) == 1 && lim &&
                        lim->size() == 1 && (*lim)[0].named();
    c.set_output(0, t, Shape{counts ? Dim::sym((*lim)[0].symbol) : Dim()});
    return;
  }
  int64_t n;
  if (is_float(t)) {
    // As the reference: (limit - start) in T, then divided in double.
    double diff =
        t == DType::Float32
            ? static_cast<double>(static_cast<float>(limit->as_double(0)) - static_cast<float>(start->as_double(0)))
            : limit->as_double(0) - start->as_double(0);
    double d = delta->as_double(0);
    if (d == 0) c.fail("delta is zero");
    double q = std::ceil(diff / d);
    if (std::isnan(q)) c.fail("the range length is not a number");
    if (q > kMaxRange) c.fail("the range would have " + std::to_string(q) + " elements");
    n = q > 0 ? static_cast<int64_t>(q) : 0;
  } else {
    // Exact integer ceil((limit - start) / delta), in 128 bits so no input overflows.
    __int128 a = limit->as_int64(0), b = start->as_int64(0), d = delta->as_int64(0);
    if (d == 0) c.fail("delta is zero");
    __int128 diff = a - b;
    __int128 q = diff / d;
    if (diff % d != 0 && ((diff < 0) == (d < 0))) ++q;
    if (q > static_cast<__int128>(kMaxRange))
      c.fail("the range would have " + std::to_string(static_cast<double>(q)) + " elements");
    n = q > 0 ? static_cast<int64_t>(q) : 0;
  }
  c.set_output(0, t, Shape{Dim(n)});
}

}  // namespace

void register_generator_schemas(OpRegistry& r) {
  // Exactly one value attribute; the set grew at opsets 11 (sparse_value) and 12 (value_*).
  r.add("Constant")
      .since(1, 10)
      .io(0, 0)
      .required_attr("value", AttrKind::Tensor)
      .set_infer(infer_constant)
      .set_cost(cost_data_movement);
  r.add("Constant")
      .since(11, 11)
      .io(0, 0)
      .attr("value", AttrKind::Tensor)
      .attr("sparse_value", AttrKind::Opaque)
      .set_infer(infer_constant)
      .set_cost(cost_data_movement);
  r.add("Constant")
      .since(12)
      .io(0, 0)
      .attr("value", AttrKind::Tensor)
      .attr("sparse_value", AttrKind::Opaque)
      .attr("value_float", AttrKind::Float)
      .attr("value_floats", AttrKind::Floats)
      .attr("value_int", AttrKind::Int)
      .attr("value_ints", AttrKind::Ints)
      .attr("value_string", AttrKind::String)
      .attr("value_strings", AttrKind::Strings)
      .set_infer(infer_constant)
      .set_cost(cost_data_movement);

  r.add("ConstantOfShape")
      .since(9)
      .io(1, 1)
      .attr("value", AttrKind::Tensor, AttrValue{Tensor::from_float({0.0f}, {1})})
      .set_infer(infer_constant_of_shape)
      .set_cost(cost_data_movement);

  // One add per element (the reference accumulates start + delta + delta ...).
  r.add("Range").since(11).io(3, 3).set_infer(infer_range).set_cost([](const CostContext& c) {
    return Cost{c.out_numel(0), c.all_in_bytes(), c.all_out_bytes()};
  });
}

}  // namespace fusec
