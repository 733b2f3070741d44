// Linear quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, and the integer
// products MatMulInteger, ConvInteger, QLinearMatMul and QLinearConv (what ONNX Runtime's quantizer
// and QDQ exports produce).
//
// A quantized tensor is uint8, int8 or int16 here (ir/ops/quantize.h). Scales are float32 before
// opset 19; from 19 on they may be any float type, and DequantizeLinear's output takes the scale's.
#include "ir/op_schema.h"
#include "ir/ops/all_ops.h"
#include "ir/ops/conv_geometry.h"
#include "ir/ops/linalg.h"
#include "ir/ops/quantize.h"

namespace fusec {

namespace {

constexpr std::initializer_list<DType> kFloats = {DType::Float32, DType::Float16, DType::BFloat16};
constexpr std::initializer_list<DType> kInt8s = {DType::UInt8, DType::Int8};

void require_quantized(const InferContext& c, size_t i, const char* what) {
  if (!quant::is_quantized_type(c.input_dtype(i)))
    c.unsupported(std::string(what) + " of type " + dtype_name(c.input_dtype(i)) +
                  " (fusec quantizes to uint8, int8 and int16)");
}

/// The scale's (input si) type, and the zero point's (input zi, optional) shape against it.
void require_scale(const InferContext& c, size_t si, size_t zi) {
  if (c.opset() < 19)
    c.require_dtype(si, {DType::Float32});
  else
    c.require_dtype(si, kFloats);
  if (!c.has_input(zi)) return;
  const auto& ss = c.input_shape(si);
  const auto& zs = c.input_shape(zi);
  if (ss && zs && is_static(*ss) && is_static(*zs) &&
      checked_numel(static_dims(*ss)) != checked_numel(static_dims(*zs)))
    c.fail("the zero point " + shape_str(*zs) + " and the scale " + shape_str(*ss) + " differ in size");
}

/// The scale (input si) against x (input 0) when both shapes are known: the kernel checks it again
/// on the dims it runs with.
void check_layout(const InferContext& c, size_t si) {
  const auto& xs = c.input_shape(0);
  const auto& ss = c.input_shape(si);
  if (!xs || !ss || !is_static(*xs) || !is_static(*ss)) return;
  if (c.opset() < 13 && checked_numel(static_dims(*ss)) != 1) c.fail("before opset 13 the scale must be a scalar");
  const int64_t axis = c.opset() >= 13 ? c.attr_int("axis") : 1;
  const int64_t block = c.opset() >= 21 ? c.attr_int("block_size") : 0;
  quant::scale_layout(c, static_dims(*xs), static_dims(*ss), axis, block);
}

// y = saturate(round_half_even(x / scale) + zero_point), typed by the zero point, else
// output_dtype (opset 21), else uint8.
void infer_quantize_linear(InferContext& c) {
  if (c.opset() < 19)
    c.require_dtype(0, {DType::Float32, DType::Int32});
  else
    c.require_dtype(0, {DType::Float32, DType::Float16, DType::BFloat16, DType::Int32});
  require_scale(c, 1, 2);
  check_layout(c, 1);
  DType out = DType::UInt8;
  if (c.has_input(2)) {
    out = c.input_dtype(2);
    require_quantized(c, 2, "a zero point");
  } else if (c.opset() >= 21 && c.attr_int("output_dtype") != 0) {
    out = dtype_from_onnx(static_cast<int32_t>(c.attr_int("output_dtype")));
    if (!quant::is_quantized_type(out))
      c.unsupported("output_dtype " + onnx_dtype_name(static_cast<int32_t>(c.attr_int("output_dtype"))) +
                    " (fusec quantizes to uint8, int8 and int16)");
  }
  if (c.opset() >= 21 && c.has_input(2) && c.attr_int("output_dtype") != 0 &&
      dtype_from_onnx(static_cast<int32_t>(c.attr_int("output_dtype"))) != out)
    c.fail("output_dtype disagrees with the zero point's type");
  c.set_output(0, out, c.input_shape(0));
}

// y = (x - zero_point) * scale, typed by the scale.
void infer_dequantize_linear(InferContext& c) {
  const DType x = c.input_dtype(0);
  if (x != DType::Int32) require_quantized(c, 0, "x");
  require_scale(c, 1, 2);
  if (c.has_input(2) && c.input_dtype(2) != x)
    c.fail(std::string("the zero point is ") + dtype_name(c.input_dtype(2)) + " but x is " + dtype_name(x));
  check_layout(c, 1);
  if (c.opset() >= 21 && c.attr_int("output_dtype") != 0 &&
      dtype_from_onnx(static_cast<int32_t>(c.attr_int("output_dtype"))) != c.input_dtype(1))
    c.unsupported("an output_dtype other than the scale's type");
  c.set_output(0, c.input_dtype(1), c.input_shape(0));
}

// uint8 y with the scalar scale and zero point that map [min(x, 0), max(x, 0)] onto [0, 255].
void infer_dynamic_quantize_linear(InferContext& c) {
  c.require_dtype(0, {DType::Float32});
  c.set_output(0, DType::UInt8, c.input_shape(0));
  c.set_output(1, DType::Float32, Shape{});
  c.set_output(2, DType::UInt8, Shape{});
}

/// The integer products' two operands (inputs a, b), uint8 or int8, and their optional zero points
/// (za, zb: of the operands' types).
void require_int8_operands(const InferContext& c, size_t a, size_t za, size_t b, size_t zb, const char* names) {
  c.require_dtype(a, kInt8s);
  c.require_dtype(b, kInt8s);
  if ((c.has_input(za) && c.input_dtype(za) != c.input_dtype(a)) ||
      (c.has_input(zb) && c.input_dtype(zb) != c.input_dtype(b)))
    c.fail(std::string("a zero point's type is not its operand's (") + names + ")");
}

/// QLinearMatMul's and QLinearConv's operands (0, 3), their scales (1, 4) and y's (6), each scale
/// with its zero point after it; the output takes y's zero point's type.
void require_qlinear_operands(const InferContext& c, const char* names) {
  require_int8_operands(c, 0, 2, 3, 5, names);
  for (size_t s : {1, 4, 6}) require_scale(c, s, s + 1);
  c.require_dtype(7, kInt8s);
}

// int32 A·B of zero-point-shifted uint8/int8 operands.
void infer_matmul_integer(InferContext& c) {
  require_int8_operands(c, 0, 2, 1, 3, "A, B");
  c.set_output(0, DType::Int32, matmul_output_shape(c, 0, 1));
}

// a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point: the product requantized.
void infer_qlinear_matmul(InferContext& c) {
  require_qlinear_operands(c, "a, b");
  c.set_output(0, c.input_dtype(7), matmul_output_shape(c, 0, 3));
}

// x, w, x_zero_point, w_zero_point: an int32 convolution of the shifted operands.
void infer_conv_integer(InferContext& c) {
  require_int8_operands(c, 0, 2, 1, 3, "x, w");
  infer_conv_output(c, 0, 1, 8, DType::Int32);
}

// x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B (int32).
void infer_qlinear_conv(InferContext& c) {
  require_qlinear_operands(c, "x, w");
  if (c.has_input(8)) c.require_dtype(8, {DType::Int32});
  infer_conv_output(c, 0, 3, 8, c.input_dtype(7));
}

/// A subtract and a multiply (and a round) per element.
Cost cost_per_element(const CostContext& c) { return {2 * c.out_numel(0), c.all_in_bytes(), c.all_out_bytes()}; }

/// A's last dim (K) multiply-adds per output element.
Cost cost_integer_matmul(const CostContext& c) {
  const auto& a = c.in_dims[0];
  const double k = a.empty() ? 0 : static_cast<double>(a.back());
  return {2 * c.out_numel(0) * k, c.all_in_bytes(), c.all_out_bytes()};
}

/// (C/group)·prod(kernel) multiply-adds per output element; W is input `wi`.
template <size_t wi>
Cost cost_integer_conv(const CostContext& c) {
  double per = 1;
  for (size_t i = 1; i < c.in_dims[wi].size(); ++i) per *= static_cast<double>(c.in_dims[wi][i]);
  return {2 * c.out_numel(0) * per, c.all_in_bytes(), c.all_out_bytes()};
}

OpSchema& conv_attrs(OpSchema& s) {
  return s.attr("auto_pad", AttrKind::String, AttrValue{std::string("NOTSET")})
      .attr("dilations", AttrKind::Ints)
      .attr("group", AttrKind::Int, AttrValue{int64_t{1}})
      .attr("kernel_shape", AttrKind::Ints)
      .attr("pads", AttrKind::Ints)
      .attr("strides", AttrKind::Ints);
}

}  // namespace

void register_quantize_schemas(OpRegistry& r) {
  r.add("QuantizeLinear").since(10, 12).io(2, 3).set_infer(infer_quantize_linear).set_cost(cost_per_element);
  r.add("QuantizeLinear")
      .since(13, 18)
      .io(2, 3)
      .attr("axis", AttrKind::Int, AttrValue{int64_t{1}})
      .set_infer(infer_quantize_linear)
      .set_cost(cost_per_element);
  // saturate only changes float8 outputs, which fusec declines; it is accepted and has no effect.
  r.add("QuantizeLinear")
      .since(19, 20)
      .io(2, 3)
      .attr("axis", AttrKind::Int, AttrValue{int64_t{1}})
      .attr("saturate", AttrKind::Int, AttrValue{int64_t{1}})
      .set_infer(infer_quantize_linear)
      .set_cost(cost_per_element);
  r.add("QuantizeLinear")
      .since(21)
      .io(2, 3)
      .attr("axis", AttrKind::Int, AttrValue{int64_t{1}})
      .attr("block_size", AttrKind::Int, AttrValue{int64_t{0}})
      .attr("output_dtype", AttrKind::Int, AttrValue{int64_t{0}})
      .attr("precision", AttrKind::Int, AttrValue{int64_t{0}})
      .attr("saturate", AttrKind::Int, AttrValue{int64_t{1}})
      .set_infer(infer_quantize_linear)
      .set_cost(cost_per_element);

  r.add("DequantizeLinear").since(10, 12).io(2, 3).set_infer(infer_dequantize_linear).set_cost(cost_per_element);
  r.add("DequantizeLinear")
      .since(13, 20)
      .io(2, 3)
      .attr("axis", AttrKind::Int, AttrValue{int64_t{1}})
      .set_infer(infer_dequantize_linear)
      .set_cost(cost_per_element);
  r.add("DequantizeLinear")
      .since(21)
      .io(2, 3)
      .attr("axis", AttrKind::Int, AttrValue{int64_t{1}})
      .attr("block_size", AttrKind::Int, AttrValue{int64_t{0}})
      .attr("output_dtype", AttrKind::Int, AttrValue{int64_t{0}})
      .set_infer(infer_dequantize_linear)
      .set_cost(cost_per_element);

  r.add("DynamicQuantizeLinear")
      .since(11)
      .io(1, 1, 3, 3)
      .set_infer(infer_dynamic_quantize_linear)
      .set_cost(cost_per_element);
  r.add("MatMulInteger").since(10).io(2, 4).set_infer(infer_matmul_integer).set_cost(cost_integer_matmul);
  r.add("QLinearMatMul").since(10).io(8, 8).set_infer(infer_qlinear_matmul).set_cost(cost_integer_matmul);
  conv_attrs(r.add("ConvInteger").since(10).io(2, 4)).set_infer(infer_conv_integer).set_cost(cost_integer_conv<1>);
  conv_attrs(r.add("QLinearConv").since(10).io(8, 9)).set_infer(infer_qlinear_conv).set_cost(cost_integer_conv<3>);
}

}  // namespace fusec
