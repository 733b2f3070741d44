// Elementwise arithmetic, math, comparison, logic and conversion ops with ONNX multidirectional
// broadcasting (and the pre-opset-7 `broadcast`/`axis` form where the spec had it).
//
// Cost model (FLOPs per output element): arithmetic, comparison, logic, select, rounding and
// sign ops count 1; Sqrt/Reciprocal 1 (one hardware instruction each); transcendental functions
// (exp, log, erf, trig and hyperbolic, Pow) count kTranscendental = 8, a typical polynomial after
// range reduction; Cast/CastLike move data only (0 flops).
#include <cfloat>
#include <climits>

#include "ir/op_schema.h"
#include "ir/ops/all_ops.h"
#include "ir/ops/legacy_broadcast.h"

namespace fusec {

namespace {

constexpr double kTranscendental = 8;

bool is_numeric(DType t) { return is_float(t) || is_integer(t); }

CostFn flops_per_element(double f) {
  return [f](const CostContext& c) { return cost_elementwise(c, f); };
}

/// Output shape of a binary op: numpy broadcasting, or the pre-opset-7 rules for legacy entries.
std::optional<Shape> binary_shape(const InferContext& c) {
  if (!c.schema().find_attr("broadcast")) return broadcast_all_inputs(c);
  const auto& a = c.input_shape(0);
  const auto& b = c.input_shape(1);
  if (!c.attr_int("broadcast")) {
    if (a && b) {
      if (a->size() != b->size())
        c.fail("shapes " + shape_str(*a) + " and " + shape_str(*b) + " differ and broadcast=0");
      for (size_t i = 0; i < a->size(); ++i)
        if ((*a)[i].is_static() && (*b)[i].is_static() && (*a)[i].value != (*b)[i].value)
          c.fail("shapes " + shape_str(*a) + " and " + shape_str(*b) + " differ and broadcast=0");
    }
    return a ? a : b;
  }
  if (!a || !b) return a;
  int64_t axis = legacy_broadcast_axis(a->size(), b->size(), c);
  for (size_t i = 0; i < b->size(); ++i) {
    const Dim& bd = (*b)[i];
    const Dim& ad = (*a)[static_cast<size_t>(axis) + i];
    if (bd.is_static() && ad.is_static() && bd.value != 1 && bd.value != ad.value)
      c.fail("legacy broadcast: cannot broadcast " + shape_str(*b) + " onto " + shape_str(*a));
  }
  return a;
}

void require_same_types(const InferContext& c) {
  DType t = c.input_dtype(0);
  for (size_t i = 1; i < c.num_inputs(); ++i)
    if (c.has_input(i) && c.input_dtype(i) != t)
      c.fail(std::string("inputs have different types: ") + dtype_name(t) + " and " + dtype_name(c.input_dtype(i)));
}

void require_numeric(const InferContext& c, size_t i) {
  if (!is_numeric(c.input_dtype(i)))
    c.fail("input " + std::to_string(i) + " must be numeric, not " + dtype_name(c.input_dtype(i)));
}

void require_bool(const InferContext& c, size_t i) {
  if (c.input_dtype(i) != DType::Bool)
    c.fail("input " + std::to_string(i) + " must be bool, not " + dtype_name(c.input_dtype(i)));
}

// Binary arithmetic (Add Sub Mul Div Mod): same numeric type in and out.
void infer_arithmetic(InferContext& c) {
  require_same_types(c);
  require_numeric(c, 0);
  c.set_output(0, c.input_dtype(0), binary_shape(c));
}

// Comparisons: same type in, bool out.
void infer_compare(InferContext& c) {
  require_same_types(c);
  if (!is_numeric(c.input_dtype(0)) && c.input_dtype(0) != DType::Bool)
    c.unsupported(std::string("unsupported input type ") + dtype_name(c.input_dtype(0)));
  c.set_output(0, DType::Bool, binary_shape(c));
}

void infer_logic(InferContext& c) {
  require_bool(c, 0);
  require_bool(c, 1);
  c.set_output(0, DType::Bool, binary_shape(c));
}

// Pow: the base decides the output type; since opset 12 the exponent may be any numeric type.
void infer_pow(InferContext& c) {
  DType base = c.input_dtype(0);
  if (c.opset() < 12) {
    require_same_types(c);
    c.require_float(0);
  } else {
    if (!is_float(base) && base != DType::Int32 && base != DType::Int64)
      c.unsupported(std::string("base type ") + dtype_name(base) + " is not supported (int32, int64 or float)");
    require_numeric(c, 1);
  }
  c.set_output(0, base, binary_shape(c));
}

// Variadic Max/Min/Sum/Mean.
void infer_variadic(InferContext& c, bool float_only) {
  require_same_types(c);
  if (float_only)
    c.require_float(0);
  else
    require_numeric(c, 0);
  c.set_output(0, c.input_dtype(0), broadcast_all_inputs(c));
}

CostFn variadic_cost(bool mean) {
  // n inputs: n-1 binary ops per element (Mean adds one multiply).
  return [mean](const CostContext& c) {
    double n = 0;
    for (size_t i = 0; i < c.in_dims.size(); ++i) n += c.has_input(i) ? 1 : 0;
    return cost_elementwise(c, std::max(0.0, n - 1) + (mean ? 1 : 0));
  };
}

enum class UnaryTypes { Float, Numeric, Signed };

void declare_unary(OpRegistry& r, const char* op, int64_t since, UnaryTypes types, double flops) {
  r.add(op)
      .since(since)
      .io(1, 1)
      .set_infer([types](InferContext& c) {
        DType t = c.input_dtype(0);
        if (types == UnaryTypes::Float)
          c.require_float(0);
        else if (types == UnaryTypes::Numeric)
          require_numeric(c, 0);
        else if (!is_numeric(t) || !is_signed(t))
          c.fail(std::string("input must be a signed numeric type, not ") + dtype_name(t));
        c.propagate(0);
      })
      .set_cost(flops_per_element(flops));
}

// Pre-opset-7 binary entries: `broadcast` and `axis` (and, before 6, `consumed_inputs`).
void declare_legacy_binary(OpRegistry& r, const char* op, int64_t lo, int64_t hi, bool consumed_inputs, InferFn infer,
                           double flops) {
  auto& s = r.add(op)
                .since(lo, hi)
                .io(2, 2)
                .attr("broadcast", AttrKind::Int, AttrValue{int64_t{0}})
                .attr("axis", AttrKind::Int);
  if (consumed_inputs) s.attr("consumed_inputs", AttrKind::Ints);
  s.set_infer(std::move(infer)).set_cost(flops_per_element(flops));
}

void infer_cast_to(InferContext& c, DType to) { c.set_output(0, to, c.input_shape(0)); }

Cost cast_like_cost(const CostContext& c) {
  // Reads only input 0's data; the target only lends its type.
  return {0, c.in_bytes(0), c.out_bytes(0)};
}

void infer_clip(InferContext& c) {
  if (c.opset() < 12)
    c.require_float(0);
  else
    require_numeric(c, 0);
  for (size_t i = 1; i < 3; ++i) {
    if (!c.has_input(i)) continue;
    if (c.input_dtype(i) != c.input_dtype(0))
      c.fail(std::string("min/max must have the input's type ") + dtype_name(c.input_dtype(0)) + ", not " +
             dtype_name(c.input_dtype(i)));
    const auto& s = c.input_shape(i);
    if (s && is_static(*s) && checked_numel(static_dims(*s)) != 1)
      c.fail("min/max must be scalars, got shape " + shape_str(*s));
  }
  c.propagate(0);
}

}  // namespace

void register_elementwise_schemas(OpRegistry& r) {
  // ---- binary arithmetic ----
  for (const char* op : {"Add", "Sub", "Mul", "Div"}) {
    declare_legacy_binary(r, op, 1, 5, true, infer_arithmetic, 1);
    declare_legacy_binary(r, op, 6, 6, false, infer_arithmetic, 1);
    r.add(op).since(7).io(2, 2).set_infer(infer_arithmetic).set_cost(flops_per_element(1));
  }
  declare_legacy_binary(r, "Pow", 1, 6, false, infer_pow, kTranscendental);
  r.add("Pow").since(7).io(2, 2).set_infer(infer_pow).set_cost(flops_per_element(kTranscendental));
  // Before opset 28 a floating-point Mod had to truncate (fmod 1); from 28 fmod 0 is the floored
  // modulo for every type (the result takes the divisor's sign).
  r.add("Mod")
      .since(10, 27)
      .io(2, 2)
      .attr("fmod", AttrKind::Int, AttrValue{int64_t{0}})
      .set_infer([](InferContext& c) {
        infer_arithmetic(c);
        if (is_float(c.input_dtype(0)) && c.attr_int("fmod") == 0)
          c.fail("fmod must be 1 for floating-point inputs before opset 28");
      })
      .set_cost(flops_per_element(2));  // a divide and a multiply-subtract
  r.add("Mod")
      .since(28)
      .io(2, 2)
      .attr("fmod", AttrKind::Int, AttrValue{int64_t{0}})
      .set_infer([](InferContext& c) {
        infer_arithmetic(c);
        const int64_t fmod = c.attr_int("fmod");
        if (fmod != 0 && fmod != 1) c.fail("fmod must be 0 or 1, not " + std::to_string(fmod));
      })
      .set_cost(flops_per_element(2));

  // ---- variadic ----
  r.add("Max")
      .since(6)
      .io(1, INT_MAX)
      .set_infer([](InferContext& c) { infer_variadic(c, false); })
      .set_cost(variadic_cost(false));
  r.add("Min")
      .since(6)
      .io(1, INT_MAX)
      .set_infer([](InferContext& c) { infer_variadic(c, false); })
      .set_cost(variadic_cost(false));
  r.add("Sum")
      .since(6)
      .io(1, INT_MAX)
      .set_infer([](InferContext& c) { infer_variadic(c, false); })
      .set_cost(variadic_cost(false));
  r.add("Mean")
      .since(6)
      .io(1, INT_MAX)
      .set_infer([](InferContext& c) { infer_variadic(c, true); })
      .set_cost(variadic_cost(true));

  // ---- unary math ----
  declare_unary(r, "Abs", 6, UnaryTypes::Numeric, 1);
  declare_unary(r, "Neg", 6, UnaryTypes::Signed, 1);
  declare_unary(r, "Sign", 9, UnaryTypes::Numeric, 1);
  declare_unary(r, "Reciprocal", 6, UnaryTypes::Float, 1);
  declare_unary(r, "Sqrt", 6, UnaryTypes::Float, 1);
  declare_unary(r, "Floor", 6, UnaryTypes::Float, 1);
  declare_unary(r, "Ceil", 6, UnaryTypes::Float, 1);
  declare_unary(r, "Round", 11, UnaryTypes::Float, 1);
  declare_unary(r, "Exp", 6, UnaryTypes::Float, kTranscendental);
  declare_unary(r, "Log", 6, UnaryTypes::Float, kTranscendental);
  declare_unary(r, "Erf", 9, UnaryTypes::Numeric, kTranscendental);
  for (const char* op : {"Sin", "Cos", "Tan", "Asin", "Acos", "Atan"})
    declare_unary(r, op, 7, UnaryTypes::Float, kTranscendental);
  for (const char* op : {"Sinh", "Cosh", "Asinh", "Acosh", "Atanh"})
    declare_unary(r, op, 9, UnaryTypes::Float, kTranscendental);

  r.add("IsNaN")
      .since(9)
      .io(1, 1)
      .set_infer([](InferContext& c) {
        c.require_float(0);
        c.set_output(0, DType::Bool, c.input_shape(0));
      })
      .set_cost(flops_per_element(1));
  r.add("IsInf")
      .since(10)
      .io(1, 1)
      .attr("detect_negative", AttrKind::Int, AttrValue{int64_t{1}})
      .attr("detect_positive", AttrKind::Int, AttrValue{int64_t{1}})
      .set_infer([](InferContext& c) {
        c.require_float(0);
        c.set_output(0, DType::Bool, c.input_shape(0));
      })
      .set_cost(flops_per_element(1));

  // ---- comparison and logic ----
  for (const char* op : {"Equal", "Less", "Greater"}) {
    declare_legacy_binary(r, op, 1, 6, false, infer_compare, 1);
    r.add(op).since(7).io(2, 2).set_infer(infer_compare).set_cost(flops_per_element(1));
  }
  for (const char* op : {"LessOrEqual", "GreaterOrEqual"})
    r.add(op).since(12).io(2, 2).set_infer(infer_compare).set_cost(flops_per_element(1));
  for (const char* op : {"And", "Or", "Xor"}) {
    declare_legacy_binary(r, op, 1, 6, false, infer_logic, 1);
    r.add(op).since(7).io(2, 2).set_infer(infer_logic).set_cost(flops_per_element(1));
  }
  r.add("Not")
      .since(1)
      .io(1, 1)
      .set_infer([](InferContext& c) {
        require_bool(c, 0);
        c.propagate(0);
      })
      .set_cost(flops_per_element(1));
  // fusec's only unsigned type is uint8 (uint16/32/64 are rejected at import); opset 28 adds the
  // signed types, shifted arithmetically.
  auto bitshift = [](bool signed_types) {
    return [signed_types](InferContext& c) {
      require_same_types(c);
      if (signed_types)
        c.require_dtype(0, {DType::UInt8, DType::Int8, DType::Int16, DType::Int32, DType::Int64});
      else
        c.require_dtype(0, {DType::UInt8});
      std::string d = c.attr_string("direction");
      if (d != "LEFT" && d != "RIGHT") c.fail("direction must be LEFT or RIGHT, not '" + d + "'");
      c.set_output(0, c.input_dtype(0), broadcast_all_inputs(c));
    };
  };
  r.add("BitShift")
      .since(11, 27)
      .io(2, 2)
      .required_attr("direction", AttrKind::String)
      .set_infer(bitshift(false))
      .set_cost(flops_per_element(1));
  r.add("BitShift")
      .since(28)
      .io(2, 2)
      .required_attr("direction", AttrKind::String)
      .set_infer(bitshift(true))
      .set_cost(flops_per_element(1));

  // Bitwise ops on the integer types (opset 18); fusec's only unsigned type is uint8.
  auto bitwise = [](InferContext& c) {
    require_same_types(c);
    c.require_dtype(0, {DType::UInt8, DType::Int8, DType::Int16, DType::Int32, DType::Int64});
    c.set_output(0, c.input_dtype(0), broadcast_all_inputs(c));
  };
  for (const char* op : {"BitwiseAnd", "BitwiseOr", "BitwiseXor"})
    r.add(op).since(18).io(2, 2).set_infer(bitwise).set_cost(flops_per_element(1));
  r.add("BitwiseNot").since(18).io(1, 1).set_infer(bitwise).set_cost(flops_per_element(1));

  r.add("Where")
      .since(9)
      .io(3, 3)
      .set_infer([](InferContext& c) {
        require_bool(c, 0);
        if (c.input_dtype(1) != c.input_dtype(2))
          c.fail(std::string("X and Y have different types: ") + dtype_name(c.input_dtype(1)) + " and " +
                 dtype_name(c.input_dtype(2)));
        c.set_output(0, c.input_dtype(1), broadcast_all_inputs(c));
      })
      .set_cost(flops_per_element(1));

  // ---- conversion ----
  // `to` is an ONNX TensorProto.DataType code; strings, float8, int4 and the wide unsigned types
  // are not fusec dtypes. `saturate` (opset 19) only affects float8 targets.
  auto infer_cast = [](InferContext& c) {
    int64_t to = c.attr_int("to");
    DType t = to >= INT32_MIN && to <= INT32_MAX ? dtype_from_onnx(static_cast<int32_t>(to)) : DType::Undefined;
    if (t == DType::Undefined) c.unsupported("Cast to " + onnx_dtype_name(static_cast<int32_t>(to)) + " is not supported");
    infer_cast_to(c, t);
  };
  r.add("Cast")
      .since(6, 18)
      .io(1, 1)
      .required_attr("to", AttrKind::Int)
      .set_infer(infer_cast)
      .set_cost(cost_data_movement);
  r.add("Cast")
      .since(19)
      .io(1, 1)
      .required_attr("to", AttrKind::Int)
      .attr("saturate", AttrKind::Int, AttrValue{int64_t{1}})
      .set_infer(infer_cast)
      .set_cost(cost_data_movement);
  auto infer_cast_like = [](InferContext& c) { infer_cast_to(c, c.input_dtype(1)); };
  r.add("CastLike").since(15, 18).io(2, 2).set_infer(infer_cast_like).set_cost(cast_like_cost);
  r.add("CastLike")
      .since(19)
      .io(2, 2)
      .attr("saturate", AttrKind::Int, AttrValue{int64_t{1}})
      .set_infer(infer_cast_like)
      .set_cost(cast_like_cost);

  // ---- Clip: bounds are attributes before opset 11, optional scalar inputs since ----
  r.add("Clip")
      .since(6, 10)
      .io(1, 1)
      .attr("min", AttrKind::Float, AttrValue{-FLT_MAX})
      .attr("max", AttrKind::Float, AttrValue{FLT_MAX})
      .set_infer(infer_clip)
      .set_cost(flops_per_element(2));
  r.add("Clip").since(11).io(1, 3).set_infer(infer_clip).set_cost(flops_per_element(2));
}

}  // namespace fusec
