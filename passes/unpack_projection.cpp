// unpack_projection: a projection viewed as groups and cut within each group -> one projection per
// piece.
//
//        X [.., K]                                   X [.., K]
//           │                                 ┌─────────┼─────────┐
//   MatMul W [K, G·C] (+ b)        =>     MatMul W₀   MatMul W₁   MatMul W₂      Wᵢ = W's columns
//           │                            (+ b₀)      (+ b₁)      (+ b₂)          g·C + [aᵢ, bᵢ) of
//   Reshape [.., G, C] (Transpose)          │           │           │              every group g
//           │                            Reshape [.., G, bᵢ - aᵢ] (Transpose) each
//   Split / Slices along C: [a₀, b₀), [a₁, b₁), [a₂, b₂)
//
// Piece i of the view is, per token, the columns g·C + [aᵢ, bᵢ) of the product, in group order:
// exactly X·Wᵢ (+ bᵢ) viewed [.., G, bᵢ - aᵢ]. GPT-NeoX (Pythia) writes its query_key_value so, one
// [H, 3·D] view per token cut into Q, K and V; CodeGen views its qkv_proj as [mp_num, 3·E/mp_num]
// and cuts Q, V and K out of each. Unpacked, Q, K and V are ordinary per-head projections: the
// rotary and attention passes match them as Llama's, and merge_qkv packs them back in the order
// the attention kernels read (Q heads, K heads, V heads), with the rotation over the packed rows.
// Without this, such a model kept a transpose of the whole product, a Split copy, one rotation per
// operand and an unpacked 4-D attention.
//
// Only where a piece reaches a Softmax within a few ops (an attention, which merge_qkv packs back
// into one product): elsewhere one GEMM would become several for no gain. The new weights are
// derived (ir/derived_weight.h): built in the scratch store where the source is mapped.
#include "passes/unpack_projection.h"

#include <deque>
#include <optional>
#include <set>

#include "ir/derived_weight.h"
#include "ir/dtype.h"
#include "passes/pattern.h"
#include "passes/rewrite.h"

namespace fusec {

namespace {

const char* kPass = "unpack_projection";

struct Piece {
  Value* value;    // the Split, Slice or Gather output it replaces
  int64_t g0, g1;  // groups [g0, g1)
  int64_t a, b;    // columns [a, b) of each of them
  Node* producer;  // its Split, Slice or Gather
};

struct Match {
  Node *matmul = nullptr, *add = nullptr, *view = nullptr, *transpose = nullptr;
  Value *x = nullptr, *w = nullptr, *bias = nullptr;
  int64_t groups = 0, width = 0;  // G, C
  int64_t split_width = 0;        // D of a [.., G, P, D] view (C = P·D), else 0
  std::vector<Piece> pieces;
};

/// The pieces `grouped` ([.., G, C], or [.., G, P, C / P] where `split_width` is C / P) is cut into:
/// along C (Split or Slices of the last axis: GPT-NeoX's heads' [Q | K | V]), along G (of the axis
/// before: Falcon's query heads, then its key and value heads), or along P by single indices
/// (Gathers: BLOOM's [H, 3, D] view); nullopt when a reader does anything else or the cut is not
/// one into Q, K and V.
std::optional<std::vector<Piece>> pieces_of(Value* grouped, int64_t groups, int64_t width, int64_t split_width) {
  const int64_t rank = static_cast<int64_t>(grouped->type.shape->size());
  const int64_t c_axis = split_width ? rank - 2 : rank - 1, g_axis = c_axis - 1;
  std::vector<Piece> out;
  auto add = [&](Value* v, int64_t axis, int64_t from, int64_t to, Node* n) {
    if (axis == c_axis && !split_width) {
      out.push_back({v, 0, groups, from, to, n});
      return true;
    }
    if (axis == g_axis && !split_width) {
      out.push_back({v, from, to, 0, width, n});
      return true;
    }
    return false;
  };
  for (Node* c : grouped->consumers) {
    if (c->input(0) != grouped) return std::nullopt;
    if (is_op(c, "Split")) {
      int64_t axis = c->attr_int("axis", 0);
      if (axis < 0) axis += rank;
      int64_t at = 0;
      for (Value* o : c->outputs) {
        const Shape* os = o && o->type.shape ? &*o->type.shape : nullptr;
        if (!os || axis < 0 || axis >= rank || !(*os)[static_cast<size_t>(axis)].is_static()) return std::nullopt;
        const int64_t n = (*os)[static_cast<size_t>(axis)].value;
        if ((!o->consumers.empty() || o->is_graph_output) && !add(o, axis, at, at + n, c)) return std::nullopt;
        at += n;
      }
      continue;
    }
    if (is_op(c, "Slice")) {
      const std::optional<AxisSlice> sl = axis_slice(c);
      if (!sl.has_value()) return std::nullopt;
      const AxisSlice cut = *sl;
      if (cut.begin >= cut.end || !add(c->outputs[0], cut.axis, cut.begin, cut.end, c)) return std::nullopt;
      continue;
    }
    if (is_op(c, "Gather") && split_width) {  // one index along P: [.., G, C / P]
      int64_t axis = c->attr_int("axis", 0);
      if (axis < 0) axis += rank;
      const Tensor* i = constant_of(c->input(1));
      if (axis != c_axis || !i || i->rank() != 0 || !is_integer(i->dtype())) return std::nullopt;
      int64_t p = static_cast<int64_t>(i->as_double(0));
      const int64_t parts = width / split_width;
      if (p < 0) p += parts;
      if (p < 0 || p >= parts) return std::nullopt;
      out.push_back({c->outputs[0], 0, groups, p * split_width, (p + 1) * split_width, c});
      continue;
    }
    return std::nullopt;
  }
  // Q, K and V: three or more parts that use every column of every group. A cut in two within a
  // head is a rotation's (rotate_half, a partial rotary's rotated and passed parts), which stays.
  if (out.size() < 3) return std::nullopt;
  std::vector<bool> used(static_cast<size_t>(groups * width), false);
  for (const Piece& p : out)
    for (int64_t g = p.g0; g < p.g1; ++g)
      for (int64_t c = p.a; c < p.b; ++c) used[static_cast<size_t>(g * width + c)] = true;
  for (bool u : used)
    if (!u) return std::nullopt;
  return out;
}

/// Whether a Softmax reads `v` within `depth` ops.
bool reaches_softmax(const Value* v, int depth) {
  std::deque<std::pair<const Value*, int>> work = {{v, 0}};
  std::set<const Node*> seen;
  while (!work.empty()) {
    auto [x, d] = work.front();
    work.pop_front();
    for (const Node* c : x->consumers) {
      if (is_op(c, "Softmax")) return true;
      if (d + 1 >= depth || !seen.insert(c).second) continue;
      for (const Value* o : c->outputs)
        if (o) work.emplace_back(o, d + 1);
    }
  }
  return false;
}

std::optional<Match> match(Node* mm) {
  Match m;
  m.matmul = mm;
  if (mm->inputs.size() != 2 || !mm->input(0) || !mm->input(0)->type.shape) return std::nullopt;
  m.x = mm->input(0);
  m.w = mm->input(1);
  const Tensor* w = constant_of(m.w);
  if (!w || w->rank() != 2 || !is_float(w->dtype()) || w->dtype() != m.x->type.dtype || m.x->type.shape->size() < 2)
    return std::nullopt;
  const int64_t n = w->dim(1);
  Value* y = mm->outputs[0];
  if (y->consumers.size() == 1 && is_op(y->consumers[0], "Add") && !y->is_graph_output) {
    Node* add = y->consumers[0];
    Value* b = add->input(add->input(0) == y ? 1 : 0);
    const Tensor* bt = constant_of(b);
    if (bt && bt->dtype() == w->dtype() && bt->numel() == n && b->type.shape && !b->type.shape->empty() &&
        b->type.shape->back().is_static() && b->type.shape->back().value == n &&
        add->outputs[0]->type.shape == y->type.shape) {
      m.add = add;
      m.bias = b;
      y = add->outputs[0];
    }
  }
  if (y->consumers.size() != 1 || y->is_graph_output || !is_op(y->consumers[0], "Reshape") || !y->type.shape)
    return std::nullopt;
  m.view = y->consumers[0];
  Value* view = m.view->outputs[0];
  const Shape& ys = *y->type.shape;
  if (m.view->input(0) != y || !view->type.shape) return std::nullopt;
  const Shape& vs = *view->type.shape;
  // [.., G, C], or [.., G, P, D] (BLOOM), read as [.., G, P·D].
  const bool three = vs.size() == ys.size() + 2;
  if (vs.size() != ys.size() + 1 && !three) return std::nullopt;
  for (size_t i = 0; i + 1 < ys.size(); ++i)
    if (!same_dim(ys[i], vs[i])) return std::nullopt;
  for (size_t i = ys.size() - 1; i < vs.size(); ++i)
    if (!vs[i].is_static()) return std::nullopt;
  const int64_t groups = vs[ys.size() - 1].value;
  const int64_t width = three ? vs[ys.size()].value * vs.back().value : vs.back().value;
  if (groups * width != n || groups < 2) return std::nullopt;
  m.groups = groups;
  m.width = width;
  m.split_width = three ? vs.back().value : 0;
  Value* grouped = view;
  if (!three && view->consumers.size() == 1 && is_op(view->consumers[0], "Transpose") && !view->is_graph_output) {
    Node* t = view->consumers[0];
    const auto perm = t->attr_ints("perm");
    const int64_t last = static_cast<int64_t>(vs.size()) - 1;
    if (perm.size() == vs.size() && perm.back() == last && t->outputs[0]->type.shape) {
      m.transpose = t;
      grouped = t->outputs[0];
    }
  }
  if (grouped->is_graph_output) return std::nullopt;
  auto pieces = pieces_of(grouped, m.groups, m.width, m.split_width);
  if (!pieces) return std::nullopt;
  // Behind a Transpose the groups' axis may have moved: cuts along C only.
  for (const Piece& p : *pieces)
    if (m.transpose && (p.g0 != 0 || p.g1 != m.groups)) return std::nullopt;
  bool attention = false;
  for (const Piece& p : *pieces) attention |= reaches_softmax(p.value, 10);
  if (!attention) return std::nullopt;
  m.pieces = std::move(*pieces);
  return m;
}

/// Whether `c` is a Reshape of `piece` (rank `rank` + 1) whose constant target copies (0) none of
/// the piece's last two dims, so that it may read the product (rank `rank`) instead.
bool views_product(const Node* c, const Value* piece, size_t rank) {
  if (!is_op(c, "Reshape") || c->input(0) != piece || c->attr_int("allowzero", 0) != 0) return false;
  const Tensor* t = constant_of(c->input(1));
  if (!t || t->dtype() != DType::Int64 || t->rank() != 1) return false;
  for (int64_t i = 0; i < t->numel(); ++i)
    if (t->data<int64_t>()[i] == 0 && i >= static_cast<int64_t>(rank) - 1) return false;
  return true;
}

/// Columns g·C + [a, b) of groups g in [g0, g1) of the [rows, G·C] matrix (or [G·C] vector) `t`.
Tensor gather_columns(const Tensor& t, int64_t groups, int64_t width, const Piece& p) {
  const int64_t rows = t.rank() == 2 ? t.dim(0) : 1, cols = groups * width;
  const size_t es = dtype_size(t.dtype());
  std::vector<ByteRun> runs;
  const auto* base = static_cast<const unsigned char*>(t.raw());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = p.g0; g < p.g1; ++g)
      append_run(runs, base + static_cast<size_t>(r * cols + g * width + p.a) * es,
                 static_cast<size_t>(p.b - p.a) * es);
  std::vector<int64_t> dims = {(p.g1 - p.g0) * (p.b - p.a)};
  if (t.rank() == 2) dims.insert(dims.begin(), rows);
  return derived_weight(t.dtype(), dims, runs);
}

std::string describe_piece(const Piece& p, int64_t groups) {
  std::string s = "columns " + std::to_string(p.a) + ".." + std::to_string(p.b);
  if (p.g0 != 0 || p.g1 != groups) s += " of groups " + std::to_string(p.g0) + ".." + std::to_string(p.g1);
  return s;
}

}  // namespace

bool UnpackProjectionPass::run(Graph& g, PassContext& ctx) {
  Rewriter r(g, ctx, kPass);
  auto origins = [](const Node* n) {
    return n->fused_from.empty() ? std::vector<std::string>{n->name} : n->fused_from;
  };
  for (Node* mm : g.node_list()) {
    if (r.removed(mm) || !is_op(mm, "MatMul")) continue;
    auto m = match(mm);
    if (!m) continue;
    const Tensor& w = *constant_of(m->w);
    const DType t = w.dtype();
    const Shape& ys = *(m->add ? m->add : m->matmul)->outputs[0]->type.shape;
    const std::vector<int64_t> perm = m->transpose ? m->transpose->attr_ints("perm") : std::vector<int64_t>{};
    // The new nodes first (the Split or Slices still hold the values they replace), then the old go.
    std::vector<std::pair<Value*, Value*>> replace;
    std::string pieces, first;  // first: the first new product's name
    for (size_t i = 0; i < m->pieces.size(); ++i) {
      const Piece& p = m->pieces[i];
      const int64_t part = p.b - p.a, groups = p.g1 - p.g0;
      const std::string stem = mm->name + "_part" + std::to_string(i);
      Value* wi = g.add_initializer(stem + "_weight", gather_columns(w, m->groups, m->width, p));
      Shape yi_shape = ys;
      yi_shape.back() = Dim(groups * part);
      Value* yi = g.add_value(stem);
      yi->type = {t, yi_shape};
      Node* product = r.add("MatMul", {m->x, wi}, {yi}, g.unique_node_name(stem), "", origins(mm));
      if (i == 0) first = product->name;
      if (m->bias) {
        Value* bi = g.add_initializer(stem + "_bias", gather_columns(*constant_of(m->bias), m->groups, m->width, p));
        Value* sum = g.add_value(stem + "_biased");
        sum->type = yi->type;
        r.add("Add", {yi, bi}, {sum}, g.unique_node_name(stem + "_bias"), "", origins(m->add));
        yi = sum;
      }
      // A Reshape reading the piece reads the new product instead, where its target copies (0)
      // none of the piece's last two dims: a view of a view is one view (CodeGen's heads).
      if (!m->transpose) {
        std::vector<Node*> views;
        for (Node* c : p.value->consumers)
          if (views_product(c, p.value, ys.size())) views.push_back(c);
        for (Node* c : views) g.set_input(c, 0, yi);
        if (p.value->consumers.empty() && !p.value->is_graph_output) {
          pieces += (i ? ", " : "") + describe_piece(p, m->groups);
          continue;
        }
      }
      // The view: the leading dims copied (0), then [g1 - g0, b - a].
      std::vector<int64_t> target(ys.size() - 1, 0);
      target.push_back(groups);
      target.push_back(part);
      Value* vi = g.add_value(stem + "_view");
      Shape vi_shape(ys.begin(), ys.end() - 1);
      vi_shape.push_back(Dim(groups));
      vi_shape.push_back(Dim(part));
      vi->type = {t, vi_shape};
      r.add("Reshape",
            {yi, g.add_initializer(stem + "_view_shape",
                                   Tensor::from_int64(target, {static_cast<int64_t>(target.size())}))},
            {vi}, g.unique_node_name(stem + "_view"), "", origins(m->view));
      if (m->transpose) {
        Value* ti = g.add_value(stem + "_transposed");
        ti->type = p.value->type;
        Node* tn = r.add("Transpose", {vi}, {ti}, g.unique_node_name(stem + "_transpose"), "", origins(m->transpose));
        tn->set_attr("perm", perm);
        vi = ti;
      }
      replace.emplace_back(p.value, vi);
      pieces += (i ? ", " : "") + describe_piece(p, m->groups);
    }
    std::vector<Node*> gone = {m->matmul};
    if (m->add) gone.push_back(m->add);
    gone.push_back(m->view);
    if (m->transpose) gone.push_back(m->transpose);
    std::set<Node*> cuts;
    for (const Piece& p : m->pieces)
      if (cuts.insert(p.producer).second) gone.push_back(p.producer);
    for (auto [from, to] : replace) g.replace_all_uses(from, to);
    Replaced rep = r.remove(gone);
    r.rewrote(rep.listed + " -> " + std::to_string(m->pieces.size()) + " projections (" + pieces + " of " +
                  std::to_string(m->groups) + " groups of " + std::to_string(m->width) + ")",
              rep.names, first);
  }
  if (r.changed()) {
    g.remove_unused_values();
    g.topo_sort();
  }
  return r.changed();
}

}  // namespace fusec
