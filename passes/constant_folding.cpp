// constant_folding: a node whose inputs are all known becomes an initializer.
//
//   initializer(s) -> Op -> y        =>   y := Op(initializers)  (evaluated by the CPU kernels)
//   x[static 16x3x224x224] -> Shape  =>   [16, 3, 224, 224]      (likewise Size)
//
// After --batch/--shape bind the inputs, whole shape subgraphs (Shape -> Gather -> Unsqueeze ->
// Concat -> Reshape, ConstantOfShape, Range...) fold away. With the batch left open, the static
// dims a Gather picks from a Shape fold, and a Reshape whose output dims inference proved takes a
// constant target (proved_reshape_target). Outputs over the size cap are left as
// they are (folding a large Expand/Tile/ConstantOfShape would only bloat the file), and said so.
#include "passes/constant_folding.h"

#include <algorithm>
#include <unordered_set>

#include "backend/cpu/kernel.h"
#include "ir/error.h"
#include "ir/subgraph.h"
#include "passes/pattern.h"

namespace fusec {

namespace {

const char* kPass = "constant_folding";

bool is_nondeterministic(const Node& n) {
  return n.op_type.rfind("Random", 0) == 0 || n.op_type == "Bernoulli" || n.op_type == "Multinomial";
}

/// A quantized weight's DequantizeLinear stays: folding it would store the weight as float (four
/// times the bytes) and drop the quantization its author chose, which other runtimes (TensorRT,
/// ONNX Runtime's QDQ fusions) build int8 kernels from. fusec's CUDA plan folds it at load.
bool keeps_quantized_weight(const Node& n) { return n.domain.empty() && n.op_type == "DequantizeLinear"; }

/// Gather(Shape(x), constant indices) or Slice(Shape(x), constant bounds) where every dim it picks
/// is static, though x's batch may be open: x.shape[-1] // 2 (a rotation's half), x.shape[1] (a
/// sequence length) or x.shape[-1:] (a head size, for a scale) folds, and what reads it (Div,
/// Unsqueeze, Cast, Sqrt, a Slice's bounds) folds after it. The op runs on the CPU kernels over
/// the dims' positions, so it picks exactly what it would pick from the dims themselves.
std::optional<Tensor> static_dims_picked(const Node* n, int64_t opset) {
  if (!(is_op(n, "Gather") && n->attr_int("axis", 0) == 0) && !is_op(n, "Slice")) return std::nullopt;
  const Node* sh = n->input(0) ? n->input(0)->producer : nullptr;
  if (!is_op(sh, "Shape") || !sh->input(0)->type.shape) return std::nullopt;
  std::vector<const Tensor*> inputs{nullptr};
  for (size_t i = 1; i < n->inputs.size(); ++i) {
    const Tensor* c = n->input(i) ? constant_of(n->input(i)) : nullptr;
    if (n->input(i) && !c) return std::nullopt;
    inputs.push_back(c);
  }
  const Shape& xs = *sh->input(0)->type.shape;
  const int64_t r = static_cast<int64_t>(xs.size());
  auto bound = [r](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + r : v, 0, r); };
  const int64_t start = bound(sh->attr_int("start", 0)), end = bound(sh->attr_int("end", r));
  std::vector<int64_t> positions;
  for (int64_t i = start; i < end; ++i) positions.push_back(i);
  const Tensor where = Tensor::from_int64(positions, {static_cast<int64_t>(positions.size())});
  inputs[0] = &where;
  std::vector<Tensor> picked_at;
  try {
    picked_at = cpu::evaluate_node(*n, opset, inputs);
  } catch (const Error&) {
    return std::nullopt;  // out-of-range indices: left for the run to report
  }
  std::vector<int64_t> picked;
  for (int64_t i : picked_at[0].to_int64_vector()) {
    const Dim& d = xs[static_cast<size_t>(i)];
    if (!d.is_static()) return std::nullopt;
    picked.push_back(d.value);
  }
  return Tensor::from_int64(picked, picked_at[0].dims());
}

/// Removes the node that produces v, then the producers of its inputs, while what each produces is
/// read by nothing: the shape arithmetic behind a value that folded goes in the same sweep, so
/// that the tensor it measured looks single-use to the fusions later in the sweep.
void remove_dead_producers(Graph& g, Value* v, std::unordered_set<const Node*>& removed) {
  std::vector<Value*> work{v};
  while (!work.empty()) {
    Value* x = work.back();
    work.pop_back();
    Node* p = x ? x->producer : nullptr;
    if (!p) continue;
    bool used = false;
    for (Value* o : p->outputs) used |= o && (!o->consumers.empty() || o->is_graph_output);
    if (used) continue;
    const std::vector<Value*> inputs = p->inputs;
    removed.insert(p);
    g.remove_node(p);
    work.insert(work.end(), inputs.begin(), inputs.end());
  }
}

/// The target of Reshape n as a constant, where shape inference proved every dim of its output
/// though the target is computed from a shape with an open batch (Shape -> Slice/Gather -> Concat:
/// GPT-2's Conv1D views, `x.size()[:-1] + (nf,)`), written by pattern.h's reshape_target. With the
/// target a constant the arithmetic behind it goes, and the view reads as it does at a bound batch.
std::optional<Tensor> proved_reshape_target(const Node* n) {
  if (!is_op(n, "Reshape") || !n->input(1) || n->input(1)->initializer || !n->input(0)) return std::nullopt;
  const Value* y = n->outputs[0];
  const auto& xs = n->input(0)->type.shape;
  if (!y || !xs || !y->type.shape || y->type.shape->empty()) return std::nullopt;
  for (const Dim& d : *xs)
    if (!d.is_static() && d.symbol.empty()) return std::nullopt;  // -1 would not be determined
  const auto target = reshape_target(*xs, *y->type.shape, n->attr_int("allowzero", 0) != 0);
  if (!target) return std::nullopt;
  return Tensor::from_int64(*target, {static_cast<int64_t>(target->size())});
}

}  // namespace

bool ConstantFoldingPass::run(Graph& g, PassContext& ctx) {
  bool changed = false;
  std::unordered_set<const Node*> removed;  // by remove_dead_producers: skipped (compared, never read)
  for (Node* n : g.node_list()) {
    if (removed.count(n)) continue;
    if (n->outputs.empty() || is_nondeterministic(*n) || keeps_quantized_weight(*n) ||
        !unsupported_reason(g, *n).empty())
      continue;
    if (is_op(n, "Constant")) continue;  // cleanup turns these into initializers
    if (auto t = proved_reshape_target(n)) {
      Value* computed = n->input(1);
      g.set_input(n, 1, g.add_initializer(n->name + "_shape", std::move(*t)));
      remove_dead_producers(g, computed, removed);
      ctx.rewrite(kPass, "the target of " + describe(n) + " is a constant (its output's dims are proved)", {n->name},
                  "");
      changed = true;
      continue;  // the node stays: a graph output it writes is still written
    }
    bool any_output_is_graph_output = false;
    for (Value* o : n->outputs) any_output_is_graph_output |= o && o->is_graph_output;
    if (any_output_is_graph_output) continue;

    if (auto t = static_dims_picked(n, g.opset(n->domain))) {
      Value* out = n->outputs[0];
      const std::string name = n->name, what = describe(n);
      Value* measured = n->input(0);
      g.remove_node(n);
      remove_dead_producers(g, measured, removed);  // the Shape, unless something else reads it
      out->type = {DType::Int64, shape_of(t->dims())};
      out->initializer = std::make_shared<const Tensor>(std::move(*t));
      ctx.rewrite(kPass, "folded " + what + " (static dims of a shape with an open batch)", {name}, "");
      changed = true;
      continue;
    }
    // If and Loop stay: a body's work is not bounded by its outputs' size.
    if (has_subgraph(*n)) continue;
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
