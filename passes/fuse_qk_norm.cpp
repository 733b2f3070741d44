// fuse_qk_norm: a per-head norm of Q or K in front of its rotation (QK-norm) goes into the
// ai.fusec Rotary, and a constant scalar scaling the query there moves behind it, so that the head
// split in front of both moves behind the rotation as fuse_rotary does for Llama's. Then
// fuse_attention reads the projection in place and merge_qkv packs the projections.
//
//   P ─ Reshape [B,S,H,D] ─ [Transpose(0,2,1,3)] ─ SimplifiedLayerNorm(γ; axis −1) ─ Rotary(c, s) ─ Q
//     =>  P ─ Rotary(c', s', γ; head_size = D, norm = 1, epsilon) ─ Reshape ─ [Transpose] ─ Q
//
//   LayerNormalization(γ, β; axis −1) instead: norm = 2, β as input 4 (Persimmon, Cohere).
//   P ─ SimplifiedLayerNorm(γ [H·D]) ─ Rotary(c, s; head_size = D) (OLMo 2 normalizes the whole
//   projection before the split; fuse_rotary has already moved the split behind the rotation)
//     =>  P ─ Rotary(c, s, γ as [H, D]; head_size = D, norm = 1, norm_groups = [H])
//   Mul(x, c) or Div(x, c) with c a constant scalar before the Rotary: Rotary(x)·c (ESM's
//   query·D^-½), since the rotation is linear; fuse_attention folds c into its scale.
//
// The norm is over the head's D values (the last axis, which the head split and the Transpose
// keep), so it reads the same in every view: with γ (and β) one row of D values. Exporters write
// QK-norm after the head split (the norm module is per head), sometimes after the Transpose too,
// which is why fuse_rotary could not move the split behind the rotation: the norm stood between.
// Runs after recognize_layernorm (the norms are nodes) and before fuse_attention.
//
// Not taken: a norm whose output something else reads, a scale or bias that is not a constant row
// of the normalized width, LayerNormalization with stash_type other than float or its statistics
// read, a norm over a packed rotation's rows (some of them V's).
#include "passes/fuse_qk_norm.h"

#include "ir/dtype.h"
#include "passes/fuse_rotary.h"
#include "passes/pattern.h"
#include "passes/rewrite.h"

namespace fusec {

namespace {

bool is_rotary(const Node* n) { return n && n->op_type == "Rotary" && n->domain == "ai.fusec"; }

/// A constant of `d` values laid out as one row ([d], or [1, .., 1, d]), else nullptr.
const Tensor* row_of(const Value* v, int64_t d) {
  const Tensor* t = v ? constant_of(v) : nullptr;
  if (!t || t->rank() == 0 || t->dims().back() != d || t->numel() != d) return nullptr;
  return t;
}

/// Why `norm` (the producer of `rot`'s X) cannot go into the rotation as its norm, or "": over each
/// head (a rotation without head_size), or over a row of whole heads (one with head_size). Sets
/// *kind (1: RMS, 2: LayerNorm).
std::string norm_problem(const Node* norm, const Node* rot, int64_t* kind) {
  const bool rms = norm->op_type == "SimplifiedLayerNorm" && norm->domain == "ai.fusec";
  *kind = rms ? 1 : 2;
  const Value* x = norm->input(0);
  const Shape* xs = known_rank(x);
  if (!xs || xs->empty() || !xs->back().is_static()) return "the normalized tensor's head size is not known";
  const int64_t rank = static_cast<int64_t>(xs->size()), d = xs->back().value;
  const int64_t axis = norm->attr_int("axis", -1);
  if (axis != -1 && axis != rank - 1) return "it normalizes more than the last axis (the head)";
  if (rot->attr_int("rotated", 0) != 0 || rot->attr_int("norm", 0) != 0)
    return "the rotation is already packed or normalized";
  const int64_t hs = rot->attr_int("head_size", 0);
  if (hs != 0 && d % hs != 0) return "the normalized row is not whole heads of " + std::to_string(hs);
  if (!has_single_use(norm->outputs[0]) || norm->outputs[0]->is_graph_output)
    return "its output '" + norm->outputs[0]->name + "' is read outside the rotation";
  for (size_t i = 1; i < norm->outputs.size(); ++i)
    if (norm->outputs[i] && (use_count(norm->outputs[i]) > 0 || norm->outputs[i]->is_graph_output))
      return "its statistics output '" + norm->outputs[i]->name + "' is read";
  if (!rms && norm->attr_int("stash_type", 1) != 1) return "it computes in a type other than float32";
  if (!row_of(norm->input(1), d)) return "its scale is not a constant row of the " + std::to_string(d) + " values";
  if (!rms && norm->input(2) && !row_of(norm->input(2), d))
    return "its bias is not a constant row of the " + std::to_string(d) + " values";
  for (size_t i = 1; i < 3 && i < norm->inputs.size(); ++i)
    if (norm->input(i) && norm->input(i)->type.dtype != x->type.dtype) return "its scale or bias is not of X's type";
  if (x->type.dtype != rot->input(0)->type.dtype) return "it changes the type";
  return "";
}

/// A row constant of d values as [d], or as [d / head, head] rows where the norm spans several heads
/// (a new initializer where the dims change).
Value* as_rows(Graph& g, Value* v, int64_t d, int64_t head, const std::string& stem) {
  const Tensor* t = constant_of(v);
  const std::vector<int64_t> dims = head && head < d ? std::vector<int64_t>{d / head, head} : std::vector<int64_t>{d};
  if (t->dims() == dims) return v;
  return g.add_initializer(stem, t->reshaped(dims));
}

/// Norm `norm` -> Rotary `rot` => Rotary(norm's X, .., scale [, bias]; norm, epsilon[, norm_groups]).
Node* absorb_norm(Rewriter& r, Node* norm, Node* rot, int64_t kind) {
  Graph& g = r.graph();
  Value* x = norm->input(0);
  const int64_t d = known_rank(x)->back().value, hs = rot->attr_int("head_size", 0);
  std::vector<Value*> ins = {x, rot->input(1), rot->input(2),
                             as_rows(g, norm->input(1), d, hs, rot->name + "_norm_scale")};
  if (kind == 2 && norm->inputs.size() > 2 && norm->input(2))
    ins.push_back(as_rows(g, norm->input(2), d, hs, rot->name + "_norm_bias"));
  const float eps = norm->attr_float("epsilon", 1e-5f);
  const bool spans = hs && hs < d;  // the norm spans the row's d / hs heads
  Value* y = rot->outputs[0];
  const std::string name = rot->name;
  auto attrs = rot->attrs;
  Replaced gone = r.remove({norm, rot});
  Node* nr = r.add("Rotary", ins, {y}, name, "ai.fusec", gone.origins);
  nr->attrs = std::move(attrs);
  nr->set_attr("norm", kind);
  nr->set_attr("epsilon", eps);
  if (spans) nr->set_attr("norm_groups", std::vector<int64_t>{d / hs});
  r.rewrote(gone.listed + " -> " + describe(nr) +
                (spans ? " (the row's " + std::to_string(d / hs) + " heads normalized as one, then rotated)"
                       : " (each head normalized, then rotated)"),
            gone.names, name);
  return nr;
}

/// Mul(x, c) or Div(x, c), c a constant scalar, -> Rotary `rot` => Rotary(x) -> the same Mul/Div.
Node* sink_scale(Rewriter& r, Node* s, Node* rot) {
  Graph& g = r.graph();
  const int xi = constant_of(s->input(0)) ? 1 : 0;
  if (s->op_type == "Div" && xi != 0) return nullptr;
  const Tensor* c = constant_of(s->input(1 - xi));
  Value* x = s->input(xi);
  if (!c || c->numel() != 1 || !has_single_use(s->outputs[0]) || s->outputs[0]->is_graph_output ||
      !same_shape_and_type(x, s->outputs[0]) || rot->attr_int("rotated", 0) != 0)
    return nullptr;
  Value* y = rot->outputs[0];
  std::vector<Value*> rot_ins = rot->inputs, s_ins = s->inputs;
  rot_ins[0] = x;
  const auto rot_attrs = rot->attrs;
  const std::string rot_name = rot->name, s_name = s->name, s_op = s->op_type;
  const std::vector<std::string> rot_from = rot->fused_from, s_from = s->fused_from;
  Replaced gone = r.remove({s, rot});
  Value* rotated = g.add_value(rot_name + "_unscaled");
  rotated->type = y->type;
  Node* nr = r.add("Rotary", rot_ins, {rotated}, rot_name, "ai.fusec", rot_from);
  nr->attrs = rot_attrs;
  s_ins[xi] = rotated;
  Node* moved = g.add_node(s_op, s_ins, {y}, s_name);
  moved->fused_from = s_from;
  r.rewrote(gone.listed + " -> " + describe(nr) + " -> " + describe(moved) + " (the scalar moved after the rotation)",
            {}, rot_name);
  return nr;
}

}  // namespace

bool FuseQkNormPass::run(Graph& g, PassContext& ctx) {
  Rewriter r(g, ctx, name());
  std::vector<Node*> rotaries;
  for (Node* n : g.node_list())
    if (is_rotary(n)) rotaries.push_back(n);
  for (Node* rot : rotaries) {
    // Each step either takes the node in front of the rotation or moves it behind; the head split
    // then moves behind too, and the next node in front is looked at.
    bool touched = false;
    for (bool moved = true; moved && rot; touched = touched || moved) {
      moved = false;
      Node* p = rot->input(0) ? rot->input(0)->producer : nullptr;
      if (!p) break;
      if ((p->op_type == "SimplifiedLayerNorm" && p->domain == "ai.fusec") || is_op(p, "LayerNormalization")) {
        int64_t kind = 0;
        const std::string why = norm_problem(p, rot, &kind);
        if (!why.empty()) {
          r.near_miss(describe(p) + " -> " + describe(rot) + " not fused", why);
          break;
        }
        rot = absorb_norm(r, p, rot, kind);
        moved = true;
      } else if ((is_op(p, "Mul") || is_op(p, "Div")) && rot->attr_int("head_size", 0) == 0) {
        if (Node* nr = sink_scale(r, p, rot)) rot = nr, moved = true;
      } else if (touched) {
        if (Node* nr = sink_head_split(r, rot)) rot = nr, moved = true;
      }
    }
  }
  if (r.changed()) g.remove_unused_values();
  return r.changed();
}

}  // namespace fusec
