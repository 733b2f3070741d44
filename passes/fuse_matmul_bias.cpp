// fuse_matmul_bias: a matrix product, its bias and its activation -> one GEMM with an epilogue.
//
//    A    W                                    A    W    bias'
//     \  /                                      \   |   /
//    MatMul 'm'   bias (constant)              Gemm 'm'            A, W 2-D, no activation
//      |         /                        =>   (standard ONNX, also under --portable)
//     Add 'a' --'                                  or
//      |                                       FusedMatMul 'm'     A N-D or an activation
//    [Relu | LeakyRelu | Sigmoid | Tanh |      (ai.fusec, activation = "Relu", ...)
//     HardSigmoid | HardSwish | Clip | Gelu] 'r'
//      |                                            |
//      y                                            y
//
//   y = act(A·W + bias)
//
// The bias must be a constant that broadcasts along the last axis only: shape [N] or
// [1,..,1,N] with N the product's last dim, so bias' = reshape(bias, [N]) for FusedMatMul (Gemm
// takes it as it is). W may be computed. MatMul -> activation with no bias becomes FusedMatMul
// without a bias. The MatMul's (and Add's) output must be read only by the next node of the
// pattern. Types: float32, float16, bfloat16. Under --portable the bias still folds into Gemm
// when A and W are 2-D (the activation then stays a separate node); everything else that would
// need FusedMatMul is left alone with a near-miss.
#include "passes/fuse_matmul_bias.h"

#include <cstring>
#include <utility>

#include "ir/error.h"
#include "ir/op_schema.h"
#include "passes/activation_op.h"
#include "passes/pattern.h"
#include "passes/rewrite.h"

namespace fusec {

namespace {

const char* kPass = "fuse_matmul_bias";

bool fusable_dtype(DType t) { return t == DType::Float32 || t == DType::Float16 || t == DType::BFloat16; }

/// Why `bias` cannot be the bias of a product with output shape `out`, or "".
std::string bias_problem(const Value* bias, const Shape& out, DType dtype) {
  const Tensor* t = constant_of(bias);
  if (!t) return "the Add's other operand '" + bias->name + "' is not a constant";
  if (t->dtype() != dtype) return "the bias type differs from the product's";
  const auto& d = t->dims();
  const Dim& n = out.back();
  std::string need = "need [N] or [1,..,1,N] with N = " + n.str();
  if (d.empty() || d.size() > out.size() || !n.is_static() || d.back() != n.value)
    return "the bias shape " + dims_str(d) + " does not run along the last axis (" + need + ")";
  for (size_t i = 0; i + 1 < d.size(); ++i)
    if (d[i] != 1) return "the bias shape " + dims_str(d) + " broadcasts along more than the last axis (" + need + ")";
  return "";
}

size_t rank_of(const Value* v) { return v && v->type.shape ? v->type.shape->size() : 0; }

/// Applies (or declines, with a near-miss) the rewrite starting at MatMul `mm`.
bool fuse_at(Rewriter& r, Node* mm) {
  Graph& g = r.graph();
  Value* prod = mm->outputs.empty() ? nullptr : mm->outputs[0];
  if (!prod || prod->consumers.empty() || !prod->type.shape || prod->type.shape->empty()) return false;
  Value* a_in = mm->input(0);
  Value* w_in = mm->input(1);
  if (!a_in || !w_in || !a_in->type.shape || !w_in->type.shape) return false;

  // The pattern's op types: MatMul -> Add and/or an activation.
  Node* first = prod->consumers[0];
  Node* add = is_op(first, "Add") ? first : nullptr;
  std::string act_why;
  // An activation of the product itself (not one whose other input it is: a PRelu slope, a bound).
  std::optional<ActivationOp> act = add || first->input(0) != prod ? std::nullopt : activation_of(first, &act_why);
  if (!add && !act && act_why.empty()) return false;
  std::string what = describe(mm) + " -> " + describe(first) + " not fused";
  if (!act_why.empty()) return r.near_miss(what, act_why);
  if (!has_single_use(prod))
    return r.near_miss(what, prod->is_graph_output
                                 ? "the MatMul output is a graph output"
                                 : "the MatMul output has " + std::to_string(use_count(prod)) + " consumers");
  const DType dtype = prod->type.dtype;
  if (!fusable_dtype(dtype))
    return r.near_miss(
        what, std::string("its data type is ") + dtype_name(dtype) + " (fused here: float32, float16, bfloat16)");

  Value* bias = nullptr;
  Value* out = prod;
  if (add) {
    bias = other_input(add, prod);
    std::string why = bias ? bias_problem(bias, *prod->type.shape, dtype) : "the Add reads the product twice";
    if (!why.empty()) return r.near_miss(what, why);
    out = add->outputs[0];
    // An activation after the bias joins when it is the bias sum's only reader.
    if (!out->consumers.empty()) {
      std::string why2;
      Node* reader = out->consumers[0];
      std::optional<ActivationOp> next =
          reader->input(0) == out ? activation_of(reader, &why2) : std::optional<ActivationOp>{};
      if ((next || !why2.empty()) && !has_single_use(out)) {
        why2 = out->is_graph_output ? "the Add output is a graph output"
                                    : "the Add output has " + std::to_string(use_count(out)) + " consumers";
        next.reset();
      }
      if (next && next->node->outputs[0] && next->node->outputs[0]->type.dtype == dtype) act = next;
      if (!why2.empty())
        r.near_miss(describe(add) + " -> " + describe(out->consumers[0]) + " not fused into " + describe(mm), why2);
    }
  }
  if (act && (act->node->outputs.empty() || !act->node->outputs[0])) return false;
  Value* result = act ? act->node->outputs[0] : out;

  const bool gemm_shaped = rank_of(a_in) == 2 && rank_of(w_in) == 2 && onnx_opset(g) >= 7;
  bool write_gemm = bias && gemm_shaped && !act;
  if (!write_gemm && r.opts().portable) {
    if (bias && gemm_shaped) {
      // The bias still folds into a standard Gemm; the activation stays a node of its own.
      r.near_miss(describe(act->node) + " not fused into " + describe(mm),
                  "--portable writes standard ops only: the activation needs ai.fusec FusedMatMul");
      act.reset();
      result = out;
      write_gemm = true;
    } else {
      std::string why = "--portable writes standard ops only: ";
      if (gemm_shaped)
        why += "an activation without a bias needs ai.fusec FusedMatMul";
      else
        why += "A is " + std::to_string(rank_of(a_in)) + "-D and W " + std::to_string(rank_of(w_in)) +
               "-D, the standard Gemm takes 2-D operands, so this needs ai.fusec FusedMatMul";
      return r.near_miss(what, why);
    }
  }

  // Rewrite.
  std::vector<Node*> replaced = {mm};
  if (add) replaced.push_back(add);
  if (act) replaced.push_back(act->node);
  const std::string name = mm->name;
  std::vector<Value*> inputs = {a_in, w_in};
  if (bias) {
    const Tensor* t = constant_of(bias);
    if (!write_gemm && t->rank() != 1) {
      // FusedMatMul takes a 1-D bias: the same data as [N].
      bias = g.add_initializer(name + ".bias", t->reshaped({t->numel()}));
    }
    inputs.push_back(bias);
  }
  std::string act_name = act ? act->name : "";
  std::vector<float> act_params = act ? act->params : std::vector<float>{};
  Replaced gone = r.remove(replaced);
  Node* fused =
      r.add(write_gemm ? "Gemm" : "FusedMatMul", inputs, {result}, name, write_gemm ? "" : "ai.fusec", gone.origins);
  if (!write_gemm) {
    if (!act_name.empty()) fused->set_attr("activation", act_name);
    if (!act_params.empty()) fused->set_attr("activation_params", act_params);
  }
  r.rewrote(gone.listed + " -> " + describe(fused) + (act_name.empty() ? "" : " (activation " + act_name + ")"),
            gone.names, name);
  return true;
}

/// A 2-D constant's transpose (any element type: bytes are moved, not values).
Tensor transposed_2d(const Tensor& w) {
  const int64_t rows = w.dims()[0], cols = w.dims()[1];
  Tensor t(w.dtype(), {cols, rows});
  const size_t es = dtype_size(w.dtype());
  const auto* src = static_cast<const unsigned char*>(w.raw());
  auto* dst = static_cast<unsigned char*>(t.raw());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      std::memcpy(dst + static_cast<size_t>(j * rows + i) * es, src + static_cast<size_t>(i * cols + j) * es, es);
  return t;
}

/// Sets `inputs` to a Gemm's operands as FusedMatMul's (A, W [K,N], bias [N]) and returns "", or
/// returns why it cannot. FusedMatMul is A·W + bias: alpha = beta = 1, A not transposed, C (if any) a constant
/// along the last axis; a transposed B is taken when it is a constant no larger than the fold cap
/// (its [K,N] copy is added, written in memory like a folded constant).
std::string gemm_as_fused_matmul(Graph& g, const PassOptions& opts, Node* gemm, std::vector<Value*>* inputs) {
  if (gemm->attr_float("alpha", 1.0f) != 1.0f) return "its alpha is not 1";
  if (gemm->attr_int("transA", 0) != 0) return "it transposes A";
  Value* a = gemm->input(0);
  Value* b = gemm->input(1);
  Value* c = gemm->input(2);
  Value* out = gemm->outputs.empty() ? nullptr : gemm->outputs[0];
  if (!a || !b || !out || !out->type.shape) return "an operand is missing";
  if (c && gemm->attr_float("beta", 1.0f) != 1.0f) return "its beta is not 1";
  if (c) {
    const std::string why = bias_problem(c, *out->type.shape, out->type.dtype);
    if (!why.empty()) return why;
  }
  if (gemm->attr_int("transB", 0) != 0) {
    const Tensor* w = constant_of(b);
    if (!w || w->rank() != 2) return "it transposes B, which is not a constant";
    if (static_cast<double>(w->nbytes()) > static_cast<double>(opts.fold_size_cap))
      return "it transposes B, whose " + std::to_string(w->nbytes()) + " bytes are over the fold cap of " +
             std::to_string(opts.fold_size_cap);
    b = g.add_initializer(gemm->name + ".weight_kn", transposed_2d(*w));
  }
  inputs->assign({a, b});
  if (c) {
    const Tensor* t = constant_of(c);
    inputs->push_back(t->rank() == 1 ? c : g.add_initializer(gemm->name + ".bias", t->reshaped({t->numel()})));
  }
  return "";
}

/// A product fused in an earlier sweep (FusedMatMul without activation, or a Gemm, the model's or
/// this pass's) followed by an activation: FusedMatMul takes it in when it became the only reader;
/// otherwise the near-miss is recorded again, so the fixed-point sweep --explain shows keeps it.
/// A Reshape between them (GPT-2's Conv1D: a 2-D Gemm, then the view back to [B, S, N]) stays,
/// after the product: an activation is the same before or after a reshape.
bool fuse_activation_into(Rewriter& r, Node* fused) {
  Value* out = fused->outputs.empty() ? nullptr : fused->outputs[0];
  if (!out || out->consumers.empty()) return false;
  Node* view = nullptr;
  Node* next = out->consumers[0];
  if (is_op(next, "Reshape") && next->input(0) == out && has_single_use(out) && next->outputs.size() == 1 &&
      next->outputs[0] && has_single_use(next->outputs[0]) && !next->outputs[0]->is_graph_output) {
    view = next;
    next = view->outputs[0]->consumers[0];
  }
  std::string why;
  if (next->input(0) != (view ? view->outputs[0] : out)) return false;  // it is not the activation's X
  std::optional<ActivationOp> act = activation_of(next, &why);
  if (!act && why.empty()) return false;
  const std::string what = describe(next) + " not fused into " + describe(fused);
  if (why.empty() && !has_single_use(out))
    why = out->is_graph_output
              ? "the output of " + describe(fused) + " is a graph output"
              : "the output of " + describe(fused) + " has " + std::to_string(use_count(out)) + " consumers";
  if (why.empty() && !fusable_dtype(out->type.dtype))
    why = std::string("its data type is ") + dtype_name(out->type.dtype) + " (fused here: float32, float16, bfloat16)";
  if (why.empty() && fused->op_type == "Gemm" && r.opts().portable)
    why = "--portable writes standard ops only: the activation needs ai.fusec FusedMatMul";
  if (why.empty() && (!act->node->outputs[0] || act->node->outputs[0]->type.dtype != out->type.dtype)) return false;
  std::vector<Value*> inputs = fused->inputs;
  std::vector<NamedAttribute> attrs = fused->attrs;
  if (why.empty() && fused->op_type == "Gemm") {
    why = gemm_as_fused_matmul(r.graph(), r.opts(), fused, &inputs);
    attrs.clear();  // Gemm's alpha, beta and trans* are not FusedMatMul's
  }
  if (!why.empty()) return r.near_miss(what, why);
  Value* result = act->node->outputs[0];
  const std::string name = fused->name;
  if (!view) {
    Replaced gone = r.remove({fused, act->node});
    Node* n = r.add("FusedMatMul", inputs, {result}, name, "ai.fusec", gone.origins);
    n->attrs = std::move(attrs);
    n->set_attr("activation", act->name);
    if (!act->params.empty()) n->set_attr("activation_params", act->params);
    r.rewrote(gone.listed + " -> " + describe(n) + " (activation " + act->name + ")", gone.names, name);
    return true;
  }
  // product -> Reshape -> act  =>  product+act -> Reshape (writing the activation's output).
  const std::vector<Value*> view_in = view->inputs;
  const std::vector<NamedAttribute> view_attrs = view->attrs;
  const std::string view_name = view->name;
  Replaced gone = r.remove({fused, act->node});
  Replaced view_gone = r.remove({view});
  Node* n = r.add("FusedMatMul", inputs, {out}, name, "ai.fusec", gone.origins);
  n->attrs = std::move(attrs);
  n->set_attr("activation", act->name);
  if (!act->params.empty()) n->set_attr("activation_params", act->params);
  Node* v = r.add("Reshape", view_in, {result}, view_name, "", view_gone.origins);
  v->attrs = view_attrs;
  r.rewrote(gone.listed + " -> " + describe(n) + " (activation " + act->name + ", before " + describe(v) + ")",
            gone.names, name);
  return true;
}

bool is_skip_norm(const Node* n) {
  return n->domain == "ai.fusec" && (n->op_type == "SkipLayerNorm" || n->op_type == "SkipSimplifiedLayerNorm");
}

/// The producer of `t` when it is a bare product that can take a residual: a FusedMatMul without
/// activation or residual, a MatMul with a 2-D weight (a batched product's residual would leave
/// the GEMM), or a Gemm (whether its alpha, beta and transposes allow it is gemm_as_fused_matmul's
/// to say). Else nullptr.
Node* bare_product(const Value* t) {
  Node* mm = t ? t->producer : nullptr;
  const bool bare_fused = mm && mm->op_type == "FusedMatMul" && mm->domain == "ai.fusec" && !mm->input(3) &&
                          mm->attr_string("activation", "").empty();
  const bool plain = is_op(mm, "MatMul") && rank_of(mm->input(1)) == 2;
  return bare_fused || plain || is_op(mm, "Gemm") ? mm : nullptr;
}

/// Where a residual sum reads a product: the product's node and output t, and the Reshape between
/// them, if any, whose output u the sum reads (u = t without one). GPT-2's Conv1D is a 2-D Gemm
/// over the flattened tokens, viewed back to [B, S, N] before each residual sum.
struct ProductSite {
  Node* mm = nullptr;
  Node* view = nullptr;
  Value* t = nullptr;
  Value* u = nullptr;
};

ProductSite product_site(Value* u) {
  Node* view = producer_of(u, "Reshape");
  if (view && view->input(0)) {
    if (Node* mm = bare_product(view->input(0))) return {mm, view, view->input(0), u};
  }
  if (Node* mm = bare_product(u)) return {mm, nullptr, u, u};
  return {};
}

/// Checks shared by both residual rewrites at `site` (the sum's other summand `res`), as the
/// reason they fail, or "". Through a Reshape the residual is viewed as the product, by a
/// constant target: the product's shape may leave at most one dim open.
std::string residual_problem(const ProductSite& site, const Value* res) {
  if (!has_single_use(site.t) || (site.view && !has_single_use(site.u)))
    return "the product '" + site.t->name + "' is read elsewhere too";
  if (!same_shape_and_type(site.u, res))
    return "the residual '" + res->name + "' does not have the product's shape and type";
  if (site.view && !(known_rank(site.t) && reshape_target(*res->type.shape, *site.t->type.shape)))
    return "the residual cannot be viewed as the product: its shape leaves more than one dim open";
  return "";
}

/// `res` as the product's shape: itself, or a Reshape of it to t's (the view's inverse).
Value* residual_as_product(Rewriter& r, const ProductSite& site, Value* res) {
  if (!site.view) return res;
  Graph& g = r.graph();
  const std::vector<int64_t> dims = *reshape_target(*res->type.shape, *site.t->type.shape);
  Value* target = g.add_initializer(site.mm->name + ".residual_shape",
                                    Tensor::from_int64(dims, {static_cast<int64_t>(dims.size())}));
  Value* viewed = g.add_value(res->name + ".as_product");
  viewed->type = site.t->type;
  r.add("Reshape", {res, target}, {viewed}, g.unique_node_name(site.mm->name + ".residual_view"), "", {});
  return viewed;
}

/// The FusedMatMul's operands for the product at `site` with the residual `res`: A, W, the bias (or
/// none) and Z = `res` viewed as the product, in `in`, its attributes in `attrs`; or why not (what
/// FusedMatMul cannot express of a Gemm). Called once every other check passed: it adds the
/// residual's view and a Gemm's transposed weight to the graph.
std::string residual_operands(Rewriter& r, const ProductSite& site, Value* res, std::vector<Value*>* in,
                              std::vector<NamedAttribute>* attrs) {
  Node* mm = site.mm;
  if (mm->op_type == "Gemm") {
    attrs->clear();  // Gemm's alpha, beta and trans* are not FusedMatMul's
    const std::string why = gemm_as_fused_matmul(r.graph(), r.opts(), mm, in);
    if (!why.empty()) return why;
    in->resize(3, nullptr);
  } else {
    in->assign({mm->input(0), mm->input(1), mm->input(2)});
    *attrs = mm->attrs;
  }
  in->push_back(residual_as_product(r, site, res));
  return "";
}

/// A bare product (a MatMul, a Gemm, or a FusedMatMul without activation or residual), perhaps
/// viewed by a Reshape, read only by a SkipLayerNorm or SkipSimplifiedLayerNorm whose other summand
/// has the (viewed) product's shape and type: the sum moves into the GEMM as its residual Z and the
/// skip norm becomes the plain norm of the GEMM's output, which is the sum S for whoever reads S.
///   t = A·W [+ b];  S = t + r;  Y = Norm(S)   =>   S = FusedMatMul(A, W, [b], Z = r);  Y = Norm(S)
///   t = A·W [+ b];  S = View(t) + r           =>   S = View(FusedMatMul(A, W, [b], Z = View⁻¹(r)))
/// One read of r by the GEMM (compute-bound: nearly free) instead of one read of each summand and
/// a write of S by the normalization.
bool absorb_residual(Rewriter& r, Node* sln) {
  Graph& g = r.graph();
  const bool rms = sln->op_type == "SkipSimplifiedLayerNorm";
  // LayerNormalization is standard from opset 17; SimplifiedLayerNorm is always ai.fusec.
  if (!is_skip_norm(sln) || (!rms && g.opset("") < 17)) return false;
  for (size_t side : {0u, 1u}) {
    Value* u = sln->input(side);
    Value* res = sln->input(1 - side);
    const ProductSite site = product_site(u);
    if (!res || !site.mm || res == u) continue;
    if (!fusable_dtype(site.t->type.dtype)) continue;
    const std::string what = describe(site.mm) + " + " + describe(sln) + " not merged";
    std::string why = residual_problem(site, res);
    Value* y = sln->outputs.empty() ? nullptr : sln->outputs[0];
    Value* sum = sln->outputs.size() > 1 ? sln->outputs[1] : nullptr;
    if (why.empty() && (!y || (sum && sum->is_graph_output))) why = "the sum S is a graph output";
    std::vector<Value*> mm_in;
    std::vector<NamedAttribute> mm_attrs;
    if (why.empty()) why = residual_operands(r, site, res, &mm_in, &mm_attrs);
    if (!why.empty()) return r.near_miss(what, why);
    std::vector<Value*> ln_in = {u, sln->input(2)};
    if (!rms && sln->input(3)) ln_in.push_back(sln->input(3));
    const int64_t axis = sln->attr_int("axis", -1);
    const float eps = sln->attr_float("epsilon", 1e-5f);
    const std::string mm_name = site.mm->name, ln_name = sln->name;
    // Two nodes stand for two: each keeps its own origins. A view between them stays as it is.
    Replaced mm_gone = r.remove({site.mm}), ln_gone = r.remove({sln});
    Node* fused = r.add("FusedMatMul", mm_in, {site.t}, mm_name, "ai.fusec", mm_gone.origins);
    fused->attrs = mm_attrs;
    Node* ln = rms ? r.add("SimplifiedLayerNorm", ln_in, {y}, ln_name, "ai.fusec", ln_gone.origins)
                   : r.add("LayerNormalization", ln_in, {y}, ln_name, "", ln_gone.origins);
    ln->set_attr("axis", axis);
    ln->set_attr("epsilon", eps);
    if (sum) g.replace_all_uses(sum, u);
    r.rewrote(mm_gone.listed + " + " + ln_gone.listed + " -> " + describe(fused) + " (residual '" + res->name +
                  (site.view ? "', viewed as the product) + " : "') + ") + describe(ln),
              {mm_name, ln_name}, mm_name);
    return true;
  }
  return false;
}

/// Writes the residual rewrite where a view or permutation `between` (reading t) stands between the
/// product and the sum's Add: FusedMatMul(mm_in) writes t, and `between` moves after it, writing
/// the sum. `how` ends the --explain line's residual clause.
bool move_after_product(Rewriter& r, Node* mm, Node* add, Node* between, const std::vector<Value*>& mm_in,
                        std::vector<NamedAttribute> mm_attrs, Value* t, const std::string& res_name,
                        const std::string& how) {
  Value* sum = add->outputs[0];
  const std::vector<Value*> between_in = between->inputs;
  const std::vector<NamedAttribute> between_attrs = between->attrs;
  const std::string mm_name = mm->name, between_name = between->name, between_op = between->op_type;
  Replaced gone = r.remove({mm, add});
  Replaced between_gone = r.remove({between});
  Node* fused = r.add("FusedMatMul", mm_in, {t}, mm_name, "ai.fusec", gone.origins);
  fused->attrs = std::move(mm_attrs);
  Node* moved = r.add(between_op, between_in, {sum}, between_name, "", between_gone.origins);
  moved->attrs = between_attrs;
  std::vector<std::string> names = gone.names;
  names.push_back(between_name);
  r.rewrote(gone.listed + " + " + between_gone.listed + " -> " + describe(fused) + " (residual '" + res_name + "', " +
                how + ") + " + describe(moved),
            names, mm_name);
  return true;
}

/// A bare product (as absorb_residual takes) whose output t is read only by an Add whose other
/// summand has t's shape and type: the sum moves into the GEMM as its residual Z.
///   S = Add(t, r)                              =>   S = FusedMatMul(A, W, [b], Z = r)
///   S = Add(View(t), r)                        =>   S = View(FusedMatMul(A, W, [b], Z = View⁻¹(r)))
///   S = Add(Transpose_p(t), Transpose_p(s))    =>   S = Transpose_p(FusedMatMul(A, W, [b], Z = s))
///   S = Add(Transpose_p(t), r)                 =>   S = Transpose_p(FusedMatMul(A, W, [b], Z = Transpose_p⁻¹(r)))
/// The View form is GPT-2's Conv1D (a 2-D Gemm viewed back to [B, S, N]) where no norm follows.
/// The Transpose forms are ConvNeXt's block: its MLP output is permuted back to NCHW before the
/// residual sum; the block's input is a permuted LayerNorm (stage 1), a downsampling conv (the
/// first block of the later stages: its residual is transposed back), or the block before (then
/// Transpose_p of the GEMM before, after this rewrite). The GEMM reads the residual once, where the
/// Add was a pass of its own reading t and r and writing S. On the GPU those permutations are of
/// channels-last tensors to and from NCHW: the 46 Transposes of the optimized ConvNeXt-T took 0.005
/// ms in all before this rewrite added three (fusec profile, H100).
bool absorb_residual_add(Rewriter& r, Node* add) {
  Graph& g = r.graph();
  if (!is_op(add, "Add") || add->outputs.empty() || !add->outputs[0]) return false;
  for (size_t side : {0u, 1u}) {
    Value* u = add->input(side);
    Value* res = add->input(1 - side);
    if (!u || !res || u == res) continue;
    Node* tr = is_op(u->producer, "Transpose") && u->producer->has_attr("perm") ? u->producer : nullptr;
    if (!tr) {
      const ProductSite site = product_site(u);
      if (!site.mm || !fusable_dtype(site.t->type.dtype)) continue;
      const std::string what = describe(site.mm) + " + " + describe(add) + " not merged";
      if (r.opts().portable)
        return r.near_miss(what, "--portable writes standard ops only: a residual needs FusedMatMul");
      std::string why = residual_problem(site, res);
      std::vector<Value*> mm_in;
      std::vector<NamedAttribute> mm_attrs;
      if (why.empty()) why = residual_operands(r, site, res, &mm_in, &mm_attrs);
      if (!why.empty()) return r.near_miss(what, why);
      Value* sum = add->outputs[0];
      const std::string mm_name = site.mm->name;
      if (!site.view) {
        Replaced gone = r.remove({site.mm, add});
        Node* fused = r.add("FusedMatMul", mm_in, {sum}, mm_name, "ai.fusec", gone.origins);
        fused->attrs = mm_attrs;
        r.rewrote(gone.listed + " -> " + describe(fused) + " (residual '" + res->name + "')", gone.names, mm_name);
        return true;
      }
      return move_after_product(r, site.mm, add, site.view, mm_in, mm_attrs, site.t, res->name,
                                "viewed as the product");
    }
    Value* t = tr->input(0);
    // Through the Transpose, the GEMM needs the residual in the product's order: s when the
    // residual is Transpose_p(s) too, else the residual transposed back (made below).
    Node* res_tr = is_op(res->producer, "Transpose") && res->producer->attr_ints("perm") == tr->attr_ints("perm")
                       ? res->producer
                       : nullptr;
    if (res_tr) res = res_tr->input(0);
    Node* mm = bare_product(t);
    if (!mm || mm->op_type == "Gemm" || !fusable_dtype(t->type.dtype)) continue;
    const std::string what = describe(mm) + " + " + describe(add) + " not merged";
    if (r.opts().portable)
      return r.near_miss(what, "--portable writes standard ops only: a residual needs FusedMatMul");
    if (!has_single_use(t) || !has_single_use(u))
      return r.near_miss(what, "the product '" + t->name + "' is read elsewhere too");
    const Value* matched = res_tr ? t : u;  // what the residual must match as it stands
    if (!same_shape_and_type(matched, res) || t->type.dtype != res->type.dtype)
      return r.near_miss(what, "the residual '" + res->name + "' does not have the product's shape and type");
    if (!res_tr) {
      const std::vector<int64_t> perm = tr->attr_ints("perm");
      std::vector<int64_t> inverse(perm.size());
      for (size_t i = 0; i < perm.size(); ++i) inverse[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
      Value* back = g.add_value(res->name + ".permuted");
      back->type = t->type;
      Node* undo = r.add("Transpose", {res}, {back}, g.unique_node_name(tr->name + ".residual"), "", {});
      undo->set_attr("perm", inverse);
      res = back;
    }
    return move_after_product(r, mm, add, tr, {mm->input(0), mm->input(1), mm->input(2), res}, mm->attrs, t, res->name,
                              "the sum's permutation moved after it");
  }
  return false;
}

}  // namespace

bool FuseMatMulBiasPass::run(Graph& g, PassContext& ctx) {
  // Collected first: a rewrite removes the Add/activation nodes after its MatMul. Products fused
  // in earlier sweeps are collected too: their activation may join now (or say again why not).
  std::vector<Node*> matmuls, earlier;
  for (Node* n : g.node_list()) {
    if (is_op(n, "MatMul")) matmuls.push_back(n);
    const bool bare_fused =
        n->op_type == "FusedMatMul" && n->domain == "ai.fusec" && n->attr_string("activation", "").empty();
    if (bare_fused || is_op(n, "Gemm")) earlier.push_back(n);
  }
  Rewriter r(g, ctx, kPass);
  for (Node* n : matmuls) fuse_at(r, n);
  for (Node* n : earlier) fuse_activation_into(r, n);
  // SkipLayerNorms collected before any is rewritten: a rewrite frees its own SkipLayerNorm and
  // the product before it, which a walk over a node list taken earlier would then read.
  std::vector<Node*> skips;
  for (Node* n : g.node_list())
    if (is_skip_norm(n)) skips.push_back(n);
  for (Node* n : skips) absorb_residual(r, n);
  // Then the residual Adds no norm reads: collected first for the same reason.
  std::vector<Node*> adds;
  for (Node* n : g.node_list())
    if (is_op(n, "Add")) adds.push_back(n);
  for (Node* n : adds)
    if (!r.removed(n)) absorb_residual_add(r, n);
  if (r.changed()) g.remove_unused_values();
  return r.changed();
}

}  // namespace fusec
