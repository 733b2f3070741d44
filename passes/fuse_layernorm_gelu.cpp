// fuse_layernorm_gelu: a LayerNormalization whose only reader is a Gelu joins it.
//
//     x ── LayerNormalization(·, γ, β; axis, ε) ──▶ n ── Gelu(approximate) ──▶ y
//
//     y = Gelu(LayerNormalization(x, γ, β))   =>   ai.fusec LayerNormGelu(x, γ, β; axis, ε, approximate) ──▶ y
//
// Either op may be standard or ai.fusec (recognize_layernorm and recognize_gelu write whichever
// the model's opset allows). Guards: n is read only by the Gelu, the LayerNormalization's
// Mean/InvStdDev outputs are unused and its statistics float32 (stash_type 1), which is what
// LayerNormGelu computes. ai.fusec only: under --portable, a near-miss.
#include "passes/fuse_layernorm_gelu.h"

#include <unordered_set>

#include "passes/pattern.h"

namespace fusec {

namespace {

bool standard_or_fusec(const Node* n, const char* op) {
  return n && n->op_type == op && (n->domain.empty() || n->domain == "ai.fusec");
}

}  // namespace

bool FuseLayerNormGeluPass::run(Graph& g, PassContext& ctx) {
  bool changed = false;
  std::unordered_set<const Node*> gone;
  for (Node* gelu : g.node_list()) {
    if (gone.count(gelu) || !standard_or_fusec(gelu, "Gelu") || !gelu->input(0) || gelu->outputs.empty() ||
        !gelu->outputs[0])
      continue;
    Value* n = gelu->input(0);
    Node* ln = n->producer;
    if (!standard_or_fusec(ln, "LayerNormalization") || ln->outputs[0] != n) continue;
    std::string what = describe(ln) + " -> " + describe(gelu) + " not fused";
    std::string why;
    if (!has_single_use(n))
      why = "the LayerNormalization's output '" + n->name + "' has " + std::to_string(use_count(n)) +
            (n->is_graph_output ? " uses (it is a graph output)" : " consumers");
    for (size_t i = 1; i < ln->outputs.size() && why.empty(); ++i)
      if (ln->outputs[i] && use_count(ln->outputs[i]) > 0)
        why = "the LayerNormalization's " + std::string(i == 1 ? "Mean" : "InvStdDev") + " output is read";
    if (why.empty() && ln->attr_int("stash_type", 1) != 1)
      why = "the LayerNormalization has stash_type " + std::to_string(ln->attr_int("stash_type", 1)) + ", not 1";
    if (why.empty() && ctx.opts.portable) why = "LayerNormGelu is not standard ONNX; --portable writes standard ops only";
    if (!why.empty()) {
      ctx.near_miss(name(), what, why);
      continue;
    }

    std::vector<Node*> replaced = {ln, gelu};
    std::string node_name = ln->name, listed = describe(ln) + " + " + describe(gelu);
    std::vector<std::string> names = {ln->name, gelu->name}, from = fused_origins(replaced);
    std::vector<Value*> ins = {ln->input(0), ln->input(1), ln->input(2)};
    if (!ins.back()) ins.pop_back();
    Value* y = gelu->outputs[0];
    int64_t axis = ln->attr_int("axis", -1);
    float eps = ln->attr_float("epsilon", 1e-5f);
    std::string approximate = gelu->attr_string("approximate", "none");
    for (Node* r : replaced) {
      gone.insert(r);
      g.remove_node(r);
    }
    Node* fused = g.add_node("LayerNormGelu", ins, {y}, node_name, "ai.fusec");
    fused->set_attr("axis", axis);
    fused->set_attr("epsilon", eps);
    fused->set_attr("approximate", approximate);
    fused->fused_from = std::move(from);
    use_fusec_domain(g);
    g.remove_unused_values();
    ctx.rewrite(name(), listed + " -> ai.fusec." + describe(fused), names, node_name);
    changed = true;
  }
  return changed;
}

}  // namespace fusec
