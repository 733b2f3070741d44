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

const Shape* rank_of(const Value* v, size_t r) {
  return v && v->type.shape && v->type.shape->size() == r ? &*v->type.shape : nullptr;
}

/// An element-wise op the core keeps: Add/Sub/Mul/Div/Max (XGLM's clamp), or Where (a mask filled
/// in: FSMT).
bool is_elementwise(const Node* n) {
  const bool where = is_op(n, "Where");
  if (!where && !is_op(n, "Add") && !is_op(n, "Sub") && !is_op(n, "Mul") && !is_op(n, "Div") && !is_op(n, "Max"))
    return false;
  if (n->inputs.size() != (where ? 3u : 2u)) return false;
  for (const Value* in : n->inputs)
    if (!in) return false;
  return true;
}

/// Where the core's folded dim is in one of its values: N = B·H at `at` of a rank-3 value, or, in
/// a `split` (rank-4) value, B at `at` and H at `at` + 1 (HF's attn_weights.view(B, H, T, S) for the
/// mask, and back).
struct Track {
  int at = 0;
  bool split = false;
  bool operator==(const Track& o) const { return at == o.at && split == o.split; }
};

bool computed(const Value* v) { return v && v->type.shape && !constant_of(v); }

/// A Reshape between a rank-3 [.., N, ..] and a rank-4 [.., B, H, ..] that only splits (or merges)
/// that one dim; `into` the rank-4 side. The dim's position, or -1.
int fold_reshape(const Node* n, bool* into) {
  if (!is_op(n, "Reshape") || !n->input(0)) return -1;
  const Shape *a = rank_of(n->input(0), 3), *b = rank_of(n->outputs[0], 4);
  *into = a && b;
  if (!*into) {
    a = rank_of(n->outputs[0], 3);
    b = rank_of(n->input(0), 4);
    if (!a || !b) return -1;
  }
  for (int at = 0; at < 3; ++at) {
    bool same = true;
    for (int i = 0; i < 3 && same; ++i) {
      if (i == at) continue;
      same = same_dim((*a)[static_cast<size_t>(i)], (*b)[static_cast<size_t>(i < at ? i : i + 1)]);
    }
    const Dim &n3 = (*a)[static_cast<size_t>(at)], &b4 = (*b)[static_cast<size_t>(at)],
              &h4 = (*b)[static_cast<size_t>(at + 1)];
    if (same && n3.is_static() && b4.is_static() && h4.is_static() && n3.value == b4.value * h4.value) return at;
  }
  return -1;
}

/// An op the core keeps (rank-3 ones get the folded dim split), or a fold Reshape that goes.
bool inner_op(const Graph& g, const Node* n) {
  if (n->outputs.size() != 1 || !n->outputs[0]->type.shape) return false;
  const Value* out = n->outputs[0];
  if (is_op(n, "Transpose")) return rank_of(out, 3) && n->attr_ints("perm").size() == 3 && computed(n->input(0));
  if (is_op(n, "MatMul"))
    return rank_of(out, 3) && rank_of(n->input(0), 3) && rank_of(n->input(1), 3) && computed(n->input(0)) &&
           computed(n->input(1));
  if (is_op(n, "Softmax")) {
    const size_t r = out->type.shape->size();
    const int64_t axis = n->attr_int("axis", g.opset("") < 13 ? 1 : -1);
    return (r == 3 || r == 4) && (axis == -1 || axis == static_cast<int64_t>(r) - 1);
  }
  bool into = false;
  if (is_op(n, "Reshape")) return fold_reshape(n, &into) >= 0;
  return is_elementwise(n) && (rank_of(out, 3) || rank_of(out, 4));
}

/// The track of each computed value of node `n` of rank 3 or 4, given `known`'s; false when the
/// node cannot carry the folded dim there (a MatMul's N must be its batch dim, a Softmax's not its
/// axis, a fold Reshape must split exactly it).
bool propagate(const Node* n, const Value* known, Track t, std::vector<std::pair<Value*, Track>>& out) {
  if (is_op(n, "Transpose")) {
    if (t.split) return false;
    const auto p = n->attr_ints("perm");
    int in_at = t.at;
    if (known == n->outputs[0]) in_at = static_cast<int>(p[static_cast<size_t>(t.at)]);
    int out_at = -1;
    for (int i = 0; i < 3; ++i)
      if (p[static_cast<size_t>(i)] == in_at) out_at = i;
    if (out_at < 0) return false;
    out = {{n->input(0), {in_at, false}}, {n->outputs[0], {out_at, false}}};
    return true;
  }
  if (is_op(n, "MatMul")) {
    if (t.split || t.at != 0) return false;
    out = {{n->input(0), {0, false}}, {n->input(1), {0, false}}, {n->outputs[0], {0, false}}};
    return true;
  }
  if (is_op(n, "Reshape")) {
    bool into = false;
    const int at = fold_reshape(n, &into);
    if (at != t.at) return false;
    const bool in_split = !into;
    if ((known == n->input(0)) != (t.split == in_split)) return false;
    out = {{n->input(0), {at, in_split}}, {n->outputs[0], {at, !in_split}}};
    return true;
  }
  const size_t rank = t.split ? 4 : 3;
  if (is_op(n, "Softmax") && t.at + (t.split ? 1 : 0) == static_cast<int>(rank) - 1) return false;
  out = {{n->outputs[0], t}};
  for (Value* in : n->inputs)
    if (computed(in) && in->type.shape->size() == rank) out.emplace_back(in, t);
  return true;
}

struct Core {
  std::vector<Node*> nodes;
  std::set<const Node*> member;
  std::map<Value*, Track> track;  // every computed value the core reads or writes
  std::vector<Value*> order;      // the same values, in the order found
};

std::optional<Core> collect(const Graph& g, Node* softmax, std::string* why) {
  Core c;
  std::deque<Value*> work;
  // Nodes reached from the Softmax forward (and the Softmax): their outputs' readers join the core.
  // A node reached backward (on the way to Q, K, V or a mask) keeps its other readers outside: a
  // mask shared by every layer must not pull in the next layer's attention.
  std::set<const Node*> forward = {softmax};
  auto take = [&](Node* n, const Value* known, Track t) {
    std::vector<std::pair<Value*, Track>> vals;
    if (!propagate(n, known, t, vals)) {
      *why = describe(n) + " does not keep the folded batch dim where the scores have it";
      return false;
    }
    for (auto [v, tv] : vals) {
      auto [it, added] = c.track.emplace(v, tv);
      if (!added && !(it->second == tv)) {
        *why = "'" + v->name + "' would have the folded batch dim in two places";
        return false;
      }
      if (added) {
        work.push_back(v);
        c.order.push_back(v);
      }
    }
    c.nodes.push_back(n);
    c.member.insert(n);
    return true;
  };
  // Scores [B·H, S, S], or their view [B, H, S, S] (BLOOM's Softmax, between the folded bmms).
  const bool split = rank_of(softmax->input(0), 4) != nullptr;
  if ((!split && !rank_of(softmax->input(0), 3)) || !inner_op(g, softmax)) {
    *why = "the Softmax is not over the last axis of rank-3 or rank-4 scores";
    return std::nullopt;
  }
  if (!take(softmax, softmax->input(0), {0, split})) return std::nullopt;
  while (!work.empty()) {
    Value* v = work.front();
    work.pop_front();
    Node* p = v->producer;
    if (p && !c.member.count(p) && inner_op(g, p) && !take(p, v, c.track.at(v))) return std::nullopt;
    if (!p || !forward.count(p)) continue;  // an entry, or on the way back: its other readers stay outside
    for (Node* u : v->consumers)
      if (!c.member.count(u) && inner_op(g, u)) {
        if (!take(u, v, c.track.at(v))) return std::nullopt;
        forward.insert(u);
      }
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

Value* reshape_node(Graph& g, Value* v, Value* out, const std::string& stem) {
  const std::vector<int64_t> t = *target(*out->type.shape);
  g.add_node("Reshape",
             {v, g.add_initializer(stem + "_shape", Tensor::from_int64(t, {static_cast<int64_t>(t.size())}))}, {out},
             g.unique_node_name(stem));
  return out;
}

Value* reshaped(Graph& g, Value* v, const Shape& to, const std::string& stem) {
  Value* out = g.add_value(stem);
  out->type = {v->type.dtype, to};
  return reshape_node(g, v, out, stem);
}

/// perm of a rank-3 Transpose whose input has the folded dim at `in_at`, over the rank-4 tensors
/// where that dim is split in two (kept together, in order, in the output).
std::vector<int64_t> split_perm(const std::vector<int64_t>& p, int64_t in_at) {
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
    if (!p || depth > 6) continue;
    if (is_op(p, "MatMul") && rank_of(p->outputs[0], 3)) return true;
    for (const Value* in : p->inputs)
      if (in && !constant_of(in)) work.emplace_back(in, depth + 1);
  }
  return false;
}

bool split_folded_heads(Graph& g, Node* softmax, std::string* why) {
  auto core = collect(g, softmax, why);
  if (!core) return false;
  // The split of N: the fold Reshapes' [B, H] where the core has them (all alike), else [1, N].
  const Shape& scores = *softmax->input(0)->type.shape;
  std::optional<std::pair<Dim, Dim>> bh;
  for (Node* n : core->nodes) {
    if (!is_op(n, "Reshape")) continue;
    const Value* four = core->track.at(n->input(0)).split ? n->input(0) : n->outputs[0];
    const int at = core->track.at(n->input(0)).at;
    const std::pair<Dim, Dim> here = {(*four->type.shape)[static_cast<size_t>(at)],
                                      (*four->type.shape)[static_cast<size_t>(at + 1)]};
    if (bh && !(same_dim(bh->first, here.first) && same_dim(bh->second, here.second))) {
      *why = "the core splits its folded batch dim in two different ways";
      return false;
    }
    bh = here;
  }
  if (!bh) bh = scores.size() == 4 ? std::make_pair(scores[0], scores[1]) : std::make_pair(Dim(1), scores[0]);
  auto split_shape = [&](const Shape& s, int at) {
    Shape e = s;
    const Dim d = e[static_cast<size_t>(at)];
    e[static_cast<size_t>(at)] = d.is_static() && d.value == 1 ? Dim(1) : bh->first;
    e.insert(e.begin() + at + 1, d.is_static() && d.value == 1 ? Dim(1) : bh->second);
    return e;
  };
  for (Value* v : core->order)
    if (!core->track.at(v).split && !target(split_shape(*v->type.shape, core->track.at(v).at))) {
      *why = "'" + v->name + "' has more than one open dim (bind the batch, e.g. --batch)";
      return false;
    }
  std::set<Value*> produced;
  for (Node* n : core->nodes) produced.insert(n->outputs[0]);
  // The Transposes' perms over rank 4, from where N is in their inputs (before those are rewired).
  std::map<Node*, std::vector<int64_t>> perms;
  for (Node* n : core->nodes)
    if (is_op(n, "Transpose")) perms[n] = split_perm(n->attr_ints("perm"), core->track.at(n->input(0)).at);
  // Entries: a rank-3 value from outside gets its split form.
  std::map<Value*, Value*> entry4;
  for (Node* n : core->nodes) {
    if (is_op(n, "Reshape")) continue;  // fold Reshapes go below
    const Track out_t = core->track.at(n->outputs[0]);
    for (size_t i = 0; i < n->inputs.size(); ++i) {
      Value* v = n->input(i);
      if (!v || produced.count(v)) continue;
      if (auto it = core->track.find(v); it != core->track.end()) {
        if (it->second.split) continue;  // a rank-4 operand of a rank-4 op: as it is
        Value*& v4 = entry4[v];
        if (!v4) v4 = reshaped(g, v, split_shape(*v->type.shape, it->second.at), v->name + "_heads");
        g.set_input(n, i, v4);
        continue;
      }
      if (out_t.split) continue;  // broadcasts against the rank-4 value as before
      // A side operand of a rank-3 element-wise op (a constant or a lower-rank value): aligned to
      // rank 3, its folded dim split, where it reaches that dim.
      const Shape* s = v->type.shape ? &*v->type.shape : nullptr;
      const Tensor* t = constant_of(v);
      if (!is_elementwise(n) || (t && t->numel() == 1)) continue;
      if (!s || s->size() > 3) {
        *why = "'" + v->name + "' has no known rank of at most 3";
        return false;
      }
      if (static_cast<int>(s->size()) <= 2 - out_t.at) continue;  // below the folded dim: broadcasts alike
      Shape aligned(3 - s->size(), Dim(1));
      aligned.insert(aligned.end(), s->begin(), s->end());
      const Shape four = split_shape(aligned, out_t.at);
      if (!target(four)) {
        *why = "'" + v->name + "' has more than one open dim";
        return false;
      }
      if (t)
        g.set_input(n, i, g.add_initializer(v->name + "_heads", t->reshaped(*target(four))));
      else
        g.set_input(n, i, reshaped(g, v, four, v->name + "_heads"));
    }
  }
  // A value read outside the core (or a graph output) keeps its name and rank: the core writes a
  // new rank-4 value, and a Reshape writes it back.
  std::set<Value*> exited;
  for (Value* v : core->order) {
    if (!produced.count(v) || core->track.at(v).split) continue;
    std::vector<std::pair<Node*, size_t>> inside;
    bool outside = v->is_graph_output;
    for (Node* u : v->consumers) {
      if (!core->member.count(u)) outside = true;
      for (size_t i = 0; i < u->inputs.size(); ++i)
        if (core->member.count(u) && u->input(i) == v) inside.emplace_back(u, i);
    }
    if (!outside) continue;
    Value* v4 = g.add_value(v->name + "_heads");
    v4->type = {v->type.dtype, split_shape(*v->type.shape, core->track.at(v).at)};
    g.set_output(v->producer, 0, v4);
    for (auto [u, i] : inside) g.set_input(u, i, v4);
    reshape_node(g, v4, v, v->name + "_folded");
    exited.insert(v);
  }
  for (auto& [n, perm] : perms) n->set_attr("perm", perm);
  softmax->set_attr("axis", int64_t{-1});
  for (Value* v : core->order)
    if (produced.count(v) && !exited.count(v) && !core->track.at(v).split)
      v->type.shape = split_shape(*v->type.shape, core->track.at(v).at);
  // The fold Reshapes now map a tensor to its own shape (all but a split of a rank-3 entry): they go.
  for (Node* n : core->nodes) {
    if (!is_op(n, "Reshape") || (!core->track.at(n->input(0)).split && !produced.count(n->input(0)))) continue;
    Value *in = n->input(0), *out = n->outputs[0];
    if (out->is_graph_output) continue;  // keeps its name: a Reshape to its own shape stays
    g.remove_node(n);
    g.replace_all_uses(out, in);
  }
  g.topo_sort();
  return true;
}

}  // namespace fusec::attention
