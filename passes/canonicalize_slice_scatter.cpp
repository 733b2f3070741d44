// torch.export functionalizes an in-place update of a slice, `x[.., s:s+n, ..] += b` (MViT-V2
// adds its relative positions to a block of the attention scores this way), into
// slice_scatter(x, slice(x) + b), which the dynamo exporter writes along axis d as
//
//   ScatterND(Transpose_p(x), rows [[s], [s+1], .., [s+n-1]], Transpose_p(Slice_d(x, s, s+n) + b))
//
// with p a permutation that brings axis d first (none for d = 0; the exporter may have composed it
// with a neighbouring transpose). That is x with its slice replaced by the slice plus b:
//
//   -> Transpose_p(x + Pad_d(b, s, dim_d - s - n))      (zeros outside the slice)
//   -> Transpose_p(x)                                    (no b: the slice written back unchanged)
//
// The ScatterND and the copies of x around it go; the scores then read `x + mask`, which
// fuse_attention takes (the padded sum is the mask). Exact: x + 0 is x, and inside the slice the
// sum is the one the graph computed (b + Slice or Slice + b, the same float addition). A nested
// update (a slice of a slice: MViT's [:, :, 1:, 1:]) rewrites from the inside out: the outer one's
// update is then the inner one's Transpose under the exporter's, a chain read as one perm.
#include "passes/canonicalize_slice_scatter.h"

#include <algorithm>
#include <numeric>

#include "passes/pattern.h"

namespace fusec {

namespace {

/// Whether a tensor of `dims` laid out as its dims permuted by `p` is the same bytes: the axes of
/// size above 1 keep their order under p (so a Reshape does what Transpose_p does).
bool moves_unit_dims_only(const std::vector<int64_t>& dims, const std::vector<int64_t>& p) {
  int64_t last = -1;
  for (int64_t ax : p) {
    if (dims[static_cast<size_t>(ax)] == 1) continue;
    if (ax < last) return false;
    last = ax;
  }
  return true;
}

/// Whether `q` is a permutation of 0..rank-1.
bool is_perm(std::vector<int64_t> q, size_t rank) {
  if (q.size() != rank) return false;
  std::sort(q.begin(), q.end());
  for (size_t j = 0; j < rank; ++j)
    if (q[j] != static_cast<int64_t>(j)) return false;
  return true;
}

/// The start of the chain of Transposes above `v` (up to four) and the perm they compose to: v is
/// Transpose_perm(start). v itself and the identity where v is no Transpose.
Value* transpose_chain(Value* v, size_t rank, std::vector<int64_t>* perm) {
  perm->resize(rank);
  std::iota(perm->begin(), perm->end(), 0);
  Value* cur = v;
  for (int step = 0; step < 4; ++step) {
    const Node* t = cur->producer;
    if (!t || !is_op(t, "Transpose") || !t->input(0)) break;
    const std::vector<int64_t> q = t->attr_ints("perm");
    if (!is_perm(q, rank)) break;
    for (int64_t& a : *perm) a = q[static_cast<size_t>(a)];
    cur = t->input(0);
  }
  return cur;
}

/// Whether `v` is Transpose_perm(base) through a chain of Transposes (up to four).
bool is_transpose_of(Value* v, const Value* base, const std::vector<int64_t>& perm) {
  std::vector<int64_t> acc(perm.size());
  std::iota(acc.begin(), acc.end(), 0);
  Value* cur = v;
  for (int step = 0; step < 5; ++step) {
    if (cur == base) return acc == perm;
    const Node* t = cur->producer;
    if (!t || !is_op(t, "Transpose") || !t->input(0)) return false;
    const std::vector<int64_t> q = t->attr_ints("perm");
    if (!is_perm(q, acc.size())) return false;
    for (int64_t& a : acc) a = q[static_cast<size_t>(a)];
    cur = t->input(0);
  }
  return false;
}

/// What `v` is Transpose_p of: the start of a chain of Transposes whose perms compose to p (the
/// exporter composes an inner update's transpose back with the outer one's forward); else v itself
/// or the first value up its chain of Reshapes whose dims permuted by p are v's, where that
/// permutation moves only unit dims (compose_movement writes such a Transpose as a Reshape); else
/// nullptr.
Value* permuted_from(Value* v, const std::vector<int64_t>& p) {
  std::vector<int64_t> acc(p.size());  // v = Transpose_acc(cur)
  std::iota(acc.begin(), acc.end(), 0);
  Value* cur = v;
  for (int step = 0; step < 4; ++step) {
    if (acc == p) return cur;
    const Node* t = cur->producer;
    if (!t || !is_op(t, "Transpose") || !t->input(0)) break;
    const std::vector<int64_t> q = t->attr_ints("perm");
    if (!is_perm(q, acc.size())) break;
    for (int64_t& a : acc) a = q[static_cast<size_t>(a)];
    cur = t->input(0);
  }
  const std::optional<std::vector<int64_t>> vd = known_dims(v);
  if (!vd || vd->size() != p.size()) return nullptr;
  cur = v;
  for (int step = 0; step < 4 && cur; ++step) {
    const std::optional<std::vector<int64_t>> c = known_dims(cur);
    if (c && c->size() == p.size()) {
      std::vector<int64_t> permuted;
      for (int64_t ax : p) permuted.push_back((*c)[static_cast<size_t>(ax)]);
      if (permuted == *vd && moves_unit_dims_only(*c, p)) return cur;
    }
    const Node* rs = cur->producer;
    cur = rs && is_op(rs, "Reshape") ? rs->input(0) : nullptr;
  }
  return nullptr;
}

/// s when `idx` is the constant [[s], [s+1], .., [s+n-1]] (n = rows), else -1.
int64_t consecutive_rows(const Value* idx, int64_t rows) {
  const Tensor* t = constant_of(idx);
  if (!t || t->rank() != 2 || t->dim(0) != rows || t->dim(1) != 1 || rows < 1) return -1;
  const int64_t s = t->as_int64(0);
  for (int64_t i = 1; i < rows; ++i)
    if (t->as_int64(i) != s + i) return -1;
  return s;
}

/// Whether `v` is Slice(x) along `axis` over exactly [s, s + n).
bool is_slice_of(const Value* v, const Value* x, int64_t axis, int64_t s, int64_t n) {
  const Node* sl = v ? v->producer : nullptr;
  if (!sl || sl->input(0) != x) return false;
  const std::optional<AxisSlice> a = axis_slice(sl);
  return a && a->axis == axis && a->begin == s && a->end == s + n;
}

}  // namespace

bool slice_scatter_as_add(Rewriter& r, Node* n) {
  if (!is_op(n, "ScatterND") || n->inputs.size() != 3 || !n->outputs[0] ||
      n->attr_string("reduction", "none") != "none")
    return false;
  const std::optional<std::vector<int64_t>> dd = known_dims(n->input(0));
  const std::optional<std::vector<int64_t>> ud = known_dims(n->input(2));
  if (!dd || !ud || dd->empty() || ud->size() != dd->size()) return false;
  if (onnx_opset(r.graph()) < 11) return false;  // Pad's pads as an input
  const int64_t rows = (*ud)[0];
  const int64_t s = consecutive_rows(n->input(1), rows);
  if (s < 0 || s + rows > (*dd)[0]) return false;
  // updates = Transpose_p(a), p from the transposes above the updates (else above the data; else
  // none); a Reshape that moves the same bytes as Transpose_p counts as one.
  const size_t rank = dd->size();
  std::vector<int64_t> p, pd;
  transpose_chain(n->input(2), rank, &p);
  transpose_chain(n->input(0), rank, &pd);
  if (std::is_sorted(p.begin(), p.end())) p = pd;
  if (!is_perm(p, rank)) return false;
  Value* a = permuted_from(n->input(2), p);
  if (!a || !a->producer) return false;
  const int64_t axis = p[0];
  // a = Slice_axis(x) [+ b], b of the slice's own shape.
  const std::optional<std::vector<int64_t>> ad = known_dims(a);
  Value *x = nullptr, *b = nullptr;
  auto sliced = [&](Value* v) -> Value* {
    const Node* sl = v ? v->producer : nullptr;
    return sl && is_op(sl, "Slice") && is_slice_of(v, sl->input(0), axis, s, rows) ? sl->input(0) : nullptr;
  };
  if (Value* whole = sliced(a)) {
    x = whole;
  } else {
    const Node* add = a->producer;
    if (!is_op(add, "Add") || add->inputs.size() != 2 || !has_single_use(a)) return false;
    for (int i = 0; i < 2 && !x; ++i)
      if (Value* whole = sliced(add->input(static_cast<size_t>(i))))
        x = whole, b = add->input(static_cast<size_t>(1 - i));
    if (!x || known_dims(b) != ad) return false;
  }
  // The data is Transpose_p(x): x is where it comes from, or x comes from the data by p's inverse.
  std::vector<int64_t> inverse(rank);
  for (size_t j = 0; j < rank; ++j) inverse[static_cast<size_t>(p[j])] = static_cast<int64_t>(j);
  const bool data_is_px = permuted_from(n->input(0), p) == x || is_transpose_of(x, n->input(0), inverse);
  const std::optional<std::vector<int64_t>> xd = known_dims(x);
  if (!data_is_px || !xd || x->type.dtype != a->type.dtype || !is_float(x->type.dtype)) return false;
  std::vector<Node*> gone_nodes = {n};
  Graph& g = r.graph();
  const std::string name = n->name;
  const std::string what = describe(n);
  Value* out = n->outputs[0];
  Replaced gone = r.remove(gone_nodes);
  Value* sum = x;
  if (b) {
    std::vector<int64_t> pads(2 * rank, 0);
    pads[static_cast<size_t>(axis)] = s;
    pads[rank + static_cast<size_t>(axis)] = (*xd)[static_cast<size_t>(axis)] - s - rows;
    Value* pads_v = g.add_initializer(name + "_pads", Tensor::from_int64(pads, {static_cast<int64_t>(pads.size())}));
    Value* padded = typed_value(g, name + "_padded", x->type.dtype, *xd);
    r.add("Pad", {b, pads_v}, {padded}, g.unique_node_name(name + "_pad"), "", gone.origins);
    sum = typed_value(g, name + "_sum", x->type.dtype, *xd);
    r.add("Add", {x, padded}, {sum}, name, "", gone.origins);
  }
  std::vector<int64_t> id(rank);
  std::iota(id.begin(), id.end(), 0);
  if (p == id) {
    if (!forward_value(g, out, sum))
      r.add("Identity", {sum}, {out}, g.unique_node_name(name + "_same"), "", gone.origins);
  } else {
    Node* t = r.add("Transpose", {sum}, {out}, g.unique_node_name(name + "_transpose"), "", gone.origins);
    t->set_attr("perm", p);
  }
  r.rewrote(what + (b ? " -> Add of the update padded with zeros (an in-place slice update)"
                      : " -> nothing: it writes a slice back unchanged"),
            gone.names, name);
  return true;
}

}  // namespace fusec
