#include "passes/attention_view_bias.h"

#include <algorithm>
#include <optional>
#include <set>
#include <vector>

#include "passes/attention_pattern.h"
#include "passes/pattern.h"

namespace fusec::attention {

namespace {

/// The dims of `v` when all are known.
std::optional<std::vector<int64_t>> static_dims(const Value* v) {
  if (!v || !v->type.shape) return std::nullopt;
  std::vector<int64_t> d;
  for (const Dim& x : *v->type.shape) {
    if (!x.is_static()) return std::nullopt;
    d.push_back(x.value);
  }
  return d;
}

/// numpy's broadcast of two shapes, or nullopt.
std::optional<std::vector<int64_t>> broadcast(std::vector<int64_t> a, std::vector<int64_t> b) {
  if (a.size() < b.size()) std::swap(a, b);
  b.insert(b.begin(), a.size() - b.size(), 1);
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i] || b[i] == 1) continue;
    if (a[i] != 1) return std::nullopt;
    a[i] = b[i];
  }
  return a;
}

/// Whether `target` is among the values `from` is computed from, looking at most `budget` nodes back.
bool depends_on(const Value* from, const Value* target, int budget) {
  std::vector<const Value*> work = {from};
  std::set<const Node*> seen;
  while (!work.empty()) {
    const Value* v = work.back();
    work.pop_back();
    if (v == target) return true;
    const Node* p = v ? v->producer : nullptr;
    if (!p || !seen.insert(p).second) continue;
    if (--budget < 0) return true;  // too far to tell: as if it did
    for (const Value* in : p->inputs)
      if (in) work.push_back(in);
  }
  return false;
}

/// Q·Kᵀ: a MatMul's output, or one scaled by constant scalars (attention_pattern's peel_scale).
bool is_scores(Value* s) {
  double scale = 1;
  std::vector<Node*> scales;
  const Value* x = peel_scale(s, scale, scales);
  return x && is_op(x->producer, "MatMul");
}

/// The chain of Adds from the view `x` back to the Reshape that made the finer view (`r1`), with
/// the terms each adds; false if `x` is not such a chain.
bool collect_chain(Value* x, const std::vector<int64_t>& fine, std::vector<Node*>& nodes, std::vector<Value*>& terms,
                   Node*& r1, int depth) {
  Node* p = x->producer;
  if (!p || x->consumers.size() != 1 || x->is_graph_output || static_dims(x) != fine || depth > 6) return false;
  if (is_op(p, "Reshape")) {
    r1 = p;
    nodes.push_back(p);
    return true;
  }
  if (!is_op(p, "Add") || p->inputs.size() != 2 || !p->input(0) || !p->input(1)) return false;
  for (size_t i = 0; i < 2; ++i) {
    const size_t mark = nodes.size(), tmark = terms.size();
    if (collect_chain(p->input(i), fine, nodes, terms, r1, depth + 1)) {
      nodes.push_back(p);
      terms.push_back(p->input(1 - i));
      return true;
    }
    nodes.resize(mark);
    terms.resize(tmark);
  }
  return false;
}

}  // namespace

bool hoist_view_bias(Graph& g, Node* softmax, std::string* what, std::vector<std::string>* gone) {
  Value* out = softmax->input(0);
  Node* r2 = out ? out->producer : nullptr;
  if (!is_op(r2, "Reshape") || !r2->input(0) || out->is_graph_output) return false;
  const auto coarse = static_dims(out);
  const auto fine = static_dims(r2->input(0));
  if (!coarse || !fine || *coarse == *fine) return false;
  std::vector<Node*> chain;
  std::vector<Value*> terms;
  Node* r1 = nullptr;
  if (!collect_chain(r2->input(0), *fine, chain, terms, r1, 0) || terms.empty()) return false;
  Value* s = r1->input(0);
  if (!s || static_dims(s) != coarse || !is_scores(s)) return false;
  const DType t = s->type.dtype;
  for (Value* term : terms)
    if (term->type.dtype != t || !static_dims(term) || depends_on(term, s, 256)) return false;

  // The terms' sum over the finer view, broadcast to it, viewed as the scores.
  Value* bias = terms[0];
  std::vector<int64_t> dims = *static_dims(bias);
  for (size_t i = 1; i < terms.size(); ++i) {
    const auto b = broadcast(dims, *static_dims(terms[i]));
    if (!b) return false;
    dims = *b;
  }
  if (*broadcast(dims, *fine) != *fine) return false;
  const std::string stem = s->name + "_view_bias";
  for (size_t i = 1; i < terms.size(); ++i) {
    Value* sum = g.add_value(stem);
    const auto d = broadcast(*static_dims(bias), *static_dims(terms[i]));
    sum->type = {t, Shape(d->begin(), d->end())};
    g.add_node("Add", {bias, terms[i]}, {sum}, g.unique_node_name(stem));
    bias = sum;
  }
  if (dims != *fine) {
    Value* full = g.add_value(stem + "_expanded");
    full->type = {t, Shape(fine->begin(), fine->end())};
    g.add_node("Expand", {bias, int64_initializer(g, stem + "_fine", *fine)}, {full}, g.unique_node_name(stem));
    bias = full;
  }
  Value* viewed = g.add_value(stem + "_viewed");
  viewed->type = {t, Shape(coarse->begin(), coarse->end())};
  g.add_node("Reshape", {bias, int64_initializer(g, stem + "_coarse", *coarse)}, {viewed}, g.unique_node_name(stem));
  if (what) {
    *what = describe(r1);
    for (Node* n : chain)
      if (n != r1) *what += " + " + describe(n);
    *what += " + " + describe(r2) + " -> the scores '" + s->name + "' plus " + std::to_string(terms.size()) +
             " term(s) viewed as them";
  }
  if (gone) {
    for (Node* n : chain) gone->push_back(n->name);
    gone->push_back(r2->name);
  }
  g.remove_node(r2);
  for (Node* n : chain) g.remove_node(n);
  g.add_node("Add", {s, viewed}, {out}, g.unique_node_name(stem + "_add"));
  g.topo_sort();
  return true;
}

}  // namespace fusec::attention
