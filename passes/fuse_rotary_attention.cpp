// fuse_rotary_attention: the rotation of packed QKV's Q and K heads goes into the attention.
//
//   QKV   cos   sin                              QKV   mask   cos   sin
//     \    |    /                                  \    |      |    /
//   Rotary 'r' (head_size D,            =>       Attention 'a' (ai.fusec, packed)
//     rotated (Hq + Hkv)·D)                              |
//          |      mask                                   y
//     Attention 'a' (ai.fusec, packed)
//          |
//          y
//
// A RoPE decoder (Llama, Mistral, Qwen2, Phi-3, Gemma) rotates each token's Q and K heads right
// before its attention; merge_qkv writes that as one Rotary over the packed rows. As a node of its
// own the rotation reads and writes the whole packed tensor (12 MB a layer at Llama-3.2-1B's sizes,
// batch 16, seq 128, fp16), where the attention kernel can rotate each Q and K tile in shared
// memory as it loads it. On CUDA that is one candidate of the attention tuner's race, beside the
// rotary kernel followed by cuDNN's SDPA, which has won at every shape measured so far
// (docs/benchmarks.md). The tables must be the same for every head (broadcasting to [B, S, 1, D],
// as transformers' [1, S, 1, D] and [B, S, 1, D] do) and the rotation must cover exactly Q's and K's
// heads, each of the attention's head size, whole heads in the half-split form (a partial or
// interleaved rotation stays a Rotary of its own); the Rotary's output must have no other reader.
#include "passes/fuse_rotary_attention.h"

#include "ir/ops/attention.h"
#include "passes/pattern.h"
#include "passes/rewrite.h"

namespace fusec {

namespace {

const char* kPass = "fuse_rotary_attention";

/// Why table `t` does not broadcast to [B, S, 1, D] for every binding of the packed tensor's dims
/// ("" when it does).
std::string table_problem(const Value* t, const Shape& qkv, int64_t d) {
  const Shape* s = known_rank(t);
  if (!s) return "the rotary table '" + t->name + "' has no known shape";
  const Dim want[4] = {qkv[0], qkv[1], Dim(1), Dim(d)};
  if (s->empty() || s->size() > 4) return "the rotary table '" + t->name + "' is not of rank 1 to 4";
  for (size_t k = 0; k < s->size(); ++k) {
    const Dim& have = (*s)[s->size() - 1 - k];
    const bool one = have.is_static() && have.value == 1;
    if (k == 1 && !one) return "the rotary table '" + t->name + "' differs from head to head";
    if (k != 1 && !same_dim(have, want[3 - k]) && !(one && k != 0))
      return "the rotary table '" + t->name + "' " + shape_str(*s) + " does not broadcast to [B, S, 1, D]";
  }
  return "";
}

/// Why Rotary `rot` cannot go into packed Attention `attn` ("" when it can).
std::string problem(const Node* rot, const Node* attn) {
  const Shape* qkv = known_rank(rot->input(0));
  if (!qkv || qkv->size() != 3 || !(*qkv)[2].is_static()) return "the packed QKV's width is not known";
  const int64_t hq = attn->attr_int("q_num_heads", 0), hkv = attn->attr_int("kv_num_heads", 0);
  if (hq <= 0 || hkv <= 0 || (*qkv)[2].value % (hq + 2 * hkv) != 0) return "the attention's heads do not split QKV";
  const int64_t d = (*qkv)[2].value / (hq + 2 * hkv);
  if (rot->attr_int("head_size", 0) != d) return "the rotation's head size is not the attention's " + std::to_string(d);
  if (rot->attr_int("rotated", 0) != (hq + hkv) * d) return "the rotation does not cover exactly Q's and K's heads";
  // The attention kernels rotate whole heads in the half-split form.
  if (const int64_t rd = rot->attr_int("rotary_dim", 0); rd != 0 && rd != d)
    return "the rotation covers " + std::to_string(rd) + " of each head's " + std::to_string(d) + " values";
  if (rot->attr_int("interleaved", 0) != 0) return "the rotation pairs interleaved values";
  // The attention kernels rotate the rows they load; a norm would need each whole head first.
  if (rot->attr_int("norm", 0) != 0) return "the rotation normalizes each head first (QK-norm)";
  if (rot->input(0)->type.dtype != rot->input(1)->type.dtype || rot->input(0)->type.dtype != rot->input(2)->type.dtype)
    return "the rotary tables are not of QKV's type";
  for (size_t i : {size_t(1), size_t(2)})
    if (std::string why = table_problem(rot->input(i), *qkv, d); !why.empty()) return why;
  return "";
}

bool fuse_at(Rewriter& r, Node* attn) {
  if (attn->domain != "ai.fusec" || !is_packed_attention(*attn) || attn->input(4) || attn->input(5)) return false;
  Node* rot = attn->input(0) ? attn->input(0)->producer : nullptr;
  if (!rot || rot->op_type != "Rotary" || rot->domain != "ai.fusec") return false;
  const std::string what = describe(rot) + " -> " + describe(attn) + " not fused";
  if (!has_single_use(rot->outputs[0]))
    return r.near_miss(what, "the rotated QKV '" + rot->outputs[0]->name + "' is read elsewhere");
  if (std::string why = problem(rot, attn); !why.empty()) return r.near_miss(what, why);

  std::vector<Value*> ins = {rot->input(0), nullptr, nullptr, attn->input(3), rot->input(1), rot->input(2)};
  Value* y = attn->outputs[0];
  const std::string name = attn->name;
  auto attrs = attn->attrs;
  Replaced gone = r.remove({rot, attn});
  Node* fused = r.add("Attention", ins, {y}, name, "ai.fusec", gone.origins);
  fused->attrs = std::move(attrs);
  r.rewrote(gone.listed + " -> " + describe(fused) + " (Q's and K's heads rotated inside)", gone.names, name);
  return true;
}

}  // namespace

bool FuseRotaryAttentionPass::run(Graph& g, PassContext& ctx) {
  std::vector<Node*> attns;
  for (Node* n : g.node_list())
    if (n->op_type == "Attention") attns.push_back(n);
  Rewriter r(g, ctx, kPass);
  for (Node* n : attns)
    if (!r.removed(n)) fuse_at(r, n);
  if (r.changed()) g.remove_unused_values();
  return r.changed();
}

}  // namespace fusec
