#include "passes/attention_pattern.h"

#include <limits>

#include "ir/dim_values.h"

#include "passes/pattern.h"

namespace fusec::attention {

namespace {

const Shape* shape_of_rank(const Value* v, size_t rank) {
  return v && v->type.shape && v->type.shape->size() == rank ? &*v->type.shape : nullptr;
}

int64_t static_dim(const Value* v, size_t rank, size_t i) {
  const Shape* s = shape_of_rank(v, rank);
  return s && (*s)[i].is_static() ? (*s)[i].value : 0;
}

/// The Transpose producing `v` if its perm is `perm`.
Node* transpose_with(const Value* v, std::initializer_list<int64_t> perm) {
  Node* t = v ? v->producer : nullptr;
  if (!is_op(t, "Transpose") || t->attr_ints("perm") != std::vector<int64_t>(perm)) return nullptr;
  return t;
}

/// A Reshape [B, S, E] -> [B, S, H, D] with H·D = E: the head split of a projection.
Node* head_split(const Value* bshd) {
  Node* r = bshd ? bshd->producer : nullptr;
  if (!is_op(r, "Reshape")) return nullptr;
  const Shape* in = shape_of_rank(r->input(0), 3);
  const Shape* out = shape_of_rank(bshd, 4);
  if (!in || !out || !same_dim((*in)[0], (*out)[0]) || !same_dim((*in)[1], (*out)[1])) return nullptr;
  const Dim &e = (*in)[2], &h = (*out)[2], &d = (*out)[3];
  if (!e.is_static() || !h.is_static() || !d.is_static() || h.value * d.value != e.value) return nullptr;
  return r;
}

/// Scores can be Q·Kᵀ: 4-D, or of unknown rank (then the pass explains why it cannot prove the heads).
bool maybe_scores(const Value* v) { return !v->type.shape || v->type.shape->size() == 4; }

/// The MatMul whose (4-D) output reaches `v` through at most `depth` ops, or null.
Node* find_matmul(const Value* v, int depth) {
  Node* p = v ? v->producer : nullptr;
  if (!p || depth < 0) return nullptr;
  if (is_op(p, "MatMul")) return maybe_scores(p->outputs[0]) ? p : nullptr;
  for (const Value* in : p->inputs)
    if (Node* m = find_matmul(in, depth - 1)) return m;
  return nullptr;
}

/// The input of the binary/ternary `n` that carries the scores (reaches a MatMul), or null.
Value* score_input(const Node* n, std::initializer_list<size_t> candidates) {
  for (size_t i : candidates)
    if (find_matmul(n->input(i), 6)) return n->input(i);
  return nullptr;
}

}  // namespace

std::optional<double> scalar_factor(const Node* n, const Value* x) {
  if (!n || n->inputs.size() != 2 || !(is_op(n, "Mul") || is_op(n, "Div"))) return std::nullopt;
  const bool x_first = n->input(0) == x;
  if (!x_first && n->input(1) != x) return std::nullopt;
  if (is_op(n, "Div") && !x_first) return std::nullopt;  // c / x is not a scale
  const Tensor* c = constant_of(n->input(x_first ? 1 : 0));
  if (!c || c->numel() != 1 || !is_float(c->dtype())) return std::nullopt;
  const auto& xs = x->type.shape;
  const auto& ys = n->outputs[0]->type.shape;
  if (!xs || !ys || xs->size() != ys->size()) return std::nullopt;  // the constant must not add dims
  const double f = c->as_double(0);
  if (is_op(n, "Div")) return f == 0 ? std::nullopt : std::optional<double>(1.0 / f);
  return f;
}

namespace {

/// Whether `n` multiplies the scores `x` by a float constant per head: broadcast to x's
/// [.., H, Sq, Skv], every dim 1 but the head dim (H or 1), and x's shape kept.
bool head_factor(const Node* n, const Value* x) {
  if (!is_op(n, "Mul") || n->inputs.size() != 2) return false;
  const Tensor* c = constant_of(n->input(n->input(0) == x ? 1 : 0));
  const auto& xs = x->type.shape;
  if (!c || !is_float(c->dtype()) || !xs || xs->size() < 3 || n->outputs[0]->type.shape != xs) return false;
  const auto& cd = c->dims();
  if (cd.size() > xs->size()) return false;
  for (size_t i = 0; i < cd.size(); ++i) {
    const size_t from_end = cd.size() - i;  // 1: the keys' dim, 2: the queries', 3: the heads'
    const Dim& h = (*xs)[xs->size() - 3];
    if (cd[i] != 1 && !(from_end == 3 && h.is_static() && cd[i] == h.value)) return false;
  }
  return true;
}

}  // namespace

Value* peel_scale(Value* v, double& scale, std::vector<Node*>& nodes) {
  for (Node* p = v ? v->producer : nullptr; p && (is_op(p, "Mul") || is_op(p, "Div")); p = v->producer) {
    Value* x = constant_of(p->input(0)) ? p->input(1) : p->input(0);
    auto f = scalar_factor(p, x);
    if (!f) break;
    scale *= *f;
    nodes.push_back(p);
    v = x;
  }
  return v;
}

ScoreChain walk_scores(Node* softmax) {
  ScoreChain c;
  std::vector<ChainStep> inward;  // from the Softmax back
  Value* v = softmax->input(0);
  for (int depth = 0; depth < 8 && v && v->producer; ++depth) {
    Node* p = v->producer;
    if (is_op(p, "MatMul")) {
      if (maybe_scores(p->outputs[0])) c.qk = p;
      break;
    }
    if (!find_matmul(v, 6)) break;  // no Q·Kᵀ behind this: not attention
    ChainStep s{ChainStep::Scale, p};
    Value* next = nullptr;
    if (is_op(p, "Mul") || is_op(p, "Div")) {
      next = score_input(p, {0, 1});
      auto f = next ? scalar_factor(p, next) : std::nullopt;
      if (!f && next && head_factor(p, next)) {
        s.kind = ChainStep::HeadScale;
        s.mask = p->input(next == p->input(0) ? 1 : 0);
        inward.push_back(s);
        v = next;
        continue;
      }
      if (!f) {
        c.why = describe(p) + " scales the scores by '" + p->input(next == p->input(0) ? 1 : 0)->name +
                "', which is not a constant scalar";
        return c;
      }
      s.factor = *f;
    } else if (is_op(p, "Add") && p->inputs.size() == 2) {
      next = score_input(p, {0, 1});
      s.kind = ChainStep::AddMask;
      s.mask = p->input(next == p->input(0) ? 1 : 0);
    } else if (is_op(p, "Sub") && p->inputs.size() == 2) {
      next = score_input(p, {0, 1});
      if (next != p->input(0)) {
        c.why = describe(p) + " subtracts the scores from '" + p->input(0)->name + "'";
        return c;
      }
      s.kind = ChainStep::AddMask;
      s.mask = p->input(1);
      s.negated = true;
    } else if (is_op(p, "Where") && p->inputs.size() == 3) {
      next = score_input(p, {1, 2});
      s.kind = ChainStep::WhereMask;
      s.mask = p->input(0);
      s.keep_where_true = next == p->input(1);
      const Value* fill = p->input(s.keep_where_true ? 2 : 1);
      auto f = uniform_constant(fill);
      if (!f) {
        c.why = describe(p) + " fills the masked scores with '" + fill->name + "', which is not a constant";
        return c;
      }
      s.fill = *f;
    } else if (is_op(p, "Max") && p->inputs.size() == 2) {
      next = score_input(p, {0, 1});
      const Value* low = p->input(next == p->input(0) ? 1 : 0);
      const Tensor* t = constant_of(low);
      if (!t || t->numel() != 1 || t->dtype() != DType::Float32 ||
          t->as_double(0) != -static_cast<double>(std::numeric_limits<float>::max())) {
        c.why = describe(p) + " clamps the scores at '" + low->name + "', not at the constant -FLT_MAX";
        return c;
      }
      s.kind = ChainStep::ClampLow;
    } else if (is_op(p, "Reshape") && p->inputs.size() == 2) {
      next = p->input(0);
      s.kind = ChainStep::Regroup;
    } else if (is_op(p, "Tanh")) {
      next = p->input(0);
      s.kind = ChainStep::Tanh;
    } else {
      c.why = "an unrecognized " + describe(p) + " sits between Q·Kᵀ and the Softmax";
      return c;
    }
    inward.push_back(s);
    v = next;
  }
  c.steps.assign(inward.rbegin(), inward.rend());
  return c;
}

SoftmaxGuard match_softmax_guard(Value* probs) {
  // What reads P: an IsNaN of it, and a Where whose false branch is P and whose condition is an
  // IsNaN (of P or, wrongly, of something else). Neither: no guard, and nothing to explain.
  Node *isnan = nullptr, *where = nullptr;
  for (Node* c : probs->consumers) {
    if (is_op(c, "IsNaN") && c->input(0) == probs) isnan = c;
    if (is_op(c, "Where") && c->inputs.size() == 3 && c->input(2) == probs && is_op(c->input(0)->producer, "IsNaN"))
      where = c;
  }
  if (!isnan && !where) return {};
  auto fail = [](std::string why) {
    SoftmaxGuard g;
    g.why = std::move(why);
    return g;
  };
  if (!isnan)
    return fail(describe(where) + " tests IsNaN of '" + where->input(0)->producer->input(0)->name +
                "', not of the Softmax's output (torch's safe softmax is Where(IsNaN(P), 0, P))");
  Value* nan = isnan->outputs[0];
  if (!has_single_use(nan))
    return fail(describe(isnan) + " of the attention probabilities " +
                (nan->is_graph_output ? std::string("is a graph output")
                                      : "has " + std::to_string(nan->consumers.size()) + " readers") +
                "; only the Where of torch's safe softmax may read it");
  Node* w = nan->consumers[0];
  if (!is_op(w, "Where") || w->inputs.size() != 3 || w->input(0) != nan || w->input(2) != probs || w->input(1) == probs)
    return fail(describe(isnan) + " of the attention probabilities feeds " + describe(w) +
                ", not Where(IsNaN(P), 0, P) (torch's safe softmax)");
  const auto zero = uniform_constant(w->input(1));
  if (!zero || *zero != 0)
    return fail(describe(w) + " writes '" + w->input(1)->name + "' where the probabilities are NaN, not a constant 0 " +
                "(torch's safe softmax; Attention gives 0 for a row with every key masked)");
  const auto &ps = probs->type.shape, &ws = w->outputs[0]->type.shape;
  if (!ps || !ws || *ps != *ws) return fail(describe(w) + " does not keep the probabilities' shape");
  if (probs->is_graph_output || probs->consumers.size() != 2)
    return fail("the attention probabilities '" + probs->name + "' " +
                (probs->is_graph_output ? std::string("are a graph output")
                                        : "have " + std::to_string(probs->consumers.size()) + " readers") +
                "; only torch's safe-softmax guard (IsNaN and Where) may read them");
  SoftmaxGuard g;
  g.isnan = isnan;
  g.where = w;
  return g;
}

Operand match_query(Value* q) {
  Operand op;
  op.v4 = q;
  op.heads = static_dim(q, 4, 1);
  if (Node* t = transpose_with(q, {0, 2, 1, 3})) {
    op.nodes.push_back(t);
    op.bshd = t->input(0);
    if (Node* r = head_split(op.bshd)) {
      op.nodes.push_back(r);
      op.v3 = r->input(0);
    }
  }
  return op;
}

Operand match_kv(Value* kv, bool absorb_repeat) {
  // repeat_kv (transformers' Llama): x [B, Hkv, S, D] ── Unsqueeze(2) ── Expand [B, Hkv, r, S, D]
  // ── Reshape [B, Hkv·r, S, D]; kv head g then serves query heads g·r .. g·r + r − 1.
  Node* r = kv ? kv->producer : nullptr;
  Node* e = is_op(r, "Reshape") ? r->input(0)->producer : nullptr;
  Node* u = is_op(e, "Expand") ? e->input(0)->producer : nullptr;
  if (absorb_repeat && is_op(u, "Unsqueeze")) {
    Value* x = u->input(0);
    const Shape *xs = shape_of_rank(x, 4), *us = shape_of_rank(u->outputs[0], 5), *es = shape_of_rank(e->outputs[0], 5),
                *rs = shape_of_rank(kv, 4);
    bool ok = xs && us && es && rs && (*us)[2].is_static() && (*us)[2].value == 1 && (*es)[2].is_static();
    for (size_t i = 0; ok && i < 4; ++i)  // x's dims around the new axis 2 are kept
      ok = same_dim((*xs)[i], (*us)[i < 2 ? i : i + 1]) && same_dim((*xs)[i], (*es)[i < 2 ? i : i + 1]);
    if (ok)
      ok = (*xs)[1].is_static() && (*rs)[1].is_static() && (*rs)[1].value == (*xs)[1].value * (*es)[2].value &&
           same_dim((*rs)[0], (*xs)[0]) && same_dim((*rs)[2], (*xs)[2]) && same_dim((*rs)[3], (*xs)[3]);
    if (ok) {
      Operand op = match_query(x);
      op.repeat = (*es)[2].value;
      op.nodes.insert(op.nodes.end(), {r, e, u});
      return op;
    }
  }
  return match_query(kv);
}

namespace {

/// Kᵀ [B, H, D, S] as torch's SDPA decomposition writes it over repeated keys (Mistral, Qwen2,
/// Gemma): Reshape [B, H, D, S] ◀ Transpose(0,2,1) ◀ Reshape [B·H, S, D] ◀ repeat_kv's Expand
/// [B, Hkv, r, S, D] (of Unsqueeze(2) of K [B, Hkv, S, D]). Both Reshapes only merge and split the
/// leading dims, so Kᵀ is the repeated K's Transpose(0,1,3,2). Over a 4-D K the same three nodes
/// are one Transpose once canonicalize has run (transpose_of_groups); the repeat's merge of three
/// dims into B·H, split back as B and Hkv·r, is not a transpose of whole groups, so it is matched
/// here.
std::optional<Operand> key_transposed_in_3d(Value* kt, bool absorb_repeat) {
  Node* split = kt ? kt->producer : nullptr;
  if (!is_op(split, "Reshape")) return std::nullopt;
  Node* t = transpose_with(split->input(0), {0, 2, 1});
  Node* merge = t && is_op(t->input(0)->producer, "Reshape") ? t->input(0)->producer : nullptr;
  const Shape* out = shape_of_rank(kt, 4);
  const Shape* flat = merge ? shape_of_rank(merge->outputs[0], 3) : nullptr;
  if (!out || !flat || !is_static(*out) || !is_static(*flat)) return std::nullopt;
  const int64_t B = (*out)[0].value, H = (*out)[1].value, D = (*out)[2].value, S = (*out)[3].value;
  if ((*flat)[0].value != B * H || (*flat)[1].value != S || (*flat)[2].value != D) return std::nullopt;
  Value* x = merge->input(0);
  Node* e = x->producer;
  Node* u = is_op(e, "Expand") ? e->input(0)->producer : nullptr;
  const Shape* es = shape_of_rank(x, 5);
  if (!absorb_repeat || !es || !is_op(u, "Unsqueeze")) return std::nullopt;
  const Shape* ks = shape_of_rank(u->input(0), 4);
  const Shape* us = shape_of_rank(u->outputs[0], 5);
  if (!ks || !us || !is_static(*es) || !is_static(*ks) || (*us)[2].value != 1) return std::nullopt;
  const int64_t r = (*es)[2].value;
  if ((*ks)[0].value != B || (*ks)[1].value * r != H || (*ks)[2].value != S || (*ks)[3].value != D ||
      (*es)[0].value != B || (*es)[1].value != (*ks)[1].value || (*es)[3].value != S || (*es)[4].value != D)
    return std::nullopt;
  Operand op = match_query(u->input(0));
  op.repeat = r;
  op.nodes.insert(op.nodes.end(), {e, u, split, t, merge});
  return op;
}

}  // namespace

std::optional<Operand> match_key_transposed(Value* kt, bool absorb_repeat, double& scale) {
  if (Node* t = transpose_with(kt, {0, 1, 3, 2})) {
    std::vector<Node*> peeled;
    Value* k = peel_scale(t->input(0), scale, peeled);
    Operand op = match_kv(k, absorb_repeat);
    op.nodes.push_back(t);
    op.nodes.insert(op.nodes.end(), peeled.begin(), peeled.end());
    return op;
  }
  if (auto op = key_transposed_in_3d(kt, absorb_repeat)) return op;
  if (Node* t = transpose_with(kt, {0, 2, 3, 1})) {
    Operand op;
    op.bshd = t->input(0);
    op.heads = static_dim(op.bshd, 4, 2);
    op.nodes.push_back(t);
    if (Node* r = head_split(op.bshd)) {
      op.nodes.push_back(r);
      op.v3 = r->input(0);
    }
    return op;
  }
  // Kᵀ = Transpose(p)(x) is Transpose(0,1,3,2) of K = Transpose(p with its last two swapped)(x).
  if (Node* t = kt->producer; is_op(t, "Transpose") && shape_of_rank(t->input(0), 4) && shape_of_rank(kt, 4)) {
    std::vector<int64_t> p = t->attr_ints("perm");
    if (p.size() != 4) return std::nullopt;
    std::swap(p[2], p[3]);
    Operand op;
    op.k_from = t->input(0);
    op.k_perm = p;
    op.heads = static_dim(kt, 4, 1);
    op.nodes.push_back(t);
    return op;
  }
  // Any other 4-D Kᵀ (K stored transposed, [B, H, D, S]: CoAtNet's qkv chunked along D) is
  // Transpose(0,1,3,2) of K = Transpose(0,1,3,2)(Kᵀ).
  if (shape_of_rank(kt, 4) && !constant_of(kt)) {
    Operand op;
    op.k_from = kt;
    op.k_perm = {0, 1, 3, 2};
    op.heads = static_dim(kt, 4, 1);
    return op;
  }
  return std::nullopt;
}

Node* match_head_merge(Node* pv) {
  Node* t = sole_consumer_of(pv->outputs[0], "Transpose");
  if (!t || t->attr_ints("perm") != std::vector<int64_t>{0, 2, 1, 3}) return nullptr;
  Node* r = sole_consumer_of(t->outputs[0], "Reshape");
  if (!r || r->input(0) != t->outputs[0]) return nullptr;
  const Shape* in = shape_of_rank(t->outputs[0], 4);
  if (!in) return nullptr;
  const Dim &h = (*in)[2], &d = (*in)[3];
  if (!h.is_static() || !d.is_static()) return nullptr;
  if (const Shape* out = shape_of_rank(r->outputs[0], 3)) {
    const Dim& e = (*out)[2];
    if (!same_dim((*in)[0], (*out)[0]) || !same_dim((*in)[1], (*out)[1]) || !e.is_static() ||
        h.value * d.value != e.value)
      return nullptr;
    return r;
  }
  // [B·S, H·Dv]: the head merge and the flattening for the output projection's Gemm in one view
  // (torch.export writes it so for GPT-2's Conv1D layers; legacy writes the two Reshapes).
  // B·S may be a product over an open batch (ir/dim_values.h).
  const Shape* out = shape_of_rank(r->outputs[0], 2);
  if (!out || !(*out)[1].is_static() || (*out)[1].value != h.value * d.value) return nullptr;
  const auto b = product_of((*in)[0]), sq = product_of((*in)[1]), rows = product_of((*out)[0]);
  const auto bs = b && sq ? times(*b, *sq) : std::nullopt;
  if (!bs || !rows || !(*bs == *rows)) return nullptr;
  return r;
}

std::optional<Shape> bhsd(const Operand& o) {
  if (o.v4 && o.v4->type.shape && o.v4->type.shape->size() == 4) return *o.v4->type.shape;
  if (o.k_from && o.k_from->type.shape && o.k_from->type.shape->size() == 4 && o.k_perm.size() == 4) {
    const Shape& s = *o.k_from->type.shape;
    Shape k;
    for (int64_t a : o.k_perm) k.push_back(s[static_cast<size_t>(a)]);
    return k;
  }
  if (o.bshd && o.bshd->type.shape && o.bshd->type.shape->size() == 4) {
    const Shape& s = *o.bshd->type.shape;
    return Shape{s[0], s[2], s[1], s[3]};
  }
  return std::nullopt;
}

bool same_known(const Dim& a, const Dim& b) {
  return (a.is_static() && b.is_static() && a.value == b.value) || (!a.symbol.empty() && a.symbol == b.symbol);
}

bool viewable_3d(const Operand& o) {
  if (o.v3) return true;
  if (!o.bshd || !o.bshd->type.shape || o.bshd->type.shape->size() != 4) return false;
  const Shape& s = *o.bshd->type.shape;
  return s[2].is_static() && s[3].is_static();
}

Value* as_3d(Graph& g, const Operand& o) {
  if (o.v3) return o.v3;
  const Shape& s = *o.bshd->type.shape;
  Value* shape =
      g.add_initializer(o.bshd->name + "_bse_shape", Tensor::from_int64({0, 0, s[2].value * s[3].value}, {3}));
  Value* out = g.add_value(o.bshd->name + "_bse");
  g.add_node("Reshape", {o.bshd, shape}, {out}, g.unique_node_name(o.bshd->name + "_merge_heads"));
  return out;
}

bool is_causal_constant(const Tensor& t, int64_t sq, int64_t skv, bool additive) {
  const auto& d = t.dims();
  if (d.size() < 2 || d[d.size() - 2] != sq || d.back() != skv) return false;
  for (size_t i = 0; i + 2 < d.size(); ++i)
    if (d[i] != 1) return false;
  for (int64_t i = 0; i < sq; ++i)
    for (int64_t j = 0; j < skv; ++j) {
      const double v = t.as_double(i * skv + j);
      const bool allowed = j <= i;
      if (additive ? (allowed ? v != 0 : !masks_like_neg_inf(v)) : ((v != 0) != allowed)) return false;
    }
  return true;
}

bool has_empty_row(const Tensor& t, int64_t sq, int64_t skv) {
  if (t.numel() == 0) return sq > 0 && skv > 0;
  const int64_t cols = t.rank() >= 1 ? t.dims().back() : 1;
  const int64_t rows = t.numel() / cols;  // every (leading index, query row) the mask stores
  if (skv == 0) return false;
  for (int64_t r = 0; r < rows; ++r) {
    bool any = false;
    for (int64_t j = 0; j < cols && !any; ++j) any = t.as_double(r * cols + j) != 0;
    if (!any) return true;
  }
  return false;
}

}  // namespace fusec::attention
