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

std::optional<ActivationOp> activation_of(Node* n, std::string* why) {
  const bool gelu = n->op_type == "Gelu" && (n->domain.empty() || n->domain == "ai.fusec");
  if (!n->domain.empty() && !gelu) return std::nullopt;
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
  if (gelu) {
    std::string approx = n->attr_string("approximate", "none");
    if (approx != "none" && approx != "tanh") return std::nullopt;
    a.name = approx == "tanh" ? "GeluTanh" : "Gelu";
    return a;
  }
  if (op == "Clip") {
    for (size_t i = 1; i < 3; ++i) {
      const Value* b = n->input(i);
      if (b && (!constant_of(b) || constant_of(b)->numel() != 1)) {
        *why = "the Clip bound '" + b->name + "' is not a constant";
        return std::nullopt;
      }
    }
    // Absent bounds are the float range, as the Clip kernel has them.
    a.params = {scalar_or(n->input(1), n->attr_float("min", -FLT_MAX)),
                scalar_or(n->input(2), n->attr_float("max", FLT_MAX))};
    return a;
  }
  return std::nullopt;
}

}  // namespace fusec
