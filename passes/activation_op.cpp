#include "passes/activation_op.h"

#include <cfloat>

#include "passes/pattern.h"

namespace fusec {

namespace {

float scalar_or(const Value* v, float def) {
  if (!v) return def;
  return static_cast<float>(constant_of(v)->as_double(0));
}

}  // namespace

bool is_activation_op(const Node* n) {
  static const char* kOps[] = {"Relu",    "Clip", "LeakyRelu", "PRelu", "HardSigmoid",
                               "Sigmoid", "Tanh", "HardSwish", "Gelu"};
  if (!n->domain.empty() && !(n->domain == "ai.fusec" && n->op_type == "Gelu")) return false;
  for (const char* op : kOps)
    if (n->op_type == op) return true;
  return false;
}

std::optional<ActivationOp> activation_of(Node* n, std::string* why) {
  if (!is_activation_op(n)) return std::nullopt;
  const std::string& op = n->op_type;
  ActivationOp a{n, op, {}};
  if (op == "Relu" || op == "Sigmoid" || op == "Tanh" || op == "HardSwish") return a;
  if (op == "LeakyRelu") {
    a.params = {n->attr_float("alpha", 0.01f)};
    return a;
  }
  if (op == "HardSigmoid") {
    a.params = {n->attr_float("alpha", 0.2f), n->attr_float("beta", 0.5f)};
    return a;
  }
  if (op == "PRelu") {
    const std::optional<double> slope = uniform_constant(n->input(1));
    if (!slope) {
      *why = constant_of(n->input(1)) ? "the PRelu slope varies (per channel); the fused LeakyRelu takes one value"
                                      : "the PRelu slope '" + n->input(1)->name + "' is not a constant";
      return std::nullopt;
    }
    a.name = "LeakyRelu";
    a.params = {static_cast<float>(*slope)};
    return a;
  }
  if (op == "Gelu") {
    std::string approx = n->attr_string("approximate", "none");
    if (approx != "none" && approx != "tanh") {
      *why = "Gelu approximate='" + approx + "'";
      return std::nullopt;
    }
    a.name = approx == "tanh" ? "GeluTanh" : "Gelu";
    return a;
  }
  // Clip: its bounds are inputs from opset 11, attributes before; absent ones are the float range,
  // as the Clip kernel has them.
  for (size_t i = 1; i < 3; ++i) {
    const Value* b = n->input(i);
    if (b && (!constant_of(b) || constant_of(b)->numel() != 1)) {
      *why = std::string("Clip's ") + (i == 1 ? "min" : "max") + " '" + b->name + "' is not a constant";
      return std::nullopt;
    }
  }
  a.params = {scalar_or(n->input(1), n->attr_float("min", -FLT_MAX)),
              scalar_or(n->input(2), n->attr_float("max", FLT_MAX))};
  return a;
}

}  // namespace fusec
