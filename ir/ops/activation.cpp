// Activation functions: elementwise, same type and shape in and out (PRelu's slope broadcasts
// onto X).
//
// Cost model (FLOPs per element): compare/select/multiply count 1 each; exp, log, tanh and erf
// count kTranscendental = 8 (a polynomial after range reduction), so e.g. Sigmoid = exp + add +
// divide = 10 and Softplus = exp + log + add = 17.
#include "ir/op_schema.h"
#include "ir/ops/all_ops.h"

namespace fusec {

namespace {

constexpr double kTranscendental = 8;

CostFn flops_per_element(double f) {
  return [f](const CostContext& c) { return cost_elementwise(c, f); };
}

void infer_float(InferContext& c) {
  c.require_float(0);
  c.propagate(0);
}

// Relu (opset 14) and Shrink/PRelu (9) also take integer types; accept them at every version.
void infer_numeric(InferContext& c) {
  DType t = c.input_dtype(0);
  if (!is_float(t) && !is_integer(t)) c.fail(std::string("input 0 must be numeric, not ") + dtype_name(t));
  c.propagate(0);
}

// PRelu: slope broadcasts unidirectionally onto X. Before opset 7 a 1-D slope of X's channel
// count applies per channel (axis 1), as PyTorch exported it.
void infer_prelu(InferContext& c) {
  infer_numeric(c);
  if (c.input_dtype(1) != c.input_dtype(0))
    c.fail(std::string("slope type ") + dtype_name(c.input_dtype(1)) + " differs from X's " +
           dtype_name(c.input_dtype(0)));
  const auto& x = c.input_shape(0);
  const auto& s = c.input_shape(1);
  if (!x || !s) return;
  if (c.opset() < 7 && s->size() == 1 && x->size() >= 2 && (*s)[0].is_static() && (*x)[1].is_static() &&
      (*s)[0].value == (*x)[1].value && (*s)[0].value != 1)
    return;  // per-channel slope
  if (s->size() > x->size()) c.fail("slope " + shape_str(*s) + " does not broadcast onto X " + shape_str(*x));
  Shape b = broadcast_shapes(*x, *s, c);
  for (size_t i = 0; i < x->size(); ++i)
    if (b[i].is_static() && (*x)[i].is_static() && b[i].value != (*x)[i].value)
      c.fail("slope " + shape_str(*s) + " does not broadcast onto X " + shape_str(*x));
}

}  // namespace

void register_activation_schemas(OpRegistry& r) {
  r.add("Relu").since(6).io(1, 1).set_infer(infer_numeric).set_cost(flops_per_element(1));
  r.add("LeakyRelu")
      .since(6)
      .io(1, 1)
      .attr("alpha", AttrKind::Float, AttrValue{0.01f})
      .set_infer(infer_float)
      .set_cost(flops_per_element(2));
  r.add("PRelu").since(6).io(2, 2).set_infer(infer_prelu).set_cost(flops_per_element(2));
  r.add("Sigmoid").since(6).io(1, 1).set_infer(infer_float).set_cost(flops_per_element(kTranscendental + 2));
  r.add("HardSigmoid")
      .since(6)
      .io(1, 1)
      .attr("alpha", AttrKind::Float, AttrValue{0.2f})
      .attr("beta", AttrKind::Float, AttrValue{0.5f})
      .set_infer(infer_float)
      .set_cost(flops_per_element(4));
  r.add("Swish")
      .since(24)
      .io(1, 1)
      .attr("alpha", AttrKind::Float, AttrValue{1.0f})
      .set_infer(infer_float)
      .set_cost(flops_per_element(kTranscendental + 4));
  r.add("HardSwish").since(14).io(1, 1).set_infer(infer_float).set_cost(flops_per_element(5));
  r.add("Tanh").since(6).io(1, 1).set_infer(infer_float).set_cost(flops_per_element(kTranscendental));
  r.add("Elu")
      .since(6)
      .io(1, 1)
      .attr("alpha", AttrKind::Float, AttrValue{1.0f})
      .set_infer(infer_float)
      .set_cost(flops_per_element(kTranscendental + 2));
  r.add("Selu")
      .since(6)
      .io(1, 1)
      .attr("alpha", AttrKind::Float, AttrValue{1.67326319217681884765625f})
      .attr("gamma", AttrKind::Float, AttrValue{1.05070102214813232421875f})
      .set_infer(infer_float)
      .set_cost(flops_per_element(kTranscendental + 3));
  r.add("Celu")
      .since(12)
      .io(1, 1)
      .attr("alpha", AttrKind::Float, AttrValue{1.0f})
      .set_infer(infer_float)
      .set_cost(flops_per_element(kTranscendental + 4));
  r.add("Softplus").since(1).io(1, 1).set_infer(infer_float).set_cost(flops_per_element(2 * kTranscendental + 1));
  r.add("Softsign").since(1).io(1, 1).set_infer(infer_float).set_cost(flops_per_element(3));
  r.add("ThresholdedRelu")
      .since(10)
      .io(1, 1)
      .attr("alpha", AttrKind::Float, AttrValue{1.0f})
      .set_infer(infer_float)
      .set_cost(flops_per_element(1));
  r.add("Shrink")
      .since(9)
      .io(1, 1)
      .attr("bias", AttrKind::Float, AttrValue{0.0f})
      .attr("lambd", AttrKind::Float, AttrValue{0.5f})
      .set_infer(infer_numeric)
      .set_cost(flops_per_element(2));
  // Mish = x * tanh(softplus(x)).
  r.add("Mish").since(18).io(1, 1).set_infer(infer_float).set_cost(flops_per_element(3 * kTranscendental + 2));

  // Gelu: exact 0.5x(1+erf(x/√2)) or the tanh approximation. fusec's fusion passes also write it
  // into models whose ai.onnx opset is below 20, so it exists in "ai.fusec" too, with the same
  // attribute and semantics.
  auto infer_gelu = [](InferContext& c) {
    std::string a = c.attr_string("approximate");
    if (a != "none" && a != "tanh") c.fail("approximate must be 'none' or 'tanh', not '" + a + "'");
    infer_float(c);
  };
  // none: erf + 4 (scale, add, two multiplies); tanh: tanh + 7 (x³ term, scales, add, multiplies).
  auto gelu_cost = [](const CostContext& c) {
    bool tanh = false;
    if (const Attribute* a = c.node.find_attr("approximate"))
      if (auto* s = std::get_if<std::string>(&a->value)) tanh = *s == "tanh";
    return cost_elementwise(c, kTranscendental + (tanh ? 7 : 4));
  };
  r.add("Gelu")
      .since(20)
      .io(1, 1)
      .attr("approximate", AttrKind::String, AttrValue{std::string("none")})
      .set_infer(infer_gelu)
      .set_cost(gelu_cost);
  r.add("Gelu", "ai.fusec")
      .since(1)
      .io(1, 1)
      .attr("approximate", AttrKind::String, AttrValue{std::string("none")})
      .set_infer(infer_gelu)
      .set_cost(gelu_cost)
      .set_doc("Gelu as in ai.onnx opset 20, for models of any opset (written by fusion passes).");
}

}  // namespace fusec
