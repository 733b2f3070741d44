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

#include "passes/pattern.h"
#include "passes/rewrite.h"

namespace fusec {

namespace {

bool standard_or_fusec(const Node* n, const char* op) {
  return n && n->op_type == op && (n->domain.empty() || n->domain == "ai.fusec");
}

}  // namespace

bool FuseLayerNormGeluPass::run(Graph& g, PassContext& ctx) {
  Rewriter r(g, ctx, name());
  for (Node* gelu : g.node_list()) {
    if (r.removed(gelu) || !standard_or_fusec(gelu, "Gelu") || !gelu->input(0) || gelu->outputs.empty() ||
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
    if (why.empty() && ctx.opts.portable)
      why = "LayerNormGelu is not standard ONNX; --portable writes standard ops only";
    if (!why.empty()) {
      r.near_miss(what, why);
      continue;
    }

    std::string node_name = ln->name;
    std::vector<Value*> ins = {ln->input(0), ln->input(1), ln->input(2)};
    if (!ins.back()) ins.pop_back();
    Value* y = gelu->outputs[0];
    int64_t axis = ln->attr_int("axis", -1);
    float eps = ln->attr_float("epsilon", 1e-5f);
    std::string approximate = gelu->attr_string("approximate", "none");
    Replaced gone = r.remove({ln, gelu});
    Node* fused = r.add("LayerNormGelu", ins, {y}, node_name, "ai.fusec", gone.origins);
    fused->set_attr("axis", axis);
    fused->set_attr("epsilon", eps);
    fused->set_attr("approximate", approximate);
    g.remove_unused_values();
    r.rewrote(gone.listed + " -> ai.fusec." + describe(fused), gone.names, node_name);
  }
  return r.changed();
}

}  // namespace fusec
