// Einsum(a, b) with an explicit output, every label once per term, no ellipsis, and labels of four
// kinds only (batch: in a, b and the output; row: a and the output; column: b and the output;
// contracted: a and b), with at least one of each of the last three:
//
//   Transpose(a -> [batch.., rows.., ks..]) · Transpose(b -> [batch.., ks.., cols..]) -> Transpose(to the output)
//
// with the batch labels in the output's order and each identity transpose left out. Where a kind
// has several labels (MViT-V2's relative positions, "bythwc,hkc->bythwk": rows b, y, t, w), a
// Reshape merges them into one dim on each side of the product and one splits them after it; their
// sizes must be known but for one row label (-1), and the batch labels keep their place (0).
// MaxViT writes its attention as Einsum("BGHID,BGHJD->BGHIJ") and ("BGHIJ,BGHJD->BGHID"): as MatMul
// and Transpose the CUDA backend runs them (it has no Einsum kernel: an Einsum runs on the CPU
// reference). The sum is the same one over the contracted labels.
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
  if (row.empty() || col.empty() || k.empty()) return false;
  // Batch labels must have one size in both operands (MatMul would broadcast a 1 where Einsum
  // requires equal sizes; equal known sizes keep the two the same).
  for (char c : batch) {
    const Dim& da = (*n->input(0)->type.shape)[a->find(c)];
    const Dim& db = (*n->input(1)->type.shape)[b->find(c)];
    if (!same_dim(da, db)) return false;
  }
  // The merged dims' sizes: every label known, but one row label may be left to -1.
  auto size_of = [&](char c) -> int64_t {
    const bool in_a = in(*a, c);
    const Dim& d = (*n->input(in_a ? 0 : 1)->type.shape)[(in_a ? *a : *b).find(c)];
    return d.is_static() ? d.value : -1;
  };
  auto merged = [&](const std::string& labels, bool* open) {
    int64_t p = 1;
    for (char c : labels) {
      const int64_t v = size_of(c);
      if (v < 0) {
        *open = true;
        return int64_t{-1};
      }
      p *= v;
    }
    return p;
  };
  bool row_open = false, other_open = false;
  int open_rows = 0;
  for (char c : row) open_rows += size_of(c) < 0;
  const int64_t rows_n = merged(row, &row_open), cols_n = merged(col, &other_open), k_n = merged(k, &other_open);
  if (other_open || open_rows > 1) return false;
  Graph& g = r.graph();
  const std::string name = n->name;
  Value *x = n->input(0), *w = n->input(1), *out = n->outputs[0];
  const std::string a_order = batch + row + k, b_order = batch + k + col, p_order = batch + row + col;
  const std::string what = describe(n) + " '" + eq + "'";
  const bool flat = row.size() == 1 && col.size() == 1 && k.size() == 1;
  // [batch.. as 0, then the given dims] as a Reshape of `v`, or v itself where nothing merges.
  auto reshaped = [&](Value* v, std::vector<int64_t> tail, const std::string& stem) {
    if (flat) return v;
    std::vector<int64_t> dims(batch.size(), 0);
    dims.insert(dims.end(), tail.begin(), tail.end());
    Value* shape = g.add_initializer(stem + "_shape", Tensor::from_int64(dims, {static_cast<int64_t>(dims.size())}));
    Value* y = g.add_value(stem);
    g.add_node("Reshape", {v, shape}, {y}, g.unique_node_name(stem));
    return y;
  };
  std::vector<int64_t> split;  // the product's rows and columns, each label's own dim
  for (char c : row + col) split.push_back(size_of(c));
  Replaced gone = r.remove({n});
  Value* lhs = reshaped(transposed(g, x, perm_of(*a, a_order), name + "_lhs"), {row_open ? -1 : rows_n, k_n},
                        name + "_lhs_merged");
  Value* rhs = reshaped(transposed(g, w, perm_of(*b, b_order), name + "_rhs"), {k_n, cols_n}, name + "_rhs_merged");
  const bool last = p_order == *y;
  Value* product = last && flat ? out : g.add_value(name + "_product");
  Node* mm = r.add("MatMul", {lhs, rhs}, {product}, name, "", gone.origins);
  if (!flat) {
    Value* unmerged = last ? out : g.add_value(name + "_unmerged");
    std::vector<int64_t> dims(batch.size(), 0);
    dims.insert(dims.end(), split.begin(), split.end());
    Value* shape =
        g.add_initializer(name + "_split_shape", Tensor::from_int64(dims, {static_cast<int64_t>(dims.size())}));
    g.add_node("Reshape", {product, shape}, {unmerged}, g.unique_node_name(name + "_split"));
    product = unmerged;
  }
  if (!last) {
    Node* t = g.add_node("Transpose", {product}, {out}, g.unique_node_name(name + "_out"));
    t->set_attr("perm", perm_of(p_order, *y));
  }
  r.rewrote(what + " -> " + describe(mm) + " (a batched matrix product)", gone.names, mm->name);
  return true;
}

}  // namespace fusec
