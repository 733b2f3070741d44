#include "passes/pattern.h"

#include <algorithm>
#include <cmath>

namespace fusec {

bool is_op(const Node* n, const std::string& op) { return n && n->op_type == op && n->domain.empty(); }

Node* producer_of(const Value* v, const std::string& op) {
  if (!v || !v->producer) return nullptr;
  Node* p = v->producer;
  return p->op_type == op && (p->domain.empty() || p->domain == "ai.fusec") ? p : nullptr;
}

std::optional<std::vector<int64_t>> known_dims(const Value* v) {
  if (!v || !v->type.shape || !is_static(*v->type.shape)) return std::nullopt;
  std::vector<int64_t> d;
  for (const auto& dim : *v->type.shape) d.push_back(dim.value);
  return d;
}

std::optional<std::vector<int64_t>> reshape_target(const Shape& in, const Shape& out, bool allowzero) {
  std::vector<int64_t> target;
  bool inferred = false;
  for (size_t i = 0; i < out.size(); ++i) {
    const Dim& d = out[i];
    if (d.is_static() && d.value > 0) {
      target.push_back(d.value);
    } else if (d.is_static() || d.symbol.empty()) {
      return std::nullopt;
    } else if (!allowzero && i < in.size() && in[i] == d) {
      target.push_back(0);
    } else if (!inferred) {
      inferred = true;
      target.push_back(-1);
    } else {
      return std::nullopt;
    }
  }
  return target;
}

const Shape* known_rank(const Value* v) { return v && v->type.shape ? &*v->type.shape : nullptr; }

std::optional<std::vector<int64_t>> reduced_axes(const Node* r, int64_t rank, std::string* why) {
  std::vector<int64_t> axes;
  if (r->has_attr("axes")) {
    axes = r->attr_ints("axes");
  } else if (Value* a = r->input(1)) {
    const Tensor* t = constant_of(a);
    if (!t) {
      *why = describe(r) + " takes its axes from '" + a->name + "', which is not a constant";
      return std::nullopt;
    }
    axes = t->to_int64_vector();
  }
  if (axes.empty()) {
    if (r->attr_int("noop_with_empty_axes", 0)) {
      *why = describe(r) + " reduces nothing (noop_with_empty_axes=1 and no axes)";
      return std::nullopt;
    }
    for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
  }
  for (auto& a : axes) {
    if (a < -rank || a >= rank) {
      *why = describe(r) + " has axis " + std::to_string(a) + " out of range for rank " + std::to_string(rank);
      return std::nullopt;
    }
    if (a < 0) a += rank;
  }
  std::sort(axes.begin(), axes.end());
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  return axes;
}

bool same_dim(const Dim& a, const Dim& b) {
  if (a.is_static() || b.is_static()) return a.value == b.value;
  return !a.symbol.empty() && a.symbol == b.symbol;
}

bool same_shape_and_type(const Value* a, const Value* b) {
  if (!a || !b || !a->type.shape || !b->type.shape || a->type.dtype != b->type.dtype) return false;
  const Shape &x = *a->type.shape, &y = *b->type.shape;
  if (x.size() != y.size()) return false;
  for (size_t i = 0; i < x.size(); ++i)
    if (!same_dim(x[i], y[i])) return false;
  return true;
}

Value* typed_value(Graph& g, const std::string& stem, DType dtype, const std::vector<int64_t>& dims) {
  Value* v = g.add_value(stem);
  v->type.dtype = dtype;
  v->type.shape = shape_of(dims);
  return v;
}

Value* int64_initializer(Graph& g, const std::string& stem, const std::vector<int64_t>& v) {
  return g.add_initializer(stem, Tensor::from_int64(v, {static_cast<int64_t>(v.size())}));
}

std::optional<AxisSlice> axis_slice(const Node* n) {
  std::optional<AxisSlice> s = strided_axis_slice(n);
  if (s && s->step != 1) return std::nullopt;
  return s;
}

std::optional<AxisSlice> strided_axis_slice(const Node* n) {
  if (!is_op(n, "Slice") || n->inputs.size() < 3 || !n->input(0)) return std::nullopt;
  const Shape* xd = known_rank(n->input(0));
  if (!xd || xd->empty()) return std::nullopt;
  const Tensor *st = constant_of(n->input(1)), *en = constant_of(n->input(2));
  const Tensor* ax = n->input(3) ? constant_of(n->input(3)) : nullptr;
  const Tensor* sp = n->input(4) ? constant_of(n->input(4)) : nullptr;
  if (!st || !en || st->numel() != 1 || en->numel() != 1) return std::nullopt;
  if (n->input(3) && (!ax || ax->numel() != 1)) return std::nullopt;
  if (n->input(4) && (!sp || sp->numel() != 1 || sp->as_int64(0) < 1)) return std::nullopt;
  const int64_t step = sp ? sp->as_int64(0) : 1;
  const int64_t rank = static_cast<int64_t>(xd->size());
  int64_t axis = ax ? ax->as_int64(0) : 0;
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) return std::nullopt;
  if (!(*xd)[static_cast<size_t>(axis)].is_static()) return std::nullopt;
  const int64_t d = (*xd)[static_cast<size_t>(axis)].value;
  auto clamp = [d](int64_t v) { return v < 0 ? std::max<int64_t>(v + d, 0) : std::min(v, d); };
  return AxisSlice{axis, clamp(st->as_int64(0)), clamp(en->as_int64(0)), step};
}

std::optional<std::vector<int64_t>> split_sizes(const Node* sp) {
  if (const Value* sv = sp->inputs.size() > 1 ? sp->input(1) : nullptr) {
    const Tensor* t = constant_of(sv);
    if (!t) return std::nullopt;
    std::vector<int64_t> sizes;
    for (int64_t k = 0; k < t->numel(); ++k) sizes.push_back(t->as_int64(k));
    return sizes;
  }
  return sp->attr_ints("split", {});
}

size_t use_count(const Value* v) { return v->consumers.size() + (v->is_graph_output ? 1 : 0); }

bool has_single_use(const Value* v) { return v && v->consumers.size() == 1 && !v->is_graph_output; }

Node* sole_consumer(const Value* v) { return has_single_use(v) ? v->consumers[0] : nullptr; }

Node* sole_consumer_of(const Value* v, const std::string& op) {
  Node* c = sole_consumer(v);
  return c && c->op_type == op && c->domain.empty() ? c : nullptr;
}

const Tensor* constant_of(const Value* v) { return v && v->initializer ? v->initializer.get() : nullptr; }

std::optional<double> uniform_constant(const Value* v) {
  const Tensor* t = constant_of(v);
  if (!t || t->numel() == 0) return std::nullopt;
  double first = t->as_double(0);
  for (int64_t i = 1; i < t->numel(); ++i)
    if (t->as_double(i) != first) return std::nullopt;
  return first;
}

bool is_constant_near(const Value* v, double want, double rel_tol) {
  auto c = uniform_constant(v);
  return c && std::fabs(*c - want) <= rel_tol * std::max(1.0, std::fabs(want));
}

Value* other_input(const Node* n, const Value* known) {
  if (n->inputs.size() != 2) return nullptr;
  if (n->inputs[0] == known) return n->inputs[1];
  if (n->inputs[1] == known) return n->inputs[0];
  return nullptr;
}

int64_t onnx_opset(const Graph& g) { return g.opset(""); }

void erase_nodes(Graph& g, const std::vector<Node*>& nodes) {
  for (Node* n : nodes) g.remove_node(n);
  g.remove_unused_values();
}

}  // namespace fusec

#include "ir/op_schema.h"

namespace fusec {

bool forward_value(Graph& g, Value* out, Value* in) {
  if (out == in) return true;
  if (!out->is_graph_output) {
    g.replace_all_uses(out, in);
    return true;
  }
  // `out` names a graph output: keep that name by letting in's producer write it.
  Node* p = in->producer;
  if (!p || in->is_graph_output || in->is_graph_input) return false;
  g.replace_all_uses(in, out);  // in's other readers now read out; out stays a graph output
  // out leaves the node being bypassed; in loses its producer.
  g.set_output(p, static_cast<size_t>(in->producer_output), out);
  out->type = in->type.shape ? in->type : out->type;
  return true;
}

bool can_raise_opset(const Graph& g, int64_t to, std::string* blocker) {
  const auto& reg = OpRegistry::global();
  int64_t from = g.opset("");
  for (const auto& n : g.nodes()) {
    if (!n->domain.empty()) continue;
    const OpSchema* a = reg.find("", n->op_type, from);
    const OpSchema* b = reg.find("", n->op_type, to);
    if (!a || a != b) {
      if (blocker)
        *blocker =
            describe(n.get()) + " changes meaning between opset " + std::to_string(from) + " and " + std::to_string(to);
      return false;
    }
  }
  return true;
}

void use_fusec_domain(Graph& g) {
  if (!g.opsets.count("ai.fusec")) g.opsets["ai.fusec"] = 1;
}

std::optional<std::string> domain_for_standard_op(Graph& g, const PassOptions& opts, int64_t needed, std::string* why) {
  int64_t have = g.opset("");
  if (have >= needed) return std::string();
  std::string blocker;
  if (can_raise_opset(g, needed, &blocker)) {
    g.opsets[""] = needed;
    g.meta.ir_version = std::max(g.meta.ir_version, min_ir_version_for_opset(needed));
    return std::string();
  }
  if (!opts.portable) {
    use_fusec_domain(g);
    return std::string("ai.fusec");
  }
  if (why)
    *why = "the model's opset " + std::to_string(have) + " predates the standard op (opset " + std::to_string(needed) +
           ") and cannot be raised: " + blocker;
  return std::nullopt;
}

std::vector<std::string> fused_origins(const std::vector<Node*>& nodes) {
  std::vector<std::string> out;
  for (const Node* n : nodes) {
    if (n->fused_from.empty())
      out.push_back(n->name);
    else
      out.insert(out.end(), n->fused_from.begin(), n->fused_from.end());
  }
  return out;
}

}  // namespace fusec
