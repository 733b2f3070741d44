// select_rows_early: a selection of rows (a Gather or a Slice with constant indices, on one axis)
// moves above the row-wise ops that feed it, so that they compute only the rows that are kept.
//
//   x [B,S,E] ─ LayerNorm ─ MatMul(W) ─ Add(b) ─ Gelu ─ Gather(axis 1, 0) ─▶ y [B,N]
//     =>  x ─ Gather(axis 1, [0]) ─ LayerNorm ─ MatMul(W) ─ Add(b) ─ Gelu ─ Squeeze(1) ─▶ y
//
// A classifier reads one token of its encoder's last layer (ViT's and BERT's [CLS], a decoder's
// last position), and everything after that layer's attention is row-wise along the token axis:
// the output projection's residual, the MLP, the LayerNorms. Moved up, the selection leaves those
// ops one row of S (ViT-B/16: 1 of 197) and the attention's output is the first thing read whole.
//
// The algebra. An op f is row-wise along axis a of its output when row i of the output (index i
// of axis a) depends only on row i of each input that has axis a, and on all of an input that has
// no axis a or broadcasts along it (size 1). Then, for any constant selection sel of rows,
//     sel_a(f(x_1, .., x_n)) = f(sel_{a_1}(x_1), .., sel_{a_n}(x_n))    (x_k whole where it has no a_k)
// It holds for elementwise ops (a_k from right-aligned broadcasting), MatMul with a 2-D B and
// Gemm with transA = 0 (a is a row axis of A, not its last), and LayerNorm / RMSNorm whose
// normalized axes all come after a. A Gather of a scalar index drops the axis: it moves as a
// Gather of [index], and a Squeeze after the op drops the axis there, so every rule keeps ranks.
//
// A Reshape that regroups leading dims (torchvision's attention output, flattened to [B·S, E]
// for its projection's Gemm and back to [B, S, E] for the residual; GPT-2's Conv1D) is crossed
// when the kept rows of its output are, in order, the rows of one axis of its input taken whole
// in every other: [CLS] of [B, S, E] is rows {b·S} of [B·S, E], a Gather of those B rows there.
// Shapes must be static (--batch binds the batch), and the Reshape after it gets the new target.
//
// It moves above an elementwise op only on its way to a MatMul, a Gemm or a norm: elementwise
// ops fuse into the kernel they read from, so a selection wedged between them splits the kernel
// and saves less than it costs.
//
// Guards: the selection is its data's only reader (identical selections of one value merge
// first, so the two that a residual's two branches bring back to the sum count as one); that data
// is not a graph output and is the op's only used output; the selection keeps fewer rows than
// the axis has; the rows are floats (an integer Gather is shape arithmetic, left to constant
// folding). The pass runs after fuse_attention: an attention is not row-wise (P·V's B is 4-D)
// and stays whole, and the fusions after this pass see the narrowed ops.
#include "passes/select_rows_early.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "passes/pattern.h"
#include "passes/rewrite.h"

namespace fusec {

namespace {

/// A constant selection of rows: `node` keeps `count` of the `extent` rows of axis `axis` of its
/// data (input 0). Gather: `rows` are its indices; Slice (one axis, step 1): {begin, end}.
struct Selection {
  Node* node = nullptr;
  int64_t axis = 0, count = 0, extent = 0;
  bool scalar = false;  // a Gather of a rank-0 index, which drops the axis
  std::vector<int64_t> rows;
};

std::optional<Selection> selection_of(Node* n) {
  if (!n->input(0) || n->outputs.empty() || !n->outputs[0]) return std::nullopt;
  const Shape* xd = known_rank(n->input(0));
  if (!xd || xd->empty()) return std::nullopt;
  const auto rank = static_cast<int64_t>(xd->size());
  Selection s;
  s.node = n;
  if (is_op(n, "Gather")) {
    const Tensor* idx = constant_of(n->input(1));
    if (!idx || idx->rank() > 1 || idx->numel() == 0) return std::nullopt;
    s.axis = n->attr_int("axis", 0);
    if (s.axis < 0) s.axis += rank;
    if (s.axis < 0 || s.axis >= rank || !(*xd)[static_cast<size_t>(s.axis)].is_static()) return std::nullopt;
    s.extent = (*xd)[static_cast<size_t>(s.axis)].value;
    s.rows = idx->to_int64_vector();
    // An index out of range stays where the Gather reports it.
    for (int64_t i : s.rows)
      if (i < -s.extent || i >= s.extent) return std::nullopt;
    s.count = static_cast<int64_t>(s.rows.size());
    s.scalar = idx->rank() == 0;
  } else if (auto sl = axis_slice(n)) {
    s.axis = sl->axis;
    s.extent = (*xd)[static_cast<size_t>(s.axis)].value;
    s.rows = {sl->begin, sl->end};
    s.count = sl->end > sl->begin ? sl->end - sl->begin : 0;
  } else {
    return std::nullopt;
  }
  if (s.count == 0 || s.count >= s.extent) return std::nullopt;
  return s;
}

/// The rows `s` keeps, in the order it keeps them, each in [0, extent).
std::vector<int64_t> kept_rows(const Selection& s) {
  std::vector<int64_t> r;
  if (s.node->op_type == "Gather") {
    for (int64_t i : s.rows) r.push_back(i < 0 ? i + s.extent : i);
  } else {
    for (int64_t i = s.rows[0]; i < s.rows[1]; ++i) r.push_back(i);
  }
  return r;
}

/// Two selections of one value with this key select the same rows the same way.
std::string key_of(const Selection& s) {
  std::string k = s.node->op_type + "/" + std::to_string(s.axis) + (s.scalar ? "/scalar" : "/");
  for (int64_t i : s.rows) {
    k += ',';
    k += std::to_string(i);
  }
  return k;
}

bool is_elementwise(const Node* n) {
  if (n->domain == "ai.fusec") return n->op_type == "Gelu";
  if (!n->domain.empty()) return false;
  static const std::set<std::string> ops = {
      "Add",        "Sub",   "Mul",   "Div",         "Pow",         "Max",       "Min",
      "Sum",        "Mean",  "Neg",   "Abs",         "Exp",         "Log",       "Sqrt",
      "Reciprocal", "Erf",   "Tanh",  "Sigmoid",     "Relu",        "LeakyRelu", "Elu",
      "Selu",       "Celu",  "Clip",  "HardSigmoid", "HardSwish",   "Softplus",  "Softsign",
      "Floor",      "Ceil",  "Round", "Sign",        "Gelu",        "Mish",      "Cast",
      "Identity",   "Where", "Equal", "Less",        "LessOrEqual", "Greater",   "GreaterOrEqual",
      "And",        "Or",    "Xor",   "Not",         "IsNaN",       "IsInf",     "Sin",
      "Cos",        "PRelu", "Swish"};
  return ops.count(n->op_type) > 0;
}

bool is_norm(const Node* n) {
  if (n->op_type == "LayerNormalization") return n->domain.empty() || n->domain == "ai.fusec";
  return n->op_type == "SimplifiedLayerNorm" && n->domain == "ai.fusec";
}

bool is_rowwise_kind(const Node* n) {
  return is_elementwise(n) || is_norm(n) || is_op(n, "MatMul") || is_op(n, "Gemm");
}

/// When `p`'s output 0 (dims `out`) is row-wise along `axis`, the axis each input's rows are
/// selected on (-1: the input is read whole) in `in_axes`, and ""; else why it is not.
std::string rowwise_inputs(const Node* p, int64_t axis, const Shape& out, std::vector<int64_t>& in_axes) {
  const auto r = static_cast<int64_t>(out.size());
  in_axes.assign(p->inputs.size(), -1);
  auto rank_of = [](const Value* v) -> int64_t {
    const Shape* s = known_rank(v);
    return s ? static_cast<int64_t>(s->size()) : -1;
  };
  if (is_elementwise(p)) {
    if (p->has_attr("broadcast")) return "it broadcasts by its opset-6 'broadcast' attribute";
    const Dim& od = out[static_cast<size_t>(axis)];
    for (size_t k = 0; k < p->inputs.size(); ++k) {
      const Value* v = p->inputs[k];
      if (!v) continue;
      const Shape* s = known_rank(v);
      if (!s) return "input '" + v->name + "' has no known rank";
      const int64_t j = axis - (r - static_cast<int64_t>(s->size()));
      if (j < 0) continue;
      const Dim& d = (*s)[static_cast<size_t>(j)];
      if (d.is_static() && d.value == 1) continue;  // broadcast along the axis: read whole
      if (!same_dim(d, od)) return "input '" + v->name + "' has " + d.str() + " rows on that axis, not " + od.str();
      in_axes[k] = j;
    }
    return "";
  }
  if (is_norm(p)) {
    int64_t k = p->attr_int("axis", -1);
    if (k < 0) k += r;
    if (k <= axis) return "it normalizes over axis " + std::to_string(axis);
    in_axes[0] = axis;
    return "";
  }
  if (is_op(p, "MatMul")) {
    if (rank_of(p->input(1)) != 2) return "its B is not 2-D, so its rows are not A's alone";
    if (rank_of(p->input(0)) != r || axis >= r - 1) return "the axis is not a row axis of A";
    in_axes[0] = axis;
    return "";
  }
  if (is_op(p, "Gemm")) {
    if (p->attr_int("transA", 0) != 0) return "it transposes A";
    if (axis != 0) return "the axis is not A's rows";
    in_axes[0] = 0;
    if (const Value* c = p->input(2)) {
      const Shape* cs = known_rank(c);
      if (!cs) return "its C has no known rank";
      if (cs->size() == 2 && !((*cs)[0].is_static() && (*cs)[0].value == 1)) {
        if (!same_dim((*cs)[0], out[0])) return "its C's rows are not the output's";
        in_axes[2] = 0;
      }
    }
    return "";
  }
  return p->op_type + " is not row-wise here";
}

/// A Reshape that regroups only leading dims: X's first `x_lead` dims and Y's first `y_lead` hold
/// the same number of rows, and the dims after them are the same. Static shapes only.
struct Regroup {
  std::vector<int64_t> xd, yd;
  size_t x_lead = 0, y_lead = 0;
};

int64_t product(const std::vector<int64_t>& d, size_t from, size_t to) {
  int64_t n = 1;
  for (size_t i = from; i < to; ++i) n *= d[i];
  return n;
}

/// Row-major enumerations of a Reshape's leading rows stay small enough to write as indices.
constexpr int64_t kMaxRegroupRows = int64_t{1} << 22;

std::optional<Regroup> regroup_of(const Node* p) {
  if (!is_op(p, "Reshape") || !p->input(0) || p->outputs.empty() || !p->outputs[0]) return std::nullopt;
  const auto xd = known_dims(p->input(0)), yd = known_dims(p->outputs[0]);
  if (!xd || !yd || xd->empty() || yd->empty()) return std::nullopt;
  for (size_t yl = 1; yl <= yd->size(); ++yl) {
    if (yd->size() - yl > xd->size() - 1) continue;
    const size_t xl = xd->size() - (yd->size() - yl);
    if (!std::equal(xd->begin() + static_cast<std::ptrdiff_t>(xl), xd->end(),
                    yd->begin() + static_cast<std::ptrdiff_t>(yl)))
      continue;
    const int64_t rows = product(*yd, 0, yl);
    if (rows == product(*xd, 0, xl) && rows > 0 && rows <= kMaxRegroupRows) return Regroup{*xd, *yd, xl, yl};
  }
  return std::nullopt;
}

/// The axis of X and its rows that select, in Y's order, the rows of Y whose coordinate on axis `a`
/// is in `rows` (in that order): a rows-of-Y selection as one of X. nullopt when no single axis
/// of X does (the kept rows are not whole runs of one X axis).
std::optional<std::pair<int64_t, std::vector<int64_t>>> rows_through(const Regroup& g, int64_t a,
                                                                     const std::vector<int64_t>& rows) {
  const auto au = static_cast<size_t>(a);
  if (au >= g.y_lead) return std::make_pair(static_cast<int64_t>(au - g.y_lead + g.x_lead), rows);
  // F: the flat leading-row indices the selection keeps, in the order of its output.
  const int64_t outer = product(g.yd, 0, au), inner = product(g.yd, au + 1, g.y_lead);
  std::vector<int64_t> f;
  f.reserve(static_cast<size_t>(outer * inner) * rows.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t r : rows)
      for (int64_t i = 0; i < inner; ++i) f.push_back((o * g.yd[au] + r) * inner + i);
  const auto n = static_cast<int64_t>(f.size());
  for (size_t c = 0; c < g.x_lead; ++c) {
    const int64_t xo = product(g.xd, 0, c), xc = g.xd[c], stride = product(g.xd, c + 1, g.x_lead);
    if (n % (xo * stride) != 0 || n / (xo * stride) >= xc) continue;
    const int64_t k = n / (xo * stride);
    std::vector<int64_t> r;
    for (int64_t j = 0; j < k; ++j) r.push_back((f[static_cast<size_t>(j * stride)] / stride) % xc);
    bool same = true;
    size_t at = 0;
    for (int64_t o = 0; o < xo && same; ++o)
      for (int64_t rc : r)
        for (int64_t i = 0; i < stride && same; ++i) same = f[at++] == (o * xc + rc) * stride + i;
    if (same) return std::make_pair(static_cast<int64_t>(c), r);
  }
  return std::nullopt;
}

/// Whether moving a selection above elementwise `p` (rows of input k on `in_axes[k]`) leads it, on
/// through elementwise ops that only it would read, to an op whose work it cuts: a MatMul, a Gemm
/// or a norm. Stopping short of one only moves the selection between ops that fuse into one
/// kernel (a Conv and its activation, a residual Add and the GEMM it is the epilogue of), and the
/// rows it saves are of an elementwise kernel that costs what it reads.
bool leads_to_work(const Node* p, const std::vector<int64_t>& in_axes, int depth = 0) {
  if (depth > 64) return false;
  for (size_t k = 0; k < p->inputs.size(); ++k) {
    const Value* v = p->inputs[k];
    if (!v || in_axes[k] < 0 || v->is_graph_output || v->consumers.size() != 1) continue;
    const Node* q = v->producer;
    if (const auto g = q ? regroup_of(q) : std::nullopt) {
      // Which rows come out of the Reshape is not known here: any axis of X they could be on.
      const auto a = static_cast<size_t>(in_axes[k]);
      std::vector<int64_t> axes;
      if (a >= g->y_lead)
        axes = {static_cast<int64_t>(a - g->y_lead + g->x_lead)};
      else
        for (size_t c = 0; c < g->x_lead; ++c) axes.push_back(static_cast<int64_t>(c));
      for (int64_t c : axes) {
        std::vector<int64_t> q_axes(q->inputs.size(), -1);
        q_axes[0] = c;
        if (leads_to_work(q, q_axes, depth + 1)) return true;
      }
      continue;
    }
    if (!q || !is_rowwise_kind(q) || q->outputs.empty() || q->outputs[0] != v || !v->type.shape) continue;
    std::vector<int64_t> q_axes;
    if (!rowwise_inputs(q, in_axes[k], *v->type.shape, q_axes).empty()) continue;
    if (!is_elementwise(q) || leads_to_work(q, q_axes, depth + 1)) return true;
  }
  return false;
}

class Mover {
 public:
  Mover(Graph& g, Rewriter& r) : g_(g), r_(r) {}

  /// Merges selections of one value that select the same rows the same way into the first.
  bool merge_duplicates() {
    bool changed = false;
    std::map<std::pair<const Value*, std::string>, Node*> first;
    for (Node* n : g_.node_list()) {
      auto s = selection_of(n);
      if (!s) continue;
      auto [it, fresh] = first.emplace(std::make_pair(n->input(0), key_of(*s)), n);
      Value* dup = n->outputs[0];
      if (fresh || dup->is_graph_output) continue;
      Node* keep = it->second;
      g_.replace_all_uses(dup, keep->outputs[0]);
      made_.erase(n);
      Replaced gone = r_.remove({n});
      for (const std::string& o : gone.origins) keep->fused_from.push_back(o);
      r_.rewrote(gone.listed + " selects what " + describe(keep) + " does: merged", gone.names, keep->name);
      changed = true;
    }
    return changed;
  }

  /// Moves every selection of the graph one op up where it can; true when one moved.
  bool move_all_up() {
    // A node removed in this round may hand its address to one added after it: the snapshot's
    // pointers are checked against this round's removals, not the Rewriter's (all rounds').
    gone_.clear();
    misses_.clear();
    bool changed = false;
    for (Node* n : g_.node_list()) {
      if (gone_.count(n)) continue;
      if (auto s = selection_of(n)) changed |= move_up(*s);
    }
    return changed;
  }

  /// The last round's near-misses: where each selection stopped (earlier rounds' may have been
  /// waiting for a residual's other branch).
  void report() {
    for (const auto& [what, why] : misses_) r_.near_miss(what, why);
  }

 private:
  /// Moves the selection above its data's producer when that is row-wise along the axis.
  bool move_up(const Selection& s) {
    Node* sel = s.node;
    Value* x = sel->input(0);
    Node* p = x->producer;
    // Integer rows are shape arithmetic (Shape -> Gather), which constant folding reads as it is.
    if (!p || !is_float(x->type.dtype)) return false;
    // Where a selection stops is worth a near-miss when it moved before, or when it is one of rows
    // of a row-wise op (not of features: the exporters' Q/K/V slices of a packed projection stop
    // at its bias Add in every layer, and nothing is lost there).
    const bool report =
        made_.count(sel) || (is_rowwise_kind(p) && s.axis + 1 < static_cast<int64_t>(x->type.shape->size()));
    const std::string what = describe(sel) + " not moved above " + describe(p);
    auto miss = [&](const std::string& why) {
      if (report) misses_.emplace_back(what, why);
      return false;
    };
    if (x->is_graph_output) return miss("its rows are also a graph output");
    if (x->consumers.size() != 1) return miss("its rows are read by " + std::to_string(x->consumers.size()) + " nodes");
    if (p->outputs.empty() || p->outputs[0] != x) return miss("it reads another output than the first");
    for (size_t i = 1; i < p->outputs.size(); ++i)
      if (p->outputs[i] && use_count(p->outputs[i]) > 0)
        return miss("its output '" + p->outputs[i]->name + "' is read");
    if (is_op(p, "Reshape")) {
      const auto g = regroup_of(p);
      const auto through = g ? rows_through(*g, s.axis, kept_rows(s)) : std::nullopt;
      if (!through) return miss("the Reshape does not keep the selected rows whole runs of one axis of its input");
      std::vector<int64_t> in_axes(p->inputs.size(), -1);
      in_axes[0] = through->first;
      if (!leads_to_work(p, in_axes)) return miss("no MatMul, Gemm or norm above it would compute fewer rows");
      return move_above_reshape(s, *g, through->first, through->second);
    }
    std::vector<int64_t> in_axes;
    const std::string why = rowwise_inputs(p, s.axis, *x->type.shape, in_axes);
    if (!why.empty()) return miss(why);
    if (is_elementwise(p) && !leads_to_work(p, in_axes))
      return miss("no MatMul, Gemm or norm above it would compute fewer rows, and it may fuse with what it reads");

    // The op's and the selection's parts, before the nodes go.
    const std::string p_op = p->op_type, p_domain = p->domain;
    const std::vector<NamedAttribute> p_attrs = p->attrs;
    std::vector<Value*> ins = p->inputs;
    const Lifted l = lift(s);

    // A scalar Gather's index as a 1-D one: the rows are selected keeping the axis.
    Value* index = l.sel_inputs.size() > 1 ? l.sel_inputs[1] : nullptr;
    if (s.scalar) index = g_.add_initializer(index->name + "_row", Tensor::from_int64({s.rows[0]}, {1}));
    std::map<std::pair<Value*, int64_t>, Value*> selected;  // x*x selects x once
    for (size_t k = 0; k < ins.size(); ++k) {
      if (!ins[k] || in_axes[k] < 0) continue;
      Value*& v = selected[{ins[k], in_axes[k]}];
      if (!v) v = select(l, index, ins[k], in_axes[k]);
      ins[k] = v;
    }
    Value* out = rows_output(s, l);
    Node* np = r_.add(p_op, ins, {out}, l.p_name, p_domain, l.p.origins);
    np->attrs = p_attrs;
    land(s, l, out,
         std::to_string(s.count) + " of its " + std::to_string(s.extent) + " rows on axis " + std::to_string(s.axis));
    return true;
  }

  /// Y = Reshape(X) regrouping leading dims, its rows selected: X's rows `rows` on axis `axis`
  /// (rows_through), then the Reshape to Y with the selected axis shortened.
  bool move_above_reshape(const Selection& s, const Regroup& g, int64_t axis, const std::vector<int64_t>& rows) {
    Value* x = s.node->input(0)->producer->input(0);
    const Lifted l = lift(s);
    const auto k = static_cast<int64_t>(rows.size());
    Value* kept = g_.add_value(x->name + "_rows");
    Node* n = r_.add("Gather", {x, g_.add_initializer(l.stem + "_rows", Tensor::from_int64(rows, {k}))}, {kept},
                     g_.unique_node_name(l.stem), "", l.sel.origins);
    n->set_attr("axis", axis);
    made_.insert(n);
    std::vector<int64_t> target = g.yd;
    target[static_cast<size_t>(s.axis)] = s.count;
    Value* out = rows_output(s, l);
    r_.add("Reshape",
           {kept, g_.add_initializer(l.p_name + "_rows_shape",
                                     Tensor::from_int64(target, {static_cast<int64_t>(target.size())}))},
           {out}, l.p_name, "", l.p.origins);
    land(s, l, out,
         std::to_string(k) + " of its input's " + std::to_string(g.xd[static_cast<size_t>(axis)]) + " rows on axis " +
             std::to_string(axis));
    return true;
  }

  /// A selection and the op it moves above, taken out of the graph: what the rewrite rebuilds
  /// them from.
  struct Lifted {
    std::string sel_op, sel_name, p_name, listed;
    std::vector<Value*> sel_inputs;
    Value* y;               // the selection's output, which the rewrite ends in
    Replaced sel, p;        // what each stood for
    std::string stem;       // new nodes are named after the user's selection (the profiler's attribution)
  };

  Lifted lift(const Selection& s) {
    Node* sel = s.node;
    Node* p = sel->input(0)->producer;
    Lifted l;
    l.sel_op = sel->op_type;
    l.sel_name = sel->name;
    l.p_name = p->name;
    l.listed = describe(sel) + " moved above " + describe(p);
    l.sel_inputs = sel->inputs;
    l.y = sel->outputs[0];
    made_.erase(sel);
    gone_.insert(sel);
    gone_.insert(p);
    l.sel = r_.remove({sel});
    l.p = r_.remove({p});
    l.stem = !l.sel.origins.empty() ? l.sel.origins.front() : l.sel_name.empty() ? "select_rows" : l.sel_name;
    return l;
  }

  /// Where the moved op writes: the selection's output itself, or, for a scalar Gather, the rows
  /// with their axis kept, which land() squeezes into it.
  Value* rows_output(const Selection& s, const Lifted& l) {
    return s.scalar ? g_.add_value(l.y->name + "_rows") : l.y;
  }

  /// The rewrite's end: the scalar Gather's axis squeezed away, and the rewrite recorded.
  void land(const Selection& s, const Lifted& l, Value* out, const std::string& rows) {
    if (s.scalar) {
      // Squeeze takes its axes as an input from opset 13, as an attribute before.
      const bool axes_input = onnx_opset(g_) >= 13;
      std::vector<Value*> in = {out};
      if (axes_input) in.push_back(axes_constant(s.axis));
      Node* sq = r_.add("Squeeze", in, {l.y}, g_.unique_node_name(l.stem), "", l.sel.origins);
      if (!axes_input) sq->set_attr("axes", std::vector<int64_t>{s.axis});
    }
    r_.rewrote(l.listed + ": " + rows, {l.sel_name, l.p_name}, l.p_name);
  }

  /// The lifted selection of `v`'s rows on `axis`, as a new node: a Gather of `index`, or a Slice.
  Value* select(const Lifted& l, Value* index, Value* v, int64_t axis) {
    Value* out = g_.add_value(v->name + "_rows");
    const std::string name = g_.unique_node_name(l.stem);
    Node* n;
    if (l.sel_op == "Gather") {
      n = r_.add("Gather", {v, index}, {out}, name, "", l.sel.origins);
      n->set_attr("axis", axis);
    } else {
      n = r_.add("Slice", {v, l.sel_inputs[1], l.sel_inputs[2], axes_constant(axis)}, {out}, name, "", l.sel.origins);
    }
    made_.insert(n);
    return out;
  }

  Value* axes_constant(int64_t axis) {
    Value*& c = axes_[axis];
    if (!c) c = g_.add_initializer("select_rows_axis_" + std::to_string(axis), Tensor::from_int64({axis}, {1}));
    return c;
  }

  Graph& g_;
  Rewriter& r_;
  std::set<const Node*> made_, gone_;
  std::vector<std::pair<std::string, std::string>> misses_;
  std::map<int64_t, Value*> axes_;
};

}  // namespace

bool SelectRowsEarlyPass::run(Graph& g, PassContext& ctx) {
  Rewriter r(g, ctx, name());
  Mover m(g, r);
  // Each round moves every selection one op up; a chain of n row-wise ops takes n rounds. The
  // rules read only the shapes of values that were there before the pass, so no inference between.
  for (bool changed = true; changed;) {
    changed = m.merge_duplicates();
    changed |= m.move_all_up();
  }
  m.report();
  if (r.changed()) g.remove_unused_values();
  return r.changed();
}

}  // namespace fusec
