// constant_folding: a node whose inputs are all known becomes an initializer.
//
//   initializer(s) -> Op -> y        =>   y := Op(initializers)  (evaluated by the CPU kernels)
//   x[static 16x3x224x224] -> Shape  =>   [16, 3, 224, 224]      (likewise Size)
//
// After --batch/--shape bind the inputs, whole shape subgraphs (Shape -> Gather -> Unsqueeze ->
// Concat -> Reshape, ConstantOfShape, Range...) fold away. Outputs over the size cap are left as
// they are (folding a large Expand/Tile/ConstantOfShape would only bloat the file), and said so.
#include "passes/constant_folding.h"

#include "backend/cpu/kernel.h"
#include "ir/error.h"
#include "passes/pattern.h"

namespace fusec {

namespace {

const char* kPass = "constant_folding";

bool is_nondeterministic(const Node& n) {
  return n.op_type.rfind("Random", 0) == 0 || n.op_type == "Bernoulli" || n.op_type == "Multinomial";
}

}  // namespace

bool ConstantFoldingPass::run(Graph& g, PassContext& ctx) {
  bool changed = false;
  for (Node* n : g.node_list()) {
    if (n->outputs.empty() || is_nondeterministic(*n) || !unsupported_reason(g, *n).empty()) continue;
    if (is_op(n, "Constant")) continue;  // cleanup turns these into initializers
    bool any_output_is_graph_output = false;
    for (Value* o : n->outputs) any_output_is_graph_output |= o && o->is_graph_output;
    if (any_output_is_graph_output) continue;

    std::vector<const Tensor*> inputs;
    Tensor shape_only;
    bool foldable = true;
    if ((is_op(n, "Shape") || is_op(n, "Size")) && n->inputs[0]->type.shape && is_static(*n->inputs[0]->type.shape)) {
      // Only the dims are read: a data-less view stands in for the input.
      shape_only = Tensor::view(n->inputs[0]->type.dtype, static_dims(*n->inputs[0]->type.shape), nullptr, nullptr);
      inputs.push_back(&shape_only);
    } else {
      for (Value* v : n->inputs) {
        if (v && !v->initializer) {
          foldable = false;
          break;
        }
        inputs.push_back(v ? v->initializer.get() : nullptr);
      }
    }
    if (!foldable) continue;
    // The cap applies to what folding would write: check the inferred output sizes first.
    bool too_big = false;
    for (Value* o : n->outputs) {
      if (!o || !o->type.shape || !is_static(*o->type.shape)) continue;
      double bytes = static_cast<double>(checked_numel(static_dims(*o->type.shape))) * dtype_size(o->type.dtype);
      if (bytes > static_cast<double>(ctx.opts.fold_size_cap)) {
        ctx.near_miss(kPass, describe(n) + " not folded",
                      "its output '" + o->name + "' would be " + std::to_string(static_cast<int64_t>(bytes)) +
                          " bytes, over the fold cap of " + std::to_string(ctx.opts.fold_size_cap));
        too_big = true;
      }
    }
    if (too_big) continue;
    std::vector<Tensor> outs;
    try {
      outs = cpu::evaluate_node(*n, g.opset(n->domain), inputs);
    } catch (const Error& e) {
      ctx.near_miss(kPass, describe(n) + " not folded", std::string("evaluating it failed: ") + e.what());
      continue;
    }
    std::vector<Value*> produced = n->outputs;
    std::string name = n->name, what = describe(n);
    g.remove_node(n);
    for (size_t i = 0; i < produced.size(); ++i) {
      if (!produced[i]) continue;
      produced[i]->type = {outs[i].dtype(), shape_of(outs[i].dims())};
      produced[i]->initializer = std::make_shared<const Tensor>(std::move(outs[i]));
    }
    ctx.rewrite(kPass, "folded " + what, {name}, "");
    changed = true;
  }
  if (changed) g.remove_unused_values();
  return changed;
}

}  // namespace fusec
