// canonicalize: one spelling for computations that exporters write in several ways, so every
// later pass and the CUDA planner match one form. torch's legacy (TorchScript) and dynamo
// (torch.export + onnxscript) exporters write the same network differently; each rule below is a
// difference between them that decided whether a fusion happened (scripts/export_zoo.py exports
// both forms). Every rule is exact: the result computes the same values, bit for bit.
//
// Not here: dynamo's ReduceMean over H and W where legacy writes GlobalAveragePool. The CUDA
// planner runs both on the same reduce kernels in their input's layout (layout_rule.h), so the
// two forms already cost the same; and a mean over trailing axes is also a normalization's
// statistic, which recognize_layernorm matches as a ReduceMean.
//
//   Reshape(x: S -> S1 merging runs of S's dims) -> Transpose(p) -> Reshape(to exactly those runs
//   in p's order)                                    -> Transpose(x, p expanded to S's axes)
//       dynamo writes Kᵀ = Reshape[B,H,D,S](Transpose(0,2,1)(Reshape[B·H,S,D](K))); legacy writes
//       Transpose(K, 0,1,3,2). A transpose that moves whole groups of dims is that transpose of
//       the ungrouped tensor: element order is the same, only the view's dims differ.
//
//   Div(1, y)                                        -> Reciprocal(y)            1/y by definition
//       legacy RMSNorm writes 1 / sqrt(mean(x²) + ε) as Div; dynamo as Reciprocal.
//
//   Gather(d[n], indices = 0, 1, .., n-1 in row-major order, axis 0) -> Reshape(d, shape(indices))
//       dynamo writes torch's as_strided view of a contiguous tensor as a Gather of every element.
//
//   Einsum(a, b) that is a batched matrix product -> MatMul with the transposes it needs
//       (canonicalize_einsum.cpp): MaxViT's attention. The same sum over the contracted label
//       (bit for bit on the CPU reference in tests/passes/test_canonicalize.cpp).
//
//   Swish(x, alpha = 1)                              -> Mul(x, Sigmoid(x))
//       opset 24's SiLU in the form every exporter writes without it, which the conv, squeeze-excite
//       and gated-MLP fusions match. Exact at float32 and float64 (the CPU kernel rounds the sigmoid
//       before the product too); a 16-bit Swish computed in float rounds once where the pair rounds
//       twice.
//
//   ScatterND(Transpose_p(x), consecutive rows, Transpose_p(Slice(x) [+ b]))   -> Transpose_p(x [+ Pad(b)])
//       (canonicalize_slice_scatter.cpp): torch's in-place update of a slice as the dynamo export
//       writes it; MViT-V2's relative positions added to a block of the scores.
#include "passes/canonicalize.h"

#include <algorithm>
#include <numeric>

#include "ir/dim_values.h"
#include "passes/canonicalize_einsum.h"
#include "passes/canonicalize_slice_scatter.h"
#include "passes/pattern.h"
#include "passes/rewrite.h"

namespace fusec {

namespace {

const char* kPass = "canonicalize";

/// Replaces `old` (one output) by a node `op` on `inputs` that writes the same value under the same
/// name, standing for the nodes in `from` (old among them). Returns the new node.
Node* replace_node(Rewriter& r, Node* old, const std::string& op, std::vector<Value*> inputs,
                   const std::vector<Node*>& from) {
  const std::string name = old->name;
  std::vector<std::string> origins = fused_origins(from);
  Value* out = old->outputs[0];
  r.remove({old});
  return r.add(op, std::move(inputs), {out}, name, "", std::move(origins));
}

/// The runs of `from`'s axes whose products are `to`'s dims, in order (a dim of 1 in `to` may be an
/// empty run; unit dims of `from` join the run after them, trailing ones the last run), or nullopt
/// when `to` is not such a merge of `from`.
std::optional<std::vector<std::vector<int>>> merged_runs(const std::vector<DimProduct>& from,
                                                         const std::vector<DimProduct>& to) {
  // Dims are products (ir/dim_values.h) so that an open batch merges too: [B, H, S, D] -> [B·H, S, D].
  // A run grows while its product is a proper divisor of the dim it builds.
  std::vector<std::vector<int>> runs(to.size());
  size_t i = 0;
  const DimProduct one;
  for (size_t j = 0; j < to.size(); ++j) {
    DimProduct prod;
    const bool last = j + 1 == to.size();
    while (i < from.size() &&
           ((!(prod == to[j]) && divided(to[j], prod)) || (last && prod == to[j] && from[i] == one))) {
      auto next = times(prod, from[i]);
      if (!next) return std::nullopt;
      prod = *next;
      runs[j].push_back(static_cast<int>(i++));
    }
    if (!(prod == to[j])) return std::nullopt;
  }
  if (i != from.size()) return std::nullopt;
  return runs;
}

/// v's dims as products, or nullopt when one is unknown (or the rank is).
std::optional<std::vector<DimProduct>> dim_products(const Value* v) {
  if (!v || !v->type.shape) return std::nullopt;
  std::vector<DimProduct> out;
  for (const Dim& d : *v->type.shape) {
    auto p = product_of(d);
    if (!p) return std::nullopt;
    out.push_back(*p);
  }
  return out;
}

/// Rule 1: Reshape -> Transpose -> Reshape that only moves whole groups of x's dims.
bool transpose_of_groups(Rewriter& r, Node* outer) {
  if (!is_op(outer, "Reshape") || !outer->outputs[0]) return false;
  Node* t = producer_of(outer->input(0), "Transpose");
  if (!t || !t->domain.empty()) return false;
  Node* inner = producer_of(t->input(0), "Reshape");
  if (!inner || !inner->domain.empty()) return false;
  Value* x = inner->input(0);
  auto s = dim_products(x), s1 = dim_products(inner->outputs[0]), s2 = dim_products(outer->outputs[0]);
  if (!s || !s1 || !s2) return false;
  for (const DimProduct& d : *s)
    if (d.coef == 0) return false;
  auto runs = merged_runs(*s, *s1);
  if (!runs) return false;
  std::vector<int64_t> p = t->attr_ints("perm");
  if (p.empty()) {  // default: reverse the dims
    p.resize(s1->size());
    std::iota(p.rbegin(), p.rend(), 0);
  }
  if (p.size() != s1->size()) return false;
  std::vector<int64_t> perm;
  std::vector<DimProduct> shape;
  for (int64_t k : p) {
    if (k < 0 || k >= static_cast<int64_t>(runs->size())) return false;
    for (int a : (*runs)[k]) {
      perm.push_back(a);
      shape.push_back((*s)[a]);
    }
  }
  if (shape != *s2) return false;
  const std::string what = describe(inner) + " + " + describe(t) + " + " + describe(outer);
  std::vector<std::string> replaced = {inner->name, t->name, outer->name};
  Node* tr = replace_node(r, outer, "Transpose", {x}, {inner, t, outer});
  tr->set_attr("perm", perm);
  if (use_count(t->outputs[0]) == 0) erase_nodes(r.graph(), {t});  // unless another node reads the views
  if (use_count(inner->outputs[0]) == 0) erase_nodes(r.graph(), {inner});
  r.rewrote(what + " -> " + describe(tr) + " (a transpose of whole groups of dims)", replaced, tr->name);
  return true;
}

/// Rule 2: Div(1, y) -> Reciprocal(y).
bool reciprocal(Rewriter& r, Node* n) {
  if (!is_op(n, "Div") || !n->input(0) || !n->input(1)) return false;
  Value *one = n->input(0), *y = n->input(1), *out = n->outputs[0];
  if (!out) return false;
  if (!is_float(y->type.dtype) || !constant_of(one) || uniform_constant(one) != 1.0) return false;
  if (!same_shape_and_type(y, out)) return false;  // the 1 must not broadcast y to a bigger shape
  const std::string what = describe(n);
  Node* rec = replace_node(r, n, "Reciprocal", {y}, {n});
  r.rewrote(what + " (1 / y) -> " + describe(rec), {rec->name}, rec->name);
  return true;
}

/// Rule 3: Gather of every element of a 1-D tensor, in order -> Reshape.
bool gather_of_everything(Rewriter& r, Node* n) {
  if (!is_op(n, "Gather") || n->attr_int("axis", 0) != 0) return false;
  Value *d = n->input(0), *idx = n->input(1);
  auto ds = known_dims(d);
  const Tensor* t = constant_of(idx);
  if (!ds || ds->size() != 1 || !t || t->numel() != (*ds)[0] || t->numel() == 0) return false;
  for (int64_t i = 0; i < t->numel(); ++i)
    if (t->as_int64(i) != i) return false;
  Value* shape = r.graph().add_initializer(n->name + "_shape",
                                           Tensor::from_int64(t->dims(), {static_cast<int64_t>(t->dims().size())}));
  const std::string what = describe(n);
  Node* reshape = replace_node(r, n, "Reshape", {d, shape}, {n});
  r.rewrote(what + " (every element, in order) -> " + describe(reshape), {reshape->name}, reshape->name);
  return true;
}

/// Rule 6: Swish(x, alpha = 1) -> Mul(x, Sigmoid(x)).
bool swish_as_silu(Rewriter& r, Node* n) {
  if (!is_op(n, "Swish") || !n->input(0) || !n->outputs[0] || n->attr_float("alpha", 1.0f) != 1.0f) return false;
  Value* x = n->input(0);
  Graph& g = r.graph();
  Value* s = g.add_value(n->outputs[0]->name + "_sigmoid");
  s->type = x->type;
  const std::string what = describe(n);
  Node* sig = r.add("Sigmoid", {x}, {s}, g.unique_node_name(n->name + "_sigmoid"), "", fused_origins({n}));
  Node* mul = replace_node(r, n, "Mul", {x, s}, {n});
  r.rewrote(what + " -> " + describe(sig) + " and " + describe(mul), {sig->name, mul->name}, mul->name);
  return true;
}

}  // namespace

bool CanonicalizePass::run(Graph& g, PassContext& ctx) {
  Rewriter r(g, ctx, kPass);
  for (Node* n : g.node_list()) {
    if (!n->domain.empty()) continue;
    // the first rule that applies
    (void)(transpose_of_groups(r, n) || reciprocal(r, n) || gather_of_everything(r, n) || einsum_as_matmul(r, n) ||
           slice_scatter_as_add(r, n) || swish_as_silu(r, n));
  }
  if (r.changed()) g.remove_unused_values();
  return r.changed();
}

}  // namespace fusec
