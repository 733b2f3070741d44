// Einsum(a, b) with an explicit output, every label once per term, no ellipsis, and labels of four
// kinds only (batch: in a, b and the output; row: a and the output; column: b and the output;
// contracted: a and b), with one row, one column and one contracted label:
//
//   Transpose(a -> [batch.., row, k]) · Transpose(b -> [batch.., k, col]) -> Transpose(to the output)
//
// with the batch labels in the output's order and each identity transpose left out. MaxViT writes
// its attention as Einsum("BGHID,BGHJD->BGHIJ") and ("BGHIJ,BGHJD->BGHID"): as MatMul and Transpose the
// CUDA backend runs them (it has no Einsum kernel: an Einsum runs on the CPU reference). The sum is
// the same one over the contracted label.
#include "passes/canonicalize_einsum.h"

#include <algorithm>
#include <numeric>

#include "passes/pattern.h"

namespace fusec {

namespace {

/// The labels of one term, or nullopt when it has anything but letters or repeats one.
std::optional<std::string> term(const std::string& t) {
  std::string seen;
  for (char c : t) {
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) || seen.find(c) != std::string::npos) return std::nullopt;
    seen += c;
  }
  return seen;
}

/// A Transpose of `x` with `perm`, or x itself for the identity.
Value* transposed(Graph& g, Value* x, const std::vector<int64_t>& perm, const std::string& name) {
  std::vector<int64_t> id(perm.size());
  std::iota(id.begin(), id.end(), 0);
  if (perm == id) return x;
  Value* out = g.add_value(name);
  Node* t = g.add_node("Transpose", {x}, {out}, g.unique_node_name(name));
  t->set_attr("perm", perm);
  return out;
}

/// perm taking a tensor labelled `from` to the labels `to` (the same letters).
std::vector<int64_t> perm_of(const std::string& from, const std::string& to) {
  std::vector<int64_t> p;
  for (char c : to) p.push_back(static_cast<int64_t>(from.find(c)));
  return p;
}

}  // namespace

bool einsum_as_matmul(Rewriter& r, Node* n) {
  if (!is_op(n, "Einsum") || n->inputs.size() != 2 || !n->outputs[0] || !n->has_attr("equation")) return false;
  std::string eq = n->attr_string("equation", "");
  eq.erase(std::remove(eq.begin(), eq.end(), ' '), eq.end());
  const size_t arrow = eq.find("->"), comma = eq.find(',');
  if (arrow == std::string::npos || comma == std::string::npos || comma > arrow) return false;
  auto a = term(eq.substr(0, comma)), b = term(eq.substr(comma + 1, arrow - comma - 1)), y = term(eq.substr(arrow + 2));
  if (!a || !b || !y) return false;
  for (const Value* v : {n->input(0), n->input(1)})
    if (!v->type.shape || !is_float(v->type.dtype)) return false;
  if (n->input(0)->type.shape->size() != a->size() || n->input(1)->type.shape->size() != b->size()) return false;
  std::string batch, row, col, k;
  auto in = [](const std::string& s, char c) { return s.find(c) != std::string::npos; };
  for (char c : *y) {
    if (in(*a, c) && in(*b, c))
      batch += c;
    else if (in(*a, c))
      row += c;
    else if (in(*b, c))
      col += c;
    else
      return false;  // an output label in neither operand
  }
  for (char c : *a)
    if (in(*b, c) && !in(*y, c)) k += c;
  for (const std::string* t : {&*a, &*b})
    for (char c : *t)
      if (!in(*y, c) && !in(k, c)) return false;  // summed out of one operand alone
  if (row.size() != 1 || col.size() != 1 || k.size() != 1) return false;
  // Batch labels must have one size in both operands (MatMul would broadcast a 1 where Einsum
  // requires equal sizes; equal known sizes keep the two the same).
  for (char c : batch) {
    const Dim& da = (*n->input(0)->type.shape)[a->find(c)];
    const Dim& db = (*n->input(1)->type.shape)[b->find(c)];
    if (!same_dim(da, db)) return false;
  }
  Graph& g = r.graph();
  const std::string name = n->name;
  Value *x = n->input(0), *w = n->input(1), *out = n->outputs[0];
  const std::string a_order = batch + row + k, b_order = batch + k + col, p_order = batch + row + col;
  const std::string what = describe(n) + " '" + eq + "'";
  Replaced gone = r.remove({n});
  Value* lhs = transposed(g, x, perm_of(*a, a_order), name + "_lhs");
  Value* rhs = transposed(g, w, perm_of(*b, b_order), name + "_rhs");
  const bool last = p_order == *y;
  Value* product = last ? out : g.add_value(name + "_product");
  Node* mm = r.add("MatMul", {lhs, rhs}, {product}, name, "", gone.origins);
  if (!last) {
    Node* t = g.add_node("Transpose", {product}, {out}, g.unique_node_name(name + "_out"));
    t->set_attr("perm", perm_of(p_order, *y));
  }
  r.rewrote(what + " -> " + describe(mm) + " (a batched matrix product)", gone.names, mm->name);
  return true;
}

}  // namespace fusec
