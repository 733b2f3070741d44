// fuse_conv_activation: Conv [-> Add(residual)] [-> activation] becomes one ai.fusec FusedConv,
// Y = act(Conv(X, W, B) + Z), so the conv output is written once, not written, read and rewritten.
//
//   X  W  [B]                                 X  W  [B]  Z
//    \ |  /                                    \ |   |  /
//     Conv    Z (residual: any producer,        FusedConv(activation = "Relu")
//       \    /   the conv output's exact shape)      |
//        Add                               =>        y
//         |
//        Relu         (the Add and the activation are each optional; at least one is there)
//         |
//         y
//
//   activation                       -> activation, activation_params
//   Relu                             -> Relu
//   Clip(lo, hi), ReLU6 = Clip(0, 6) -> Clip [lo, hi]   (a missing bound is ∓FLT_MAX; bounds constant)
//   LeakyRelu(α)                     -> LeakyRelu [α]   PRelu with one slope value α -> LeakyRelu [α]
//   HardSigmoid(α, β)                -> HardSigmoid [α, β]
//   Sigmoid, Tanh, HardSwish         -> same name
//   Gelu(approximate none | tanh)    -> Gelu | GeluTanh
//   SiLU as x·Sigmoid(x):   t ──> Sigmoid ──> Mul ──> y     t has two readers, both inside the
//                           └─────────────────^             pattern -> SiLU
//
// Projection shortcut, Add(Conv a, Conv b): fused into the conv that comes later in topological
// order, so the other conv's output (the residual Z) is already computed when it runs.
//
// An activation a few data-movement ops after the conv (a conv's image turned into tokens, then
// the activation: SegFormer's and PVT's Mix-FFN, conv -> Transpose -> Reshape -> Gelu) moves in
// front of them first: an activation is elementwise, so it commutes with the movement, and then
// fuses as above.
//
// fold_batchnorm runs first, so Conv -> BatchNormalization -> (Add) -> Relu ends as one FusedConv.
// Under --portable (standard ops only) nothing is fused; each candidate is a near-miss.
#include "passes/fuse_conv_activation.h"

#include <optional>
#include <unordered_map>

#include "passes/activation_op.h"
#include "passes/pattern.h"
#include "passes/rewrite.h"

namespace fusec {

namespace {

const char* kPass = "fuse_conv_activation";

/// The activation found after a value: FusedConv's attribute, its params, the nodes it replaces
/// and the value it writes.
struct Activation {
  std::string name;
  std::vector<float> params;
  std::vector<Node*> nodes;
  Value* out = nullptr;
  std::string text;  // "Relu 'r1'" / "Sigmoid 's' + Mul 'm' (SiLU)"
};

bool fusable_dtype(DType t) { return t == DType::Float32 || t == DType::Float16 || t == DType::BFloat16; }

std::string shape_text(const Value* v) { return v->type.shape ? shape_str(*v->type.shape) : "unknown"; }

/// Why `r` cannot be FusedConv's Z for the conv output `y`, or "". Z adds without broadcasting.
std::string residual_problem(const Value* y, const Value* r) {
  if (r->type.dtype != y->type.dtype)
    return std::string("the residual is ") + dtype_name(r->type.dtype) + ", the conv output " +
           dtype_name(y->type.dtype);
  if (!y->type.shape || !r->type.shape) return "the residual's or the conv output's shape is unknown";
  for (const Dim& d : *r->type.shape)
    if (!d.is_static() && d.symbol.empty()) return "the residual's shape " + shape_text(r) + " is not fully known";
  if (*r->type.shape != *y->type.shape)
    return "the residual '" + r->name + "' has shape " + shape_text(r) + ", the conv output " + shape_text(y) +
           ": Z must match exactly (no broadcasting)";
  return "";
}

class ConvFuser {
 public:
  explicit ConvFuser(Rewriter& r) : r_(r), g_(r.graph()) {
    auto nodes = g_.node_list();
    for (size_t i = 0; i < nodes.size(); ++i) pos_[nodes[i]] = i;
  }

  bool fuse(Node* conv) {
    Value* y = conv->outputs[0];
    std::string chain = describe(conv);
    std::vector<Node*> nodes;  // replaced, after the conv
    Value* end = y;
    Value* z = nullptr;

    // 1. A residual Add right after the conv.
    if (Node* add = y->consumers.size() == 1 ? y->consumers[0] : nullptr; add && is_op(add, "Add")) {
      std::string what = chain + " -> " + describe(add) + " not fused";
      if (y->is_graph_output) return miss(what, "the conv output '" + y->name + "' is a graph output");
      Value* r = other_input(add, y);
      if (!r) return false;
      std::string why = residual_problem(y, r);
      if (!why.empty()) return miss(what, why);
      if (later_conv_takes(conv, r)) return false;
      nodes.push_back(add);
      end = add->outputs[0];
      z = r;
      chain += " + " + describe(add);
    } else if (extra_readers(y)) {
      return false;
    }

    // 2. An activation on what we have so far.
    std::string act_why, act_what;
    std::optional<Activation> act = match_activation(end, &act_why, &act_what);
    if (act) {
      for (Node* n : act->nodes) nodes.push_back(n);
      end = act->out;
      chain += " + " + act->text;
    } else if (!act_why.empty()) {
      r_.near_miss(chain + " -> " + act_what + " not fused", act_why);
    }
    if (nodes.empty()) return false;

    // 3. Guards that hold for the whole chain.
    DType dt = y->type.dtype;
    std::string what = chain + " not fused";
    if (!fusable_dtype(dt))
      return miss(what, std::string("FusedConv takes float32/float16/bfloat16, not ") + dtype_name(dt));
    if (r_.opts().portable) return miss(what, "--portable writes standard ops only (FusedConv is ai.fusec)");

    // 4. Rewrite: the conv node becomes the FusedConv and writes the chain's last value.
    std::string desc = act ? "activation " + act->name : std::string("no activation");
    if (z) desc += ", residual '" + z->name + "'";
    Replaced gone = r_.absorb(conv, nodes);
    std::vector<std::string> replaced = {conv->name};
    replaced.insert(replaced.end(), gone.names.begin(), gone.names.end());
    r_.rewrote(chain + " -> FusedConv '" + conv->name + "' (" + desc + ")", replaced, conv->name);
    conv->op_type = "FusedConv";
    conv->domain = "ai.fusec";
    if (z) g_.set_input(conv, 3, z);
    if (act) {
      conv->set_attr("activation", act->name);
      if (!act->params.empty()) conv->set_attr("activation_params", act->params);
    }
    use_fusec_domain(g_);
    g_.remove_unused_values();
    return true;
  }

 private:
  bool miss(const std::string& what, const std::string& why) { return r_.near_miss(what, why); }

  /// When `r` (the other Add operand) is the output of a conv later in topological order that
  /// would itself fuse with this Add, that conv takes the Add: its Z, our output, is ready first.
  bool later_conv_takes(const Node* conv, const Value* r) const {
    const Node* other = r->producer;
    if (!other || !is_op(other, "Conv") || r_.removed(other)) return false;
    auto a = pos_.find(conv), b = pos_.find(other);
    if (a == pos_.end() || b == pos_.end() || b->second < a->second) return false;
    return has_single_use(r) && fusable_dtype(r->type.dtype);
  }

  /// Records a near-miss when the conv output `v` has readers besides an Add/activation that
  /// would otherwise fuse, or is a graph output. x·Sigmoid(x) is left to match_silu.
  bool extra_readers(const Value* v) {
    if (has_single_use(v) || v->consumers.empty()) return false;
    if (v->consumers.size() == 2 && !v->is_graph_output &&
        (is_op(v->consumers[0], "Sigmoid") || is_op(v->consumers[1], "Sigmoid")))
      return false;
    for (Node* c : v->consumers) {
      if (!is_op(c, "Add") && !is_activation_op(c)) continue;
      std::string why = v->is_graph_output ? "the conv output '" + v->name + "' is a graph output"
                                           : "the conv output '" + v->name + "' has " +
                                                 std::to_string(v->consumers.size()) + " consumers";
      miss(describe(v->producer) + " -> " + describe(c) + " not fused", why);
      return true;
    }
    return false;
  }

  /// The activation reading `t`, if any. When the op types line up but a guard fails, sets `why`
  /// (and `what`, the activation's description) and returns nullopt.
  std::optional<Activation> match_activation(Value* t, std::string* why, std::string* what) {
    if (t->consumers.empty()) return std::nullopt;
    if (auto silu = match_silu(t, why, what)) return silu;
    if (!why->empty()) return std::nullopt;
    if (!has_single_use(t)) {
      for (Node* c : t->consumers)
        if (is_activation_op(c)) {
          *what = describe(c);
          *why = t->is_graph_output ? "'" + t->name + "' is a graph output"
                                    : "'" + t->name + "' has " + std::to_string(t->consumers.size()) + " consumers";
          break;
        }
      return std::nullopt;
    }
    Node* a = t->consumers[0];
    if (!is_activation_op(a) || a->input(0) != t) return std::nullopt;
    *what = describe(a);
    std::optional<ActivationOp> op = activation_of(a, why);
    if (!op) return std::nullopt;
    return Activation{op->name, op->params, {a}, a->outputs[0], describe(a)};
  }

  /// t -> Sigmoid -> Mul(t, sigmoid): SiLU. Sets `why` when the shape is there but a reader escapes.
  std::optional<Activation> match_silu(Value* t, std::string* why, std::string* what) {
    if (t->consumers.size() != 2) return std::nullopt;
    Node* sig = nullptr;
    Node* mul = nullptr;
    for (Node* c : t->consumers) {
      if (is_op(c, "Sigmoid"))
        sig = c;
      else if (is_op(c, "Mul"))
        mul = c;
    }
    if (!sig || !mul || !sig->outputs[0] || other_input(mul, t) != sig->outputs[0]) return std::nullopt;
    *what = describe(sig) + " + " + describe(mul) + " (SiLU)";
    if (t->is_graph_output) {
      *why = "'" + t->name + "' is a graph output";
      return std::nullopt;
    }
    if (!has_single_use(sig->outputs[0])) {
      *why = "the Sigmoid output '" + sig->outputs[0]->name + "' has other readers";
      return std::nullopt;
    }
    return Activation{"SiLU", {}, {sig, mul}, mul->outputs[0], *what};
  }

  Rewriter& r_;
  Graph& g_;
  std::unordered_map<const Node*, size_t> pos_;
};

bool moves_data(const Node* n) {
  static const char* kOps[] = {"Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze"};
  for (const char* op : kOps)
    if (is_op(n, op)) return true;
  return false;
}

/// conv -> movement... -> activation  =>  conv -> activation -> movement...: the activation then
/// reads the conv's output and fuses. Each value on the way has the one reader; the activation is
/// elementwise on its first input alone (PRelu's slope is laid out like the moved value: left).
bool hoist_activation(Rewriter& r, Node* conv) {
  Value* y = conv->outputs.empty() ? nullptr : conv->outputs[0];
  if (!y || !has_single_use(y)) return false;
  std::vector<Node*> chain;
  for (Node* n = y->consumers[0]; moves_data(n) && n->input(0) && n->outputs[0]; n = n->outputs[0]->consumers[0]) {
    if (n->input(0) != (chain.empty() ? y : chain.back()->outputs[0])) return false;
    chain.push_back(n);
    if (!has_single_use(n->outputs[0])) return false;
  }
  if (chain.empty()) return false;
  Value* moved = chain.back()->outputs[0];
  Node* act = moved->consumers[0];
  if (!is_activation_op(act) || act->op_type == "PRelu" || act->input(0) != moved || act->outputs.size() != 1 ||
      !act->outputs[0] || act->outputs[0]->type.dtype != y->type.dtype)
    return false;
  Graph& g = r.graph();
  // The activation now writes a value of y's shape; the chain's last op writes the activation's
  // old output, so its name, readers and graph-output status stay.
  Value* out = act->outputs[0];
  Value* activated = g.add_value(y->name + "_" + act->op_type);
  activated->type = y->type;
  g.set_input(act, 0, y);
  g.set_output(act, 0, activated);
  g.set_input(chain.front(), 0, activated);
  g.set_output(chain.back(), 0, out);
  g.topo_sort();
  r.rewrote(
      describe(act) + " moved in front of " + std::to_string(chain.size()) + " movement op(s) after " + describe(conv),
      {}, act->name);
  return true;
}

}  // namespace

bool FuseConvActivationPass::run(Graph& g, PassContext& ctx) {
  Rewriter r(g, ctx, kPass);
  bool hoisted = false;
  if (!ctx.opts.portable)
    for (Node* n : g.node_list())
      if (is_op(n, "Conv")) hoisted = hoist_activation(r, n) || hoisted;
  if (hoisted) g.remove_unused_values();  // the chain's old last value
  ConvFuser f(r);
  // A rewrite removes only nodes after the conv (Add, activation), never allocates one, and turns
  // the conv itself into FusedConv in place; removed nodes are skipped by identity.
  for (Node* n : g.node_list()) {
    if (r.removed(n) || !is_op(n, "Conv")) continue;
    f.fuse(n);
  }
  return r.changed();
}

}  // namespace fusec
