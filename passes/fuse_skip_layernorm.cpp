// fuse_skip_layernorm: the residual Add in front of a LayerNormalization (or of an RMSNorm,
// ai.fusec SimplifiedLayerNorm) joins it.
//
//     a ─┐
//        ├─ Add ──▶ s ── LayerNormalization(·, γ, β; axis, ε) ──▶ y
//     b ─┘          └──▶ (other readers of s, e.g. the next residual)
//
//     s = a + b;  y = LayerNormalization(s, γ, β)   =>   ai.fusec SkipLayerNorm(a, b, γ, β) ──▶ y [, s]
//     s = a + b;  y = SimplifiedLayerNorm(s, γ)     =>   ai.fusec SkipSimplifiedLayerNorm(a, b, γ) ──▶ y [, s]
//
// The operand with the sum's shape is X, the other the skip (it must broadcast to X without
// changing X's shape). S, the second output, is written (as the same value s) only when s is read
// after the LayerNorm. An Add of a 1-D constant to a MatMul/Gemm output is that MatMul's bias, not a
// residual: it is left for the MatMul bias fusion (and for fuse_layernorm_gelu after it). The
// LayerNormalization's Mean/InvStdDev outputs must be unused and its statistics float32
// (stash_type 1), as SkipLayerNorm has neither. ai.fusec only: under --portable, a near-miss.
#include "passes/fuse_skip_layernorm.h"

#include "passes/pattern.h"
#include "passes/rewrite.h"

namespace fusec {

namespace {

bool is_layernorm(const Node* n) {
  return n && n->op_type == "LayerNormalization" && (n->domain.empty() || n->domain == "ai.fusec");
}
bool is_rmsnorm(const Node* n) { return n && n->op_type == "SimplifiedLayerNorm" && n->domain == "ai.fusec"; }

/// Why `add` (an operand constant, the other from a MatMul/Gemm) is a bias add, or "".
std::string bias_of_matmul(const Node* add) {
  for (int i = 0; i < 2; ++i) {
    const Tensor* c = constant_of(add->inputs[i]);
    Node* p = add->inputs[1 - i]->producer;
    if (c && c->rank() == 1 && p && (p->op_type == "MatMul" || p->op_type == "Gemm" || p->op_type == "FusedMatMul"))
      return describe(add) + " adds the constant bias '" + add->inputs[i]->name + "' to " + describe(p) +
             "; that is the MatMul's bias (for the MatMul bias fusion), not a residual";
  }
  return "";
}

}  // namespace

bool FuseSkipLayerNormPass::run(Graph& g, PassContext& ctx) {
  Rewriter r(g, ctx, name());
  for (Node* ln : g.node_list()) {
    const bool rms = is_rmsnorm(ln);
    if (r.removed(ln) || !(rms || is_layernorm(ln)) || !ln->input(0) || ln->outputs.empty() || !ln->outputs[0])
      continue;
    const char* fused_op = rms ? "SkipSimplifiedLayerNorm" : "SkipLayerNorm";
    Value* s = ln->input(0);
    Node* add = s->producer;
    if (!is_op(add, "Add") || add->inputs.size() != 2 || !add->inputs[0] || !add->inputs[1]) continue;
    std::string what = describe(add) + " -> " + describe(ln) + " not fused";
    std::string why;
    for (size_t i = 1; i < ln->outputs.size(); ++i)
      if (ln->outputs[i] && use_count(ln->outputs[i]) > 0)
        why = "the LayerNormalization's " + std::string(i == 1 ? "Mean" : "InvStdDev") + " output is read";
    if (why.empty() && ln->attr_int("stash_type", 1) != 1)
      why = "the LayerNormalization has stash_type " + std::to_string(ln->attr_int("stash_type", 1)) + ", not 1";
    if (why.empty()) why = bias_of_matmul(add);
    if (why.empty() && (s == ln->input(1) || (!rms && s == ln->input(2)))) why = "the sum is also the scale or bias";
    Value* x = nullptr;
    Value* skip = nullptr;
    if (why.empty()) {
      const auto& ss = s->type.shape;
      for (int i = 0; i < 2 && !x; ++i) {
        const auto& as = add->inputs[i]->type.shape;
        if (ss && as && *as == *ss) {
          x = add->inputs[i];
          skip = add->inputs[1 - i];
        }
      }
      if (!x)
        why = "neither operand has the sum's shape " + (ss ? shape_str(*ss) : std::string("?")) +
              ", so the skip would broadcast X";
    }
    if (why.empty() && !is_float(s->type.dtype)) why = std::string("the sum is ") + dtype_name(s->type.dtype);
    if (why.empty() && ctx.opts.portable)
      why = std::string(fused_op) + " is not standard ONNX; --portable writes standard ops only";
    if (!why.empty()) {
      r.near_miss(what, why);
      continue;
    }

    std::string node_name = add->name;
    std::vector<Value*> ins = {x, skip, ln->input(1)};
    if (!rms && ln->input(2)) ins.push_back(ln->input(2));
    Value* y = ln->outputs[0];
    int64_t axis = ln->attr_int("axis", -1);
    float eps = ln->attr_float("epsilon", 1e-5f);
    Replaced gone = r.remove({add, ln});
    // s keeps its name when it is read later: the fused node writes it as S.
    std::vector<Value*> outs = {y};
    if (use_count(s) > 0) outs.push_back(s);
    Node* fused = r.add(fused_op, ins, outs, node_name, "ai.fusec", gone.origins);
    fused->set_attr("axis", axis);
    fused->set_attr("epsilon", eps);
    g.remove_unused_values();
    r.rewrote(gone.listed + " -> ai.fusec." + describe(fused) + (outs.size() > 1 ? " (also writes the sum)" : ""),
              gone.names, node_name);
  }
  return r.changed();
}

}  // namespace fusec
