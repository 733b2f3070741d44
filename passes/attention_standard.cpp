// The views around a 4-D ONNX Attention, absorbed into it (torch's exporter at opset 23):
//
//   x_q ─ Reshape [B,S,H,D] ─ Transpose(0,2,1,3) ───────────────────────────── Q ─┐
//   x_k ─ Reshape [B,S,Hkv,D] ─ Transpose(0,2,1,3) [─ repeat_kv] ───────────── K ─┼─ Attention ─┐
//   x_v ─ Reshape [B,S,Hkv,D] ─ Transpose(0,2,1,3) [─ repeat_kv] ───────────── V ─┘  [, mask]   │
//   ┌────────────────────────────────────────────────────────────────────────────────────────┘
//   └─ Transpose(0,2,1,3) ─ Reshape [B,S,H·Dv] ──▶ y
//
//   y = Attention(x_q, x_k, x_v [, mask]; the node's attributes, q_num_heads = H, kv_num_heads = Hkv)
//
// The 3-D form reads [B, S, H·D] as the head split does, and a kv head g serving query heads
// g·r .. g·r + r − 1 is Attention's grouped heads (query head h reads kv head h / (H / Hkv)), so
// the node computes the same thing without the copies of the transposes and the repeat. Then
// merge_qkv packs the three projections and fuse_rotary_attention takes the rotary, as for the
// attention fuse_attention writes from the softmax form. The mask, scale, causality and soft cap
// are the node's own and stay as they are.
#include "passes/attention_standard.h"

#include "passes/attention_pattern.h"
#include "passes/pattern.h"
#include "passes/rewrite.h"

namespace fusec::attention {

Value* three_d_output(Graph& g, Value* merged, Value** flat) {
  *flat = nullptr;
  if (!merged->type.shape || merged->type.shape->size() != 2) return merged;
  *flat = merged;
  return g.add_value(merged->name + "_bse");
}

void add_flatten(Graph& g, Value* y, Value* flat, const std::string& name) {
  if (!flat) return;
  std::vector<int64_t> dims;
  for (const Dim& d : *flat->type.shape) dims.push_back(d.value);
  Value* shape = g.add_initializer(flat->name + "_shape", Tensor::from_int64(dims, {2}));
  g.add_node("Reshape", {y, shape}, {flat}, g.unique_node_name(name + "_flatten"));
}

void remove_unread(Rewriter& r, Node* fused, const std::vector<Node*>& candidates) {
  for (bool again = true; again;) {
    again = false;
    for (Node* n : candidates) {
      if (r.removed(n)) continue;
      bool used = false;
      for (const Value* o : n->outputs) used |= o && use_count(o) > 0;
      if (used) continue;
      for (const auto& f : r.remove({n}).origins) fused->fused_from.push_back(f);
      again = true;
    }
  }
}

Node* absorb_standard_views(Rewriter& r, Node* attn, std::string* why) {
  why->clear();
  if (!is_op(attn, "Attention") || attn->find_attr("q_num_heads") || attn->inputs.size() < 3) return nullptr;
  for (size_t i = 0; i < 3; ++i) {
    const Value* x = attn->input(i);
    if (!x || !x->type.shape || x->type.shape->size() != 4) return nullptr;
  }
  // A cache (past keys and values in, present ones out) or the scores as an output: not this form.
  for (size_t i = 4; i < attn->inputs.size(); ++i)
    if (attn->input(i)) return nullptr;
  for (size_t i = 1; i < attn->outputs.size(); ++i)
    if (attn->outputs[i] && use_count(attn->outputs[i]) > 0) return nullptr;

  Operand q = match_query(attn->input(0));
  Operand k = match_kv(attn->input(1), true), v = match_kv(attn->input(2), true);
  if (k.repeat != v.repeat) {  // a GQA repeat only where K and V both have it
    k = match_kv(attn->input(1), false);
    v = match_kv(attn->input(2), false);
  }
  Node* merge = match_head_merge(attn);
  const auto qs = bhsd(q), ks = bhsd(k), vs = bhsd(v);
  if (!merge) {
    *why = "its output is not merged back to [B, S, H·Dv] (Transpose(0,2,1,3), Reshape)";
  } else if (!viewable_3d(q) || !viewable_3d(k) || !viewable_3d(v)) {
    *why = "Q, K and V are not all head splits of [B, S, H·D] tensors";
  } else if (!qs || !ks || !vs || q.heads <= 0 || k.heads <= 0 || v.heads <= 0) {
    *why = "the heads of Q, K and V are not known (bind the shapes, e.g. --batch)";
  } else if (!same_known((*qs)[0], (*ks)[0]) || !same_known((*qs)[0], (*vs)[0])) {
    *why = "Q, K and V do not have one known batch size";
  } else if (k.heads != v.heads || q.heads % k.heads != 0) {
    *why = "Q's " + std::to_string(q.heads) + " heads are not a multiple of K's and V's (" + std::to_string(k.heads) +
           ", " + std::to_string(v.heads) + ")";
  }
  if (!why->empty()) return nullptr;

  Graph& g = r.graph();
  std::vector<Value*> ins = {as_3d(g, q), as_3d(g, k), as_3d(g, v)};
  if (attn->inputs.size() > 3 && attn->input(3)) ins.push_back(attn->input(3));
  Value* flat = nullptr;
  Value* y = three_d_output(g, merge->outputs[0], &flat);
  const std::vector<NamedAttribute> attrs = attn->attrs;
  const std::string name = attn->name;
  Replaced gone = r.remove({attn, merge->input(0)->producer, merge});
  Node* fused = r.add("Attention", ins, {y}, name, "", gone.origins);
  fused->attrs = attrs;
  fused->set_attr("q_num_heads", q.heads);
  fused->set_attr("kv_num_heads", k.heads);
  add_flatten(g, y, flat, name);
  // The operands' transposes, reshapes and repeats go too where nothing else reads them.
  std::vector<Node*> candidates;
  for (const Operand* o : {&q, &k, &v}) candidates.insert(candidates.end(), o->nodes.begin(), o->nodes.end());
  remove_unread(r, fused, candidates);
  g.remove_unused_values();
  return fused;
}

}  // namespace fusec::attention
