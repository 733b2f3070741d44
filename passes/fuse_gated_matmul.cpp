// fuse_gated_matmul: the gated MLP's two projections of one input and their gating -> one node.
//
//          X                                           X   Wg   Wv  [bg]  [bv]
//        /   \                                          \   |    |   |    /
//   MatMul 'g'  MatMul 'u'                        =>    GatedMatMul 'g'  (ai.fusec, activation = act)
//   [+ bg]      [+ bv]                                        |
//      |          |                                           y
//     act         |
//       \        /
//        Mul 'm'           y = act(X·Wg + bg) · (X·Wv + bv)
//          |
//          y
//
// act is SiLU written x · Sigmoid(x) (Llama, Mistral, Qwen2: SwiGLU), the activation that
// fuse_matmul_bias took into the gate's FusedMatMul (Gemma's tanh-GELU and T5 v1.1's GELU: GeGLU;
// Sigmoid: GLU), or an activation node on a bare projection (on one half of a split product,
// where fuse_matmul_bias cannot take it: ModernBERT's GeGLU). A projection is MatMul(X, W) or
// ai.fusec FusedMatMul(X, W [, b]) with no residual, W a 2-D constant; both read the same X, their
// weights have one shape and type, and each intermediate is read only inside the pattern. Or both
// are the halves of one such product of a [K, 2N] weight along its last axis, cut by one Split
// (Phi-3's gate_up_proj, the dynamo exports' chunk) or by two Slices (the legacy exports' chunk):
// GatedMatMul then takes the weight's halves, as two new initializers. Otherwise the weights stay
// the model's tensors: GatedMatMul takes both, and a backend packs them as its kernels want (the
// CUDA backend into one product whose epilogue does the gating: backend/cuda/ops/gemm/gated_layout.h).
//
// Why: the gating is an element-wise pass over both products (on Llama-3.2-1B's MLP, 96 MB read
// and written per layer at batch 16, seq 128, fp16) that a GEMM with the gating inside never
// writes or reads back.
#include "passes/fuse_gated_matmul.h"

#include "ir/derived_weight.h"
#include "passes/activation_op.h"
#include "passes/pattern.h"
#include "passes/rewrite.h"

namespace fusec {

namespace {

const char* kPass = "fuse_gated_matmul";

/// One projection: MatMul or bare/activated FusedMatMul(X, W [, b]), no residual; or one half of
/// such a product of both (Phi-3's gate_up_proj): `split` is then the node that cuts the product's
/// last axis into two equal halves (a Split, or the Slice of this half), and `half` which of them
/// (W [K, 2N] holds the gate's and the value's columns).
struct Projection {
  Node* node = nullptr;
  Value* x = nullptr;
  Value* w = nullptr;
  Value* bias = nullptr;
  std::string act;  // the FusedMatMul's activation ("" for none)
  std::vector<float> act_params;
  Node* split = nullptr;
  int half = -1;
  /// This projection's product value: the node's output, or the split's output for its half.
  const Value* value() const {
    if (!split) return node->outputs[0];
    return split->outputs[is_op(split, "Split") ? half : 0];
  }
};

std::optional<Projection> product_of(const Value* v) {
  Node* n = v ? v->producer : nullptr;
  if (!n || n->outputs.empty() || n->outputs[0] != v) return std::nullopt;
  Projection p;
  p.node = n;
  if (is_op(n, "MatMul")) {
    p.x = n->input(0);
    p.w = n->input(1);
  } else if (n->op_type == "FusedMatMul" && n->domain == "ai.fusec") {
    if (n->inputs.size() > 3 && n->input(3)) return std::nullopt;  // a residual
    p.x = n->input(0);
    p.w = n->input(1);
    p.bias = n->inputs.size() > 2 ? n->input(2) : nullptr;
    p.act = n->attr_string("activation", "");
    p.act_params = n->attr_floats("activation_params", {});
  } else {
    return std::nullopt;
  }
  if (!p.x || !p.w) return std::nullopt;
  return p;
}

/// Whether `sp` splits its input's last axis into two equal halves.
bool halves_last_axis(const Node* sp) {
  const Shape* in = known_rank(sp->input(0));
  if (!in || in->empty() || sp->outputs.size() != 2) return false;
  const int64_t rank = static_cast<int64_t>(in->size());
  int64_t axis = sp->attr_int("axis", 0);
  if (axis < 0) axis += rank;
  const std::optional<std::vector<int64_t>> sizes = split_sizes(sp);
  return axis == rank - 1 && sizes && (sizes->empty() || (sizes->size() == 2 && (*sizes)[0] == (*sizes)[1]));
}

/// Which half of its input's last axis the Slice `sl` takes (its steps 1): 0 for [0, N/2), 1 for
/// [N/2, N), else -1.
int half_sliced(const Node* sl) {
  const std::optional<AxisSlice> cut = axis_slice(sl);
  const Shape* in = known_rank(sl->input(0));
  if (!cut || !in || cut->axis != static_cast<int64_t>(in->size()) - 1) return -1;
  const int64_t n = in->back().value;  // static: axis_slice checked it
  if (n % 2) return -1;
  return cut->begin == 0 && cut->end == n / 2 ? 0 : cut->begin == n / 2 && cut->end == n ? 1 : -1;
}

std::optional<Projection> projection_of(const Value* v) {
  Node* sp = v ? v->producer : nullptr;
  if (sp && is_op(sp, "Slice")) {
    // One of two Slices that take the halves of a product read by nothing else.
    const int half = half_sliced(sp);
    const Value* whole = sp->input(0);
    if (half < 0 || use_count(whole) != 2 || whole->is_graph_output) return std::nullopt;
    int other = -1;
    for (const Node* c : whole->consumers)
      if (c != sp && is_op(c, "Slice") && c->input(0) == whole) other = half_sliced(c);
    if (other != 1 - half) return std::nullopt;
    std::optional<Projection> p = product_of(whole);
    if (!p || !p->act.empty()) return std::nullopt;
    p->split = sp;
    p->half = half;
    return p;
  }
  if (!sp || !is_op(sp, "Split")) return product_of(v);
  if (!halves_last_axis(sp) || !has_single_use(sp->input(0))) return std::nullopt;
  std::optional<Projection> p = product_of(sp->input(0));
  if (!p || !p->act.empty()) return std::nullopt;
  p->split = sp;
  p->half = sp->outputs[0] == v ? 0 : 1;
  return p;
}

/// The gate side of the Mul: x · Sigmoid(x) of a bare projection (SiLU), an activation node on a
/// bare projection, or a projection with its activation inside. `inner` collects the gating's own
/// nodes (the Sigmoid and its Mul, or the activation node).
struct Gate {
  Projection proj;
  std::string act;
  std::vector<float> params;
  std::vector<Node*> inner;
};

std::optional<Gate> gate_of(const Value* v) {
  if (!has_single_use(v)) return std::nullopt;
  if (Node* mul = producer_of(v, "Mul")) {
    // x · Sigmoid(x), either order.
    for (int side = 0; side < 2; ++side) {
      Value* x = mul->input(side);
      Value* s = mul->input(1 - side);
      Node* sig = producer_of(s, "Sigmoid");
      if (!sig || sig->input(0) != x || !has_single_use(s) || use_count(x) != 2 || x->is_graph_output) continue;
      std::optional<Projection> p = projection_of(x);
      if (!p || !p->act.empty()) return std::nullopt;
      return Gate{*p, "SiLU", {}, {sig, mul}};
    }
    return std::nullopt;
  }
  // An activation node on a projection: on a split half (ModernBERT's GeGLU: its Wi product in
  // two halves, GELU on the first), where fuse_matmul_bias cannot take it into the product.
  if (Node* a = v->producer; a && a->outputs.size() == 1 && a->input(0)) {
    std::string why;
    if (std::optional<ActivationOp> act = activation_of(a, &why)) {
      Value* x = a->input(0);
      if (!has_single_use(x) || x->is_graph_output) return std::nullopt;
      std::optional<Projection> p = projection_of(x);
      if (!p || !p->act.empty()) return std::nullopt;
      return Gate{*p, act->name, act->params, {a}};
    }
  }
  std::optional<Projection> p = projection_of(v);
  if (!p || p->act.empty()) return std::nullopt;
  return Gate{*p, p->act, p->act_params, {}};
}

/// Why the two projections cannot be one GatedMatMul, or "".
std::string problem(const Gate& gate, const Projection& value, const Value* y) {
  const Projection& g = gate.proj;
  if (g.x != value.x)
    return "the gate and the value project different inputs ('" + g.x->name + "', '" + value.x->name + "')";
  if (g.split || value.split) {
    if (!g.split || !value.split || g.split->input(0) != value.split->input(0) || g.half == value.half)
      return "the gate and the value are not the two halves of one product";
    const Tensor* w = constant_of(g.w);
    if (!w) return "the projection's weight is not a constant";
    if (w->rank() != 2 || w->dim(1) % 2) return "the weight " + dims_str(w->dims()) + " is not 2-D [K, 2N]";
  } else {
    const Tensor *wg = constant_of(g.w), *wv = constant_of(value.w);
    if (!wg || !wv) return "a projection's weight is not a constant";
    if (wg->rank() != 2 || wg->dims() != wv->dims() || wg->dtype() != wv->dtype())
      return "the weights " + dims_str(wg->dims()) + " and " + dims_str(wv->dims()) +
             " are not two 2-D [K, N] of one type";
  }
  const Tensor* wg = constant_of(g.w);
  const int64_t n = g.split ? wg->dim(1) / 2 : wg->dim(1);
  const DType t = y->type.dtype;
  if (t != DType::Float32 && t != DType::Float16 && t != DType::BFloat16)
    return std::string("its type is ") + dtype_name(t) + " (fused here: float32, float16, bfloat16)";
  if (wg->dtype() != t) return "the weights' type differs from the output's";
  for (const Value* b : {g.bias, value.bias})
    if (b && (!constant_of(b) || constant_of(b)->rank() != 1)) return "a projection's bias is not a 1-D constant";
  const Shape* ys = known_rank(y);
  if (!ys || ys->empty() || !ys->back().is_static() || ys->back().value != n)
    return "the product is not known to have the weights' N columns";
  if (!same_shape_and_type(g.value(), value.value())) return "the two products do not have one shape and type";
  return "";
}

/// Columns [c0, c0 + n) of a 2-D constant, or elements [c0, c0 + n) of a 1-D one.
Tensor columns(const Tensor& t, int64_t c0, int64_t n) {
  const int64_t rows = t.rank() == 2 ? t.dim(0) : 1, cols = t.rank() == 2 ? t.dim(1) : t.dim(0);
  const size_t es = dtype_size(t.dtype());
  std::vector<ByteRun> runs;
  for (int64_t r = 0; r < rows; ++r)
    append_run(runs, static_cast<const unsigned char*>(t.raw()) + static_cast<size_t>(r * cols + c0) * es,
               static_cast<size_t>(n) * es);
  return derived_weight(t.dtype(), t.rank() == 2 ? std::vector<int64_t>{rows, n} : std::vector<int64_t>{n}, runs);
}

bool fuse_at(Rewriter& r, Node* mul) {
  Value* y = mul->outputs.empty() ? nullptr : mul->outputs[0];
  if (!y || !mul->input(0) || !mul->input(1) || mul->input(0) == mul->input(1)) return false;
  for (int side = 0; side < 2; ++side) {
    std::optional<Gate> gate = gate_of(mul->input(side));
    if (!gate) continue;
    Value* vv = mul->input(1 - side);
    std::optional<Projection> value = projection_of(vv);
    if (!value || !value->act.empty() || (value->node == gate->proj.node && !value->split)) continue;
    const std::string what =
        describe(gate->proj.node) + " + " + describe(value->node) + " -> " + describe(mul) + " not fused";
    if (!has_single_use(vv)) return r.near_miss(what, "the value's product '" + vv->name + "' is read elsewhere");
    if (std::string why = problem(*gate, *value, y); !why.empty()) return r.near_miss(what, why);
    if (r.opts().portable)
      return r.near_miss(what, "--portable writes standard ops only: the gating needs ai.fusec GatedMatMul");

    const std::string name = gate->proj.node->name;
    std::vector<Value*> ins = {gate->proj.x, gate->proj.w, value->w};
    if (gate->proj.bias || value->bias) {
      ins.push_back(gate->proj.bias);
      ins.push_back(value->bias);
    }
    std::vector<Node*> replaced = {gate->proj.node};
    if (gate->proj.split) {
      // One product of both: its weight's (and bias's) halves become the two operands.
      Graph& g = r.graph();
      const Tensor& w = *constant_of(gate->proj.w);
      const int64_t n = w.dim(1) / 2, gh = gate->proj.half;
      ins[1] = g.add_initializer(name + ".gate_weight", columns(w, gh * n, n));
      ins[2] = g.add_initializer(name + ".value_weight", columns(w, (1 - gh) * n, n));
      if (const Tensor* b = constant_of(gate->proj.bias)) {
        ins[3] = g.add_initializer(name + ".gate_bias", columns(*b, gh * n, n));
        ins[4] = g.add_initializer(name + ".value_bias", columns(*b, (1 - gh) * n, n));
      }
      replaced.push_back(gate->proj.split);
      if (value->split != gate->proj.split) replaced.push_back(value->split);  // the other Slice
    } else {
      replaced.push_back(value->node);
    }
    replaced.insert(replaced.end(), gate->inner.begin(), gate->inner.end());
    replaced.push_back(mul);
    Replaced gone = r.remove(replaced);
    Node* fused = r.add("GatedMatMul", ins, {y}, name, "ai.fusec", gone.origins);
    fused->set_attr("activation", gate->act);
    if (!gate->params.empty()) fused->set_attr("activation_params", gate->params);
    r.rewrote(gone.listed + " -> " + describe(fused) + " (activation " + gate->act + ")", gone.names, name);
    return true;
  }
  return false;
}

}  // namespace

bool FuseGatedMatMulPass::run(Graph& g, PassContext& ctx) {
  // Collected first: a rewrite removes Muls of the gating.
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
