// merge_qkv: the Q, K and V projections of one attention -> one GEMM writing packed QKV.
//
//                 X [B, S, E]                             X [B, S, E]
//        ┌─────────┼─────────┐                             │
//   FusedMatMul FusedMatMul FusedMatMul         FusedMatMul 'q'  W = [Wq | Wk | Wv]  [E, Nq+Nk+Nv]
//   'q' Wq, bq  'k' Wk, bk  'v' Wv, bv    =>                     b = [bq | bk | bv]
//        │Q        │K        │V                            │ QKV [B, S, (Hq + 2·Hkv)·D]
//        └──── Attention 'a' ────┘ [mask]         ai.fusec.Attention 'a' (QKV, "", "" [, mask])
//                (3-D)
//
//   X·[Wq | Wk | Wv] + [bq | bk | bv] = [X·Wq + bq | X·Wk + bk | X·Wv + bv]     (column blocks)
//
// Each token's row of the one product is [Q heads | K heads | V heads]: the packed form of ai.fusec
// Attention (docs/ops.md), whose kernels read Q, K and V as strided views of it, so no Split copy
// comes back. One GEMM of N = Nq + Nk + Nv instead of three of N/3: one launch instead of three, and
// a small gain in time (BERT-base at M = 2048, fp32, scripts/gpu_check.sh micro: the three 768x768
// products against one 768x2304), as cuBLASLt's fp32 kernels already run both near the fp32 peak.
//
// A projection is FusedMatMul(X, W [, b]) without activation, MatMul(X, W) (fuse_matmul_bias leaves
// a bias-free product alone), or MatMul(X, W) -> Add(b) (fuse_matmul_bias skipped or --portable);
// W a constant 2-D [E, N] of X's type, b a constant [N] or [1,..,1,N]. A projection without a bias
// gets zeros in its part of the merged bias when another has one (y + 0 = y). Each projection's
// output must be read by the Attention alone. The Attention: 3-D; inputs Q, K, V [, attn_mask],
// output Y only; K's head size equal to V's (packed QKV has one D). ai.fusec Attention, or ONNX
// Attention using nothing outside ai.fusec's subset (no cache or nonpad_kv_seqlen, no extra outputs,
// no window, softmax_precision absent or float, scale not the literal 0 that ai.fusec
// reads as "default", a mask exactly as wide as the keys since ONNX pads a narrower one where
// ai.fusec broadcasts it): it becomes ai.fusec Attention, the only one that takes packed QKV.
//
// With rotary position embeddings (Llama, after fuse_rotary): Q and K are each ai.fusec Rotary(P,
// cos, sin; head_size = D) of a projection P, both with the same tables, constant along the heads.
// The three projections merge as above and one Rotary over the packed rows (rotated = (Hq + Hkv)·D)
// rotates Q's and K's heads and copies V's: one GEMM and one rotation kernel instead of three and two.
// The same for the packed forms below with rotated Q and K (Phi-3's fused qkv_proj, sliced). Where
// the rotations normalize each head first (QK-norm, fuse_qk_norm's), both alike, the one over the
// packed rows does too, with Q's row of scale for each Q head and K's for each K head ([Hq + Hkv, D]);
// where they normalize runs of heads (OLMo 2's whole projections: norm_groups [Hq] and [Hkv]), the
// packed one normalizes Q's runs then K's ([Hq, Hkv]).
//
// Second form, GPT-2's c_attn: Q, K and V are outputs 0, 1, 2 of one Split of a 3-D T along its last
// axis. T is packed QKV already ([Hq·D | Hkv·D | Hkv·D] per token): the Split goes, Attention(T, "", "").
// The same for three Slices of T along its last axis, back to back from 0 to its end (torch's
// nn.MultiheadAttention once compose_movement has composed its head split).
//
// Third form, the head split of packed QKV that timm-style blocks write (Swin's windows, timm's ViT):
// T [B, S, 3·H·D] -> Reshape [B, S, 3, H, D] -> Transpose(2, 0, 3, 1, 4) -> Gather(0 | 1 | 2, axis 0)
// gives Q, K and V [B, H, S, D] of a 4-D Attention. Gather i of that Transpose is T's column block i
// with its heads moved ahead of the tokens, which is what packed QKV's strided views read: the
// Attention becomes ai.fusec Attention(T, "", "" [, mask]) with H heads, and its 4-D output
// Y [B, H, S, D] the Transpose(0, 2, 1, 3) of its packed output [B, S, H·D] viewed [B, S, H, D]. The
// head merge after it (Transpose(0, 2, 1, 3) -> Reshape [B, S, H·D]) then composes away with that
// (compose_movement), so the QKV copy, the three Gathers and the head merge's copy all go.
//
// Fourth form, ModernBERT's Wqkv: T [B, S, 3·H·D] -> Reshape [B, S, 3, H, D] -> unbound along
// axis 2 (Slice [i, i + 1) and Squeeze each, or one Split and three Squeezes) -> Q and K each
// rotated over whole heads (4-D ai.fusec Rotary) or neither -> each Reshape back to [B, S, H·D] ->
// 3-D Attention with H heads. Part i of the view is T's column block i, so the Attention reads T
// packed, and one Rotary over T's rows (rotated = 2·H·D) stands for the two: the three strided
// copies of the cuts go, and fuse_rotary_attention can then take the rotation inside.
//
// Under --portable nothing changes (ONNX Attention has no packed form); a near-miss says so. Runs
// after fuse_matmul_bias, so that the projections are whole FusedMatMuls by then.
#include "passes/merge_qkv.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <optional>
#include <set>

#include "ir/derived_weight.h"
#include "ir/dtype.h"
#include "passes/pattern.h"
#include "passes/rewrite.h"

namespace fusec {

namespace {

const char* kPass = "merge_qkv";
enum Input : size_t { kQ = 0, kK, kV, kMask };
const char* kRole[] = {"Q", "K", "V"};

bool standard_domain(const Node* n) { return n->domain.empty() || n->domain == "ai.onnx"; }

bool attention_type(DType t) { return t == DType::Float32 || t == DType::Float16 || t == DType::BFloat16; }

/// One projection: FusedMatMul(x, w [, bias]), MatMul(x, w), or MatMul(x, w) -> Add(bias).
struct Projection {
  std::vector<Node*> nodes;  // the product first, then its Add
  Value* x = nullptr;
  Value* w = nullptr;
  Value* bias = nullptr;
  Value* out = nullptr;
  Node* product() const { return nodes.front(); }
};

/// The projection producing `v`, or nullopt when its producer is no matrix product at all (then the
/// pattern is not there, and nothing is said).
std::optional<Projection> projection_of(Value* v) {
  Node* p = v ? v->producer : nullptr;
  if (!p) return std::nullopt;
  Projection pr;
  pr.out = v;
  if ((p->op_type == "FusedMatMul" && p->domain == "ai.fusec") || is_op(p, "MatMul")) {
    pr.nodes = {p};
    pr.x = p->input(0);
    pr.w = p->input(1);
    pr.bias = p->op_type == "FusedMatMul" ? p->input(2) : nullptr;
    return pr;
  }
  if (is_op(p, "Add") && p->inputs.size() == 2) {
    for (size_t i = 0; i < 2; ++i) {
      Node* mm = p->input(i) ? p->input(i)->producer : nullptr;
      if (is_op(mm, "MatMul") && constant_of(p->input(1 - i))) {
        pr.nodes = {mm, p};
        pr.x = mm->input(0);
        pr.w = mm->input(1);
        pr.bias = p->input(1 - i);
        return pr;
      }
    }
  }
  return std::nullopt;
}

std::string read_elsewhere(const Value* v, const Node* by) {
  const std::string who = "the output '" + v->name + "' of " + describe(by);
  if (v->is_graph_output) return who + " is a graph output";
  return who + " is also read by another node (" + std::to_string(use_count(v)) + " reads)";
}

/// Why `p` cannot be one column block of the merged product (output type `t`), or "".
std::string projection_problem(const Projection& p, DType t) {
  Node* mm = p.product();
  if (mm->op_type == "FusedMatMul") {
    const std::string act = mm->attr_string("activation", "");
    if (!act.empty()) return describe(mm) + " applies the activation " + act + " (only plain products merge)";
  }
  if (p.nodes.size() > 1 && !has_single_use(mm->outputs[0])) return read_elsewhere(mm->outputs[0], mm);
  if (!has_single_use(p.out)) return read_elsewhere(p.out, p.nodes.back());
  const Tensor* w = constant_of(p.w);
  if (!w) return "the weight '" + p.w->name + "' of " + describe(mm) + " is not a constant";
  const std::string weight = "the weight '" + p.w->name + "' of " + describe(mm);
  if (w->rank() != 2) return weight + " is not 2-D (" + dims_str(w->dims()) + ")";
  if (w->dtype() != t) return weight + " is " + dtype_name(w->dtype()) + ", not " + dtype_name(t);
  if (!p.bias) return "";
  const Tensor* b = constant_of(p.bias);
  const std::string bias = "the bias '" + p.bias->name + "' of " + describe(mm);
  if (!b) return bias + " is not a constant";
  if (b->dtype() != t) return bias + " is " + dtype_name(b->dtype()) + ", not " + dtype_name(t);
  const auto& d = b->dims();
  bool along_last = !d.empty() && d.back() == w->dim(1);
  for (size_t i = 0; i + 1 < d.size(); ++i) along_last &= d[i] == 1;
  if (!along_last)
    return bias + " has shape " + dims_str(d) + ", not [" + std::to_string(w->dim(1)) + "] along the last axis";
  return "";
}

/// What feeds Q, K and V: three projections, one Split, or three Slices of one tensor; none when
/// `found` is false.
struct Source {
  bool found = false;
  std::array<Projection, 3> proj;
  /// Q's and K's rotary embeddings between their projections and the attention (fuse_rotary's),
  /// or both nullptr.
  std::array<Node*, 2> rotary = {nullptr, nullptr};
  Node* split = nullptr;
  std::array<Node*, 3> slices = {nullptr, nullptr, nullptr};
  /// The fourth form (unbound_of): T's view as [B, S, 3, H, D], the nodes between it and the
  /// attention (the Split or the Slices of axis 2, the Squeezes, the Reshapes back to [B, S, H·D];
  /// the rotations are in `rotary`), and H and D.
  struct Unbound {
    Node* view = nullptr;
    Node* split = nullptr;
    std::array<Node*, 3> slices{}, squeezes{}, merges{};
    int64_t heads = 0, head_size = 0;
  };
  std::optional<Unbound> unbound;
  /// The packed tensor a Split or the Slices read (the fourth form: T), else nullptr.
  Value* packed() const {
    if (unbound) return unbound->view->input(0);
    return split ? split->input(0) : slices[0] ? slices[0]->input(0) : nullptr;
  }
};

/// The third form: Q, K and V as Gather(i, axis 0) of Transpose(2, 0, 3, 1, 4) of Reshape(T) to
/// [B, S, 3, H, D], T 3-D [B, S, 3·H·D].
struct HeadSplit {
  std::array<Node*, 3> gathers{};
  Node *transpose = nullptr, *reshape = nullptr;
  Value* packed = nullptr;
  int64_t heads = 0, head_size = 0, tokens = 0;
};

/// Q, K and V of a 4-D attention in the third form, each Gather read by the attention alone; else
/// nullopt.
std::optional<HeadSplit> head_split_of(const std::array<Value*, 3>& qkv) {
  HeadSplit h;
  for (size_t i = 0; i < 3; ++i) {
    Node* n = qkv[i] ? qkv[i]->producer : nullptr;
    if (!is_op(n, "Gather") || !has_single_use(qkv[i]) || n->attr_int("axis", 0) != 0) return std::nullopt;
    const Tensor* idx = constant_of(n->input(1));
    if (!idx || !idx->dims().empty() || idx->as_double(0) != static_cast<double>(i)) return std::nullopt;
    if (h.transpose && n->input(0) != h.transpose->outputs[0]) return std::nullopt;
    h.gathers[i] = n;
    h.transpose = n->input(0) ? n->input(0)->producer : nullptr;
    if (!is_op(h.transpose, "Transpose") || h.transpose->attr_ints("perm") != std::vector<int64_t>{2, 0, 3, 1, 4})
      return std::nullopt;
  }
  h.reshape = h.transpose->input(0) ? h.transpose->input(0)->producer : nullptr;
  if (!is_op(h.reshape, "Reshape")) return std::nullopt;
  h.packed = h.reshape->input(0);
  const Shape *ts = known_rank(h.packed), *rs = known_rank(h.reshape->outputs[0]);
  if (!ts || !rs || ts->size() != 3 || rs->size() != 5 || !same_dim((*ts)[0], (*rs)[0]) ||
      !same_dim((*ts)[1], (*rs)[1]))
    return std::nullopt;
  const Dim &n = (*ts)[2], &three = (*rs)[2], &heads = (*rs)[3], &d = (*rs)[4], &tokens = (*rs)[1];
  if (!n.is_static() || !three.is_static() || three.value != 3 || !heads.is_static() || !d.is_static() ||
      !tokens.is_static() || 3 * heads.value * d.value != n.value)
    return std::nullopt;
  h.heads = heads.value, h.head_size = d.value, h.tokens = tokens.value;
  return h;
}

/// Q, K and V as Slices (step 1) of one 3-D T along its last axis covering [0, a), [a, b), [b, end),
/// each read by the attention alone; else nullopt.
std::optional<std::array<Node*, 3>> slices_of(const std::array<Value*, 3>& qkv) {
  std::array<Node*, 3> out{};
  const Value* t = nullptr;
  int64_t at = 0, width = 0;
  for (size_t i = 0; i < 3; ++i) {
    Node* n = qkv[i] ? qkv[i]->producer : nullptr;
    if (!is_op(n, "Slice") || !has_single_use(qkv[i]) || (t && n->input(0) != t)) return std::nullopt;
    t = n->input(0);
    auto ts = known_dims(t);
    if (!ts || ts->size() != 3) return std::nullopt;
    width = ts->back();
    const auto sl = axis_slice(n);
    if (!sl || sl->axis != 2 || sl->begin != at || sl->end <= sl->begin) return std::nullopt;
    at = sl->end;
    out[i] = n;
  }
  if (at != width) return std::nullopt;
  return out;
}

/// The single axis `sq` squeezes (its axes input or attribute), normalized to `rank`, or -1.
int64_t squeezed_axis(const Node* sq, int64_t rank) {
  std::vector<int64_t> axes = sq->attr_ints("axes", {});
  if (sq->inputs.size() > 1 && sq->input(1)) {
    const Tensor* t = constant_of(sq->input(1));
    if (!t || t->numel() != 1) return -1;
    axes = {t->as_int64(0)};
  }
  if (axes.size() != 1) return -1;
  return axes[0] < 0 ? axes[0] + rank : axes[0];
}

/// The fourth form (ModernBERT's Wqkv): T [B, S, 3·H·D] viewed [B, S, 3, H, D] and unbound along
/// axis 2 (a Slice [i, i + 1) of it and a Squeeze each, or one Split into three and their
/// Squeezes); Q and K each either rotated over whole heads by a 4-D ai.fusec Rotary or neither;
/// each then viewed back [B, S, H·D] for the 3-D attention; every value between read once. Sets
/// `rotary` to the rotations found.
std::optional<Source::Unbound> unbound_of(const Node* attn, std::array<Node*, 2>* rotary) {
  Source::Unbound u;
  std::array<Node*, 2> rot = {nullptr, nullptr};
  Value* view = nullptr;
  for (size_t i = 0; i < 3; ++i) {
    Value* y = attn->input(i);
    Node* merge = y ? y->producer : nullptr;
    if (!is_op(merge, "Reshape") || !has_single_use(y)) return std::nullopt;
    Value* x = merge->input(0);
    if (i < 2 && x && x->producer && x->producer->op_type == "Rotary" && x->producer->domain == "ai.fusec") {
      if (!has_single_use(x)) return std::nullopt;
      rot[i] = x->producer;
      x = rot[i]->input(0);
    }
    Node* sq = x ? x->producer : nullptr;
    if (!is_op(sq, "Squeeze") || !has_single_use(x) || squeezed_axis(sq, 5) != 2) return std::nullopt;
    Value* part = sq->input(0);
    Node* cut = part ? part->producer : nullptr;
    if (!has_single_use(part) || !cut) return std::nullopt;
    if (is_op(cut, "Split")) {
      if (cut->outputs.size() != 3 || cut->outputs[i] != part || (u.split && u.split != cut)) return std::nullopt;
      u.split = cut;
    } else if (is_op(cut, "Slice")) {
      const auto sl = axis_slice(cut);
      if (!sl || sl->axis != 2 || sl->begin != static_cast<int64_t>(i) || sl->end != sl->begin + 1) return std::nullopt;
      u.slices[i] = cut;
    } else {
      return std::nullopt;
    }
    if (view && cut->input(0) != view) return std::nullopt;
    view = cut->input(0);
    u.squeezes[i] = sq;
    u.merges[i] = merge;
  }
  if ((rot[0] == nullptr) != (rot[1] == nullptr)) return std::nullopt;
  if (u.split) {
    int64_t axis = u.split->attr_int("axis", 0);
    if (axis < 0) axis += 5;
    const std::optional<std::vector<int64_t>> sizes = split_sizes(u.split);
    if (axis != 2 || !sizes || !(sizes->empty() || *sizes == std::vector<int64_t>{1, 1, 1})) return std::nullopt;
  }
  u.view = view ? view->producer : nullptr;
  if (!is_op(u.view, "Reshape") || view->is_graph_output || use_count(view) != (u.split ? 1u : 3u)) return std::nullopt;
  const Shape *ts = known_rank(u.view->input(0)), *vs = known_rank(view);
  if (!ts || !vs || ts->size() != 3 || vs->size() != 5 || !same_dim((*ts)[0], (*vs)[0]) ||
      !same_dim((*ts)[1], (*vs)[1]))
    return std::nullopt;
  const Dim &n = (*ts)[2], &three = (*vs)[2], &heads = (*vs)[3], &d = (*vs)[4];
  if (!n.is_static() || !three.is_static() || three.value != 3 || !heads.is_static() || !d.is_static() ||
      3 * heads.value * d.value != n.value)
    return std::nullopt;
  u.heads = heads.value;
  u.head_size = d.value;
  *rotary = rot;
  return u;
}

Source source_of(const Node* attn) {
  Source s;
  if (auto u = unbound_of(attn, &s.rotary)) {
    s.unbound = std::move(*u);
    s.found = true;
    return s;
  }
  // Q and K may each be rotated per head first (ai.fusec Rotary, fuse_rotary's): Llama's
  // projections, Phi-3's Slices of its fused qkv_proj. Both or neither.
  std::array<Value*, 3> in = {attn->input(kQ), attn->input(kK), attn->input(kV)};
  for (size_t i = 0; i < 2; ++i) {
    Node* rot = in[i] ? in[i]->producer : nullptr;
    if (rot && rot->op_type == "Rotary" && rot->domain == "ai.fusec") {
      s.rotary[i] = rot;
      in[i] = rot->input(0);
    }
  }
  if ((s.rotary[0] == nullptr) != (s.rotary[1] == nullptr)) return s;
  Value *q = in[0], *k = in[1], *v = in[2];
  Node* sp = q ? q->producer : nullptr;
  if (is_op(sp, "Split") && sp->outputs.size() == 3 && sp->outputs[0] == q && sp->outputs[1] == k &&
      sp->outputs[2] == v) {
    s.split = sp;
    s.found = true;
    return s;
  }
  if (auto sl = slices_of({q, k, v})) {
    s.slices = *sl;
    s.found = true;
    return s;
  }
  for (size_t i = 0; i < 3; ++i) {
    auto p = projection_of(in[i]);
    if (!p) return s;
    s.proj[i] = std::move(*p);
  }
  s.found = true;
  return s;
}

/// The head size `r` rotates: its head_size, or without one the last dim of its X (a 4-D rotation
/// over [B, S, H, D], the fourth form's); 0 where unknown.
int64_t rotary_head(const Node* r) {
  if (const int64_t hs = r->attr_int("head_size", 0)) return hs;
  const Shape* xs = known_rank(r->input(0));
  return xs && xs->size() == 4 && xs->back().is_static() ? xs->back().value : 0;
}

int64_t rotated_heads(const Node* r, int64_t head);

/// Why Q's and K's rotations (of head size `d`) cannot become one over packed QKV, or "".
std::string rotary_problem(const Source& src, int64_t d) {
  const Node *rq = src.rotary[0], *rk = src.rotary[1];
  if (!rq) return "";
  for (const Node* r : {rq, rk}) {
    if (!has_single_use(r->outputs[0]) || r->outputs[0]->is_graph_output) return read_elsewhere(r->outputs[0], r);
    if (rotary_head(r) != d || r->attr_int("rotated", 0) != 0)
      return describe(r) + " does not rotate each head of " + std::to_string(d) + " values";
  }
  if (rq->attr_int("rotary_dim", 0) != rk->attr_int("rotary_dim", 0) ||
      rq->attr_int("interleaved", 0) != rk->attr_int("interleaved", 0))
    return describe(rq) + " and " + describe(rk) + " rotate in different forms";
  // The same tables: one value, or equal constants (cleanup shares equal constants only up to 1 MiB).
  auto same = [](const Value* a, const Value* b) {
    if (a == b) return true;
    const Tensor *ta = constant_of(a), *tb = constant_of(b);
    return ta && tb && ta->dtype() == tb->dtype() && ta->dims() == tb->dims() &&
           std::memcmp(ta->raw(), tb->raw(), ta->nbytes()) == 0;
  };
  if (!same(rq->input(1), rk->input(1)) || !same(rq->input(2), rk->input(2)))
    return describe(rq) + " and " + describe(rk) + " read different cos/sin tables";
  // QK-norm (fuse_qk_norm's): one rotation of the packed rows normalizes Q's and K's heads with
  // one row of scale (and bias) each, so both must normalize alike, each with its own constant row.
  if (rq->attr_int("norm", 0) != rk->attr_int("norm", 0) ||
      rq->attr_float("epsilon", 1e-5f) != rk->attr_float("epsilon", 1e-5f) ||
      (rq->inputs.size() > 4 && rq->input(4)) != (rk->inputs.size() > 4 && rk->input(4)))
    return describe(rq) + " and " + describe(rk) + " normalize their heads differently";
  if (rq->attr_int("norm", 0) != 0)
    for (const Node* r : {rq, rk})
      for (size_t i = 3; i < r->inputs.size(); ++i) {
        const Tensor* t = r->input(i) ? constant_of(r->input(i)) : nullptr;
        if (r->input(i) && (!t || !(t->rank() == 1 || (t->rank() == 2 && t->dim(0) == rotated_heads(r, d)))))
          return "the norm of " + describe(r) + " is not one constant row, or one for each of its heads";
      }
  // One rotation of the packed rows reads the tables at Q's and K's heads alike: a table must not
  // vary along the heads.
  for (size_t i : {size_t(1), size_t(2)}) {
    auto td = known_dims(rq->input(i));
    if (!td || (td->size() >= 2 && (*td)[td->size() - 2] != 1))
      return "the table '" + rq->input(i)->name + "' of " + describe(rq) + " is not known to be one for all heads";
  }
  return "";
}

/// "FusedMatMul 'q' + FusedMatMul 'k' + FusedMatMul 'v'" (or "Split 's'").
std::string sources_str(const Source& s) {
  if (s.unbound)
    return describe(s.unbound->view) + " + " +
           (s.unbound->split ? describe(s.unbound->split)
                             : describe(s.unbound->slices[0]) + " + " + describe(s.unbound->slices[1]) + " + " +
                                   describe(s.unbound->slices[2]));
  if (s.split) return describe(s.split);
  if (s.slices[0]) return describe(s.slices[0]) + " + " + describe(s.slices[1]) + " + " + describe(s.slices[2]);
  return describe(s.proj[0].product()) + " + " + describe(s.proj[1].product()) + " + " + describe(s.proj[2].product());
}

/// Where a 4-D attention's operand came from before its head split (and RoPE): walking back along
/// the data input through layout and elementwise ops to a projection. Only for the near-miss.
std::optional<Projection> traced_projection(Value* v) {
  static const std::set<std::string> through = {"Transpose", "Reshape", "Unsqueeze", "Squeeze",         "Expand",
                                                "Mul",       "Add",     "Neg",       "FusedElementwise"};
  for (int depth = 0; v && v->producer && depth < 8; ++depth) {
    if (auto p = projection_of(v)) return p;
    if (!through.count(v->producer->op_type)) return std::nullopt;
    v = v->producer->input(0);
  }
  return std::nullopt;
}

/// Standard ONNX Attention features ai.fusec Attention lacks, the mask's width aside, as a reason,
/// or "".
std::string features_beyond_fusec(const Node* a) {
  const char* extra_in[] = {"past_key", "past_value", "nonpad_kv_seqlen"};
  for (size_t i = 4; i < 7; ++i)
    if (a->input(i)) return std::string("it reads ") + extra_in[i - 4] + ", which ai.fusec Attention does not have";
  const char* extra_out[] = {"present_key", "present_value", "qk_matmul_output"};
  for (size_t i = 1; i < a->outputs.size() && i < 4; ++i)
    if (a->outputs[i]) return std::string("it writes ") + extra_out[i - 1] + ", which ai.fusec Attention does not have";
  for (const char* w : {"left_window_size", "right_window_size"})
    if (a->attr_int(w, -1) != -1)
      return std::string("it has a sliding window (") + w + "), which ai.fusec Attention does not have";
  if (a->has_attr("softmax_precision") && a->attr_int("softmax_precision", 1) != 1)
    return "its softmax_precision is not float (ai.fusec Attention computes the softmax in float32)";
  if (a->has_attr("scale") && a->attr_float("scale", 1) == 0)
    return "its scale is 0, which ai.fusec Attention reads as the default 1/√D";
  return "";
}

/// features_beyond_fusec, and a mask narrower than the keys of a 3-D Q, as a reason, or "".
std::string beyond_fusec_subset(const Node* a) {
  if (std::string why = features_beyond_fusec(a); !why.empty()) return why;
  if (const Value* m = a->input(kMask)) {
    const Shape* ms = known_rank(m);
    const Shape* qs = known_rank(a->input(kQ));
    if (!ms || ms->empty() || !qs || qs->size() != 3 || !same_dim(ms->back(), (*qs)[1]))
      return "its attn_mask '" + m->name + "' is not known to be exactly as wide as the keys (ONNX Attention pads a " +
             "narrower mask, ai.fusec Attention broadcasts it)";
  }
  return "";
}

/// Why `attn` (whose Q, K, V come from `src`) cannot take packed QKV, or "".
std::string attention_problem(const Node* attn, const Source& src) {
  const Value* q = attn->input(kQ);
  const DType t = q->type.dtype;
  if (!attention_type(t))
    return std::string("its type is ") + dtype_name(t) + " (ai.fusec Attention: float32, float16, bfloat16)";
  const Shape *qs = known_rank(q), *ks = known_rank(attn->input(kK)), *vs = known_rank(attn->input(kV));
  if (!qs || !ks || !vs) return "the shapes of Q, K and V are not known";
  if (qs->size() == 4) return describe(attn) + " is 4-D: packed QKV is a form of the 3-D attention";
  if (qs->size() != 3 || ks->size() != 3 || vs->size() != 3) return "Q, K and V are not all 3-D";
  if (standard_domain(attn))
    if (std::string why = beyond_fusec_subset(attn); !why.empty()) return describe(attn) + ": " + why;
  const int64_t hq = attn->attr_int("q_num_heads", 0), hkv = attn->attr_int("kv_num_heads", 0);
  if (hq <= 0 || hkv <= 0) return "q_num_heads and kv_num_heads are not both given";
  const Dim &nq = qs->back(), &nk = ks->back(), &nv = vs->back();
  if (!nq.is_static() || !nk.is_static() || !nv.is_static()) return "the hidden sizes of Q, K and V are not known";
  if (nq.value % hq || nk.value % hkv || nv.value % hkv)
    return "the hidden sizes of Q, K and V do not split into the heads";
  const int64_t dk = nk.value / hkv, dv = nv.value / hkv;
  if (dk != dv)
    return "K's head size " + std::to_string(dk) + " differs from V's " + std::to_string(dv) +
           " (packed QKV has one head size)";
  if (src.split) {
    const Node* sp = src.split;
    const Shape* ts = known_rank(sp->input(0));
    if (!ts || ts->size() != 3) return "the input of " + describe(sp) + " is not known to be 3-D";
    int64_t axis = sp->attr_int("axis", 0);
    if (axis < 0) axis += 3;
    if (axis != 2) return describe(sp) + " splits axis " + std::to_string(sp->attr_int("axis", 0)) + ", not the last";
    for (size_t i = 0; i < 3; ++i)
      if (!has_single_use(sp->outputs[i])) return kRole[i] + std::string(": ") + read_elsewhere(sp->outputs[i], sp);
    return rotary_problem(src, dk);
  }
  if (src.slices[0]) return rotary_problem(src, dk);  // slices_of checked the Slices
  if (src.unbound) {
    if (hq != src.unbound->heads || hkv != src.unbound->heads || dk != src.unbound->head_size)
      return describe(attn) + "'s heads are not the " + std::to_string(src.unbound->heads) + " of " +
             std::to_string(src.unbound->head_size) + " values its view of '" + src.packed()->name + "' holds";
    return rotary_problem(src, dk);
  }
  const Value* x = src.proj[0].x;
  if (src.proj[1].x != x || src.proj[2].x != x)
    return "the projections read different inputs ('" + src.proj[0].x->name + "', '" + src.proj[1].x->name + "', '" +
           src.proj[2].x->name + "')";
  for (const auto& p : src.proj)
    if (std::string why = projection_problem(p, t); !why.empty()) return why;
  return rotary_problem(src, dk);
}

/// [E, N0], [E, N1], [E, N2] -> [E, N0 + N1 + N2] (ir/derived_weight.h: file to file where the
/// sources are mapped).
Tensor concat_columns(const std::array<const Tensor*, 3>& w) {
  const int64_t rows = w[0]->dim(0);
  int64_t cols = 0;
  for (const Tensor* t : w) cols += t->dim(1);
  const size_t es = dtype_size(w[0]->dtype());
  std::vector<ByteRun> runs;
  for (int64_t r = 0; r < rows; ++r)
    for (const Tensor* t : w) {
      const size_t n = static_cast<size_t>(t->dim(1)) * es;
      append_run(runs, static_cast<const unsigned char*>(t->raw()) + static_cast<size_t>(r) * n, n);
    }
  return derived_weight(w[0]->dtype(), {rows, cols}, runs);
}

/// [bq | bk | bv] (zeros for a projection without a bias), or nullopt when none has one.
std::optional<Tensor> concat_bias(const std::array<Projection, 3>& proj, DType t) {
  int64_t cols = 0;
  bool any = false;
  std::vector<ByteRun> runs;
  for (const auto& p : proj) {
    const int64_t n = constant_of(p.w)->dim(1);
    cols += n;
    any |= p.bias != nullptr;
    append_run(runs, p.bias ? constant_of(p.bias)->raw() : nullptr, static_cast<size_t>(n) * dtype_size(t));
  }
  if (!any) return std::nullopt;
  return derived_weight(t, {cols}, runs);
}

/// Replaces `attn` by ai.fusec Attention(packed, "", "" [, mask]) with its attributes, name and
/// origins (plus `absorbed`, the origins of nodes it took in).
Node* packed_attention(Rewriter& r, Node* attn, Value* packed, const std::vector<std::string>& absorbed) {
  std::vector<NamedAttribute> attrs;
  for (const auto& a : attn->attrs)
    if (a.name == "scale" || a.name == "is_causal" || a.name == "q_num_heads" || a.name == "kv_num_heads" ||
        (a.name == "softcap" && attn->attr_float("softcap", 0) != 0))
      attrs.push_back(a);
  std::vector<Value*> ins = {packed, nullptr, nullptr};
  if (Value* m = attn->input(kMask)) ins.push_back(m);
  Value* y = attn->outputs[0];
  const std::string name = attn->name;
  std::vector<std::string> origins = r.remove({attn}).origins;
  origins.insert(origins.end(), absorbed.begin(), absorbed.end());
  Node* n = r.add("Attention", ins, {y}, name, "ai.fusec", std::move(origins));
  n->attrs = std::move(attrs);
  return n;
}

/// The heads of `head` values rotation `r` covers in a row: its X's last dim over its head_size,
/// or (a 4-D rotation over [B, S, H, D]) H.
int64_t rotated_heads(const Node* r, int64_t head) {
  const Shape* xs = known_rank(r->input(0));
  if (r->attr_int("head_size", 0) != 0) return xs->back().value / head;
  return (*xs)[xs->size() - 2].value;
}

/// [qn + kn, D]: Q's qn rows, then K's kn rows; a one-row constant ([D]) serves each of its heads.
Value* stacked_rows(Graph& g, const Tensor& q, int64_t qn, const Tensor& k, int64_t kn, const std::string& stem) {
  const int64_t d = q.dims().back();
  Tensor t(q.dtype(), {qn + kn, d});
  const size_t row = static_cast<size_t>(d) * dtype_size(q.dtype());
  char* out = static_cast<char*>(t.raw());
  for (int64_t i = 0; i < qn + kn; ++i) {
    const Tensor& from = i < qn ? q : k;
    const int64_t at = from.rank() == 1 ? 0 : i < qn ? i : i - qn;
    std::memcpy(out + static_cast<size_t>(i) * row,
                static_cast<const char*>(from.raw()) + static_cast<size_t>(at) * row, row);
  }
  return g.add_initializer(stem, std::move(t));
}

/// The runs of heads a rotation's norm spans (norm_groups), or one run a head.
std::vector<int64_t> norm_runs(const Node* r, int64_t heads) {
  std::vector<int64_t> g = r->attr_ints("norm_groups");
  return g.empty() ? std::vector<int64_t>(static_cast<size_t>(heads), 1) : g;
}

/// Q's and K's rotations (src.rotary, whose outputs the attention no longer reads) -> one Rotary
/// over `packed` that rotates its first `rotated` values of each row (Q's and K's heads) and copies
/// V's; returns the rotated tensor, or `packed` when there were no rotations.
Value* rotate_packed(Rewriter& r, const Source& src, Value* packed, int64_t rotated, const std::string& stem,
                     std::string* summary) {
  Node* rq = src.rotary[0];
  if (!rq) return packed;
  Value *cos = rq->input(1), *sin = rq->input(2);
  const int64_t head = rotary_head(rq);
  const int64_t norm = rq->attr_int("norm", 0);
  // Q's form (rotary_dim, interleaved, norm, epsilon: rotary_problem checked K's is the same), over
  // the packed rows.
  const std::vector<NamedAttribute> attrs = rq->attrs;
  std::vector<Value*> ins = {packed, cos, sin};
  // QK-norm: Q's row of scale (bias) for each of its heads, then K's for each of its heads.
  const int64_t q_heads = rotated / head - rotated_heads(src.rotary[1], head);
  for (size_t i = 3; norm && i < rq->inputs.size(); ++i)
    ins.push_back(rq->input(i) ? stacked_rows(r.graph(), *constant_of(rq->input(i)), q_heads,
                                              *constant_of(src.rotary[1]->input(i)), rotated / head - q_heads,
                                              stem + (i == 3 ? ".qk_norm_scale" : ".qk_norm_bias"))
                               : nullptr);
  // Q's runs of normalized heads, then K's.
  std::vector<int64_t> runs = norm_runs(rq, q_heads);
  for (int64_t n : norm_runs(src.rotary[1], rotated / head - q_heads)) runs.push_back(n);
  const bool spans = norm && std::any_of(runs.begin(), runs.end(), [](int64_t n) { return n > 1; });
  const std::string name = rq->name;
  Replaced gone = r.remove({src.rotary[0], src.rotary[1]});
  Value* out = r.graph().add_value(stem + ".qkv_rotated");
  Node* rot = r.add("Rotary", ins, {out}, name, "ai.fusec", gone.origins);
  rot->attrs = attrs;
  rot->set_attr("head_size", head);
  rot->set_attr("rotated", rotated);
  if (spans) rot->set_attr("norm_groups", runs);
  *summary += " + " + gone.listed + " -> " + describe(rot) + " (Q's and K's heads of the packed rows)";
  return out;
}

/// The projections -> one product writing packed QKV; returns the Attention reading it.
Node* merge_projections(Rewriter& r, Node* attn, const Source& src, std::string* summary) {
  Graph& g = r.graph();
  const auto& proj = src.proj;
  const DType t = attn->input(kQ)->type.dtype;
  Node* q_mm = proj[0].product();
  const std::string name = q_mm->name;
  Tensor w = concat_columns({constant_of(proj[0].w), constant_of(proj[1].w), constant_of(proj[2].w)});
  const int64_t e = w.dim(0), n = w.dim(1);
  std::optional<Tensor> b = concat_bias(proj, t);
  Value* x = proj[0].x;
  std::vector<Node*> replaced;
  for (const auto& p : proj) replaced.insert(replaced.end(), p.nodes.begin(), p.nodes.end());
  const int64_t rotated = constant_of(proj[0].w)->dim(1) + constant_of(proj[1].w)->dim(1);
  // The rotations' outputs lose their reader before the rotations go, and they before the
  // projections they read.
  Value* packed = g.add_value(attn->name + ".qkv");
  Value* in = packed;
  if (src.rotary[0]) {
    g.set_input(attn, kQ, nullptr);
    g.set_input(attn, kK, nullptr);
    in = rotate_packed(r, src, packed, rotated, attn->name, summary);
  }
  Replaced gone = r.remove(replaced);

  std::vector<Value*> ins = {x, g.add_initializer(name + ".qkv_weight", std::move(w))};
  if (b) ins.push_back(g.add_initializer(name + ".qkv_bias", std::move(*b)));
  Node* mm = r.add(b ? "FusedMatMul" : "MatMul", ins, {packed}, name, b ? "ai.fusec" : "", gone.origins);
  *summary = gone.listed + " -> " + describe(mm) + " (W [" + std::to_string(e) + ", " + std::to_string(n) + "])" +
             *summary;
  return packed_attention(r, attn, in, {});
}

/// The third form (HeadSplit) -> ai.fusec Attention over T, its 4-D output rebuilt as a view of the
/// packed one; false (with a near-miss where the form is there) when it does not apply.
bool try_head_split(Rewriter& r, Node* attn, const HeadSplit& h) {
  Graph& g = r.graph();
  const std::string what = describe(h.gathers[0]) + " + " + describe(h.gathers[1]) + " + " + describe(h.gathers[2]) +
                           " of " + describe(h.transpose) + " -> " + describe(attn) + " not packed";
  const Value* q = attn->input(kQ);
  const DType t = q->type.dtype;
  if (!attention_type(t))
    return r.near_miss(
        what, std::string("its type is ") + dtype_name(t) + " (ai.fusec Attention: float32, float16, bfloat16)");
  // The mask's width is checked below, against the S keys (beyond_fusec_subset's is for a 3-D Q).
  if (standard_domain(attn))
    if (std::string why = features_beyond_fusec(attn); !why.empty()) return r.near_miss(what, describe(attn) + ": " + why);
  if (const Value* m = attn->input(kMask)) {
    const Shape* ms = known_rank(m);
    if (!ms || ms->empty() || !ms->back().is_static() || ms->back().value != h.tokens)
      return r.near_miss(what, "its attn_mask '" + m->name + "' is not known to be exactly as wide as the keys");
  }
  if (r.opts().portable)
    return r.near_miss(what, "packing Q, K and V needs ai.fusec Attention (--portable writes standard ops only)");
  const Shape* ys = known_rank(attn->outputs[0]);
  if (!ys || ys->size() != 4) return r.near_miss(what, "the attention's output is not known to be 4-D");

  const std::string name = attn->name;
  const bool was_standard = standard_domain(attn);
  std::string summary = what.substr(0, what.size() - std::string(" not packed").size());
  std::vector<std::string> replaced;
  for (Node* n : h.gathers) replaced.push_back(n->name);
  // The Gathers lose their reader, then go; the Transpose and the Reshape too where nothing else
  // reads them.
  for (size_t i : {kQ, kK, kV}) g.set_input(attn, i, nullptr);
  std::vector<Node*> gone_nodes(h.gathers.begin(), h.gathers.end());
  if (use_count(h.transpose->outputs[0]) == 3 && !h.transpose->outputs[0]->is_graph_output) {
    gone_nodes.push_back(h.transpose);
    replaced.push_back(h.transpose->name);
    if (has_single_use(h.reshape->outputs[0]) && !h.reshape->outputs[0]->is_graph_output) {
      gone_nodes.push_back(h.reshape);
      replaced.push_back(h.reshape->name);
    }
  }
  Replaced gone = r.remove(gone_nodes);

  std::vector<NamedAttribute> attrs;
  for (const auto& a : attn->attrs)
    if (a.name == "scale" || a.name == "is_causal") attrs.push_back(a);
  std::vector<Value*> ins = {h.packed, nullptr, nullptr};
  if (Value* m = attn->input(kMask)) ins.push_back(m);
  Value* y4 = attn->outputs[0];
  std::vector<std::string> origins = r.remove({attn}).origins;
  origins.insert(origins.end(), gone.origins.begin(), gone.origins.end());
  const DType yt = y4->type.dtype;
  const Shape& tshape = *h.packed->type.shape;
  Value* y3 = g.add_value(name + ".heads_packed");
  y3->type.dtype = yt;
  y3->type.shape = Shape{tshape[0], tshape[1], Dim(h.heads * h.head_size)};
  Node* fused = r.add("Attention", ins, {y3}, name, "ai.fusec", std::move(origins));
  fused->attrs = std::move(attrs);
  fused->set_attr("q_num_heads", h.heads);
  fused->set_attr("kv_num_heads", h.heads);
  // Y [B, H, S, D] = Transpose(0, 2, 1, 3) of the packed output viewed [B, S, H, D] (0: B as it is).
  Value* shape =
      g.add_initializer(name + ".heads_view_shape", Tensor::from_int64({0, h.tokens, h.heads, h.head_size}, {4}));
  Value* view = g.add_value(name + ".heads_view");
  view->type.dtype = yt;
  view->type.shape = Shape{tshape[0], tshape[1], Dim(h.heads), Dim(h.head_size)};
  r.add("Reshape", {y3, shape}, {view}, name + ".heads_view", "", {});
  Node* back = r.add("Transpose", {view}, {y4}, name + ".heads_merge", "", {});
  back->set_attr("perm", std::vector<int64_t>{0, 2, 1, 3});
  summary += " -> ai.fusec." + describe(fused) + " (packed QKV, " + std::to_string(h.heads) + " heads" +
             (was_standard ? ", was ONNX Attention" : "") + ") + " + describe(back);
  r.rewrote(summary, std::move(replaced), name);
  return true;
}

bool try_attention(Rewriter& r, Node* attn) {
  if (!attn->input(kQ) || !attn->input(kK) || !attn->input(kV)) return false;  // packed already
  if (auto h = head_split_of({attn->input(kQ), attn->input(kK), attn->input(kV)})) return try_head_split(r, attn, *h);
  const Source src = source_of(attn);
  if (!src.found) {
    // A 4-D attention whose operands trace back (head split, RoPE) to three projections of one X.
    const Shape* qs = known_rank(attn->input(kQ));
    if (!qs || qs->size() != 4) return false;
    std::array<std::optional<Projection>, 3> traced;
    for (size_t i = 0; i < 3; ++i)
      if (!(traced[i] = traced_projection(attn->input(i)))) return false;
    if (traced[1]->x != traced[0]->x || traced[2]->x != traced[0]->x) return false;
    return r.near_miss(describe(traced[0]->product()) + " + " + describe(traced[1]->product()) + " + " +
                           describe(traced[2]->product()) + " -> " + describe(attn) + " not merged",
                       describe(attn) +
                           " is 4-D (Q, K and V are [B, heads, S, D], e.g. after RoPE): packed QKV is a "
                           "form of the 3-D attention, which reads the projections' outputs directly");
  }
  const std::string what = sources_str(src) + " -> " + describe(attn) + (src.packed() ? " not packed" : " not merged");
  if (std::string why = attention_problem(attn, src); !why.empty()) return r.near_miss(what, why);
  if (r.opts().portable)
    return r.near_miss(what, "packing Q, K and V needs ai.fusec Attention (--portable writes standard ops only)");
  const bool was_standard = standard_domain(attn);
  const std::string attn_name = attn->name;
  std::string summary;
  std::vector<std::string> replaced;
  Node* fused;
  const bool packed_form = src.packed() != nullptr;  // src's nodes may be gone below
  const std::string product_name = packed_form ? attn_name : src.proj[0].product()->name;
  if (Value* packed = src.packed()) {
    summary = sources_str(src) + " + " + describe(attn);
    Graph& g = r.graph();
    // Q's and K's widths, before the inputs are detached: what a packed rotation rotates.
    const int64_t rotated = attn->input(kQ)->type.shape->back().value + attn->input(kK)->type.shape->back().value;
    g.set_input(attn, kQ, nullptr);  // the Split's (Slices', rotations') outputs lose their reader first
    g.set_input(attn, kK, nullptr);
    g.set_input(attn, kV, nullptr);
    // The fourth form: the views back to [B, S, H·D] go before the rotations they read.
    Replaced merges;
    if (src.unbound) {
      const auto& m = src.unbound->merges;
      merges = r.remove({m[0], m[1], m[2]});
    }
    std::string rotation;
    for (const Node* rot : src.rotary)
      if (rot) replaced.push_back(rot->name);
    Value* in = rotate_packed(r, src, packed, rotated, attn->name, &rotation);
    std::vector<Node*> cut;
    if (const auto& u = src.unbound) {
      cut = {u->squeezes[0], u->squeezes[1], u->squeezes[2]};
      if (u->split)
        cut.push_back(u->split);
      else
        cut.insert(cut.end(), u->slices.begin(), u->slices.end());
      cut.push_back(u->view);
    } else if (src.split) {
      cut = {src.split};
    } else {
      cut = {src.slices[0], src.slices[1], src.slices[2]};
    }
    Replaced gone = r.remove(cut);
    gone.names.insert(gone.names.begin(), merges.names.begin(), merges.names.end());
    gone.origins.insert(gone.origins.end(), merges.origins.begin(), merges.origins.end());
    replaced.insert(replaced.begin(), gone.names.begin(), gone.names.end());
    summary += rotation;
    fused = packed_attention(r, attn, in, gone.origins);
  } else {
    for (const auto& p : src.proj)
      for (Node* n : p.nodes) replaced.push_back(n->name);
    for (const Node* rot : src.rotary)
      if (rot) replaced.push_back(rot->name);
    fused = merge_projections(r, attn, src, &summary);
  }
  summary += " -> ai.fusec." + describe(fused) + " (packed QKV" + (was_standard ? ", was ONNX Attention" : "") + ")";
  r.rewrote(summary, std::move(replaced), product_name);
  return true;
}

}  // namespace

bool MergeQkvPass::run(Graph& g, PassContext& ctx) {
  std::vector<Node*> attns;
  for (Node* n : g.node_list())
    if (n->op_type == "Attention" && (n->domain == "ai.fusec" || standard_domain(n))) attns.push_back(n);
  Rewriter r(g, ctx, kPass);
  for (Node* a : attns) try_attention(r, a);
  if (r.changed()) g.remove_unused_values();
  return r.changed();
}

}  // namespace fusec
