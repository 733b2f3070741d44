// fuse_squeeze_excite: a squeeze-and-excite block -> one ai.fusec SqueezeExcite node.
//
//        X ─────────────────────────────┐              X  W1  W2  [B1]  [B2]
//        |                              |               \  |   |   |    /
//   GlobalAveragePool 'p'               |        =>    SqueezeExcite 'e1' (activation = act,
//   (or ReduceMean over every           |                   |             gate = gate)
//    spatial axis, keepdims)            |                   Y
//        |                              |
//   Conv/FusedConv 'e1' (1x1, act)      |     Y = X · gate(W2 ⋆ act(W1 ⋆ mean(X) + B1) + B2)
//        |                              |
//   Conv/FusedConv 'e2' (1x1, gate)     |     mean over X's spatial dims, ⋆ a 1x1 conv of the
//        |                              |     pooled [N, C, 1...]: a [N, C] x [C, Cr] product
//       Mul 'm' <───────────────────────┘
//        |
//        Y
//
// The layers are the FusedConvs fuse_conv_activation made (act and gate their activations: ReLU
// or SiLU, then Sigmoid or HardSigmoid in torchvision's MobileNetV3, EfficientNet and RegNetY), or
// plain Convs (no activation): 1x1 weights, one group, no padding, stride 1, no residual. The
// pooled value, the hidden layer and the gate are each read only inside the block; X may have
// other readers. Under --portable nothing changes and the block is a near-miss.
//
// Why: unfused, the block is four launches (the pool, two layers of a few thousand multiply-adds,
// the broadcast Mul), three of them tiny and latency-bound, once per block. As one node a backend
// runs the pool and both layers in one kernel and the scaling in a second (the CUDA backend:
// backend/cuda/ops/pool/squeeze_excite.cuh).
#include "passes/fuse_squeeze_excite.h"

#include "passes/pattern.h"
#include "passes/rewrite.h"

namespace fusec {

namespace {

const char* kPass = "fuse_squeeze_excite";

/// One of the block's two layers: a 1x1 conv of the pooled map and its activation.
struct Layer {
  Node* node = nullptr;
  Value* x = nullptr;
  Value* w = nullptr;
  Value* bias = nullptr;
  std::string act;
  std::vector<float> params;
};

std::optional<Layer> layer_of(const Value* v) {
  Node* n = v ? v->producer : nullptr;
  if (!n || n->outputs.empty() || n->outputs[0] != v) return std::nullopt;
  const bool conv = is_op(n, "Conv"), fused = n->op_type == "FusedConv" && n->domain == "ai.fusec";
  if (!conv && !fused) return std::nullopt;
  if (fused && n->inputs.size() > 3 && n->input(3)) return std::nullopt;  // a residual
  Layer l;
  l.node = n;
  l.x = n->input(0);
  l.w = n->inputs.size() > 1 ? n->input(1) : nullptr;
  l.bias = n->inputs.size() > 2 ? n->input(2) : nullptr;
  if (fused) {
    l.act = n->attr_string("activation", "");
    l.params = n->attr_floats("activation_params", {});
  }
  if (!l.x || !l.w) return std::nullopt;
  return l;
}

/// Why `l` is not a 1x1 conv of one group with no padding and stride 1 over `in` channels, or "".
std::string layer_problem(const Layer& l, int64_t rank, int64_t in) {
  const Tensor* w = constant_of(l.w);
  if (!w) return describe(l.node) + "'s weight is not a constant";
  if (l.node->attr_int("group", 1) != 1) return describe(l.node) + " is grouped";
  if (static_cast<int64_t>(w->rank()) != rank || w->dim(1) != in)
    return describe(l.node) + "'s weight " + dims_str(w->dims()) + " does not take " + std::to_string(in) +
           " channels at rank " + std::to_string(rank);
  for (size_t d = 2; d < w->rank(); ++d)
    if (w->dim(d) != 1) return describe(l.node) + " is not a 1x1 conv (weight " + dims_str(w->dims()) + ")";
  for (int64_t p : l.node->attr_ints("pads", {}))
    if (p != 0) return describe(l.node) + " pads its input";
  for (int64_t s : l.node->attr_ints("strides", {}))
    if (s != 1) return describe(l.node) + " has a stride";
  if (l.bias) {
    const Tensor* b = constant_of(l.bias);
    if (!b || b->rank() != 1 || b->dim(0) != w->dim(0)) return describe(l.node) + "'s bias is not a 1-D constant";
  }
  return "";
}

/// X when `p` is the mean of X over every spatial axis with the axes kept: GlobalAveragePool, or
/// ReduceMean whose axes (attribute, or input from opset 18) are 2..rank-1.
Value* spatial_mean_source(const Value* p) {
  Node* n = p ? p->producer : nullptr;
  if (!n) return nullptr;
  if (is_op(n, "GlobalAveragePool")) return n->input(0);
  if (!is_op(n, "ReduceMean") || n->attr_int("keepdims", 1) != 1) return nullptr;
  const Shape* xs = known_rank(n->input(0));
  if (!xs || xs->size() < 3) return nullptr;
  const int64_t rank = static_cast<int64_t>(xs->size());
  std::string why;
  const std::optional<std::vector<int64_t>> axes = reduced_axes(n, rank, &why);
  if (!axes || static_cast<int64_t>(axes->size()) != rank - 2 || axes->front() != 2) return nullptr;
  return n->input(0);
}

bool fuse_at(Rewriter& r, Node* mul) {
  Value* y = mul->outputs.empty() ? nullptr : mul->outputs[0];
  if (!y || !mul->input(0) || !mul->input(1) || mul->input(0) == mul->input(1)) return false;
  for (int side = 0; side < 2; ++side) {
    Value* x = mul->input(side);
    std::optional<Layer> gate = layer_of(mul->input(1 - side));
    if (!gate) continue;
    std::optional<Layer> squeeze = layer_of(gate->x);
    if (!squeeze || spatial_mean_source(squeeze->x) != x) continue;
    Node* pool = squeeze->x->producer;
    const std::string what = describe(pool) + " -> " + describe(squeeze->node) + " -> " + describe(gate->node) +
                             " -> " + describe(mul) + " not fused";
    for (const Value* v : {squeeze->x, gate->x, mul->input(1 - side)})
      if (!has_single_use(v) || v->is_graph_output)
        return r.near_miss(what, "'" + v->name + "' is read outside the block");
    const Shape* xs = known_rank(x);
    if (!xs || xs->size() < 3 || !(*xs)[1].is_static())
      return r.near_miss(what, "X's rank and channel count are not known");
    const int64_t rank = static_cast<int64_t>(xs->size()), c = (*xs)[1].value;
    if (!same_shape_and_type(x, y)) return r.near_miss(what, "the Mul broadcasts X itself");
    const DType t = x->type.dtype;
    if (t != DType::Float32 && t != DType::Float16 && t != DType::BFloat16)
      return r.near_miss(what,
                         std::string("its type is ") + dtype_name(t) + " (fused here: float32, float16, bfloat16)");
    if (std::string why = layer_problem(*squeeze, rank, c); !why.empty()) return r.near_miss(what, why);
    const int64_t cr = constant_of(squeeze->w)->dim(0);
    if (std::string why = layer_problem(*gate, rank, cr); !why.empty()) return r.near_miss(what, why);
    if (constant_of(gate->w)->dim(0) != c)
      return r.near_miss(what, describe(gate->node) + " does not give back X's " + std::to_string(c) + " channels");
    for (const Value* w : {squeeze->w, gate->w, squeeze->bias, gate->bias})
      if (w && constant_of(w)->dtype() != t) return r.near_miss(what, "a weight's type differs from X's");
    if (r.opts().portable)
      return r.near_miss(what, "--portable writes standard ops only: the block needs ai.fusec SqueezeExcite");

    const std::string name = squeeze->node->name;
    std::vector<Value*> ins = {x, squeeze->w, gate->w};
    if (squeeze->bias || gate->bias) {
      ins.push_back(squeeze->bias);
      ins.push_back(gate->bias);
    }
    Replaced gone = r.remove({pool, squeeze->node, gate->node, mul});
    Node* fused = r.add("SqueezeExcite", ins, {y}, name, "ai.fusec", gone.origins);
    fused->set_attr("activation", squeeze->act);
    if (!squeeze->params.empty()) fused->set_attr("activation_params", squeeze->params);
    fused->set_attr("gate", gate->act);
    if (!gate->params.empty()) fused->set_attr("gate_params", gate->params);
    r.rewrote(gone.listed + " -> " + describe(fused) + " (activation " +
                  (squeeze->act.empty() ? "none" : squeeze->act) + ", gate " +
                  (gate->act.empty() ? "none" : gate->act) + ")",
              gone.names, name);
    return true;
  }
  return false;
}

}  // namespace

bool FuseSqueezeExcitePass::run(Graph& g, PassContext& ctx) {
  std::vector<Node*> muls;
  for (Node* n : g.node_list())
    if (is_op(n, "Mul")) muls.push_back(n);
  Rewriter r(g, ctx, kPass);
  for (Node* n : muls)
    if (!r.removed(n)) fuse_at(r, n);
  if (r.changed()) g.remove_unused_values();
  return r.changed();
}

}  // namespace fusec
