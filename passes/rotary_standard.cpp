// RotaryEmbedding -> ai.fusec Rotary. The two compute the same products: RotaryEmbedding's
// real = cos·x1 − sin·x2, imag = sin·x1 + cos·x2 over half-width caches is Rotary's
// x·cos + rotate(x)·sin over whole-width tables whose entries lo and hi of a pair are both the
// cache's entry j: rotate_half pairs (j, j + r/2), so the table is the row twice; interleaved
// pairs (2j, 2j + 1), so the table repeats each entry. Rotary's tables broadcast to X's head view
// ([B, S, H, D] for a 3-D X with head_size D, X itself for a 4-D [B, H, S, D] one), so the rows
// [B, S, r] gain a unit heads axis where X has its heads.
#include "passes/rotary_standard.h"

#include <string>

#include "passes/pattern.h"
#include "passes/rewrite.h"

namespace fusec {

namespace {

/// A node `op` on `ins` writing a new value of `dtype` (its shape left to inference).
Value* emit(Rewriter& r, const std::string& op, std::vector<Value*> ins, DType dtype, const std::string& stem,
            const std::vector<std::string>& origins, std::vector<std::pair<std::string, int64_t>> attrs = {}) {
  Graph& g = r.graph();
  Value* out = g.add_value(stem);
  out->type.dtype = dtype;
  Node* n = r.add(op, std::move(ins), {out}, g.unique_node_name(stem), "", origins);
  for (const auto& [k, v] : attrs) n->set_attr(k, v);
  return out;
}

/// cache [max_position, r/2] at position_ids, or the [B, S, r/2] cache itself; widened to [B, S, r]
/// and given a unit heads axis at `heads_axis`.
Value* whole_table(Rewriter& r, RotaryTables& tables, Value* cache, Value* positions, bool interleaved,
                   int64_t heads_axis, const std::string& stem, const std::vector<std::string>& origins) {
  Value*& built = tables[{cache, positions, interleaved, heads_axis}];
  if (built) return built;
  Graph& g = r.graph();
  const DType t = cache->type.dtype;
  Value* rows = positions ? emit(r, "Gather", {cache, positions}, t, stem + "_rows", origins, {{"axis", 0}}) : cache;
  Value* wide;
  if (interleaved) {
    Value* col = emit(r, "Unsqueeze", {rows, int64_initializer(g, stem + "_last", {-1})}, t, stem + "_col", origins);
    Value* pairs = emit(r, "Concat", {col, col}, t, stem + "_pairs", origins, {{"axis", -1}});
    wide =
        emit(r, "Reshape", {pairs, int64_initializer(g, stem + "_wide_shape", {0, 0, -1})}, t, stem + "_wide", origins);
  } else {
    wide = emit(r, "Concat", {rows, rows}, t, stem + "_wide", origins, {{"axis", -1}});
  }
  built = emit(r, "Unsqueeze", {wide, int64_initializer(g, stem + "_heads_axis", {heads_axis})}, t, stem + "_table",
               origins);
  return built;
}

}  // namespace

Node* rotary_from_standard(Rewriter& r, Node* n, RotaryTables& tables) {
  if (!is_op(n, "RotaryEmbedding") || !n->input(0) || !n->input(1) || !n->input(2) || !n->outputs[0]) return nullptr;
  Value* x = n->input(0);
  if (!x->type.shape || (x->type.shape->size() != 3 && x->type.shape->size() != 4)) return nullptr;
  const bool three_d = x->type.shape->size() == 3;
  int64_t head_size = 0;
  if (three_d) {
    const Dim& hidden = x->type.shape->back();
    const int64_t heads = n->attr_int("num_heads", 0);
    if (!hidden.is_static() || heads <= 0 || hidden.value % heads != 0) return nullptr;
    head_size = hidden.value / heads;
  }
  const bool interleaved = n->attr_int("interleaved", 0) != 0;
  const int64_t rotary_dim = n->attr_int("rotary_embedding_dim", 0);
  Value* positions = n->inputs.size() > 3 ? n->input(3) : nullptr;
  const std::string what = describe(n), name = n->name;
  const std::vector<std::string> origins = fused_origins({n});
  const int64_t heads_axis = three_d ? 2 : 1;  // [B, S, 1, r] or [B, 1, S, r]
  Value* cos = whole_table(r, tables, n->input(1), positions, interleaved, heads_axis, name + "_cos", origins);
  Value* sin = whole_table(r, tables, n->input(2), positions, interleaved, heads_axis, name + "_sin", origins);
  Value* y = n->outputs[0];
  r.remove({n});
  Node* rot = r.add("Rotary", {x, cos, sin}, {y}, name, "ai.fusec", origins);
  if (head_size) rot->set_attr("head_size", head_size);
  if (rotary_dim) rot->set_attr("rotary_dim", rotary_dim);
  if (interleaved) rot->set_attr("interleaved", int64_t{1});
  r.rewrote(what + " -> ai.fusec." + describe(rot) + " (its caches as whole-width tables)", {name}, name);
  return rot;
}

}  // namespace fusec
