// cleanup: removes what computes nothing.
//
//   Constant            -> initializer (so every later pass sees constants one way)
//   x -> Identity -> y  -> x            Dropout (inference, mask unused) -> x
//   Cast(to = x.dtype)  -> x            Reshape/Flatten/Expand/Pad/Slice to x's own shape -> x
//   Transpose(perm = 0,1,..,n-1) -> x
//   Reshape(view(x)) to x's own shape -> x  view: Reshape/Flatten/Squeeze/Unsqueeze
//   Transpose(Transpose(x, p), q) -> Transpose(x, p then q)   (then gone where that is the identity)
//   nodes whose outputs nobody reads, initializers nobody reads          -> gone
//   two equal constants, two identical nodes on the same inputs           -> one of each (CSE)
#include "passes/cleanup.h"

#include <map>
#include <unordered_map>

#include "backend/cpu/kernel.h"
#include "ir/error.h"
#include "passes/pattern.h"

namespace fusec {

namespace {

const char* kPass = "cleanup";

bool same_static_shape(const Value* a, const Value* b) {
  return a && b && a->type.shape && b->type.shape && is_static(*a->type.shape) && is_static(*b->type.shape) &&
         *a->type.shape == *b->type.shape && a->type.dtype == b->type.dtype;
}

/// Why `n` is a no-op (its output 0 equals its input 0), or "" if it is not one.
std::string noop_reason(const Node& n) {
  Value* in = n.input(0);
  Value* out = n.outputs.empty() ? nullptr : n.outputs[0];
  if (!in || !out || !n.domain.empty()) return "";
  const std::string& op = n.op_type;
  if (op == "Identity") return "Identity";
  if (op == "Dropout") {
    if (n.outputs.size() > 1 && n.outputs[1] && use_count(n.outputs[1]) > 0) return "";
    Value* training = n.input(2);
    if (training) {
      auto t = uniform_constant(training);
      if (!t || *t != 0) return "";
    }
    return "inference-mode Dropout";
  }
  if (op == "Cast" && out->type.dtype == in->type.dtype && in->type.dtype != DType::Undefined)
    return "Cast to the same type";
  // A view to the same shape is one for every binding of an open batch too (same symbol, same size).
  if ((op == "Reshape" || op == "Flatten" || op == "Expand" || op == "Squeeze" || op == "Unsqueeze") &&
      same_shape_and_type(in, out))
    return op + " to the same shape";
  if (op == "Pad" && same_static_shape(in, out)) return "Pad by zero";
  if (op == "Slice" && same_static_shape(in, out)) {
    if (Value* steps = n.input(4)) {
      const Tensor* s = constant_of(steps);
      if (!s) return "";
      for (int64_t i = 0; i < s->numel(); ++i)
        if (s->as_int64(i) != 1) return "";
    }
    return "Slice of everything";
  }
  if (op == "Concat" && n.inputs.size() == 1 && same_shape_and_type(in, out)) return "Concat of one input";
  if (op == "Transpose" && n.has_attr("perm")) {
    auto perm = n.attr_ints("perm");
    for (size_t i = 0; i < perm.size(); ++i)
      if (perm[i] != static_cast<int64_t>(i)) return "";
    return "Transpose with identity perm";
  }
  return "";
}

bool constants_to_initializers(Graph& g, PassContext& ctx) {
  bool changed = false;
  for (Node* n : g.node_list()) {
    if (!is_op(n, "Constant") || n->outputs.size() != 1 || !n->outputs[0]) continue;
    Value* out = n->outputs[0];
    if (out->is_graph_output) continue;  // an initializer as graph output confuses some runtimes
    std::vector<Tensor> t;
    try {
      t = cpu::evaluate_node(*n, g.opset(""), {});
    } catch (const Error&) {
      continue;  // e.g. a string constant: leave it for the backend to report
    }
    std::string name = n->name;
    g.remove_node(n);
    out->initializer = std::make_shared<const Tensor>(std::move(t[0]));
    changed = true;
    (void)name;
  }
  return changed;
}

/// Concat operands that are empty along the axis add nothing: dropped while another operand
/// remains. (Phi-3's rotary embedding, exported by torch's legacy exporter, concatenates the
/// rotated head with the empty Slice of its pass-through part.)
bool drop_empty_concat_inputs(Graph& g, PassContext& ctx) {
  bool changed = false;
  for (Node* n : g.node_list()) {
    if (!is_op(n, "Concat") || n->inputs.size() < 2 || !n->outputs[0] || !n->outputs[0]->type.shape) continue;
    const int64_t rank = static_cast<int64_t>(n->outputs[0]->type.shape->size());
    int64_t axis = n->attr_int("axis", 0);
    if (axis < 0) axis += rank;
    if (axis < 0 || axis >= rank) continue;
    std::vector<size_t> empty;
    for (size_t i = 0; i < n->inputs.size(); ++i) {
      auto d = known_dims(n->inputs[i]);
      if (d && static_cast<int64_t>(d->size()) == rank && (*d)[static_cast<size_t>(axis)] == 0) empty.push_back(i);
    }
    if (empty.empty() || empty.size() == n->inputs.size()) continue;
    std::string names;
    for (size_t k = empty.size(); k-- > 0;) {
      if (!names.empty()) names += ", ";
      names += "'" + n->inputs[empty[k]]->name + "'";
      g.set_input(n, empty[k], nullptr);
      n->inputs.erase(n->inputs.begin() + static_cast<std::ptrdiff_t>(empty[k]));
    }
    ctx.rewrite(kPass, "dropped the empty operand(s) " + names + " of " + describe(n), {}, n->name);
    changed = true;
  }
  return changed;
}

bool remove_noops(Graph& g, PassContext& ctx) {
  bool changed = false;
  for (Node* n : g.node_list()) {
    std::string why = noop_reason(*n);
    if (why.empty()) continue;
    if (!forward_value(g, n->outputs[0], n->inputs[0])) {
      ctx.near_miss(kPass, describe(n) + " not removed", "its input and output are both graph inputs/outputs");
      continue;
    }
    ctx.rewrite(kPass, "removed " + describe(n) + " (" + why + ")", {n->name}, "");
    g.remove_node(n);
    changed = true;
  }
  return changed;
}

/// A view and the Reshape that undoes it (LeViT's flatten(0, 1) around a BatchNorm1d folded away,
/// then reshape_as): the Reshape reads the first view's input, which it equals, so it is then a
/// no-op, and an inner view nobody else reads is dead. Only a pair that gives back the first
/// input's shape: a chain that regroups further (a head merge, then a flatten) is left for the
/// patterns that read it.
bool skip_undone_views(Graph& g, PassContext& ctx) {
  bool changed = false;
  for (Node* n : g.node_list()) {
    if (!is_op(n, "Reshape") || !n->domain.empty() || !n->input(0) || !n->outputs[0]) continue;
    Node* inner = n->input(0)->producer;
    if (!inner || !inner->domain.empty() || !inner->input(0) ||
        !(is_op(inner, "Reshape") || is_op(inner, "Flatten") || is_op(inner, "Squeeze") || is_op(inner, "Unsqueeze")))
      continue;
    if (!same_shape_and_type(inner->input(0), n->outputs[0])) continue;
    ctx.rewrite(kPass,
                describe(n) + " reads '" + inner->input(0)->name + "' instead of " + describe(inner) +
                    "'s output (it undoes that view)",
                {}, n->name);
    g.set_input(n, 0, inner->input(0));
    changed = true;
  }
  return changed;
}

/// Transpose(Transpose(x, p), q) -> Transpose(x, p then q): one copy instead of two (or none,
/// which remove_noops then sees), and the inner one goes when nothing else reads it. The dynamo
/// export writes a slice update along axis d between transposes that bring d first and back, and
/// once the update is an Add (canonicalize) MViT-V2's scores went through four of them.
bool compose_transposes(Graph& g, PassContext& ctx) {
  bool changed = false;
  for (Node* n : g.node_list()) {
    if (!is_op(n, "Transpose") || !n->domain.empty() || !n->input(0) || !n->has_attr("perm")) continue;
    Node* inner = n->input(0)->producer;
    if (!inner || !is_op(inner, "Transpose") || !inner->domain.empty() || !inner->input(0) || !inner->has_attr("perm"))
      continue;
    const std::vector<int64_t> p = inner->attr_ints("perm"), q = n->attr_ints("perm");
    if (p.size() != q.size()) continue;
    std::vector<int64_t> both(q.size());
    bool valid = true;
    for (size_t i = 0; i < q.size() && valid; ++i) {
      valid = q[i] >= 0 && q[i] < static_cast<int64_t>(p.size());
      if (valid) both[i] = p[static_cast<size_t>(q[i])];
    }
    if (!valid) continue;
    ctx.rewrite(kPass,
                describe(n) + " reads '" + inner->input(0)->name + "' instead of " + describe(inner) +
                    "'s output (the two transposes composed)",
                {}, n->name);
    g.set_input(n, 0, inner->input(0));
    n->set_attr("perm", both);
    changed = true;
  }
  return changed;
}

bool remove_dead_nodes(Graph& g, PassContext& ctx) {
  bool changed = false, again = true;
  while (again) {
    again = false;
    auto nodes = g.node_list();
    for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
      Node* n = *it;
      bool used = false;
      for (Value* o : n->outputs) used |= o && use_count(o) > 0;
      if (used) continue;
      ctx.rewrite(kPass, "removed " + describe(n) + " (its outputs are never read)", {n->name}, "");
      g.remove_node(n);
      changed = again = true;
    }
  }
  size_t before = g.initializers().size();
  g.remove_unused_values();
  size_t removed = before - g.initializers().size();
  if (removed) {
    ctx.rewrite(kPass, "removed " + std::to_string(removed) + " unused initializer(s)", {}, "");
    changed = true;
  }
  return changed;
}

std::string constant_key(const Tensor& t) {
  std::string k = std::to_string(static_cast<int>(t.dtype())) + ":" + dims_str(t.dims()) + ":";
  k.append(static_cast<const char*>(t.raw()), t.nbytes());
  return k;
}

bool deduplicate(Graph& g, PassContext& ctx) {
  bool changed = false;
  // Equal small constants share one initializer (large ones are rarely duplicated; skip hashing them).
  std::unordered_map<std::string, Value*> seen;
  for (Value* v : g.initializers()) {
    if (v->is_graph_input || v->initializer_listed_as_input || v->is_graph_output ||
        v->initializer->nbytes() > (1 << 20))
      continue;
    auto [it, fresh] = seen.emplace(constant_key(*v->initializer), v);
    if (fresh) continue;
    g.replace_all_uses(v, it->second);
    changed = true;
  }
  // Identical nodes (same op, attributes and inputs) compute the same outputs.
  std::map<std::string, Node*> sig;
  for (Node* n : g.node_list()) {
    if (n->op_type.rfind("Random", 0) == 0 || n->op_type == "Bernoulli" || n->op_type == "Dropout") continue;
    std::string key = n->domain + "|" + n->op_type + "|" + std::to_string(n->outputs.size());
    for (Value* v : n->inputs) key += "|" + (v ? v->name : std::string());
    bool hashable = true;
    for (const auto& a : n->attrs) {
      key += "|" + a.name + "=";
      if (auto* i = std::get_if<int64_t>(&a.attr.value))
        key += std::to_string(*i);
      else if (auto* f = std::get_if<float>(&a.attr.value))
        key += std::to_string(*f);
      else if (auto* s = std::get_if<std::string>(&a.attr.value))
        key += *s;
      else if (auto* is = std::get_if<std::vector<int64_t>>(&a.attr.value))
        for (auto x : *is) key += std::to_string(x) + ",";
      else if (auto* fs = std::get_if<std::vector<float>>(&a.attr.value))
        for (auto x : *fs) key += std::to_string(x) + ",";
      else
        hashable = false;
    }
    if (!hashable) continue;
    auto [it, fresh] = sig.emplace(key, n);
    if (fresh) continue;
    Node* keep = it->second;
    bool ok = true;
    for (size_t i = 0; i < n->outputs.size(); ++i)
      if (n->outputs[i] && n->outputs[i]->is_graph_output) ok = false;
    if (!ok) continue;
    for (size_t i = 0; i < n->outputs.size(); ++i) {
      if (!n->outputs[i]) continue;
      if (!keep->outputs[i]) {
        ok = false;
        break;
      }
    }
    if (!ok) continue;
    for (size_t i = 0; i < n->outputs.size(); ++i)
      if (n->outputs[i]) g.replace_all_uses(n->outputs[i], keep->outputs[i]);
    ctx.rewrite(kPass, "merged " + describe(n) + " into identical " + describe(keep), {n->name}, keep->name);
    g.remove_node(n);
    changed = true;
  }
  return changed;
}

}  // namespace

bool CleanupPass::run(Graph& g, PassContext& ctx) {
  bool changed = constants_to_initializers(g, ctx);
  changed |= drop_empty_concat_inputs(g, ctx);
  changed |= skip_undone_views(g, ctx);
  changed |= compose_transposes(g, ctx);
  changed |= remove_noops(g, ctx);
  changed |= deduplicate(g, ctx);
  changed |= remove_dead_nodes(g, ctx);
  return changed;
}

}  // namespace fusec
