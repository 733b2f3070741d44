#include "passes/attention_batch.h"

#include <algorithm>
#include <deque>
#include <optional>
#include <set>
#include <string>

#include "ir/dim_values.h"
#include "passes/pass.h"
#include "passes/pattern.h"

namespace fusec::attention {

namespace {

/// A core is two MatMuls, a Softmax and the few views and constant ops between them; a larger
/// closure is not attention.
constexpr size_t kMaxCore = 32;

const Shape* rank5(const Value* v) {
  return v && v->type.shape && v->type.shape->size() == 5 ? &*v->type.shape : nullptr;
}

bool static_from(const Shape& s, size_t first) {
  for (size_t i = first; i < s.size(); ++i)
    if (!s[i].is_static()) return false;
  return true;
}

bool same_lead(const Shape& a, const Shape& b) { return same_dim(a[0], b[0]) && same_dim(a[1], b[1]); }

/// A Reshape between a tensor of rank >= 3 and a rank-5 one (`into` the core: to rank 5; else from
/// it) that keeps the two leading dims, every other dim of both static.
bool batch_keeping_reshape(const Node* n, bool into) {
  if (!is_op(n, "Reshape")) return false;
  const Value* r5 = into ? n->outputs[0] : n->input(0);
  const Value* other = into ? n->input(0) : n->outputs[0];
  if (!rank5(r5) || !other->type.shape || other->type.shape->size() < 3) return false;
  const Shape &a = *r5->type.shape, &b = *other->type.shape;
  return same_lead(a, b) && static_from(a, 2) && static_from(b, 2);
}

bool scalar_constant(const Value* v) {
  const Tensor* t = constant_of(v);
  return t && t->numel() == 1;
}

/// A constant of rank <= 5 that is 1 (or absent) at the two batch dims of the rank-5 tensor it
/// meets: the same for every [B, G] pair.
bool batch_free_constant(const Value* v) {
  const Tensor* t = constant_of(v);
  if (!t || t->dims().size() > 5) return false;
  const auto& d = t->dims();
  for (size_t i = 0; i < d.size(); ++i)
    if (5 - d.size() + i < 2 && d[i] != 1) return false;
  return true;
}

bool same_shape(const Shape& a, const Shape& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!same_dim(a[i], b[i])) return false;
  return true;
}

/// An op the merged core keeps as it is, with its attributes or constant adjusted.
bool inner_op(const Graph& g, const Node* n) {
  if (n->outputs.size() != 1 || !rank5(n->outputs[0])) return false;
  if (is_op(n, "Transpose")) {
    const auto p = n->attr_ints("perm");
    return p.size() == 5 && p[0] == 0 && p[1] == 1;
  }
  if (is_op(n, "MatMul"))  // a constant operand would keep its two batch dims
    return rank5(n->input(0)) && rank5(n->input(1)) && !constant_of(n->input(0)) && !constant_of(n->input(1));
  if (is_op(n, "Softmax")) {
    const int64_t axis = n->attr_int("axis", g.opset("") < 13 ? 1 : -1);
    return axis == -1 || axis == 4;
  }
  if (n->inputs.size() != 2) return false;
  const bool first = rank5(n->input(0)) != nullptr;
  const Value* x = n->input(first ? 0 : 1);
  const Value* other = n->input(first ? 1 : 0);
  if (!rank5(x) || !same_shape(*x->type.shape, *n->outputs[0]->type.shape)) return false;  // no broadcast up
  if (is_op(n, "Mul")) return scalar_constant(other);
  if (is_op(n, "Div")) return first && scalar_constant(other);
  if (is_op(n, "Add")) return batch_free_constant(other);
  return false;
}

struct Core {
  std::vector<Node*> inner, entries, exits;
  std::vector<Value*> values;  // every rank-5 value, each once
};

/// The closed core around `softmax`, or nullopt with why not.
std::optional<Core> collect(const Graph& g, Node* softmax, std::string* why) {
  const Shape* scores = rank5(softmax->outputs[0]);
  if (!scores || !inner_op(g, softmax)) {
    *why = "the Softmax is not over the last axis";
    return std::nullopt;
  }
  Core c;
  std::set<const Node*> seen = {softmax};
  std::set<const Value*> visited;
  c.inner.push_back(softmax);
  std::deque<Value*> work = {softmax->input(0), softmax->outputs[0]};
  auto take = [&](Node* n) {
    c.inner.push_back(n);
    for (Value* in : n->inputs)
      if (rank5(in) && !constant_of(in)) work.push_back(in);  // a constant is the op's business
    work.push_back(n->outputs[0]);
  };
  while (!work.empty()) {
    Value* v = work.front();
    work.pop_front();
    if (!visited.insert(v).second) continue;
    // A [B, G] that a MatMul broadcasts (1 on one side) would not merge: every value has the scores'.
    if (!rank5(v) || v->is_graph_output || !same_lead(*v->type.shape, *scores)) {
      *why = "'" + v->name + "' " +
             (v->is_graph_output ? "is a graph output" : "does not keep the scores' two batch dims");
      return std::nullopt;
    }
    c.values.push_back(v);
    Node* p = v->producer;
    if (!p) {
      *why = "'" + v->name + "' is a graph input";
      return std::nullopt;
    }
    if (seen.insert(p).second) {
      if (batch_keeping_reshape(p, true))
        c.entries.push_back(p);
      else if (inner_op(g, p))
        take(p);
      else {
        *why = describe(p) +
               " is not an op that treats [B, G] as one batch (or its constant differs from one "
               "[B, G] pair to another)";
        return std::nullopt;
      }
    }
    for (Node* u : v->consumers) {
      if (!seen.insert(u).second) continue;
      if (batch_keeping_reshape(u, false))
        c.exits.push_back(u);
      else if (inner_op(g, u))
        take(u);
      else {
        *why = describe(u) + " reads the core and is not an op that treats [B, G] as one batch";
        return std::nullopt;
      }
    }
    if (c.inner.size() > kMaxCore) {
      *why = "the ops around the Softmax are more than an attention core";
      return std::nullopt;
    }
  }
  int matmuls = 0, softmaxes = 0;
  for (const Node* n : c.inner) {
    matmuls += is_op(n, "MatMul");
    softmaxes += is_op(n, "Softmax");
  }
  if (matmuls != 2 || softmaxes != 1 || c.entries.empty() || c.exits.empty()) {
    *why = "the core has " + std::to_string(matmuls) + " MatMuls and " + std::to_string(softmaxes) +
           " Softmaxes, not Q·Kᵀ, one Softmax and P·V between Reshapes that keep [B, G]";
    return std::nullopt;
  }
  // Each exit's target is written again in full: at most one of B and G may be open there.
  if (!(*scores)[0].is_static() && !(*scores)[1].is_static()) {
    *why = "both batch dims are open (bind one, e.g. --batch)";
    return std::nullopt;
  }
  return c;
}

/// A Split of T [B, G, .., N] along its last axis whose every output is read by one entry of the
/// core alone (the chunk of a packed QKV projection): the core can merge T's batch instead, and the
/// Split then splits a 3-D T as merge_qkv packs it.
bool splits_into_entries(const Node* sp, const Core& c, const Shape& scores) {
  if (!is_op(sp, "Split")) return false;
  const Value* t = sp->input(0);
  if (!t->type.shape || t->type.shape->size() < 3 || !same_lead(*t->type.shape, scores) ||
      !static_from(*t->type.shape, 2))
    return false;
  const int64_t rank = static_cast<int64_t>(t->type.shape->size());
  const int64_t axis = sp->attr_int("axis", 0);
  if (axis != -1 && axis != rank - 1) return false;
  for (const Value* o : sp->outputs) {
    if (o->is_graph_output || o->consumers.size() != 1) return false;
    if (std::find(c.entries.begin(), c.entries.end(), o->consumers[0]) == c.entries.end()) return false;
  }
  return true;
}

/// A Reshape target for `s`: its static dims, -1 for the one that is not.
Value* target_of(Graph& g, const Shape& s, const std::string& stem) {
  std::vector<int64_t> t;
  for (const Dim& d : s) t.push_back(d.is_static() ? d.value : -1);
  return int64_initializer(g, stem, t);
}

}  // namespace

bool scores_matmul_behind(const Node* softmax) {
  const Value* v = softmax->input(0);
  for (int depth = 0; depth < 4 && v && v->producer; ++depth) {
    const Node* p = v->producer;
    if (is_op(p, "MatMul")) return rank5(p->outputs[0]) != nullptr;
    const Value* next = nullptr;  // the one input that is not a constant
    for (const Value* in : p->inputs)
      if (in && !constant_of(in)) {
        if (next) return false;
        next = in;
      }
    v = next;
  }
  return false;
}

bool merge_batch_dims(Graph& g, Node* softmax, std::string* why) {
  const auto core = collect(g, softmax, why);
  if (!core) return false;
  const Shape lead = *softmax->outputs[0]->type.shape;
  const auto b = product_of(lead[0]), grp = product_of(lead[1]);
  const auto bg = b && grp ? times(*b, *grp) : std::nullopt;
  if (!bg) {
    *why = "B·G is not a known dim";
    return false;
  }
  const Dim merged = dim_of(*bg);
  auto merge = [&](const Shape& s) {
    Shape m = {merged};
    m.insert(m.end(), s.begin() + 2, s.end());
    return m;
  };
  std::set<Node*> splits, merged_splits;  // decided before any shape changes
  for (Node* e : core->entries)
    if (Node* sp = e->input(0)->producer; sp && splits_into_entries(sp, *core, lead)) splits.insert(sp);
  for (Node* e : core->entries) {
    Value* x = e->input(0);
    if (Node* sp = x->producer; sp && splits.count(sp)) {
      if (merged_splits.insert(sp).second) {
        Value* t = sp->input(0);
        Value* t_merged = g.add_value(t->name + "_batch_merged");
        t_merged->type = {t->type.dtype, merge(*t->type.shape)};
        g.add_node("Reshape", {t, target_of(g, *t_merged->type.shape, t_merged->name + "_shape")}, {t_merged},
                   g.unique_node_name(sp->name + "_merge_batch"));
        g.set_input(sp, 0, t_merged);
        sp->set_attr("axis", int64_t{-1});
        for (Value* o : sp->outputs) o->type.shape = merge(*o->type.shape);
      }
      g.set_input(e, 1, target_of(g, merge(*e->outputs[0]->type.shape), e->name + "_merged_shape"));
      continue;
    }
    Value* x_merged = g.add_value(x->name + "_batch_merged");
    x_merged->type = {x->type.dtype, merge(*x->type.shape)};
    g.add_node("Reshape", {x, target_of(g, *x_merged->type.shape, x_merged->name + "_shape")}, {x_merged},
               g.unique_node_name(e->name + "_merge_batch"));
    g.set_input(e, 0, x_merged);
    g.set_input(e, 1, target_of(g, merge(*e->outputs[0]->type.shape), e->name + "_merged_shape"));
  }
  for (Node* n : core->inner) {
    if (is_op(n, "Transpose")) {
      const auto p = n->attr_ints("perm");
      n->set_attr("perm", std::vector<int64_t>{0, p[2] - 1, p[3] - 1, p[4] - 1});
    } else if (is_op(n, "Softmax")) {
      n->set_attr("axis", int64_t{-1});
    } else if (is_op(n, "Add")) {
      const size_t at = rank5(n->input(0)) ? 1 : 0;
      const Tensor& t = *constant_of(n->input(at));
      if (t.dims().size() == 5) {  // [1, 1, ...] -> [1, ...]: still broadcast over the merged batch
        std::vector<int64_t> d(t.dims().begin() + 1, t.dims().end());
        g.set_input(n, at, g.add_initializer(n->input(at)->name + "_merged", t.reshaped(d)));
      }
    }
  }
  for (Value* v : core->values) v->type.shape = merge(*v->type.shape);
  for (Node* x : core->exits) {
    Value* v = x->input(0);
    const Shape out = *x->outputs[0]->type.shape;
    Value* y = g.add_value(v->name + "_rows");
    y->type = {v->type.dtype, merge(out)};
    g.add_node("Reshape", {v, target_of(g, *y->type.shape, y->name + "_shape")}, {y},
               g.unique_node_name(x->name + "_rows"));
    g.set_input(x, 0, y);
    g.set_input(x, 1, target_of(g, out, x->name + "_split_batch_shape"));
  }
  g.topo_sort();
  return true;
}

}  // namespace fusec::attention
