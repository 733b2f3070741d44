// recognize_gelu: the GELU subgraphs exporters write become one Gelu node.
//
//   erf form (PyTorch, TensorFlow, Keras; every Mul and Add may have its operands either way round):
//
//     x ─┬─ Div(·, √2) | Mul(·, 1/√2) ── Erf ── Add(·, 1) ──▶ E
//        │
//        ├──  Mul(x, E) ── Mul(·, ½) | Div(·, 2) ──▶ y             (x·E)·½
//        ├──  Mul(E, ½) ── Mul(·, x) ──▶ y                          (E·½)·x
//        └──  Mul(x, ½) ── Mul(·, E) ──▶ y                          (x·½)·E
//
//   tanh form (x³ as Pow(x, 3), Mul(Mul(x, x), x) or Mul(x, Mul(x, x))):
//
//     x ── x³ ── Mul(·, 0.044715) ── Add(x, ·) ── Mul(·, √(2/π)) ── Tanh ── Add(·, 1) ──▶ E, then as above
//
//   ½·x·(1 + erf(x/√2))                        =>  Gelu(x)
//   ½·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))   =>  Gelu(x, approximate = "tanh")
//
// Constants may be scalars or shape [1] and must match within 1e-4 relative (plus the rounding of a
// float16/bfloat16 constant); every intermediate
// must be read only inside the pattern. Gelu is standard ONNX from opset 20: it is written in
// ai.onnx when the model's opset is 20 or can be raised to 20, else in ai.fusec (same semantics),
// and under --portable with neither it is a near-miss. An ai.fusec Gelu moves to ai.onnx as soon
// as the opset can be raised (typically once recognize_layernorm has replaced the ReduceMeans whose
// meaning changes at opset 18).
#include "passes/recognize_gelu.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <unordered_map>

#include "passes/pattern.h"
#include "passes/rewrite.h"

namespace fusec {

namespace {

constexpr double kSqrt2 = 1.4142135623730951;
constexpr double kInvSqrt2 = 0.7071067811865476;
constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kTanhCubic = 0.044715;
constexpr double kRelTol = 1e-4;

/// A constant operand of the pattern and the value GELU has there.
struct Expected {
  const Value* v;
  double want;
};

struct GeluMatch {
  Value* x = nullptr;  // GELU's input
  Value* y = nullptr;  // the last node's output: the Gelu writes this value
  bool tanh = false;
  std::vector<Node*> nodes;         // every node the Gelu replaces
  std::vector<Value*> inner;        // values that must be read only inside the pattern
  std::vector<Expected> constants;  // checked once the op types line up
};

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

/// For a binary node with exactly one constant operand: that operand, and the other in *var.
const Value* constant_operand(const Node* n, Value** var) {
  if (!n || n->inputs.size() != 2 || !n->inputs[0] || !n->inputs[1]) return nullptr;
  bool c0 = constant_of(n->inputs[0]) != nullptr, c1 = constant_of(n->inputs[1]) != nullptr;
  if (c0 == c1) return nullptr;
  *var = c0 ? n->inputs[1] : n->inputs[0];
  return c0 ? n->inputs[0] : n->inputs[1];
}

/// n = Mul(v, c) | Mul(c, v) with c constant (wants `mul`), or Div(v, c) (wants `div`).
bool scales(const Node* n, const Value* v, double mul, double div, GeluMatch& m) {
  if (is_op(n, "Div") && n->inputs.size() == 2 && n->inputs[0] == v && constant_of(n->inputs[1])) {
    m.constants.push_back({n->inputs[1], div});
    return true;
  }
  Value* var = nullptr;
  const Value* c = is_op(n, "Mul") ? constant_operand(n, &var) : nullptr;
  if (!c || var != v) return false;
  m.constants.push_back({c, mul});
  return true;
}

/// The first node reading `v` that is `op` and satisfies `ok`.
template <class F>
Node* reader(const Value* v, const char* op, F ok) {
  if (!v) return nullptr;
  for (Node* c : v->consumers)
    if (is_op(c, op) && ok(c) && !c->outputs.empty() && c->outputs[0]) return c;
  return nullptr;
}

/// Erf(Div(x, √2) | Mul(x, 1/√2)).
bool match_erf_input(Node* erf, GeluMatch& m) {
  Value* u = erf->input(0);
  Node* s = u ? u->producer : nullptr;
  if (!s || !s->domain.empty() || s->inputs.size() != 2) return false;
  Value* x = s->inputs[0];
  if (s->op_type == "Mul") constant_operand(s, &x);
  if (!x || constant_of(x) || !scales(s, x, kInvSqrt2, kSqrt2, m)) return false;
  m.x = x;
  m.nodes = {s, erf};
  m.inner = {u};
  return true;
}

/// c = x³ as Pow(x, 3) or Mul(Mul(x, x), x) in either nesting.
bool match_cube(Value* c, Value* x, GeluMatch& m) {
  Node* p = c ? c->producer : nullptr;
  if (is_op(p, "Pow") && p->inputs.size() == 2 && p->inputs[0] == x && constant_of(p->inputs[1])) {
    m.nodes.push_back(p);
    m.constants.push_back({p->inputs[1], 3.0});
    return true;
  }
  if (!is_op(p, "Mul") || p->inputs.size() != 2) return false;
  for (int i = 0; i < 2; ++i) {
    Value* sq = p->inputs[i];
    Node* s = sq ? sq->producer : nullptr;
    if (p->inputs[1 - i] == x && is_op(s, "Mul") && s->inputs.size() == 2 && s->inputs[0] == x && s->inputs[1] == x) {
      m.nodes.insert(m.nodes.end(), {p, s});
      m.inner.push_back(sq);
      return true;
    }
  }
  return false;
}

/// Tanh(Mul(Add(x, Mul(x³, 0.044715)), √(2/π))), operands either way round.
bool match_tanh_input(Node* th, GeluMatch& m) {
  Value* u = th->input(0);
  Node* s = u ? u->producer : nullptr;
  Value* inner = nullptr;
  const Value* k = is_op(s, "Mul") ? constant_operand(s, &inner) : nullptr;
  if (!k) return false;
  Node* add = inner->producer;
  if (!is_op(add, "Add") || add->inputs.size() != 2) return false;
  for (int i = 0; i < 2; ++i) {
    Value* x = add->inputs[i];
    Value* p = add->inputs[1 - i];
    Node* pm = p ? p->producer : nullptr;
    Value* cube = nullptr;
    const Value* c3 = is_op(pm, "Mul") ? constant_operand(pm, &cube) : nullptr;
    if (!c3 || !x || constant_of(x)) continue;
    GeluMatch t;
    if (!match_cube(cube, x, t)) continue;
    m.x = x;
    m.tanh = true;
    m.nodes = {s, add, pm, th};
    m.nodes.insert(m.nodes.end(), t.nodes.begin(), t.nodes.end());
    m.inner = {u, inner, p, cube};
    m.inner.insert(m.inner.end(), t.inner.begin(), t.inner.end());
    m.constants = {{k, kSqrt2OverPi}, {c3, kTanhCubic}};
    m.constants.insert(m.constants.end(), t.constants.begin(), t.constants.end());
    return true;
  }
  return false;
}

/// From Erf/Tanh's output t: E = Add(t, 1), then the product ½·x·E in any association.
bool match_product(Node* f, GeluMatch& m) {
  Value* t = f->outputs[0];
  Value* x = m.x;
  Node* add = reader(t, "Add", [&](Node* a) {
    Value* o = nullptr;
    return constant_operand(a, &o) && o == t;
  });
  if (!add) return false;
  Value* unused = nullptr;
  m.constants.push_back({constant_operand(add, &unused), 1.0});
  m.nodes.push_back(add);
  m.inner.push_back(t);
  Value* e = add->outputs[0];
  Node* m1 = reader(e, "Mul", [&](Node* n) { return other_input(n, e) && other_input(n, e) != e; });
  if (!m1) return false;
  Value* o = other_input(m1, e);
  Value* p = m1->outputs[0];
  m.nodes.push_back(m1);
  m.inner.push_back(e);
  if (o == x) {  // (x·E)·½
    GeluMatch half;
    Node* m2 = nullptr;
    for (Node* c : p->consumers)
      if (!c->outputs.empty() && c->outputs[0] && scales(c, p, 0.5, 2.0, half)) {
        m2 = c;
        break;
      }
    if (!m2) return false;
    m.constants.push_back(half.constants.back());
    m.nodes.push_back(m2);
    m.inner.push_back(p);
    m.y = m2->outputs[0];
    return true;
  }
  if (constant_of(o)) {  // (E·½)·x
    Node* m2 = reader(p, "Mul", [&](Node* n) { return other_input(n, p) == x; });
    if (!m2) return false;
    m.constants.push_back({o, 0.5});
    m.nodes.push_back(m2);
    m.inner.push_back(p);
    m.y = m2->outputs[0];
    return true;
  }
  if (o->producer && scales(o->producer, x, 0.5, 2.0, m)) {  // (x·½)·E
    m.nodes.push_back(o->producer);
    m.inner.push_back(o);
    m.y = p;
    return true;
  }
  return false;
}

/// Why the matched structure is not a GELU fusec may replace, or "".
std::string guard(const GeluMatch& m) {
  auto rank = [](const Value* v) { return v->type.shape ? static_cast<int64_t>(v->type.shape->size()) : -1; };
  for (const auto& c : m.constants) {
    const Tensor* t = constant_of(c.v);
    if (t->numel() != 1)
      return "constant '" + c.v->name + "' has " + std::to_string(t->numel()) + " elements where GELU has a scalar";
    double v = t->as_double(0);
    // A half-precision model stores √2 as 1.4140625: allow its rounding on top of 1e-4.
    double tol = kRelTol + (t->dtype() == DType::Float16 ? 0x1p-11 : t->dtype() == DType::BFloat16 ? 0x1p-8 : 0.0);
    if (!(std::fabs(v - c.want) <= tol * std::fabs(c.want)))
      return "constant " + num(v) + " where GELU has " + num(c.want);
    if (rank(m.x) >= 0 && static_cast<int64_t>(t->rank()) > rank(m.x))
      return "constant '" + c.v->name + "' has a higher rank than the input, so it broadcasts it";
  }
  for (const Value* v : m.inner) {
    if (v->is_graph_output)
      return "'" + v->name + "' is a graph output; GELU's intermediates must be read only inside it";
    for (const Node* c : v->consumers)
      if (std::find(m.nodes.begin(), m.nodes.end(), c) == m.nodes.end())
        return "'" + v->name + "' has " + std::to_string(use_count(v)) + " consumers (" + describe(c) +
               " reads it outside the GELU pattern)";
  }
  if (!is_float(m.x->type.dtype))
    return std::string("the input is ") + dtype_name(m.x->type.dtype) + "; Gelu takes floating-point types";
  if (m.x->type.shape && m.y->type.shape && *m.x->type.shape != *m.y->type.shape)
    return "the output shape " + shape_str(*m.y->type.shape) + " differs from the input's " +
           shape_str(*m.x->type.shape);
  return "";
}

}  // namespace

bool RecognizeGeluPass::run(Graph& g, PassContext& ctx) {
  Rewriter r(g, ctx, name());
  auto nodes = g.node_list();
  std::unordered_map<const Node*, size_t> pos;
  for (size_t i = 0; i < nodes.size(); ++i) pos[nodes[i]] = i;
  for (Node* f : nodes) {
    if (r.removed(f) || !(is_op(f, "Erf") || is_op(f, "Tanh")) || f->outputs.empty() || !f->outputs[0]) continue;
    GeluMatch m;
    bool erf = f->op_type == "Erf";
    if (!(erf ? match_erf_input(f, m) : match_tanh_input(f, m)) || !match_product(f, m)) continue;
    std::sort(m.nodes.begin(), m.nodes.end(), [&](const Node* a, const Node* b) { return pos[a] < pos[b]; });
    m.nodes.erase(std::unique(m.nodes.begin(), m.nodes.end()), m.nodes.end());
    std::string what = std::string(erf ? "erf" : "tanh") + " GELU at " + describe(f);
    std::string why = guard(m);
    std::optional<std::string> domain;
    if (why.empty()) domain = domain_for_standard_op(g, ctx.opts, 20, &why);
    if (!domain) {
      r.near_miss(what + " not recognized", why);
      continue;
    }
    std::string node_name = m.nodes.front()->name;
    Replaced gone = r.remove(m.nodes);
    Node* gelu = r.add("Gelu", {m.x}, {m.y}, node_name, *domain, gone.origins);
    if (m.tanh) gelu->set_attr("approximate", std::string("tanh"));
    g.remove_unused_values();
    r.rewrote(gone.listed + " -> " + (domain->empty() ? "" : *domain + ".") + describe(gelu), gone.names, node_name);
  }

  // Gelu written in ai.fusec while the opset could not be raised: standard once it can.
  std::vector<Node*> fusec_gelus;
  for (Node* n : g.node_list())
    if (n->op_type == "Gelu" && n->domain == "ai.fusec") fusec_gelus.push_back(n);
  if (!fusec_gelus.empty() && (onnx_opset(g) >= 20 || can_raise_opset(g, 20))) {
    std::string why;
    auto domain = domain_for_standard_op(g, ctx.opts, 20, &why);
    if (domain && domain->empty())
      for (Node* n : fusec_gelus) {
        n->domain.clear();
        r.rewrote("ai.fusec." + describe(n) + " -> " + describe(n) + " (the opset is now 20)", {n->name}, n->name);
      }
  }
  return r.changed();
}

}  // namespace fusec
