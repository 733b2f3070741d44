// fuse_expert_matmul: a mixture of experts' projection, as transformers' batched_mm exports it,
// -> one node that reads each expert's weight where it is.
//
//   W [E, M, K]  idx [S]          x [T, K]                         x   W   idx  [B]
//        \        /                  |                              \   |   /   /
//    Gather (axis 0)       Unsqueeze, Expand/Tile [T, R, K],   =>   ExpertMatMul (ai.fusec,
//   (or GatherND, idx [S, 1])    Reshape/Flatten [S, K]              trans_w = 1, repeat = R)
//           |                        |                                     |
//      [S, M, K]             Unsqueeze [S, K, 1]                           y [S, M]
//             \                /
//              MatMul [S, M, 1] -> Squeeze [S, M]  [+ Gather(B [E, M], idx)]  -> y
//
//   y[s] = W[idx[s]] · x[s / R] (+ B[idx[s]])
//
// The other orientation, MatMul(Unsqueeze [S, 1, K], W[idx] [S, K, M]) -> [S, 1, M], is trans_w = 0.
// The repetition (torch's repeat_interleave of each token over its top-k picks) is optional:
// without it R = 1 and x is the product's own [S, K] operand. W (and B) are constants; the
// unsqueezes and squeezes are read off the shapes (any view op that adds or drops the unit dim).
//
// Why: the gather copies a whole expert matrix per token and pick, S · M · K values (at Mixtral's
// sizes, 117 MB a row), written and read back before a product of one row each. ExpertMatMul
// groups the rows by expert and multiplies each expert's weight once where it is.
#include "passes/fuse_expert_matmul.h"

#include "passes/pattern.h"
#include "passes/rewrite.h"

namespace fusec {

namespace {

const char* kPass = "fuse_expert_matmul";

bool is_view_op(const Node* n) {
  return n && (is_op(n, "Unsqueeze") || is_op(n, "Squeeze") || is_op(n, "Reshape") || is_op(n, "Flatten"));
}

/// `v`'s shape when its rank is `rank`, else nullptr.
const Shape* rank_of(const Value* v, size_t rank) {
  const Shape* s = known_rank(v);
  return s && s->size() == rank ? s : nullptr;
}

/// Whether `a` is `b` with a static unit dim inserted at `at`.
bool unit_inserted(const Shape& a, const Shape& b, size_t at) {
  if (a.size() != b.size() + 1 || !a[at].is_static() || a[at].value != 1) return false;
  for (size_t i = 0, j = 0; i < a.size(); ++i) {
    if (i == at) continue;
    if (!same_dim(a[i], b[j++])) return false;
  }
  return true;
}

/// The experts' weights picked per row: W [E, ., .] constant, gathered along axis 0 by a 1-D index
/// (Gather), or by [S, 1] tuples (GatherND) that are a view of a 1-D index.
struct Picked {
  Node* node = nullptr;
  Value* table = nullptr;
  Value* index = nullptr;  // [S]
};

std::optional<Picked> picked(const Value* v, size_t table_rank, std::string* why) {
  Node* n = v ? v->producer : nullptr;
  if (!n || !(is_op(n, "Gather") || is_op(n, "GatherND"))) return std::nullopt;
  Picked p{n, n->input(0), n->input(1)};
  if (!rank_of(p.table, table_rank)) return std::nullopt;
  if (!p.table->is_initializer()) {
    *why = "the experts' weights '" + p.table->name + "' are not a constant";
    return std::nullopt;
  }
  if (is_op(n, "Gather")) {
    if (n->attr_int("axis", 0) != 0) {
      *why = "the Gather is not along axis 0";
      return std::nullopt;
    }
  } else {
    const Shape* q = rank_of(p.index, 2);
    if (n->attr_int("batch_dims", 0) != 0 || !q || !(*q)[1].is_static() || (*q)[1].value != 1) {
      *why = "the GatherND does not pick whole matrices by [S, 1] indices";
      return std::nullopt;
    }
    Node* view = p.index->producer;
    Value* flat = view && is_view_op(view) ? view->input(0) : nullptr;
    const Shape* f = rank_of(flat, 1);
    if (!f || !same_dim((*f)[0], (*q)[0])) {
      *why = "the GatherND's [S, 1] indices are not a view of a 1-D index";
      return std::nullopt;
    }
    p.index = flat;
  }
  if (!rank_of(p.index, 1)) {
    *why = "the index is not 1-D";
    return std::nullopt;
  }
  return p;
}

/// x as the product reads it, [S, K]: each row of a [T, K] tensor repeated R times in a row (a
/// unit dim inserted, broadcast to R by Expand or Tile, then merged back), or itself (R = 1).
std::pair<Value*, int64_t> unrepeated(Value* xs) {
  Node* merge = xs->producer;
  if (!merge || !(is_op(merge, "Reshape") || is_op(merge, "Flatten"))) return {xs, 1};
  Value* wide = merge->input(0);
  Node* grow = wide ? wide->producer : nullptr;
  const Shape* w = rank_of(wide, 3);
  const Shape* s = rank_of(xs, 2);
  if (!grow || !(is_op(grow, "Expand") || is_op(grow, "Tile")) || !w || !s || !(*w)[1].is_static() ||
      !same_dim((*w)[2], (*s)[1]))
    return {xs, 1};
  Value* unit = grow->input(0);
  const Shape* u = rank_of(unit, 3);
  Node* insert = unit ? unit->producer : nullptr;
  if (!u || !insert || !is_view_op(insert) || !same_dim((*u)[0], (*w)[0]) || !same_dim((*u)[2], (*w)[2]))
    return {xs, 1};
  const Shape* x = rank_of(insert->input(0), 2);
  if (!x || !unit_inserted(*u, *x, 1)) return {xs, 1};
  // Flatten must merge the first two dims (axis 2), a Reshape must give [T·R, K] (the shape says).
  if (is_op(merge, "Flatten") && merge->attr_int("axis", 1) != 2 && merge->attr_int("axis", 1) != -1) return {xs, 1};
  if ((*s)[0].is_static() && (*w)[0].is_static() && (*s)[0].value != (*w)[0].value * (*w)[1].value) return {xs, 1};
  return {insert->input(0), (*w)[1].value};
}

bool fuse_at(Rewriter& r, Node* mm) {
  Value* a = mm->input(0);
  Value* b = mm->input(1);
  Value* p = mm->outputs.empty() ? nullptr : mm->outputs[0];
  const Shape* ps = rank_of(p, 3);
  if (!a || !b || !ps) return false;
  std::string why;
  // trans_w = 1: W[idx] [S, M, K] · x [S, K, 1]; trans_w = 0: x [S, 1, K] · W[idx] [S, K, M].
  for (int trans = 1; trans >= 0; --trans) {
    Value* wv = trans ? a : b;
    Value* xv = trans ? b : a;
    std::optional<Picked> pick = picked(wv, 3, &why);
    if (!pick) continue;
    const std::string what = describe(pick->node) + " -> " + describe(mm) + " not fused";
    const size_t unit_at = trans ? 2 : 1;
    Node* xview = xv->producer;
    const Shape* xs3 = rank_of(xv, 3);
    const Shape* xs2 = xview && is_view_op(xview) ? rank_of(xview->input(0), 2) : nullptr;
    if (!xs3 || !xs2 || !unit_inserted(*xs3, *xs2, unit_at))
      return r.near_miss(what, "the other operand is not a row of [S, K] viewed with a unit dim");
    // One matrix a row: no broadcasting between the rows and the picks.
    const Shape* ws = rank_of(wv, 3);
    const Shape* is = rank_of(pick->index, 1);
    if (!ws || !same_dim((*ws)[0], (*xs2)[0]) || !same_dim((*ws)[0], (*ps)[0]) || !same_dim((*is)[0], (*ws)[0]))
      return r.near_miss(what, "the rows and the picked matrices are not one to one");
    if (!has_single_use(wv)) return r.near_miss(what, "the gathered weights '" + wv->name + "' are read elsewhere");
    Node* drop = sole_consumer(p);
    Value* y = drop && is_view_op(drop) && !drop->outputs.empty() ? drop->outputs[0] : nullptr;
    const Shape* ys = rank_of(y, 2);
    if (!ys || !unit_inserted(*ps, *ys, unit_at))
      return r.near_miss(what, "the product is not read only by a view that drops its unit dim");
    if (r.opts().portable)
      return r.near_miss(what, "--portable writes standard ops only: this needs ai.fusec ExpertMatMul");
    // A bias picked by the same index and added to the rows.
    std::vector<Node*> gone_nodes = {pick->node, mm, drop};
    Value* bias = nullptr;
    Node* add = sole_consumer_of(y, "Add");
    if (add) {
      std::string no;
      Value* other = other_input(add, y);
      std::optional<Picked> bp = picked(other, 2, &no);
      const Shape* os = rank_of(other, 2);
      if (bp && bp->index == pick->index && has_single_use(other) && os && same_shape_and_type(other, y) &&
          same_dim((*rank_of(bp->table, 2))[1], (*ys)[1])) {
        bias = bp->table;
        gone_nodes.push_back(bp->node);
        gone_nodes.push_back(add);
        y = add->outputs[0];
      }
    }
    auto [x, repeat] = unrepeated(xview->input(0));
    const std::string name = mm->name;
    Replaced gone = r.remove(gone_nodes);
    std::vector<Value*> ins = {x, pick->table, pick->index};
    if (bias) ins.push_back(bias);
    Node* fused = r.add("ExpertMatMul", ins, {y}, name, "ai.fusec", gone.origins);
    fused->set_attr("trans_w", int64_t{trans});
    if (repeat != 1) fused->set_attr("repeat", repeat);
    r.rewrote(gone.listed + " -> " + describe(fused) +
                  (repeat != 1 ? " (each row read " + std::to_string(repeat) + " times)" : ""),
              gone.names, name);
    return true;
  }
  if (!why.empty()) r.near_miss(describe(mm) + " not fused as an expert product", why);
  return false;
}

}  // namespace

bool FuseExpertMatMulPass::run(Graph& g, PassContext& ctx) {
  std::vector<Node*> mms;
  for (Node* n : g.node_list())
    if (is_op(n, "MatMul")) mms.push_back(n);
  Rewriter r(g, ctx, kPass);
  for (Node* n : mms)
    if (!r.removed(n)) fuse_at(r, n);
  if (r.changed()) g.remove_unused_values();
  return r.changed();
}

}  // namespace fusec
