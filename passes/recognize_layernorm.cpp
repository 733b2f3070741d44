// recognize_layernorm: LayerNorm and RMSNorm subgraphs become LayerNormalization and
// ai.fusec SimplifiedLayerNorm.
//
//   LayerNorm, two-pass variance (PyTorch, TensorFlow, Keras exporters):
//
//     x ─┬─ ReduceMean ──▶ μ ─┐
//        └──────────────── Sub(x, μ) ──▶ d ─┬─ Pow(d, 2) | Mul(d, d) ── ReduceMean ──▶ σ²
//                                           │
//     σ² ── Add(ε) ─┬─ Sqrt ──▶ s ── Div(d, s) | Mul(d, Reciprocal(s)) ──┐
//                   └─ Pow(·, −½) ── Mul(d, ·) ──────────────────────────┴─ [Mul(γ)] ── [Add(β)] ──▶ y
//
//   one-pass variance (the ONNX LayerNormalization function body):  σ² = ReduceMean(x·x) − μ·μ
//
//     y = (x − μ) / √(σ² + ε) · γ + β   =>   LayerNormalization(x, γ or ones, β; axis, epsilon)
//
//   RMSNorm:
//
//     x ── Pow(x, 2) | Mul(x, x) ── ReduceMean ── Add(ε) ── Sqrt ── Div(x, ·) | Mul(x, Reciprocal(·)) ── [Mul(γ)]
//
//     y = x / √(mean(x²) + ε) · γ       =>   ai.fusec SimplifiedLayerNorm(x, γ or ones; axis, epsilon)
//
// (--portable: the standard RMSNormalization where the model's opset is 23 or later.) The standard
// RMSNormalization an exporter wrote (torch's at opset 23) becomes SimplifiedLayerNorm too, so that
// the fusions after this pass read one form.
//
// The ReduceMeans reduce the same trailing, contiguous axes with keepdims=1 (axes as an attribute up
// to opset 17, as an input from 18; negative or positive); the fused op's axis is the first of them.
// γ and β may be constants or graph inputs; they must vary only along the normalized axes. A Mul/Add
// after the normalization whose other operand is a non-constant that also varies along other axes
// (a residual, a mask) is not an affine parameter: the match stops before it.
//
// μ and 1/s may also be read outside the pattern: they are LayerNormalization's optional Mean and
// InvStdDev outputs (float32, stash_type 1), so the function body's three outputs come from one node.
// The function body computes on a 2-D view of X:
//
//     X ── Flatten(·, a) ── ...LayerNorm over axis 1... ── Reshape(·, shape(X)) ──▶ Y
//     μ, 1/s ── Reshape(·, X.shape[:a] + [1, 1, ...]) ──▶ Mean, InvStdDev;   γ, β = Flatten(W, 0), Flatten(B, 0)
//
// When the views only reshape (static shapes), the LayerNormalization reads X itself with axis a
// and W, B as they are, so the whole body collapses into one node; otherwise it runs on the view.
#include "passes/recognize_layernorm.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <unordered_map>

#include "ir/half.h"
#include "passes/pattern.h"
#include "passes/rewrite.h"

namespace fusec {

namespace {

constexpr int64_t kRmsNormOpset = 23;  // RMSNormalization

struct NormMatch {
  bool rms = false;
  Value* x = nullptr;                // what the statistics are computed over
  std::vector<const Node*> reduces;  // the ReduceMeans (their axes must agree)
  Value* var = nullptr;              // σ² (LayerNorm) or mean(x²) (RMSNorm)
  Value* eps = nullptr;
  Value* mean = nullptr;        // μ: may be read outside the pattern (-> Mean)
  Value* inv = nullptr;         // 1/s where the graph computes it: may be read outside (-> InvStdDev)
  Value* normalized = nullptr;  // before the affine Mul/Add
  Value* gamma = nullptr;
  Value* beta = nullptr;
  Value* y = nullptr;
  std::vector<Node*> nodes;   // every node the fused node replaces
  std::vector<Value*> inner;  // read only inside the pattern
  int64_t axis = -1;          // first normalized axis of x
};

template <class F>
Node* reader(const Value* v, const char* op, F ok) {
  if (!v) return nullptr;
  for (Node* c : v->consumers)
    if (is_op(c, op) && ok(c) && !c->outputs.empty() && c->outputs[0]) return c;
  return nullptr;
}

bool is_constant_exactly(const Value* v, double want) {
  auto c = uniform_constant(v);
  return c && *c == want;
}

/// n computes v² as Pow(v, 2) or Mul(v, v).
bool squares(const Node* n, const Value* v) {
  if (!n || n->inputs.size() != 2 || n->inputs[0] != v) return false;
  if (is_op(n, "Mul")) return n->inputs[1] == v;
  return is_op(n, "Pow") && is_constant_exactly(n->inputs[1], 2.0);
}

bool inside(const NormMatch& m, const Node* n) { return std::find(m.nodes.begin(), m.nodes.end(), n) != m.nodes.end(); }

/// Read outside the pattern (or a graph output).
bool escapes(const NormMatch& m, const Value* v) {
  if (!v) return false;
  if (v->is_graph_output) return true;
  for (const Node* c : v->consumers)
    if (!inside(m, c)) return true;
  return false;
}

int64_t rank_of(const Value* v) { return v && v->type.shape ? static_cast<int64_t>(v->type.shape->size()) : -1; }

std::string axes_str(const std::vector<int64_t>& a) {
  std::string s = "[";
  for (size_t i = 0; i < a.size(); ++i) s += (i ? ", " : "") + std::to_string(a[i]);
  return s + "]";
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// ---- structure ----

/// From σ² (or mean(x²)): Add(ε) -> Sqrt -> Div(d, s) | Reciprocal -> Mul(d, ·), or Pow(·, −½) -> Mul(d, ·).
bool match_tail(Value* var, Value* d, NormMatch& m) {
  Node* add = reader(var, "Add", [&](Node* n) { return other_input(n, var) && other_input(n, var) != var; });
  if (!add) return false;
  m.var = var;
  m.eps = other_input(add, var);
  m.nodes.push_back(add);
  m.inner.push_back(var);
  Value* ve = add->outputs[0];
  m.inner.push_back(ve);
  auto mul_by = [&](Value* r) { return reader(r, "Mul", [&](Node* n) { return other_input(n, r) == d && d != r; }); };
  Node* norm = nullptr;
  if (Node* sq = reader(ve, "Sqrt", [](Node*) { return true; })) {
    Value* s = sq->outputs[0];
    m.nodes.push_back(sq);
    m.inner.push_back(s);
    Node* rc = reader(s, "Reciprocal", [](Node*) { return true; });
    if (Node* div = reader(s, "Div", [&](Node* n) { return n->input(0) == d && n->input(1) == s; })) {
      norm = div;
      // A Reciprocal of s read outside is InvStdDev (the function body's third output).
      if (rc && !m.rms) {
        m.nodes.push_back(rc);
        m.inv = rc->outputs[0];
      }
    } else if (rc && (norm = mul_by(rc->outputs[0]))) {
      m.nodes.push_back(rc);
      m.inv = rc->outputs[0];
    } else {
      return false;
    }
  } else if (Node* pw = reader(ve, "Pow",
                               [&](Node* n) { return n->input(0) == ve && is_constant_exactly(n->input(1), -0.5); })) {
    norm = mul_by(pw->outputs[0]);
    if (!norm) return false;
    m.nodes.push_back(pw);
    m.inv = pw->outputs[0];
  } else {
    return false;
  }
  m.nodes.push_back(norm);
  if (m.rms && m.inv) m.inner.push_back(m.inv);
  m.normalized = norm->outputs[0];
  return true;
}

/// μ = ReduceMean(x) -> d = Sub(x, μ) -> σ² (two-pass or one-pass) -> match_tail.
bool match_layernorm(Node* r1, NormMatch& m) {
  Value* x = r1->input(0);
  Value* mu = r1->outputs.empty() ? nullptr : r1->outputs[0];
  if (!x || !mu) return false;
  Node* sub = reader(mu, "Sub", [&](Node* n) { return n->input(0) == x && n->input(1) == mu; });
  if (!sub) return false;
  Value* d = sub->outputs[0];
  m.x = x;
  m.mean = mu;
  m.reduces = {r1};
  m.nodes = {r1, sub};
  Value* var = nullptr;
  for (Node* sq : d->consumers) {  // two-pass: σ² = mean(d²)
    if (!squares(sq, d)) continue;
    Value* sqv = sq->outputs[0];
    Node* r2 = reader(sqv, "ReduceMean", [&](Node* n) { return n->input(0) == sqv; });
    if (!r2) continue;
    m.nodes.insert(m.nodes.end(), {sq, r2});
    m.reduces.push_back(r2);
    m.inner.push_back(sqv);
    var = r2->outputs[0];
    break;
  }
  if (!var) {  // one-pass: σ² = mean(x²) − μ²
    for (Node* mm : mu->consumers) {
      if (!squares(mm, mu)) continue;
      Value* m2 = mm->outputs[0];
      Node* vs = reader(m2, "Sub", [&](Node* n) { return n->input(1) == m2; });
      Node* r2 = vs && vs->input(0) ? vs->input(0)->producer : nullptr;
      if (!is_op(r2, "ReduceMean") || !r2->input(0)) continue;
      Node* sq = r2->input(0)->producer;
      if (!squares(sq, x)) continue;
      m.nodes.insert(m.nodes.end(), {mm, vs, r2, sq});
      m.reduces.push_back(r2);
      m.inner.insert(m.inner.end(), {m2, r2->outputs[0], sq->outputs[0]});
      var = vs->outputs[0];
      break;
    }
  }
  if (!var) return false;
  m.inner.push_back(d);
  return match_tail(var, d, m);
}

/// ReduceMean(x²) -> match_tail with d = x. (x − μ)² belongs to a LayerNorm, not an RMSNorm.
bool match_rms(Node* r, NormMatch& m) {
  Value* sqv = r->input(0);
  Node* sq = sqv ? sqv->producer : nullptr;
  if (!sq || !squares(sq, sq->input(0))) return false;
  Value* x = sq->input(0);
  if (r->outputs.empty() || !r->outputs[0]) return false;
  if (Node* s = x->producer; is_op(s, "Sub") && s->input(1)) {
    Node* mean = s->input(1)->producer;
    if (is_op(mean, "ReduceMean") && mean->input(0) == s->input(0)) return false;
  }
  m.rms = true;
  m.x = x;
  m.reduces = {r};
  m.nodes = {sq, r};
  m.inner = {sqv};
  return match_tail(r->outputs[0], x, m);
}

// ---- guards ----

/// Sets m.axis from the ReduceMeans, or says why they do not reduce the trailing axes alike.
std::string check_reduces(NormMatch& m) {
  int64_t rank = rank_of(m.x);
  if (rank <= 0) return "the input's rank is unknown";
  std::vector<int64_t> first;
  for (const Node* r : m.reduces) {
    if (r->attr_int("keepdims", 1) == 0)
      return describe(r) + " has keepdims=0; the normalization needs the reduced axes kept";
    std::string why;
    auto axes = reduced_axes(r, rank, &why);
    if (!axes) return why;
    if (r == m.reduces.front())
      first = *axes;
    else if (*axes != first)
      return "the ReduceMeans reduce different axes: " + axes_str(first) + " and " + axes_str(*axes);
  }
  for (size_t i = 0; i < first.size(); ++i)
    if (first[i] != rank - static_cast<int64_t>(first.size()) + static_cast<int64_t>(i))
      return describe(m.reduces.front()) + " reduces axes " + axes_str(first) + " of a rank-" + std::to_string(rank) +
             " input; LayerNormalization normalizes trailing contiguous axes only (wrong axis)";
  m.axis = first.front();
  return "";
}

enum class Param { NotParam, Bad, Ok };

/// Whether `p` (the other operand of a Mul/Add after the normalization) is an affine parameter:
/// it must vary only along x's normalized axes. A non-constant that does not is not a parameter at
/// all (a residual, a mask); a constant that does not is a near-miss.
Param classify(const Value* p, const Value* x, int64_t axis, const char* role, std::string* why) {
  bool constant = constant_of(p) != nullptr;
  auto bad = [&](const std::string& w) {
    *why = std::string(role) + " '" + p->name + "' " + w;
    return constant ? Param::Bad : Param::NotParam;
  };
  if (p->type.dtype != x->type.dtype) return bad("has another type than the input");
  if (!p->type.shape) return bad("has an unknown shape");
  const Shape& ps = *p->type.shape;
  const Shape& xs = *x->type.shape;
  if (ps.size() > xs.size()) return bad("of shape " + shape_str(ps) + " has a higher rank than the input");
  for (size_t k = 0; k < ps.size(); ++k) {
    size_t pos = xs.size() - ps.size() + k;
    bool one = ps[k].is_static() && ps[k].value == 1;
    if (static_cast<int64_t>(pos) < axis ? !one : !(one || ps[k] == xs[pos]))
      return bad("of shape " + shape_str(ps) + " is not broadcastable along the normalized axes of " + shape_str(xs) +
                 " alone");
  }
  return Param::Ok;
}

/// The affine Mul(γ) and Add(β) after the normalization, as far as they are parameters.
std::string match_affine(NormMatch& m) {
  Value* cur = m.normalized;
  const char* ops[] = {"Mul", "Add"};
  const char* roles[] = {"scale", "bias"};
  for (int i = 0; i < (m.rms ? 1 : 2); ++i) {
    if (!has_single_use(cur)) break;
    Node* c = cur->consumers[0];
    Value* p = is_op(c, ops[i]) ? other_input(c, cur) : nullptr;
    if (!p || p == cur) continue;
    std::string why;
    Param k = classify(p, m.x, m.axis, roles[i], &why);
    if (k == Param::Bad) return why;
    if (k == Param::NotParam) break;
    (i == 0 ? m.gamma : m.beta) = p;
    m.nodes.push_back(c);
    m.inner.push_back(cur);
    cur = c->outputs[0];
  }
  m.y = cur;
  return "";
}

std::string check_rest(const NormMatch& m) {
  const Tensor* e = constant_of(m.eps);
  if (!e) return "epsilon '" + m.eps->name + "' is not a constant";
  if (e->numel() != 1) return "epsilon '" + m.eps->name + "' has " + std::to_string(e->numel()) + " elements, not one";
  if (static_cast<int64_t>(e->rank()) > rank_of(m.var)) return "epsilon '" + m.eps->name + "' broadcasts the variance";
  if (!(e->as_double(0) >= 0)) return "epsilon " + num(e->as_double(0)) + " is negative";
  for (const Value* v : m.inner) {
    if (v->is_graph_output)
      return "'" + v->name + "' is a graph output; the pattern's intermediates must be read only inside it";
    for (const Node* c : v->consumers)
      if (!inside(m, c))
        return "'" + v->name + "' has " + std::to_string(use_count(v)) + " consumers (" + describe(c) +
               " reads it outside the pattern)";
  }
  if (!is_float(m.x->type.dtype))
    return std::string("the input is ") + dtype_name(m.x->type.dtype) + "; normalization takes floating-point types";
  if ((escapes(m, m.mean) || escapes(m, m.inv)) && m.x->type.dtype != DType::Float32)
    return std::string("the mean or inverse deviation is read elsewhere and the input is ") +
           dtype_name(m.x->type.dtype) + "; LayerNormalization's Mean/InvStdDev outputs are float32";
  if (m.x->type.shape && m.y->type.shape && *m.x->type.shape != *m.y->type.shape)
    return "the output shape " + shape_str(*m.y->type.shape) + " differs from the input's " +
           shape_str(*m.x->type.shape);
  return "";
}

// ---- parameters ----

/// A tensor of `dtype` with element i = at(i).
Tensor make_tensor(DType dtype, const std::vector<int64_t>& dims, const std::function<double(int64_t)>& at) {
  Tensor t(dtype, dims);
  for (int64_t i = 0; i < t.numel(); ++i) {
    double v = at(i);
    switch (dtype) {
      case DType::Float32:
        t.data<float>()[i] = static_cast<float>(v);
        break;
      case DType::Float64:
        t.data<double>()[i] = v;
        break;
      case DType::Float16:
        t.data<uint16_t>()[i] = float_to_half(static_cast<float>(v));
        break;
      case DType::BFloat16:
        t.data<uint16_t>()[i] = float_to_bf16(static_cast<float>(v));
        break;
      default:
        break;
    }
  }
  return t;
}

std::optional<std::vector<int64_t>> static_tail(const Shape& s, size_t from) {
  std::vector<int64_t> out;
  for (size_t i = from; i < s.size(); ++i) {
    if (!s[i].is_static()) return std::nullopt;
    out.push_back(s[i].value);
  }
  return out;
}

/// How the fused node gets one parameter: an existing value, or a new initializer.
struct ParamPlan {
  Value* value = nullptr;  // use as is
  std::optional<Tensor> data;
};

/// γ or β (`p`, broadcast against the view `xs` normalized from `axis`) as a tensor of exactly
/// the normalized shape `target` (what LayerNormalization in onnxruntime wants); p == nullptr:
/// ones (γ absent).
std::optional<ParamPlan> plan_param(const Value* p, const Value* x, int64_t axis, const Shape& target,
                                    std::string* why) {
  ParamPlan plan;
  if (p && p->type.shape && *p->type.shape == target && is_static(target)) {
    plan.value = const_cast<Value*>(p);
    return plan;
  }
  auto tdims = static_tail(target, 0);
  auto xdims = static_tail(*x->type.shape, static_cast<size_t>(axis));
  if (!p) {
    if (!tdims) {
      *why = "the normalized dims " + shape_str(target) + " are not static, so no unit scale can be written";
      return std::nullopt;
    }
    plan.data = make_tensor(x->type.dtype, *tdims, [](int64_t) { return 1.0; });
    return plan;
  }
  if (const Tensor* t = constant_of(p)) {
    if (!tdims || !xdims) {
      *why = "the normalized dims are not static, so '" + p->name + "' cannot be expanded to them";
      return std::nullopt;
    }
    // Element j of the flattened normalized dims reads p at the broadcast index.
    std::vector<int64_t> pd = t->dims();
    size_t n = xdims->size();
    plan.data = make_tensor(x->type.dtype, *tdims, [&](int64_t j) {
      int64_t src = 0, stride = 1, rest = j;
      std::vector<int64_t> idx(n);
      for (size_t k = n; k-- > 0;) {
        idx[k] = rest % (*xdims)[k];
        rest /= (*xdims)[k];
      }
      for (size_t k = pd.size(); k-- > 0;) {
        size_t xk = n - (pd.size() - k);  // pd's trailing dims align with the normalized dims
        int64_t i = (xk < n && pd[k] != 1) ? idx[xk] : 0;
        src += i * stride;
        stride *= pd[k];
      }
      return t->as_double(src);
    });
    return plan;
  }
  // A graph input seen through a view (the function body's Flatten(W, 0)).
  Node* view = p->producer;
  if (view && view->domain.empty() &&
      (view->op_type == "Flatten" || view->op_type == "Reshape" || view->op_type == "Unsqueeze" ||
       view->op_type == "Squeeze")) {
    Value* w = view->input(0);
    if (w && w->type.shape && *w->type.shape == target && is_static(target)) {
      plan.value = w;
      return plan;
    }
  }
  *why = "'" + p->name + "' has shape " + (p->type.shape ? shape_str(*p->type.shape) : "?") +
         ", is not a constant and is not a view of a value of the normalized shape " + shape_str(target);
  return std::nullopt;
}

// ---- where the fused node reads and writes ----

struct Plan {
  Value* x = nullptr;
  int64_t axis = 0;
  ParamPlan scale, bias;
  bool has_bias = false;
  Value* y = nullptr;
  Value* mean = nullptr;  // LayerNormalization outputs 1 and 2, if read
  Value* inv = nullptr;
  std::vector<Node*> extra;  // view nodes the fused node also replaces
};

int64_t product(const Shape& s, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to; ++i) p *= s[i].value;
  return p;
}

/// `v`'s readers outside the pattern get `want`: v itself has that shape, or its one outside
/// reader is a Reshape to it (which the fused node then replaces). nullptr when neither.
Value* reshaped_statistic(const NormMatch& m, Value* v, const Shape& want, std::vector<Node*>& extra) {
  if (v->type.shape && *v->type.shape == want) return v;
  if (v->is_graph_output) return nullptr;
  Node* only = nullptr;
  for (Node* c : v->consumers) {
    if (inside(m, c)) continue;
    if (only) return nullptr;
    only = c;
  }
  if (!is_op(only, "Reshape") || only->input(0) != v || !only->outputs[0] || !only->outputs[0]->type.shape ||
      *only->outputs[0]->type.shape != want)
    return nullptr;
  extra.push_back(only);
  return only->outputs[0];
}

/// The function body's form: x = Flatten/Reshape(X) and y read only by a Reshape back to X's
/// shape. Then the fused node reads X (axis a), writes the Reshape's output, and the views go.
std::optional<Plan> plan_unflattened(const NormMatch& m) {
  Node* view = m.x->producer;
  if (!view || !view->domain.empty() || (view->op_type != "Flatten" && view->op_type != "Reshape")) return std::nullopt;
  Value* X = view->input(0);
  if (!X || !X->type.shape || !is_static(*X->type.shape) || !is_static(*m.x->type.shape)) return std::nullopt;
  const Shape& xs = *X->type.shape;
  const Shape& vs = *m.x->type.shape;
  int64_t inner = product(vs, static_cast<size_t>(m.axis), vs.size());
  std::optional<int64_t> a;
  for (size_t i = 0; i < xs.size(); ++i)
    if (product(xs, i, xs.size()) == inner) {
      a = static_cast<int64_t>(i);
      break;
    }
  if (view->op_type == "Flatten") {
    int64_t fa = view->attr_int("axis", 1);
    if (fa < 0) fa += static_cast<int64_t>(xs.size());
    if (fa < static_cast<int64_t>(xs.size()) && product(xs, static_cast<size_t>(fa), xs.size()) == inner) a = fa;
  }
  if (!a) return std::nullopt;
  Plan p;
  p.x = X;
  p.axis = *a;
  // Y: y's only reader reshapes it back to X's shape.
  if (!has_single_use(m.y)) return std::nullopt;
  Node* back = m.y->consumers[0];
  if (!is_op(back, "Reshape") || back->input(0) != m.y || !back->outputs[0] || !back->outputs[0]->type.shape ||
      *back->outputs[0]->type.shape != xs)
    return std::nullopt;
  p.y = back->outputs[0];
  p.extra.push_back(back);
  Shape stats(xs.begin(), xs.begin() + *a);
  stats.resize(xs.size(), Dim(1));
  if (escapes(m, m.mean) && !(p.mean = reshaped_statistic(m, m.mean, stats, p.extra))) return std::nullopt;
  if (escapes(m, m.inv) && !(p.inv = reshaped_statistic(m, m.inv, stats, p.extra))) return std::nullopt;
  Shape target(xs.begin() + *a, xs.end());
  std::string why;
  auto scale = plan_param(m.gamma, m.x, m.axis, target, &why);
  auto bias = m.beta ? plan_param(m.beta, m.x, m.axis, target, &why) : std::optional<ParamPlan>(ParamPlan{});
  if (!scale || !bias) return std::nullopt;
  p.scale = *scale;
  p.bias = *bias;
  p.has_bias = m.beta != nullptr;
  // The Flatten goes too when only the pattern read its output.
  bool view_only_inside = !m.x->is_graph_output;
  for (const Node* c : m.x->consumers) view_only_inside &= inside(m, c);
  if (view_only_inside) p.extra.push_back(view);
  return p;
}

std::optional<Plan> plan_direct(const NormMatch& m, std::string* why) {
  Plan p;
  p.x = m.x;
  p.axis = m.axis;
  p.y = m.y;
  if (escapes(m, m.mean)) p.mean = m.mean;
  if (escapes(m, m.inv)) p.inv = m.inv;
  const Shape& xs = *m.x->type.shape;
  Shape target(xs.begin() + m.axis, xs.end());
  auto scale = plan_param(m.gamma, m.x, m.axis, target, why);
  if (!scale) return std::nullopt;
  p.scale = *scale;
  if (m.beta) {
    auto bias = plan_param(m.beta, m.x, m.axis, target, why);
    if (!bias) return std::nullopt;
    p.bias = *bias;
    p.has_bias = true;
  }
  return p;
}

/// The standard RMSNormalization (opset 23) as ai.fusec SimplifiedLayerNorm, the form the later
/// fusions (the residual's, QK-norm's) read: where the two compute the same thing, so with X and
/// scale of one type, scale holding the normalized dims' values, and float32 statistics.
void standard_rmsnorms_to_fusec(Graph& g, Rewriter& r) {
  for (Node* n : g.node_list()) {
    if (!is_op(n, "RMSNormalization")) continue;
    const std::string what = "RMSNormalization at " + describe(n);
    Value* x = n->inputs[0];
    Value* scale = n->inputs.size() > 1 ? n->inputs[1] : nullptr;
    if (!scale || !x->type.shape || !scale->type.shape) {
      r.near_miss(what + " kept", "X's or scale's shape is not known");
      continue;
    }
    if (x->type.dtype != scale->type.dtype) {
      r.near_miss(what + " kept", "scale is stored in another type than X");
      continue;
    }
    if (n->attr_int("stash_type", 1) != 1) {
      r.near_miss(what + " kept", "stash_type " + std::to_string(n->attr_int("stash_type", 1)) + ", not 1 (float)");
      continue;
    }
    const Shape& xs = *x->type.shape;
    const int64_t rank = static_cast<int64_t>(xs.size());
    int64_t axis = n->attr_int("axis", -1);
    if (axis < 0) axis += rank;
    if (axis < 0 || axis >= rank) continue;  // shape inference reports it
    const Shape normalized(xs.begin() + axis, xs.end());
    // Scale broadcasts to X: it must hold the normalized dims' values, right-aligned, and be 1 before them.
    const Shape& ss = *scale->type.shape;
    auto one = [](const Dim& d) { return d.is_static() && d.value == 1; };
    bool whole = true;
    for (size_t i = 0; i < std::max(ss.size(), normalized.size()); ++i) {
      const Dim* sd = i < ss.size() ? &ss[ss.size() - 1 - i] : nullptr;
      const Dim* nd = i < normalized.size() ? &normalized[normalized.size() - 1 - i] : nullptr;
      if (nd ? !(sd ? *sd == *nd : one(*nd)) : !one(*sd)) whole = false;
    }
    if (!whole) {
      r.near_miss(what + " kept",
                  "scale " + shape_str(ss) + " broadcasts within the normalized dims " + shape_str(normalized));
      continue;
    }
    const std::string node_name = n->name;
    const float eps = n->attr_float("epsilon", 1e-5f);
    Value* y = n->outputs[0];
    Replaced gone = r.remove({n});
    Node* fused = r.add("SimplifiedLayerNorm", {x, scale}, {y}, node_name, "ai.fusec", gone.origins);
    fused->set_attr("axis", axis);
    fused->set_attr("epsilon", eps);
    r.rewrote(gone.listed + " -> ai.fusec." + describe(fused), gone.names, node_name);
  }
}

}  // namespace

bool RecognizeLayerNormPass::run(Graph& g, PassContext& ctx) {
  Rewriter r(g, ctx, name());
  if (!ctx.opts.portable) standard_rmsnorms_to_fusec(g, r);
  auto nodes = g.node_list();
  std::unordered_map<const Node*, size_t> pos;
  for (size_t i = 0; i < nodes.size(); ++i) pos[nodes[i]] = i;
  for (Node* reduce : nodes) {
    if (r.removed(reduce) || !is_op(reduce, "ReduceMean")) continue;
    NormMatch m;
    if (!match_layernorm(reduce, m)) {
      m = NormMatch{};
      if (!match_rms(reduce, m)) continue;
    }
    const char* kind = m.rms ? "RMSNorm" : "LayerNorm";
    std::string what = std::string(kind) + " at " + describe(reduce);
    std::string why = check_reduces(m);
    if (why.empty()) why = match_affine(m);
    if (why.empty()) why = check_rest(m);
    std::optional<Plan> plan;
    if (why.empty()) {
      if (!m.rms) plan = plan_unflattened(m);
      if (!plan) plan = plan_direct(m, &why);
    }
    std::optional<std::string> domain;
    if (plan) {
      if (m.rms) {
        // --portable: the standard RMSNormalization where the model's opset has it (23).
        if (!ctx.opts.portable)
          domain = "ai.fusec";
        else if (g.opset("") >= kRmsNormOpset)
          domain = "";
        else
          why = "SimplifiedLayerNorm is not standard ONNX, and the model's opset " + std::to_string(g.opset("")) +
                " predates RMSNormalization (23); --portable writes standard ops only";
      } else {
        domain = domain_for_standard_op(g, ctx.opts, 17, &why);
      }
    }
    if (!domain) {
      r.near_miss(what + " not recognized", why);
      continue;
    }

    std::vector<Node*> replaced = m.nodes;
    replaced.insert(replaced.end(), plan->extra.begin(), plan->extra.end());
    std::sort(replaced.begin(), replaced.end(), [&](const Node* a, const Node* b) {
      return (pos.count(a) ? pos[a] : SIZE_MAX) < (pos.count(b) ? pos[b] : SIZE_MAX);
    });
    replaced.erase(std::unique(replaced.begin(), replaced.end()), replaced.end());
    std::string node_name = replaced.front()->name;
    float eps = static_cast<float>(constant_of(m.eps)->as_double(0));
    Replaced gone = r.remove(replaced);
    auto materialize = [&](ParamPlan& p, const char* role) -> Value* {
      if (p.value) return p.value;
      return g.add_initializer(node_name + "." + role, std::move(*p.data));
    };
    Value* scale = materialize(plan->scale, "scale");
    Node* fused;
    if (m.rms) {
      fused = r.add(domain->empty() ? "RMSNormalization" : "SimplifiedLayerNorm", {plan->x, scale}, {plan->y},
                    node_name, *domain, gone.origins);
    } else {
      std::vector<Value*> ins = {plan->x, scale};
      if (plan->has_bias) ins.push_back(materialize(plan->bias, "bias"));
      std::vector<Value*> outs = {plan->y, plan->mean, plan->inv};
      while (!outs.back()) outs.pop_back();
      fused = r.add("LayerNormalization", ins, outs, node_name, *domain, gone.origins);
    }
    fused->set_attr("axis", plan->axis);
    fused->set_attr("epsilon", eps);
    g.remove_unused_values();
    r.rewrote(gone.listed + " -> " + (domain->empty() ? "" : *domain + ".") + describe(fused), gone.names, node_name);
  }
  return r.changed();
}

}  // namespace fusec
