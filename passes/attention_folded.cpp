#include "passes/attention_folded.h"

#include <deque>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "passes/pattern.h"

namespace fusec::attention {

namespace {

/// A core is two MatMuls, a Softmax and the few ops between them; a larger closure is not attention.
constexpr size_t kMaxCore = 32;

const Shape* rank3(const Value* v) {
  return v && v->type.shape && v->type.shape->size() == 3 ? &*v->type.shape : nullptr;
}

bool is_binary(const Node* n) {
  return (is_op(n, "Add") || is_op(n, "Sub") || is_op(n, "Mul") || is_op(n, "Div")) && n->inputs.size() == 2 &&
         n->input(0) && n->input(1);
}

/// A computed rank-3 value: one the core tracks N through.
bool tracked(const Value* v) { return rank3(v) && !constant_of(v); }

/// An op the core keeps, with a unit dim in front of N.
bool inner_op(const Graph& g, const Node* n) {
  if (n->outputs.size() != 1 || !rank3(n->outputs[0])) return false;
  if (is_op(n, "Transpose")) return n->attr_ints("perm").size() == 3 && tracked(n->input(0));
  if (is_op(n, "MatMul")) return tracked(n->input(0)) && tracked(n->input(1));
  if (is_op(n, "Softmax")) {
    const int64_t axis = n->attr_int("axis", g.opset("") < 13 ? 1 : -1);
    return (axis == -1 || axis == 2) && tracked(n->input(0));
  }
  return is_binary(n) && (tracked(n->input(0)) || tracked(n->input(1)));
}

/// Where N is in each tracked value of node `n`, given `known` (one of them, N at `at`); false when
/// the node cannot carry N there (a MatMul's N must be its batch dim, a Softmax's not its axis).
bool propagate(const Node* n, const Value* known, int at, std::vector<std::pair<Value*, int>>& out) {
  if (is_op(n, "Transpose")) {
    const auto p = n->attr_ints("perm");
    int in_at = at;
    if (known == n->outputs[0]) in_at = static_cast<int>(p[static_cast<size_t>(at)]);
    int out_at = -1;
    for (int i = 0; i < 3; ++i)
      if (p[static_cast<size_t>(i)] == in_at) out_at = i;
    if (out_at < 0) return false;
    out = {{n->input(0), in_at}, {n->outputs[0], out_at}};
    return true;
  }
  if (is_op(n, "MatMul")) {
    if (at != 0) return false;
    out = {{n->input(0), 0}, {n->input(1), 0}, {n->outputs[0], 0}};
    return true;
  }
  if (is_op(n, "Softmax") && at == 2) return false;
  out = {{n->outputs[0], at}};
  for (Value* in : n->inputs)
    if (tracked(in)) out.emplace_back(in, at);
  return true;
}

struct Core {
  std::vector<Node*> nodes;
  std::set<const Node*> member;
  std::map<Value*, int> n_at;  // every tracked value the core reads or writes
};

std::optional<Core> collect(const Graph& g, Node* softmax, std::string* why) {
  Core c;
  std::deque<Value*> work;
  auto take = [&](Node* n, const Value* known, int at) {
    std::vector<std::pair<Value*, int>> vals;
    if (!propagate(n, known, at, vals)) {
      *why = describe(n) + " does not keep the folded batch dim where the scores have it";
      return false;
    }
    for (auto [v, a] : vals) {
      auto [it, added] = c.n_at.emplace(v, a);
      if (!added && it->second != a) {
        *why = "'" + v->name + "' would have the folded batch dim in two places";
        return false;
      }
      if (added) work.push_back(v);
    }
    c.nodes.push_back(n);
    c.member.insert(n);
    return true;
  };
  if (!inner_op(g, softmax)) {
    *why = "the Softmax is not over the last axis of rank-3 scores";
    return std::nullopt;
  }
  if (!take(softmax, softmax->input(0), 0)) return std::nullopt;
  while (!work.empty()) {
    Value* v = work.front();
    work.pop_front();
    Node* p = v->producer;
    const bool produced_inside = p && (c.member.count(p) || inner_op(g, p));
    if (p && !c.member.count(p) && inner_op(g, p) && !take(p, v, c.n_at[v])) return std::nullopt;
    if (!produced_inside) continue;  // an entry: its other readers are not the core's business
    for (Node* u : v->consumers)
      if (!c.member.count(u) && inner_op(g, u) && !take(u, v, c.n_at[v])) return std::nullopt;
    if (c.nodes.size() > kMaxCore) {
      *why = "the ops around the Softmax are more than an attention core";
      return std::nullopt;
    }
  }
  // Attention gives no probabilities: a core whose Softmax is read elsewhere stays as it is.
  const Value* probs = softmax->outputs[0];
  bool read_outside = probs->is_graph_output;
  for (const Node* u : probs->consumers) read_outside |= !c.member.count(u);
  if (read_outside) {
    *why = "the probabilities '" + probs->name + "' are read outside the attention";
    return std::nullopt;
  }
  int matmuls = 0, softmaxes = 0;
  for (const Node* n : c.nodes) {
    matmuls += is_op(n, "MatMul");
    softmaxes += is_op(n, "Softmax");
  }
  if (matmuls != 2 || softmaxes != 1) {
    *why = "the core has " + std::to_string(matmuls) + " MatMuls and " + std::to_string(softmaxes) +
           " Softmaxes, not Q·Kᵀ, one Softmax and P·V";
    return std::nullopt;
  }
  return c;
}

Shape with_unit(const Shape& s, int at) {
  Shape e = s;
  e.insert(e.begin() + at, Dim(1));
  return e;
}

/// A Reshape target for `s` (at most one dim open: -1), or nullopt.
std::optional<std::vector<int64_t>> target(const Shape& s) {
  std::vector<int64_t> t;
  int open = 0;
  for (const Dim& d : s) {
    t.push_back(d.is_static() ? d.value : -1);
    open += !d.is_static();
  }
  if (open > 1) return std::nullopt;
  return t;
}

Value* reshaped(Graph& g, Value* v, const Shape& to, const std::string& stem) {
  const std::vector<int64_t> t = *target(to);
  Value* out = g.add_value(stem);
  out->type = {v->type.dtype, to};
  g.add_node("Reshape",
             {v, g.add_initializer(stem + "_shape", Tensor::from_int64(t, {static_cast<int64_t>(t.size())}))}, {out},
             g.unique_node_name(stem));
  return out;
}

/// perm of a rank-3 Transpose whose input has N at `in_at`, over the rank-4 tensors with a unit dim
/// in front of N (kept in front of it in the output).
std::vector<int64_t> unit_perm(const std::vector<int64_t>& p, int64_t in_at) {
  std::vector<int64_t> e;
  for (int64_t a : p) {
    if (a == in_at) {
      e.push_back(in_at);
      e.push_back(in_at + 1);
    } else {
      e.push_back(a < in_at ? a : a + 1);
    }
  }
  return e;
}

}  // namespace

bool rank3_scores_behind(const Node* softmax) {
  std::vector<std::pair<const Value*, int>> work = {{softmax->input(0), 0}};
  while (!work.empty()) {
    auto [v, depth] = work.back();
    work.pop_back();
    const Node* p = v ? v->producer : nullptr;
    if (!p || depth > 3) continue;
    if (is_op(p, "MatMul") && rank3(p->outputs[0])) return true;
    for (const Value* in : p->inputs)
      if (in && !constant_of(in)) work.emplace_back(in, depth + 1);
  }
  return false;
}

bool insert_unit_batch(Graph& g, Node* softmax, std::string* why) {
  auto core = collect(g, softmax, why);
  if (!core) return false;
  // Every tracked value gets a Reshape target (entries, exits) or a shape: at most one open dim.
  for (auto& [v, at] : core->n_at)
    if (!target(*v->type.shape)) {
      *why = "'" + v->name + "' has more than one open dim (bind the batch, e.g. --batch)";
      return false;
    }
  // Q·Kᵀ: the MatMul that does not read the Softmax's output; its Kᵀ a Transpose of the core.
  Node* qk = nullptr;
  for (Node* n : core->nodes)
    if (is_op(n, "MatMul") && n->input(0)->producer != softmax) qk = n;
  if (!qk) {
    *why = "no Q·Kᵀ MatMul apart from P·V";
    return false;
  }
  Node* kt = qk->input(1)->producer;
  if (!kt || !is_op(kt, "Transpose") || !core->member.count(kt) || !has_single_use(kt->outputs[0])) kt = nullptr;
  std::set<Value*> produced;
  std::vector<Value*> produced_in_order;
  for (Node* n : core->nodes) {
    produced.insert(n->outputs[0]);
    produced_in_order.push_back(n->outputs[0]);
  }
  // The Transposes' perms over rank 4, from where N is in their inputs (before those are rewired).
  std::map<Node*, std::vector<int64_t>> perms;
  for (Node* n : core->nodes)
    if (is_op(n, "Transpose")) perms[n] = unit_perm(n->attr_ints("perm"), core->n_at.at(n->input(0)));
  std::map<Value*, Value*> entry4;
  for (Node* n : core->nodes) {
    const int out_at = core->n_at.at(n->outputs[0]);
    for (size_t i = 0; i < n->inputs.size(); ++i) {
      Value* v = n->input(i);
      if (!v || produced.count(v)) continue;
      if (core->n_at.count(v)) {  // a computed rank-3 value from outside
        Value*& v4 = entry4[v];
        if (!v4) v4 = reshaped(g, v, with_unit(*v->type.shape, core->n_at.at(v)), v->name + "_unit_batch");
        g.set_input(n, i, v4);
        continue;
      }
      // A side operand of an element-wise op (a constant or a lower-rank value): aligned to rank 3,
      // then given the unit dim, where it reaches N's axis.
      const Shape* s = v->type.shape ? &*v->type.shape : nullptr;
      const Tensor* t = constant_of(v);
      if (!is_binary(n) || (t && t->numel() == 1)) continue;
      if (!s || s->size() > 3) {
        *why = "'" + v->name + "' has no known rank of at most 3";
        return false;
      }
      if (static_cast<int>(s->size()) <= 2 - out_at) continue;  // below N's axis: broadcasts alike
      Shape aligned(3 - s->size(), Dim(1));
      aligned.insert(aligned.end(), s->begin(), s->end());
      const Shape four = with_unit(aligned, out_at);
      if (t) {
        g.set_input(n, i, g.add_initializer(v->name + "_unit_batch", t->reshaped(*target(four))));
      } else {
        if (!target(four)) {
          *why = "'" + v->name + "' has more than one open dim";
          return false;
        }
        g.set_input(n, i, reshaped(g, v, four, v->name + "_unit_batch"));
      }
    }
  }
  // A value read outside the core (or a graph output) keeps its name and rank 3: the core writes a
  // new rank-4 value, and a Reshape writes it back.
  std::set<Value*> exited;
  for (Value* v : produced_in_order) {
    std::vector<std::pair<Node*, size_t>> inside;
    bool outside = v->is_graph_output;
    for (Node* u : v->consumers) {
      if (!core->member.count(u)) outside = true;
      for (size_t i = 0; i < u->inputs.size(); ++i)
        if (core->member.count(u) && u->input(i) == v) inside.emplace_back(u, i);
    }
    if (!outside) continue;
    Value* v4 = g.add_value(v->name + "_unit_batch");
    v4->type = {v->type.dtype, with_unit(*v->type.shape, core->n_at.at(v))};
    g.set_output(v->producer, 0, v4);
    for (auto [u, i] : inside) g.set_input(u, i, v4);
    const std::vector<int64_t> t = *target(*v->type.shape);
    g.add_node(
        "Reshape",
        {v4, g.add_initializer(v->name + "_folded_shape", Tensor::from_int64(t, {static_cast<int64_t>(t.size())}))},
        {v}, g.unique_node_name(v->name + "_folded"));
    exited.insert(v);
  }
  for (auto& [n, perm] : perms) n->set_attr("perm", perm);
  softmax->set_attr("axis", int64_t{-1});
  for (Value* v : produced_in_order)
    if (!exited.count(v)) v->type.shape = with_unit(*v->type.shape, core->n_at.at(v));
  // Kᵀ as fuse_attention reads it: K [1, N, S, D], then Transpose(0,1,3,2). A Transpose of the core
  // that makes Kᵀ makes K instead; otherwise K is Kᵀ transposed (a copy the fused node reads).
  auto last_two = [&](Value* x, const std::string& stem) {
    Value* y = g.add_value(stem);
    y->type = x->type;
    std::swap((*y->type.shape)[2], (*y->type.shape)[3]);
    g.add_node("Transpose", {x}, {y}, g.unique_node_name(stem))->set_attr("perm", std::vector<int64_t>{0, 1, 3, 2});
    return y;
  };
  if (kt) {
    std::vector<int64_t> p = kt->attr_ints("perm");
    std::swap(p[2], p[3]);
    kt->set_attr("perm", p);
    Value* k = kt->outputs[0];
    std::swap((*k->type.shape)[2], (*k->type.shape)[3]);
    g.set_input(qk, 1, last_two(k, k->name + "_t"));
  } else {
    Value* k_t = qk->input(1);
    g.set_input(qk, 1, last_two(last_two(k_t, k_t->name + "_k"), k_t->name + "_kt"));
  }
  g.topo_sort();
  return true;
}

}  // namespace fusec::attention
