// Fused ops of the ai.fusec domain: what fusec's passes write where standard ONNX has no single
// op. Semantics are documented in docs/ops.md; each equals the unfused subgraph it replaces.
#include "ir/ops/fused.h"

#include <algorithm>

#include "ir/dim_math.h"
#include "ir/error.h"
#include "ir/op_schema.h"
#include "ir/ops/all_ops.h"

namespace fusec {

namespace {

// Inference/cost borrowed from the standard op the fused op starts with.
const OpSchema& standard(const char* op) {
  const OpSchema* s = OpRegistry::global().find("", op, kFusedBaseOpset);
  if (!s) internal_error(std::string("ai.fusec ops need the standard ") + op + " schema");
  return *s;
}

void infer_like(const char* op, InferContext& c, size_t n_inputs) {
  std::vector<const TypeInfo*> types;
  std::vector<const Tensor*> values;
  for (size_t i = 0; i < n_inputs && i < c.num_inputs(); ++i) {
    types.push_back(c.has_input(i) ? &c.input_type(i) : nullptr);
    values.push_back(c.input_value(i));
  }
  InferContext inner(c.node(), standard(op), kFusedBaseOpset, types, values);
  standard(op).infer(inner);
  c.set_output(0, inner.outputs[0].dtype, inner.outputs[0].shape);
}

void declare_activation(OpSchema& s) {
  s.attr("activation", AttrKind::String, AttrValue{std::string()})
      .attr("activation_params", AttrKind::Floats, AttrValue{std::vector<float>{}});
}

double activation_flops(const std::string& act) {
  if (act.empty()) return 0;
  if (act == "Relu" || act == "Clip" || act == "LeakyRelu") return 1;
  return 4;  // sigmoid/tanh/erf-based: a handful of ops per element
}

/// SkipLayerNorm and SkipSimplifiedLayerNorm: Y and S have the shape of X + skip, which must be X's.
void infer_skip_norm(InferContext& c) {
  c.require_float(0);
  if (c.input_dtype(1) != c.input_dtype(0)) c.fail("X and skip must have the same type");
  std::optional<Shape> s = c.input_shape(0);
  if (s && c.input_shape(1)) s = broadcast_shapes(*s, *c.input_shape(1), c);
  if (s && c.input_shape(0) && s->size() != c.input_shape(0)->size()) c.fail("skip must broadcast to X's shape");
  c.set_output(0, c.input_dtype(0), s);
  c.set_output(1, c.input_dtype(0), s);
}

/// The view Rotary's cos and sin broadcast against: X itself, or with `head_size`, X's last dim
/// split into [W / head_size, head_size]. Empty when X's last dim is not known.
std::optional<Shape> rotary_view(const Shape& x, int64_t head_size, InferContext& c) {
  if (x.empty()) c.fail("X must have rank >= 1");
  if (head_size == 0) return x;
  if (head_size < 0) c.fail("head_size must be positive");
  const Dim& w = x.back();
  if (!w.is_static()) return std::nullopt;
  if (w.value % head_size != 0)
    c.fail("X's last dim " + std::to_string(w.value) + " is not a multiple of head_size " + std::to_string(head_size));
  Shape v(x.begin(), x.end() - 1);
  v.push_back(Dim(w.value / head_size));
  v.push_back(Dim(head_size));
  return v;
}

/// Rotary's optional per-head norm (inputs 3 and 4, `norm`): a scale (and bias) of X's type, [D]
/// or one row of D per rotated head of a row, [R, D]. `view` is the rotated heads' view, or null
/// where X's dims are not known.
void check_rotary_norm(InferContext& c, const Shape* view) {
  const int64_t norm = c.attr_int("norm");
  if (norm < 0 || norm > 2) c.fail("norm must be 0 (none), 1 (RMS) or 2 (LayerNorm)");
  const std::vector<int64_t> groups = c.attr_ints("norm_groups");
  if (norm == 0) {
    if (c.has_input(3) || c.has_input(4)) c.fail("norm_scale and norm_bias need norm 1 or 2");
    if (!groups.empty()) c.fail("norm_groups needs norm 1 or 2");
    return;
  }
  if (!groups.empty()) {
    // Runs of whole heads of a row, covering its rotated heads.
    int64_t sum = 0;
    for (int64_t n : groups) {
      if (n < 1) c.fail("norm_groups must be positive head counts");
      sum += n;
    }
    if (c.attr_int("head_size") <= 0) c.fail("norm_groups needs head_size (runs of the heads of a row)");
    if (view && (*view)[view->size() - 2].is_static() && sum != (*view)[view->size() - 2].value)
      c.fail("norm_groups add up to " + std::to_string(sum) + " heads, not the " + (*view)[view->size() - 2].str() +
             " rotated heads of a row");
  }
  if (!c.has_input(3)) c.fail("norm " + std::to_string(norm) + " needs norm_scale (input 3)");
  for (size_t i : {size_t(3), size_t(4)}) {
    if (!c.has_input(i)) continue;
    const char* name = i == 3 ? "norm_scale" : "norm_bias";
    if (c.input_dtype(i) != c.input_dtype(0)) c.fail(std::string(name) + " must have X's type");
    const std::optional<Shape>& t = c.input_shape(i);
    if (!t || !view) continue;
    const Dim& d = (*c.input_shape(0)).back();
    const int64_t hs = c.attr_int("head_size");
    const Dim head = hs > 0 ? Dim(hs) : d;
    const bool per_head = t->size() == 2 && hs > 0 && (*t)[0] == (*view)[view->size() - 2];
    if (!(t->size() == 1 || per_head) || !(t->back() == head))
      c.fail(std::string(name) + " " + shape_str(*t) + " must be [" + head.str() + "] or [" +
             (*view)[view->size() - 2].str() + ", " + head.str() + "] (one row per rotated head)");
  }
}

void infer_rotary(InferContext& c) {
  c.require_float(0);
  for (size_t i : {size_t(1), size_t(2)})
    if (c.input_dtype(i) != c.input_dtype(0)) c.fail(std::string(i == 1 ? "cos" : "sin") + " must have X's type");
  const std::optional<Shape>& xs = c.input_shape(0);
  if (xs) {
    const int64_t hs = c.attr_int("head_size"), rotated = c.attr_int("rotated");
    const int64_t rotary_dim = c.attr_int("rotary_dim"), interleaved = c.attr_int("interleaved");
    if (interleaved != 0 && interleaved != 1) c.fail("interleaved must be 0 or 1");
    std::optional<Shape> v = rotary_view(*xs, hs, c);
    if (rotary_dim < 0 || rotary_dim % 2 != 0) c.fail("rotary_dim must be even and not negative");
    if (v) {
      if (v->back().is_static() && rotary_dim > v->back().value)
        c.fail("rotary_dim " + std::to_string(rotary_dim) + " is wider than the head's " +
               std::to_string(v->back().value) + " values");
      // Only each head's first rotary_dim values rotate: the tables are that wide.
      if (rotary_dim > 0) v->back() = Dim(rotary_dim);
      if (v->back().is_static() && v->back().value % 2 != 0)
        c.fail("the rotated size " + std::to_string(v->back().value) + " must be even");
    }
    if (rotated != 0) {
      // Only the first rotated / head_size heads rotate: the tables broadcast to those.
      if (hs <= 0 || rotated < 0 || rotated % hs != 0) c.fail("rotated must be a positive multiple of head_size");
      if (v && (*v)[v->size() - 2].is_static()) {
        if (rotated / hs > (*v)[v->size() - 2].value) c.fail("rotated is wider than X's last dim");
        (*v)[v->size() - 2] = Dim(rotated / hs);
      }
    }
    check_rotary_norm(c, v ? &*v : nullptr);
    for (size_t i : {size_t(1), size_t(2)}) {
      const std::optional<Shape>& t = c.input_shape(i);
      if (!v || !t) continue;
      const char* name = i == 1 ? "cos" : "sin";
      if (t->empty() || !(t->back() == v->back()))
        c.fail(std::string(name) + " must have the rotated size " + v->back().str() + " as its last dim");
      if (broadcast_shapes(*v, *t, c) != *v)
        c.fail(std::string(name) + " " + shape_str(*t) + " must broadcast to X's view " + shape_str(*v));
    }
  }
  c.propagate(0);
}

}  // namespace

void register_fused_schemas(OpRegistry& r) {
  // Conv attributes are declared exactly as ONNX Conv declares them.
  auto conv_attrs = [](OpSchema& s) {
    s.attr("auto_pad", AttrKind::String, AttrValue{std::string("NOTSET")})
        .attr("dilations", AttrKind::Ints)
        .attr("group", AttrKind::Int, AttrValue{int64_t{1}})
        .attr("kernel_shape", AttrKind::Ints)
        .attr("pads", AttrKind::Ints)
        .attr("strides", AttrKind::Ints);
  };
  OpSchema& conv = r.add("FusedConv", "ai.fusec").since(1).io(2, 4);
  conv_attrs(conv);
  declare_activation(conv);
  conv.set_infer([](InferContext& c) {
        infer_like("Conv", c, 3);
        if (c.has_input(3) && c.input_shape(3) && c.outputs[0].shape &&
            c.input_shape(3)->size() != c.outputs[0].shape->size())
          c.fail("the residual input must have the conv output's shape");
      })
      .set_cost([](const CostContext& c) {
        // Conv's cost over X, W, B only: it counts every input it is given, and Z is added below
        // (counting it twice put ResNet's residual convs at 127% of the copy peak in the profiler).
        const size_t n = std::min<size_t>(3, c.in_dims.size());
        std::vector<std::vector<int64_t>> in3(c.in_dims.begin(), c.in_dims.begin() + n);
        std::vector<DType> t3(c.in_dtypes.begin(), c.in_dtypes.begin() + n);
        CostContext cc{c.node, in3, t3, c.out_dims, c.out_dtypes};
        Cost k = standard("Conv").cost(cc);
        std::string act = c.node.attr_string("activation", "");
        k.flops += c.out_numel(0) * (activation_flops(act) + (c.has_input(3) ? 1 : 0));
        k.bytes_read += c.in_bytes(3);
        return k;
      })
      .set_doc("Y = act(Conv(X, W, B) + Z)");

  OpSchema& mm = r.add("FusedMatMul", "ai.fusec").since(1).io(2, 4);
  declare_activation(mm);
  mm.set_infer([](InferContext& c) {
      infer_like("MatMul", c, 2);
      if (c.has_input(2) && c.input_shape(2) && c.outputs[0].shape) {
        const Shape& b = *c.input_shape(2);
        if (b.size() != 1) c.fail("the bias must be 1-D");
      }
      // Z, the residual, is added element by element: it has the product's shape and type.
      if (c.has_input(3)) {
        if (c.input_dtype(3) != c.input_dtype(0)) c.fail("the residual Z must have A's type");
        if (c.input_shape(3) && c.outputs[0].shape && *c.input_shape(3) != *c.outputs[0].shape)
          c.fail("the residual Z must have the output's shape " + shape_str(*c.outputs[0].shape));
      }
    })
      .set_cost([](const CostContext& c) {
        std::vector<std::vector<int64_t>> in2(c.in_dims.begin(), c.in_dims.begin() + 2);
        std::vector<DType> t2(c.in_dtypes.begin(), c.in_dtypes.begin() + 2);
        CostContext mc{c.node, in2, t2, c.out_dims, c.out_dtypes};
        Cost k = standard("MatMul").cost(mc);
        k.flops += c.out_numel(0) * ((c.has_input(2) ? 1 : 0) + (c.has_input(3) ? 1 : 0) +
                                     activation_flops(c.node.attr_string("activation", "")));
        k.bytes_read += c.in_bytes(2) + c.in_bytes(3);
        return k;
      })
      .set_doc("Y = act(MatMul(A, B) + bias + Z)");

  // The gated MLP of Llama, Mistral, Qwen, Gemma and T5 v1.1 (SwiGLU, GeGLU): both projections of
  // one input and their gating. The weights stay the model's own tensors (no concatenated copy in
  // the file, and none in memory while optimizing); a backend packs them as its kernels want.
  OpSchema& gm = r.add("GatedMatMul", "ai.fusec").since(1).io(3, 5);
  declare_activation(gm);
  gm.set_infer([](InferContext& c) {
      c.require_float(0);
      for (size_t i = 1; i < 5; ++i)
        if (c.has_input(i) && c.input_dtype(i) != c.input_dtype(0)) c.fail("every input must have A's type");
      const auto& wg = c.input_shape(1);
      const auto& wv = c.input_shape(2);
      if ((wg && wg->size() != 2) || (wv && wv->size() != 2)) c.fail("the weights must be 2-D [K, N]");
      if (wg && wv && *wg != *wv) c.fail("the gate's and the value's weights must have one shape");
      for (size_t i : {size_t{3}, size_t{4}}) {
        if (!c.has_input(i)) continue;
        const auto& b = c.input_shape(i);
        if (b && b->size() != 1) c.fail("the biases must be 1-D [N]");
        if (b && wg && (*b)[0].is_static() && (*wg)[1].is_static() && (*b)[0].value != (*wg)[1].value)
          c.fail("a bias must have the weights' column count N");
      }
      infer_like("MatMul", c, 2);
    })
      .set_cost([](const CostContext& c) {
        // Two products of A (read once) and the output's elements: the gating's product plus the
        // activation and the biases; Y is the only output written.
        std::vector<std::vector<int64_t>> in2(c.in_dims.begin(), c.in_dims.begin() + 2);
        std::vector<DType> t2(c.in_dtypes.begin(), c.in_dtypes.begin() + 2);
        CostContext mc{c.node, in2, t2, c.out_dims, c.out_dtypes};
        Cost k = standard("MatMul").cost(mc);
        k.flops = 2 * k.flops + c.out_numel(0) * (1 + (c.has_input(3) ? 1 : 0) + (c.has_input(4) ? 1 : 0) +
                                                  activation_flops(c.node.attr_string("activation", "")));
        k.bytes_read += c.in_bytes(2) + c.in_bytes(3) + c.in_bytes(4);
        return k;
      })
      .set_doc("Y = act(MatMul(A, Wg) + bg) · (MatMul(A, Wv) + bv)");

  // A mixture of experts' projection as transformers' batched_mm writes it (Mixtral, Qwen-MoE,
  // OLMoE, DeepSeek-V3, GPT-OSS): each row picks its expert's matrix by an index. As exported, the
  // picked matrices are gathered into one [S, M, K] tensor, a copy of an expert's weight per token
  // and pick, then multiplied batched; this op reads the weights where they are.
  OpSchema& em = r.add("ExpertMatMul", "ai.fusec").since(1).io(3, 4);
  em.attr("trans_w", AttrKind::Int, AttrValue{int64_t{0}}).attr("repeat", AttrKind::Int, AttrValue{int64_t{1}});
  em.set_infer([](InferContext& c) {
      c.require_float(0);
      if (c.input_dtype(1) != c.input_dtype(0) || (c.has_input(3) && c.input_dtype(3) != c.input_dtype(0)))
        c.fail("X, W and B must have one type");
      const DType it = c.input_dtype(2);
      if (it != DType::Int64 && it != DType::Int32) c.fail("the indices must be int64 or int32");
      const int64_t repeat = c.attr_int("repeat"), trans = c.attr_int("trans_w");
      if (repeat < 1) c.fail("repeat must be at least 1");
      if (trans != 0 && trans != 1) c.fail("trans_w must be 0 or 1");
      const auto& x = c.input_shape(0);
      const auto& w = c.input_shape(1);
      const auto& idx = c.input_shape(2);
      if (x && x->size() != 2) c.fail("X must be 2-D [N, K]");
      if (w && w->size() != 3) c.fail(trans ? "W must be 3-D [E, M, K]" : "W must be 3-D [E, K, M]");
      if (idx && idx->size() != 1) c.fail("the indices must be 1-D [S]");
      const Dim k = w ? (*w)[trans ? 2 : 1] : Dim{}, m = w ? (*w)[trans ? 1 : 2] : Dim{};
      if (x && w && (*x)[1].is_static() && k.is_static() && (*x)[1].value != k.value)
        c.fail("X has " + std::to_string((*x)[1].value) + " columns where W's matrices have " +
               std::to_string(k.value) + " rows to multiply");
      if (x && idx && (*x)[0].is_static() && (*idx)[0].is_static() &&
          dims::mul((*x)[0].value, repeat, c, "rows read") != (*idx)[0].value)
        c.fail("X's " + std::to_string((*x)[0].value) + " rows, each read " + std::to_string(repeat) +
               " times, are not the indices' " + std::to_string((*idx)[0].value));
      if (c.has_input(3)) {
        const auto& b = c.input_shape(3);
        if (b &&
            (b->size() != 2 || (w && (*w)[0].is_static() && (*b)[0].is_static() && (*b)[0].value != (*w)[0].value) ||
             (m.is_static() && (*b)[1].is_static() && (*b)[1].value != m.value)))
          c.fail("B must be [E, M], a bias row per expert");
      }
      if (!idx || !w) return c.set_output(0, c.input_dtype(0), std::nullopt);
      c.set_output(0, c.input_dtype(0), Shape{(*idx)[0], m});
    })
      .set_cost([](const CostContext& c) {
        Cost k;
        const auto& w = c.in_dims[1];
        if (w.size() != 3) return k;
        const bool trans = c.node.attr_int("trans_w", 0) != 0;
        const double experts = static_cast<double>(w[0]), inner = static_cast<double>(trans ? w[2] : w[1]);
        // The weights are read once per expert used: at most all of them, at most one per row.
        const double used = experts > 0 ? std::min(experts, c.in_numel(2)) / experts : 0;
        k.flops = 2 * c.out_numel(0) * inner + (c.has_input(3) ? c.out_numel(0) : 0);
        k.bytes_read = c.in_bytes(0) + c.in_bytes(1) * used + c.in_bytes(2) + c.in_bytes(3) * used;
        k.bytes_written = c.out_bytes(0);
        return k;
      })
      .set_doc("Y[s] = X[s / repeat] · W[indices[s]] (+ B[indices[s]]); with trans_w, W[indices[s]]ᵀ");

  // A squeeze-and-excite block (MobileNetV3, EfficientNet, RegNetY): X scaled per channel by a
  // gate computed from X's mean over its spatial dims through two 1x1 convs. One node, so that a
  // backend can run the pooling and both layers in one kernel and the scaling in a second.
  OpSchema& se = r.add("SqueezeExcite", "ai.fusec").since(1).io(3, 5);
  declare_activation(se);
  se.attr("gate", AttrKind::String, AttrValue{std::string("Sigmoid")})
      .attr("gate_params", AttrKind::Floats, AttrValue{std::vector<float>{}});
  se.set_infer([](InferContext& c) {
      c.require_float(0);
      for (size_t i = 1; i < 5; ++i)
        if (c.has_input(i) && c.input_dtype(i) != c.input_dtype(0)) c.fail("every input must have X's type");
      const std::optional<Shape>& xs = c.input_shape(0);
      if (xs && xs->size() < 3) c.fail("X must be [N, C, spatial...]");
      // W1 [Cr, C, 1...] and W2 [C, Cr, 1...]: the two 1x1 convs over the pooled [N, C, 1...].
      const std::optional<Shape>&w1 = c.input_shape(1), &w2 = c.input_shape(2);
      for (const auto* w : {&w1, &w2}) {
        if (!*w) continue;
        if (xs && (*w)->size() != xs->size()) c.fail("the weights must have X's rank (1x1 conv weights)");
        for (size_t d = 2; d < (*w)->size(); ++d)
          if (!((**w)[d] == Dim(1))) c.fail("the weights must be 1x1 conv weights [out, in, 1...]");
      }
      auto same = [](const Dim& a, const Dim& b) { return !a.is_static() || !b.is_static() || a.value == b.value; };
      if (w1 && w2 && w1->size() >= 2 && w2->size() >= 2 && (!same((*w1)[0], (*w2)[1]) || !same((*w1)[1], (*w2)[0])))
        c.fail("W1 " + shape_str(*w1) + " and W2 " + shape_str(*w2) + " are not [Cr, C, 1...] and [C, Cr, 1...]");
      if (xs && w1 && w1->size() >= 2 && !same((*xs)[1], (*w1)[1]))
        c.fail("W1 " + shape_str(*w1) + " does not take X's " + (*xs)[1].str() + " channels");
      for (size_t i : {size_t{3}, size_t{4}}) {
        if (!c.has_input(i) || !c.input_shape(i)) continue;
        const Shape& b = *c.input_shape(i);
        const std::optional<Shape>& w = i == 3 ? w1 : w2;
        if (b.size() != 1 || (w && !w->empty() && !same(b[0], (*w)[0])))
          c.fail(std::string(i == 3 ? "B1" : "B2") + " must be 1-D, one value per output channel of its layer");
      }
      c.propagate(0);
    })
      .set_cost([](const CostContext& c) {
        // X is read twice (the pooling, then the scaling); each layer is an [N, in] x [in, out]
        // product; the activation runs on N x Cr values, the gate on N x C.
        const auto& w1 = c.in_dims[1];
        const double n = c.in_dims[0].empty() ? 1 : static_cast<double>(c.in_dims[0][0]);
        const double cr = w1.size() > 1 ? static_cast<double>(w1[0]) : 0,
                     ch = w1.size() > 1 ? static_cast<double>(w1[1]) : 0;
        Cost k;
        k.flops = 2 * c.in_numel(0) + 4 * n * cr * ch +
                  n * cr * activation_flops(c.node.attr_string("activation", "")) +
                  n * ch * activation_flops(c.node.attr_string("gate", "Sigmoid"));
        k.bytes_read = c.all_in_bytes() + c.in_bytes(0);
        k.bytes_written = c.all_out_bytes();
        return k;
      })
      .set_doc("Y = X * gate(Conv(act(Conv(GlobalAveragePool(X), W1, B1)), W2, B2))");

  auto ln_like = [&](const char* name, int min_in, int max_in, int max_out, double flops_per_elem) -> OpSchema& {
    return r.add(name, "ai.fusec")
        .since(1)
        .io(min_in, max_in, 1, max_out)
        .attr("axis", AttrKind::Int, AttrValue{int64_t{-1}})
        .attr("epsilon", AttrKind::Float, AttrValue{1e-5f})
        .set_cost([flops_per_elem](const CostContext& c) { return cost_elementwise(c, flops_per_elem); });
  };
  ln_like("LayerNormGelu", 2, 3, 1, 8 + 8)
      .attr("approximate", AttrKind::String, AttrValue{std::string("none")})
      .set_infer([](InferContext& c) {
        c.require_float(0);
        normalize_axis(c.attr_int("axis"), static_cast<int64_t>(c.input_rank(0)), c);
        c.propagate(0);
      })
      .set_doc("Y = Gelu(LayerNormalization(X, scale, bias))");
  ln_like("SkipLayerNorm", 3, 4, 2, 8 + 1)
      .set_infer(infer_skip_norm)
      .set_doc("S = X + skip; Y = LayerNormalization(S, scale, bias); outputs Y and (optionally) S");
  r.add("Rotary", "ai.fusec")
      .since(1)
      .io(3, 5)
      .attr("head_size", AttrKind::Int, AttrValue{int64_t{0}})
      .attr("rotated", AttrKind::Int, AttrValue{int64_t{0}})
      .attr("rotary_dim", AttrKind::Int, AttrValue{int64_t{0}})
      .attr("interleaved", AttrKind::Int, AttrValue{int64_t{0}})
      .attr("norm", AttrKind::Int, AttrValue{int64_t{0}})
      .attr("epsilon", AttrKind::Float, AttrValue{1e-5f})
      .attr("norm_groups", AttrKind::Ints, AttrValue{std::vector<int64_t>{}})
      .set_infer(infer_rotary)
      .set_cost([](const CostContext& c) { return cost_elementwise(c, c.has_input(3) ? 7 : 3); })
      .set_doc(
          "Y = X * cos + rotate(X) * sin over each head of head_size values (0: X's last dim), rotate "
          "pairing (j, j + r/2) or, with `interleaved`, (2i, 2i + 1) of the head's first r = rotary_dim "
          "values (0: all; the rest copied); with `rotated`, only the heads in X's first `rotated` "
          "values, the others copied; with `norm` (1: RMS, 2: LayerNorm; inputs norm_scale [, norm_bias]), "
          "each rotated head is normalized over its values first (QK-norm), or with `norm_groups` each run "
          "of that many rotated heads over all its values (OLMo 2's norm over the whole projection)");

  ln_like("SkipSimplifiedLayerNorm", 3, 3, 2, 4 + 1)
      .set_infer(infer_skip_norm)
      .set_doc("S = X + skip; Y = SimplifiedLayerNorm(S, scale); outputs Y and (optionally) S");
  ln_like("SimplifiedLayerNorm", 2, 2, 1, 4)
      .set_infer([](InferContext& c) {
        c.require_float(0);
        normalize_axis(c.attr_int("axis"), static_cast<int64_t>(c.input_rank(0)), c);
        c.propagate(0);
      })
      .set_doc("Y = X / sqrt(mean(X^2 over axes >= axis) + epsilon) * scale  (RMSNorm)");
}

}  // namespace fusec
