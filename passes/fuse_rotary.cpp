// fuse_rotary: rotary position embedding in the half-split form (GPT-NeoX, Llama, Mistral, Qwen,
// Gemma... as transformers' `rotate_half` writes it, in either torch exporter) becomes one
// ai.fusec Rotary node, and the head split in front of it moves behind it.
//
//     x ─┬──────────────────────────── Mul(·, cos) ──┐
//        ├─ Slice[..., h:] ─ Neg ─┐                  ├─ Add ──▶ y      (h = D/2, D = x's last dim)
//        └─ Slice[..., :h] ───────┴─ Concat(-1) ─ Mul(·, sin)
//
//     =>  y = Rotary(x, cos, sin)
//
// cos and sin must broadcast to x without widening it, with D as their last dim (HF's tables
// repeat the D/2 frequencies twice). The intermediates must be read by the pattern alone.
//
// The interleaved form (GPT-J, CodeGen, Cohere: rotate_every_two pairs (2i, 2i + 1), its tables
// repeat each frequency in place) becomes Rotary(x, cos, sin; interleaved = 1):
//
//     rotate_every_two(x) = Reshape(Concat(Unsqueeze(Neg(Slice[..., 1::2])), Unsqueeze(Slice[..., 0::2]); -1), x's
//     shape)
//
// A rotation of only the first r values of x's last dim, concatenated with the rest (partial
// rotary: Phi, StableLM, GPT-J) becomes one Rotary over all of x with rotary_dim = r.
//
// Then the head split before the rotation moves after it, so that fuse_attention sees the split
// it absorbs (Reshape -> Transpose straight after the projection) and the attention reads the
// projection in place:
//
//     Transpose(perm keeps the last axis) -> Rotary(·, c, s)
//         =>  Rotary(·, c', s') -> Transpose      c' = c transposed by perm's inverse
//     Reshape(splits only the last axis into [H, D]) -> Rotary(·, c, s)   (no head_size yet)
//         =>  Rotary(·, c, s; head_size = D) -> Reshape
//
// c' is a Transpose (after a Reshape adding leading 1s) of the table: constant folding folds it.
// ONNX's own RotaryEmbedding (opset 23) becomes the same Rotary (rotary_standard.cpp).
//
// ai.fusec only: under --portable, a near-miss (a RotaryEmbedding stays as it is).
#include "passes/fuse_rotary.h"

#include <algorithm>

#include "passes/pattern.h"
#include "passes/rewrite.h"
#include "passes/rotary_standard.h"

namespace fusec {

namespace {

struct Match {
  Node *add = nullptr, *mul_cos = nullptr, *mul_sin = nullptr;
  std::vector<Node*> rotate;  // the nodes computing rotate(x), read by mul_sin
  bool interleaved = false;
  Value *x = nullptr, *cos = nullptr, *sin = nullptr;
};

/// The operand of binary `n` produced by `op`, and the other operand.
std::pair<Node*, Value*> operand_from(Node* n, const std::string& op) {
  for (int i = 0; i < 2; ++i)
    if (Node* p = n->input(i) ? producer_of(n->input(i), op) : nullptr) return {p, n->input(1 - i)};
  return {nullptr, nullptr};
}

/// x's rank and static last dim D (even), or nullopt.
std::optional<std::pair<int64_t, int64_t>> head_of(const Value* x) {
  const Shape* xd = known_rank(x);
  if (!xd || xd->empty() || !xd->back().is_static() || xd->back().value % 2 != 0) return std::nullopt;
  return std::make_pair(static_cast<int64_t>(xd->size()), xd->back().value);
}

/// Slice `n` of x's last axis [begin, end) with `step`, as given.
bool is_last_axis_slice(const Node* n, int64_t begin, int64_t end, int64_t step) {
  auto s = strided_axis_slice(n);
  const Shape* xd = s ? known_rank(n->input(0)) : nullptr;
  return xd && s->axis == static_cast<int64_t>(xd->size()) - 1 && s->begin == begin && s->step == step &&
         (s->end == end || (step > 1 && s->end > end - step));
}

/// rotate_half(x) = Concat(Neg(Slice(x, h:)), Slice(x, :h)) read by `mul_sin`; fills m.
bool match_rotate_half(Node* mul_sin, Match& m) {
  auto [cat, sin] = operand_from(mul_sin, "Concat");
  if (!cat || cat->inputs.size() != 2 || !sin) return false;
  Node* neg = producer_of(cat->input(0), "Neg");
  Node* lo = cat->input(1)->producer;
  Node* hi = neg ? neg->input(0)->producer : nullptr;
  if (!neg || !is_op(lo, "Slice") || !is_op(hi, "Slice") || lo->input(0) != hi->input(0)) return false;
  Value* x = lo->input(0);
  auto h = head_of(x);
  if (!h) return false;
  const auto [rank, d] = *h;
  const int64_t axis = cat->attr_int("axis", 0);
  if ((axis != -1 && axis != rank - 1) || !is_last_axis_slice(lo, 0, d / 2, 1) || !is_last_axis_slice(hi, d / 2, d, 1))
    return false;
  m.mul_sin = mul_sin, m.rotate = {lo, hi, neg, cat}, m.x = x, m.sin = sin;
  return true;
}

/// `v` with a trailing 1 added (Unsqueeze, or a Reshape to that shape) of what it returns.
Node* trailing_one(Value* v) {
  Node* p = v ? v->producer : nullptr;
  if (!p || !p->domain.empty() || (p->op_type != "Unsqueeze" && p->op_type != "Reshape") || !p->input(0))
    return nullptr;
  const Shape *in = known_rank(p->input(0)), *out = known_rank(v);
  if (!in || !out || out->size() != in->size() + 1 || !out->back().is_static() || out->back().value != 1)
    return nullptr;
  for (size_t i = 0; i < in->size(); ++i)
    if (!same_dim((*in)[i], (*out)[i])) return nullptr;
  return p;
}

/// GPT-J's rotate_every_two(x) = Reshape(Concat(Unsqueeze(Neg(Slice(x, 1::2))), Unsqueeze(Slice(x,
/// 0::2)); axis -1), x's shape) read by `mul_sin` (the Neg before or after its Unsqueeze); fills m.
bool match_rotate_every_two(Node* mul_sin, Match& m) {
  auto [flat, sin] = operand_from(mul_sin, "Reshape");
  if (!flat || !sin) return false;
  Node* cat = producer_of(flat->input(0), "Concat");
  if (!cat || cat->inputs.size() != 2 || !cat->input(0) || !cat->input(1)) return false;
  std::vector<Node*> nodes = {flat, cat};
  // The odd values, negated: Unsqueeze(Neg(Slice)) or Neg(Unsqueeze(Slice)).
  Node *odd = nullptr, *even = nullptr;
  if (Node* neg = producer_of(cat->input(0), "Neg")) {
    Node* u = trailing_one(neg->input(0));
    if (!u) return false;
    nodes.insert(nodes.end(), {neg, u});
    odd = u->input(0)->producer;
  } else if (Node* u = trailing_one(cat->input(0))) {
    Node* neg = producer_of(u->input(0), "Neg");
    if (!neg) return false;
    nodes.insert(nodes.end(), {u, neg});
    odd = neg->input(0)->producer;
  }
  Node* ue = trailing_one(cat->input(1));
  if (!odd || !ue) return false;
  even = ue->input(0)->producer;
  nodes.insert(nodes.end(), {ue, odd, even});
  if (!is_op(odd, "Slice") || !is_op(even, "Slice") || odd->input(0) != even->input(0)) return false;
  Value* x = even->input(0);
  auto h = head_of(x);
  if (!h) return false;
  const auto [rank, d] = *h;
  const int64_t axis = cat->attr_int("axis", 0);
  if ((axis != -1 && axis != rank) || !is_last_axis_slice(even, 0, d, 2) || !is_last_axis_slice(odd, 1, d, 2))
    return false;
  const Shape *xd = known_rank(x), *yd = known_rank(flat->outputs[0]);
  if (!yd || yd->size() != xd->size()) return false;
  for (size_t i = 0; i < xd->size(); ++i)
    if (!same_dim((*xd)[i], (*yd)[i])) return false;
  std::reverse(nodes.begin(), nodes.end());  // producers first, as the rewrite lists them
  m.mul_sin = mul_sin, m.rotate = nodes, m.x = x, m.sin = sin, m.interleaved = true;
  return true;
}

bool match_at(Node* add, Match& m) {
  if (!is_op(add, "Add") || add->inputs.size() != 2 || !add->input(0) || !add->input(1)) return false;
  for (int side = 0; side < 2; ++side) {
    Node* ms = producer_of(add->input(side), "Mul");
    Node* mc = producer_of(add->input(1 - side), "Mul");
    if (!ms || !mc || ms == mc) continue;
    Match t;
    if (!match_rotate_half(ms, t) && !match_rotate_every_two(ms, t)) continue;
    if (mc->input(0) != t.x && mc->input(1) != t.x) continue;
    t.cos = other_input(mc, t.x);
    t.mul_cos = mc;
    t.add = add;
    m = t;
    return true;
  }
  return false;
}

/// Why the matched nodes cannot become one Rotary, or "".
std::string guard(const Match& m, const PassOptions& opts) {
  std::vector<const Node*> inner = {m.mul_cos, m.mul_sin};
  inner.insert(inner.end(), m.rotate.begin(), m.rotate.end());
  for (const Node* n : inner)
    if (!has_single_use(n->outputs[0]) || n->outputs[0]->is_graph_output)
      return "'" + n->outputs[0]->name + "' is read outside the rotation";
  // x's dims other than the head's may be symbolic (a batch left open): a table then broadcasts
  // along them only with 1s, so the sum has x's shape for every binding.
  const Shape& xd = *known_rank(m.x);
  const int64_t d = xd.back().value;
  if (!is_float(m.x->type.dtype)) return std::string("x is ") + dtype_name(m.x->type.dtype);
  for (const Value* t : {m.cos, m.sin}) {
    if (t->type.dtype != m.x->type.dtype) return "the table '" + t->name + "' is not of x's type";
    auto td = known_dims(t);
    if (!td || td->empty() || td->size() > xd.size() || td->back() != d)
      return "the table '" + t->name + "' does not hold the head's " + std::to_string(d) +
             " values along its last axis";
    for (size_t i = 0; i < td->size(); ++i) {
      const int64_t v = (*td)[td->size() - 1 - i];
      const Dim& xi = xd[xd.size() - 1 - i];
      if (v != 1 && !(xi.is_static() && v == xi.value)) return "the table '" + t->name + "' does not broadcast to x";
    }
  }
  if (opts.portable) return "Rotary is not standard ONNX; --portable writes standard ops only";
  return "";
}

/// Concat(Rotary(Slice(q, :r)), Slice(q, r:); axis −1): a rotation of the first r values of q's
/// last dim with the rest passed through (Phi, StableLM, GPT-J's rotary_dim) -> Rotary(q;
/// rotary_dim = r). Returns the new Rotary, or nullptr when `rot` is not such a rotation.
Node* widen_partial(Rewriter& r, Node* rot) {
  if (rot->attr_int("head_size", 0) != 0 || rot->attr_int("rotary_dim", 0) != 0 || rot->attr_int("rotated", 0) != 0)
    return nullptr;
  Value* y = rot->outputs[0];
  Node* cat = sole_consumer_of(y, "Concat");
  Node* lo = producer_of(rot->input(0), "Slice");
  if (!cat || !lo || cat->inputs.size() != 2 || cat->input(0) != y || !has_single_use(rot->input(0))) return nullptr;
  Node* rest = producer_of(cat->input(1), "Slice");
  if (!rest || rest->input(0) != lo->input(0) || !has_single_use(cat->input(1))) return nullptr;
  Value* q = lo->input(0);
  auto h = head_of(q);
  auto hr = head_of(rot->input(0));
  if (!h || !hr || h->first != hr->first) return nullptr;
  const auto [rank, d] = *h;
  const int64_t rd = hr->second;
  const int64_t axis = cat->attr_int("axis", 0);
  if ((axis != -1 && axis != rank - 1) || rd >= d || !is_last_axis_slice(lo, 0, rd, 1) ||
      !is_last_axis_slice(rest, rd, d, 1))
    return nullptr;
  Value* out = cat->outputs[0];
  const std::string name = rot->name;
  const int64_t interleaved = rot->attr_int("interleaved", 0);
  Value *cos = rot->input(1), *sin = rot->input(2);
  Replaced gone = r.remove({lo, rot, rest, cat});
  Node* wide = r.add("Rotary", {q, cos, sin}, {out}, name, "ai.fusec", gone.origins);
  wide->set_attr("rotary_dim", rd);
  if (interleaved) wide->set_attr("interleaved", interleaved);
  r.rewrote(gone.listed + " -> " + describe(wide) + " (the first " + std::to_string(rd) + " of " + std::to_string(d) +
                " values rotate, the rest are copied)",
            {}, name);
  return wide;
}

/// Table `t` (cos or sin) read at the index of Transpose(perm)'s input: rank-aligned to perm, then
/// transposed by perm's inverse.
Value* permuted_table(Graph& g, Value* t, const std::vector<int64_t>& perm, const std::string& stem) {
  std::vector<int64_t> td = *known_dims(t);
  const size_t r = perm.size();
  if (td.size() < r) {
    td.insert(td.begin(), r - td.size(), 1);
    Value* shape = g.add_initializer(stem + "_shape", Tensor::from_int64(td, {static_cast<int64_t>(r)}));
    Value* aligned = typed_value(g, stem + "_aligned", t->type.dtype, td);
    g.add_node("Reshape", {t, shape}, {aligned}, g.unique_node_name(stem + "_align"));
    t = aligned;
  }
  std::vector<int64_t> inv(r), out(r);
  for (size_t k = 0; k < r; ++k) inv[static_cast<size_t>(perm[k])] = static_cast<int64_t>(k);
  for (size_t k = 0; k < r; ++k) out[k] = td[static_cast<size_t>(inv[k])];
  Value* p = typed_value(g, stem + "_permuted", t->type.dtype, out);
  Node* tr = g.add_node("Transpose", {t}, {p}, g.unique_node_name(stem + "_permute"));
  tr->set_attr("perm", inv);
  return p;
}

}  // namespace

/// Moves the Transpose or head-split Reshape in front of Rotary `rot` behind it (file comment);
/// returns the new Rotary, or nullptr when nothing moved.
Node* sink_head_split(Rewriter& r, Node* rot) {
  Graph& g = r.graph();
  Value* x = rot->input(0);
  Value* y = rot->outputs[0];
  if (rot->attr_int("head_size", 0) != 0 || !has_single_use(x) || x->is_graph_output) return nullptr;
  Node* p = x->producer;
  const Shape* xd = known_rank(x);
  if (!p || !p->domain.empty() || !xd) return nullptr;
  Value* z = p->input(0);
  const Shape* zd = known_rank(z);
  if (!zd) return nullptr;
  const Shape z_shape = *zd;  // z's value may go with the node that read it
  Value* cos = rot->input(1);
  Value* sin = rot->input(2);
  int64_t head_size = 0;
  if (p->op_type == "Transpose") {
    std::vector<int64_t> perm = p->attr_ints("perm");
    if (perm.empty())
      for (size_t k = zd->size(); k-- > 0;) perm.push_back(static_cast<int64_t>(k));
    if (perm.size() != zd->size() || perm.back() != static_cast<int64_t>(zd->size()) - 1) return nullptr;
    cos = permuted_table(g, cos, perm, rot->name + "_cos");
    sin = permuted_table(g, sin, perm, rot->name + "_sin");
  } else if (p->op_type == "Reshape") {
    const size_t n = zd->size();
    if (xd->size() != n + 1 || n == 0) return nullptr;
    for (size_t i = 0; i + 1 < n; ++i)
      if (!same_dim((*zd)[i], (*xd)[i])) return nullptr;
    const Dim &e = zd->back(), &h = (*xd)[n - 1], &hd = (*xd)[n];
    if (!e.is_static() || !h.is_static() || !hd.is_static() || e.value != h.value * hd.value) return nullptr;
    head_size = hd.value;
  } else {
    return nullptr;
  }
  const std::vector<NamedAttribute> p_attrs = p->attrs, rot_attrs = rot->attrs;
  const std::vector<Value*> p_ins = p->inputs;
  // A per-head norm's scale and bias ([D]) read the same in either view.
  std::vector<Value*> rot_ins = {z, cos, sin};
  rot_ins.insert(rot_ins.end(), rot->inputs.begin() + 3, rot->inputs.end());
  const std::string p_op = p->op_type, p_name = p->name, rot_name = rot->name;
  const std::vector<std::string> rot_from = rot->fused_from, p_from = p->fused_from;
  Replaced gone = r.remove({p, rot});
  Value* rotated = g.add_value(rot_name + "_in_place");
  rotated->type.dtype = y->type.dtype;
  rotated->type.shape = z_shape;
  Node* nr = r.add("Rotary", rot_ins, {rotated}, rot_name, "ai.fusec", rot_from);
  nr->attrs = rot_attrs;
  if (head_size) nr->set_attr("head_size", head_size);
  std::vector<Value*> ins = p_ins;
  ins[0] = rotated;
  Node* moved = g.add_node(p_op, ins, {y}, p_name);
  moved->attrs = p_attrs;
  moved->fused_from = p_from;
  r.rewrote(gone.listed + " -> " + describe(nr) + " -> " + describe(moved) + " (the " + p_op +
                " moved after the rotation" + (head_size ? ", per head of " + std::to_string(head_size) : "") + ")",
            {}, rot_name);
  return nr;
}

bool FuseRotaryPass::run(Graph& g, PassContext& ctx) {
  Rewriter r(g, ctx, name());
  std::vector<Node*> rotaries;
  RotaryTables tables;
  for (Node* n : g.node_list()) {
    if (n->op_type == "Rotary" && n->domain == "ai.fusec") rotaries.push_back(n);
    if (!ctx.opts.portable && rotary_from_standard(r, n, tables)) continue;  // sunk next round, its types known
    Match m;
    if (r.removed(n) || !match_at(n, m)) continue;
    const std::string why = guard(m, ctx.opts);
    if (!why.empty()) {
      r.near_miss(std::string(m.interleaved ? "rotate_every_two" : "rotate_half") + " at " + describe(n) + " not fused",
                  why);
      continue;
    }
    Value* y = m.add->outputs[0];
    const std::string name = m.add->name;
    std::vector<Node*> nodes = m.rotate;
    nodes.insert(nodes.end(), {m.mul_sin, m.mul_cos, m.add});
    Replaced gone = r.remove(nodes);
    Node* rot = r.add("Rotary", {m.x, m.cos, m.sin}, {y}, name, "ai.fusec", gone.origins);
    if (m.interleaved) rot->set_attr("interleaved", int64_t{1});
    r.rewrote(gone.listed + " -> ai.fusec." + describe(rot), gone.names, name);
    rotaries.push_back(rot);
  }
  for (Node* rot : rotaries) {
    if (Node* wide = widen_partial(r, rot)) rot = wide;
    while (rot) rot = sink_head_split(r, rot);
  }
  if (r.changed()) g.remove_unused_values();
  return r.changed();
}

}  // namespace fusec
