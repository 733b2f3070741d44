// channels_last_tokens: a token sequence [N, H·W, C] turned into an image for a conv, and a conv's
// image turned back into tokens, as hybrid vision transformers write them (SegFormer's Mix-FFN
// and its overlapping patch embeddings, PVT v2, any depthwise conv between two Linears):
//
//   tokens [N,S,C] ─ Transpose(0,2,1) ─ Reshape [N,C,H,W] ─ Conv ─ Reshape [N,C',S'] ─ Transpose(0,2,1)
//
// become the same values through the 4-D channels-last permutations:
//
//   tokens ─ Reshape [N,H,W,C] ─ Transpose(0,3,1,2) ─ Conv ─ Transpose(0,2,3,1) ─ Reshape [N,S',C']
//
// On a CPU both forms copy the same bytes. A CUDA plan that runs the conv channels-last
// (backend/cuda/executor/layout_rule.h) stores Transpose(0,3,1,2) of a plain [N,H,W,C] and
// Transpose(0,2,3,1) of a channels-last activation as views of the bytes they read: the conv then
// reads the tokens in place and writes the next ones, where the 3-D form cost a transposing copy
// on each side and cuDNN an NCHW conv (at SegFormer's depthwise 3x3s, cuDNN's grouped direct
// kernel; fusec's channels-last depthwise kernels take them instead).
//
// Each side rewrites on its own, only next to a Conv (or a FusedConv), and only where the 3-D
// intermediate has no other reader; the open batch stays open (Reshape's 0 copies it).
#include "passes/channels_last_tokens.h"

#include <optional>
#include <vector>

#include "passes/pattern.h"
#include "passes/rewrite.h"

namespace fusec {

namespace {

const char* kPass = "channels_last_tokens";

bool is_conv(const Node* n) {
  return n && ((n->op_type == "Conv" && n->domain.empty()) || (n->op_type == "FusedConv" && n->domain == "ai.fusec"));
}

bool swaps_last_two(const Node* t) {
  return t && is_op(t, "Transpose") && t->attr_ints("perm") == std::vector<int64_t>{0, 2, 1};
}

// [N, C, H, W] of a 4-D value whose channel and spatial dims are static (N may be open).
const Shape* image_shape(const Value* v) {
  const Shape* s = known_rank(v);
  if (!s || s->size() != 4) return nullptr;
  for (size_t i = 1; i < 4; ++i)
    if (!(*s)[i].is_static()) return nullptr;
  return s;
}

Value* target(Graph& g, const std::string& stem, const Shape& in, const Shape& out) {
  const std::optional<std::vector<int64_t>> t = reshape_target(in, out);
  if (!t) return nullptr;
  return int64_initializer(g, stem, *t);
}

// tokens ─ Transpose(0,2,1) ─ Reshape [N,C,H,W] ─ conv  =>  tokens ─ Reshape [N,H,W,C] ─ Transpose(0,3,1,2)
bool tokens_into_conv(Rewriter& r, Node* conv) {
  Value* image = conv->input(0);
  Node* reshape = producer_of(image, "Reshape");
  if (!reshape || !reshape->input(0)) return false;
  Node* swap = reshape->input(0)->producer;
  if (!swaps_last_two(swap) || !has_single_use(reshape->input(0))) return false;
  Value* tokens = swap->input(0);
  const Shape* img = image_shape(image);
  const Shape* tok = known_rank(tokens);
  if (!img || !tok || tok->size() != 3 || !same_dim((*tok)[0], (*img)[0]) || !(*tok)[1].is_static() ||
      !(*tok)[2].is_static() || (*tok)[2].value != (*img)[1].value ||
      (*tok)[1].value != (*img)[2].value * (*img)[3].value)
    return false;
  Graph& g = r.graph();
  const Shape hwc = {(*img)[0], (*img)[2], (*img)[3], (*img)[1]};
  Value* shape = target(g, reshape->name + "_hwc", *tok, hwc);
  if (!shape) return false;
  const std::string what = describe(swap) + " + " + describe(reshape);
  // Each new node takes the name and the user's nodes of the one it stands in for.
  std::vector<std::string> swap_from = fused_origins({swap}), reshape_from = fused_origins({reshape});
  Replaced gone = r.remove({swap, reshape});
  Value* plain = g.add_value(image->name + "_hwc");
  plain->type = TypeInfo{image->type.dtype, hwc};
  Node* rs = r.add("Reshape", {tokens, shape}, {plain}, gone.names[1], "", reshape_from);
  Node* tr = r.add("Transpose", {plain}, {image}, gone.names[0], "", swap_from);
  tr->set_attr("perm", std::vector<int64_t>{0, 3, 1, 2});
  r.rewrote(what + " -> " + describe(rs) + " + " + describe(tr) + " (tokens into " + describe(conv) + ")", gone.names,
            tr->name);
  return true;
}

// conv ─ Reshape [N,C,S] ─ Transpose(0,2,1)  =>  conv ─ Transpose(0,2,3,1) ─ Reshape [N,S,C]
bool conv_into_tokens(Rewriter& r, Node* conv) {
  Value* image = conv->outputs.empty() ? nullptr : conv->outputs[0];
  const Shape* img = image_shape(image);
  if (!img) return false;
  bool changed = false;
  for (Node* reshape : std::vector<Node*>(image->consumers)) {
    if (r.removed(reshape) || !is_op(reshape, "Reshape") || reshape->input(0) != image || !reshape->outputs[0])
      continue;
    Value* flat = reshape->outputs[0];
    Node* swap = sole_consumer(flat);
    if (!swaps_last_two(swap) || !swap->outputs[0]) continue;
    const Shape* f = known_rank(flat);
    if (!f || f->size() != 3 || !same_dim((*f)[0], (*img)[0]) || !(*f)[1].is_static() || !(*f)[2].is_static() ||
        (*f)[1].value != (*img)[1].value || (*f)[2].value != (*img)[2].value * (*img)[3].value)
      continue;
    Value* tokens = swap->outputs[0];
    const Shape* tok = known_rank(tokens);
    Graph& g = r.graph();
    const Shape hwc = {(*img)[0], (*img)[2], (*img)[3], (*img)[1]};
    Value* shape = tok ? target(g, reshape->name + "_tokens", hwc, *tok) : nullptr;
    if (!shape) continue;
    const std::string what = describe(reshape) + " + " + describe(swap);
    std::vector<std::string> swap_from = fused_origins({swap}), reshape_from = fused_origins({reshape});
    Replaced gone = r.remove({reshape, swap});
    Value* plain = g.add_value(image->name + "_hwc");
    plain->type = TypeInfo{image->type.dtype, hwc};
    Node* tr = r.add("Transpose", {image}, {plain}, gone.names[1], "", swap_from);
    tr->set_attr("perm", std::vector<int64_t>{0, 2, 3, 1});
    Node* rs = r.add("Reshape", {plain, shape}, {tokens}, gone.names[0], "", reshape_from);
    r.rewrote(what + " -> " + describe(tr) + " + " + describe(rs) + " (tokens from " + describe(conv) + ")", gone.names,
              rs->name);
    changed = true;
  }
  return changed;
}

}  // namespace

bool ChannelsLastTokensPass::run(Graph& g, PassContext& ctx) {
  Rewriter r(g, ctx, kPass);
  for (Node* n : g.node_list()) {
    if (r.removed(n) || !is_conv(n)) continue;
    tokens_into_conv(r, n);
    conv_into_tokens(r, n);
  }
  if (r.changed()) {
    g.topo_sort();
    g.remove_unused_values();
  }
  return r.changed();
}

}  // namespace fusec
