// fuse_attention: scaled dot-product attention, as the PyTorch exporters write it, becomes one node.
//
//   x_q ─ Reshape [B,S,H,D] ─ Transpose(0,2,1,3) ─ [Mul(c_q)] ─────────────────────── Q ─┐
//   x_k ─ Reshape [B,S,Hkv,D] ─ Transpose(0,2,3,1) ──────────────────────────────── Kᵀ ─┴─ MatMul ─┐
//                             └ Transpose(0,2,1,3) [─ repeat_kv] ─ Transpose(0,1,3,2) [─ Mul(c_k)] ┘
//   ┌──────────────────────────────────────────────────────────────────────────────────────────┘
//   └─ [Div(√D) | Mul(1/√D)] ─ [Where(cond, ·, fill)] ─ [Add(mask)] ─ Softmax(last axis) ─ P ─┐
//        ┌──────────────────────────────────────────────────────────────────────────────────────┘
//        └─ [P' = Where(IsNaN(P), 0, P)] ─────────────────────────────────────────────────────┐
//   x_v ─ Reshape ─ Transpose(0,2,1,3) [─ repeat_kv] ──────────────────────────── V ─────────┴─ MatMul ─┐
//   ┌──────────────────────────────────────────────────────────────────────────────────────────┘
//   └─ Transpose(0,2,1,3) ─ Reshape [B,S,H·Dv] ──▶ y
//
//   y = Attention(x_q, x_k, x_v [, mask]; scale = c_q·c_k/√D, is_causal, q_num_heads = H,
//                 kv_num_heads = Hkv)                                   (3-D form, no Transpose left)
//
// The algebra: (c_q·Q)(c_k·K)ᵀ/√D = scale·QKᵀ, so every constant scalar multiplying Q, Kᵀ or the
// scores (torch's SDPA decomposition puts D^-¼ on Q and on Kᵀ; HF BERT divides by √D) folds into one
// `scale`. Where(cond, s, f) = s + (cond ? 0 : −∞) once softmaxed, for f ≤ −10⁴ (exp(f − max)
// underflows to 0), except in a row with every key masked: there the graph averages V and Attention
// gives 0, so a constant cond must have no empty row and a computed one needs f = −∞. A constant
// cond (or an additive constant of 0 / ≤ −10⁴) that is exactly the lower triangle j ≤ i becomes
// is_causal=1 (GPT-2's sliced `bias` buffer, a Llama mask folded to a constant); any other mask is
// kept as attn_mask. A mask added before the scale is folded into it when that is exact — a constant
// mask and a power-of-two scale (m·2ᵏ rounds exactly, so (QKᵀ + m)·2ᵏ = QKᵀ·2ᵏ + m·2ᵏ bit for bit);
// otherwise it is a near-miss. repeat_kv (Unsqueeze(2) → Expand → Reshape, transformers' GQA) is
// absorbed: its kv head g serves query heads g·r..g·r+r−1, which is Attention's h / (Hq/Hkv).
//
// torch's safe softmax: both exporters write SDPA with a mask as P' = Where(IsNaN(P), 0, P) after
// the Softmax. A row whose scores are all −∞ is NaN after the Softmax and 0 after the guard, and 0
// is what Attention gives for a row with every key excluded (docs/ops.md; tests/gpu holds the CUDA
// kernels, cuDNN's SDPA included, to it), so the guard is part of the pattern. An added mask goes
// to Attention as it is: the op adds it to the scores as the graph's Add does, so its fill keeps
// its meaning in every row. −∞ (the legacy exporter's Where(m, 0, −inf)) empties a fully masked
// row: 0, as the guard gives. −FLT_MAX (the dynamo exporter's Where(m, 0, −3.4028235e38)) leaves
// such a row finite: s − FLT_MAX = −FLT_MAX for every key (|s| < 10³¹), so the Softmax is uniform,
// the guard sees no NaN, and graph and Attention both average V there; in every other row
// exp(−FLT_MAX − max) is exactly 0, as for −∞. So the fill is never rewritten to −∞ or to a bool
// mask: that would change the fully masked rows of a −FLT_MAX model (a padding-only sequence),
// which optimize must not. Not reproduced: a row whose scores are NaN or +∞ (NaN or overflow in Q
// or K), which the guard zeroes and Attention leaves NaN, as ONNX Attention and torch's fused
// kernels do; finite Q and K with finite products never give one.
//
// Windows (Swin's shifted-window attention): the scores [B·G, H, N, M] of G windows per image are
// reshaped to [B, G, H, N, M] for a mask per window ([1, G, 1, N, M], added) and reshaped back, with
// a per-head bias ([1, H, N, M], added) before or after. That is attention over [B, G·H, N, ·]: the
// views Q, K, V [B·G, H, N, D] -> [B, G·H, N, D] are free, query head g·H + h of an image reads its
// own window's keys, and the masks, constant and the same for every image, sum to one constant
// mask [1, G·H, N, M] (bias[h] + window[g]). The graph adds them one after the other, the fused node
// adds their sum: one float32 rounding apart, only where both are non-zero (Swin's window masks
// are 0 or −100). Both Reshapes must be exactly that split and merge, and every mask constant.
//
// A constant per head multiplying the scores before any mask (Swin V2's learned temperature,
// [H, 1, 1]) moves onto Q as a Mul by [1, H, 1, 1]: (Q·Kᵀ)·s_h = (s_h·Q)·Kᵀ, one rounding apart.
//
// Two batch dims: a core over [B, G, H, S, D] tensors (MaxViT's block and grid attention, G windows
// or grid cells an image) is first rewritten to [B·G, H, S, D] (attention_batch.h), then matched
// as any other.
//
// Heads folded into the batch: a core over [B·H, S, D] tensors (torch's
// F.multi_head_attention_forward when nn.MultiheadAttention returns its weights, the module's
// default; transformers' BART-era bmm attention) is first rewritten to [B, H, S, D]
// (attention_folded.h; B = 1 where the core has no view of B and H), then matched as any other.
//
// An ONNX Attention the model already holds in the 4-D form, behind the same head splits and
// repeats and before the same merge (torch's exporter at opset 23), becomes the 3-D form the same
// way (attention_standard.cpp).
//
// Forms: the 3-D form when Q, K and V each come from a head split of a 3-D tensor, or are each the
// Transpose(0,2,1,3) of a [B, S, H, D] tensor (which the 3-D form reads through a free Reshape),
// and P·V goes through the head merge; otherwise the 4-D form on [B, H, S, D] tensors, keeping the
// transposes that must stay and adding Transpose(0,2,1,3) where the graph only has Kᵀ.
// Written as ONNX Attention when the model's ai.onnx opset is >= 23, else as ai.fusec Attention (the
// same semantics, docs/ops.md); under --portable, below opset 23, a near-miss. Needs cleanup first
// (Dropout, Identity and no-op Casts between Softmax and P·V are gone) and folded constants (the
// scale, the causal slice, the Reshape targets, so that shapes are known).
#include "passes/fuse_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "passes/attention_batch.h"
#include "passes/attention_folded.h"
#include "passes/attention_view_bias.h"
#include "passes/attention_mask.h"
#include "passes/attention_pattern.h"
#include "passes/attention_standard.h"
#include "passes/batchnorm_affine.h"
#include "passes/pattern.h"
#include "passes/rewrite.h"

namespace fusec {

namespace {

using attention::as_3d;
using attention::bhsd;
using attention::ChainStep;
using attention::Operand;
using attention::same_known;
using attention::viewable_3d;

const char* kPass = "fuse_attention";
constexpr int64_t kStandardAttentionOpset = 23;

/// What the scores get besides the scale: causal, and at most one explicit mask (or up to four
/// added or subtracted ones and a -FLT_MAX fill, made into one first).
struct Bias {
  bool causal = false;
  // A computed condition whose masked scores are -FLT_MAX (masked_fill with finfo.min): the node
  // reads Where(filled, t, -FLT_MAX) (keep_where_true) or Where(filled, -FLT_MAX, t), t the terms
  // added before the fill (or 0), plus the terms added after it.
  Value* filled = nullptr;
  bool keep_where_true = true;
  bool clamped = false;                         // the node reads Max(mask, -FLT_MAX) (ClampLow after the mask's Add)
  Value* mask = nullptr;                        // an existing value, or
  double factor = 1;                            // the node reads factor·mask: -1 subtracted, a power of two scaled
  std::vector<std::pair<Value*, double>> plus;  // more masks, each times its factor, added to it
  std::vector<bool> after_fill;                 // per term (mask or made, then plus): added after the fill
  std::optional<Tensor> made;                   // a new constant (a negated or scaled one) named after `made_from`
  std::string made_from;
};

struct Match {
  Node *softmax = nullptr, *qk = nullptr, *pv = nullptr, *merge = nullptr;
  attention::ScoreChain chain;
  attention::SoftmaxGuard guard;  // Where(IsNaN(P), 0, P) between the Softmax and P·V, if any
  Operand q, k, v;
  std::vector<Node*> peeled;  // scale Muls on Q and Kᵀ
  double scale = 1;
  double softcap = 0;  // c of a soft cap c·tanh(s / c) on the scaled scores (Gemma 2), 0: none
  Bias bias;
  int64_t windows = 1;          // G: the batch regrouped as [B, G] windows, heads G·H (resolve_windows)
  Value* head_scale = nullptr;  // a constant per head the scores are multiplied by, moved onto Q
  bool three_d = false;
  std::string domain;
};

std::string what_of(const Match& m) {
  std::string s = describe(m.qk) + " -> " + describe(m.softmax);
  if (m.guard.where) s += " -> " + describe(m.guard.where) + " (safe softmax)";
  return m.pv ? s + " -> " + describe(m.pv) : s;
}

/// "'name' is also read by Add 'x'" / "... is a graph output" for a value that must have one reader.
std::string extra_readers(const Value* v, const char* role) {
  if (v->is_graph_output) return std::string(role) + " '" + v->name + "' are a graph output";
  return std::string(role) + " '" + v->name + "' are read by " + std::to_string(v->consumers.size()) + " nodes";
}

bool power_of_two(double x) {
  int e;
  return x > 0 && std::frexp(x, &e) == 0.5;
}

/// The windowed form (see the top of the file): the two Regroup steps split the scores' batch into
/// [B, G] and merge it back, and every mask is a constant broadcast over the images. Sets
/// m.windows, m.scale and m.bias (one constant [1, G·H, N, M]); returns why not, or "".
std::string resolve_windows(Match& m) {
  const auto& steps = m.chain.steps;
  std::vector<size_t> at;
  for (size_t i = 0; i < steps.size(); ++i)
    if (steps[i].kind == ChainStep::Regroup) at.push_back(i);
  if (at.size() != 2)
    return describe(steps[at[0]].node) +
           " reshapes the scores, and is not one of a pair that splits their batch into windows and merges it back";
  const Node* split = steps[at[0]].node;
  const Node* merge = steps[at[1]].node;
  const auto& in = split->input(0)->type.shape;
  const auto& mid = split->outputs[0]->type.shape;
  const auto& out = merge->outputs[0]->type.shape;
  const bool pair = in && mid && out && in->size() == 4 && mid->size() == 5 && is_static(*in) && is_static(*mid) &&
                    *out == *in && (*mid)[2] == (*in)[1] && (*mid)[3] == (*in)[2] && (*mid)[4] == (*in)[3] &&
                    (*mid)[0].value * (*mid)[1].value == (*in)[0].value;
  if (!pair)
    return describe(split) + " and " + describe(merge) +
           " do not split the batch of the scores into [images, windows] and merge it back (or their shapes are "
           "unknown: bind them, e.g. --batch)";
  const int64_t G = (*mid)[1].value, H = (*in)[1].value, N = (*in)[2].value, M = (*in)[3].value;
  std::vector<float> acc(static_cast<size_t>(G * H * N * M), 0.0f);  // [1, G·H, N, M], added in float32
  bool masked = false;
  for (size_t i = 0; i < steps.size(); ++i) {
    const ChainStep& st = steps[i];
    if (st.kind == ChainStep::Regroup || st.kind == ChainStep::HeadScale) continue;
    if (st.kind == ChainStep::Scale) {
      if (masked) return describe(st.node) + " scales the scores after a window mask";
      m.scale *= st.factor;
      continue;
    }
    if (st.kind == ChainStep::WhereMask) return describe(st.node) + " masks windowed scores with a Where";
    if (st.kind == ChainStep::ClampLow) return describe(st.node) + " clamps windowed scores";
    if (st.kind == ChainStep::Tanh) return describe(st.node) + " soft-caps windowed scores";
    const Tensor* c = constant_of(st.mask);
    if (!c || (c->dtype() != DType::Float32 && c->dtype() != DType::Float16 && c->dtype() != DType::BFloat16 &&
               c->dtype() != DType::Float64))
      return "the mask '" + st.mask->name + "' of windowed scores is not a float constant";
    // The view the mask is added in: [B, G, H, N, M] between the Reshapes, else [B·G, H, N, M].
    const bool grouped = i > at[0] && i < at[1];
    const Shape& view = grouped ? *mid : *in;
    if (st.node->outputs[0]->type.shape != view) return describe(st.node) + " broadcasts the scores to a larger shape";
    const auto& cd = c->dims();
    const size_t lead = view.size() - std::min(view.size(), cd.size());
    if (cd.size() > view.size()) return "the mask '" + st.mask->name + "' has more dims than the scores";
    // The mask's element stride along each dim of the view (0 where it broadcasts or is absent).
    std::vector<int64_t> stride(view.size(), 0);
    for (size_t d = cd.size(), run = 1; d-- > 0;) {
      const int64_t want = view[lead + d].value;
      if (cd[d] != 1 && cd[d] != want)
        return "the mask '" + st.mask->name + "' does not broadcast to the scores " + shape_str(view);
      if (lead + d == 0 && cd[d] != 1)
        return "the mask '" + st.mask->name + "' differs from image to image (windows need one mask for all)";
      stride[lead + d] = cd[d] == 1 ? 0 : static_cast<int64_t>(run);
      run *= static_cast<size_t>(cd[d]);
    }
    masked = true;
    // The view's dims after the images: [G, H, N, M] between the Reshapes, [H, N, M] outside.
    const int64_t sg = grouped ? stride[1] : 0, sh = stride[view.size() - 3], sr = stride[view.size() - 2],
                  sk = stride[view.size() - 1];
    float* out = acc.data();
    for (int64_t g = 0; g < G; ++g)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t r = 0; r < N; ++r)
          for (int64_t k = 0; k < M; ++k) *out++ += static_cast<float>(c->as_double(g * sg + h * sh + r * sr + k * sk));
  }
  m.windows = G;
  if (masked) {
    const DType t = m.qk->outputs[0]->type.dtype;  // an fp16 model adds an fp16 mask
    if (t != DType::Float32 && t != DType::Float16 && t != DType::BFloat16)
      return "the windowed scores are " + std::string(dtype_name(t)) + ", not float32, float16 or bfloat16";
    m.bias.made = tensor_from(t, {1, G * H, N, M}, std::vector<double>(acc.begin(), acc.end()));
    m.bias.made_from = steps[at[0]].node->outputs[0]->name + "_window_masks";
  }
  return "";
}

/// A per-head factor on the scores (Swin V2's temperature) moves onto Q: (Q·Kᵀ)·s_h = (s_h·Q)·Kᵀ,
/// one rounding apart. Only before any mask (after one it would scale the mask too); one at most.
std::string take_head_scale(Match& m) {
  bool masked = false;
  for (const ChainStep& st : m.chain.steps) {
    if (st.kind == ChainStep::AddMask || st.kind == ChainStep::WhereMask) masked = true;
    if (st.kind != ChainStep::HeadScale) continue;
    if (masked) return describe(st.node) + " scales the masked scores per head";
    if (m.head_scale) return describe(st.node) + " scales the scores per head a second time";
    m.head_scale = st.mask;
  }
  return "";
}

/// The largest head a soft-capped attention is fused at: fusec's own CUDA kernels' (cuDNN's SDPA
/// has no soft cap; the streaming kernel takes heads up to 256).
constexpr int64_t kSoftcapMaxHead = 256;

/// A soft cap on the scores (Gemma 2): Q·Kᵀ -> scales a -> Tanh -> scales c -> masks, which is
/// c·tanh(a·s) = softcap(scale·s) with softcap c and scale a·c (c > 0): Attention's order, the cap
/// before the mask. Sets m.softcap; returns why not, or "". The scales are taken with the others.
std::string take_softcap(Match& m) {
  const auto& steps = m.chain.steps;
  size_t at = steps.size();
  for (size_t i = 0; i < steps.size(); ++i)
    if (steps[i].kind == ChainStep::Tanh) {
      if (at != steps.size()) return "two Tanh sit between Q·Kᵀ and the Softmax";
      at = i;
    }
  if (at == steps.size()) return "";
  const Node* tanh = steps[at].node;
  for (size_t i = 0; i < at; ++i)
    if (steps[i].kind != ChainStep::Scale)
      return describe(steps[i].node) + " comes before " + describe(tanh) + " (a soft cap takes the scaled scores)";
  double cap = 1;
  bool masked = false;
  for (size_t i = at + 1; i < steps.size(); ++i) {
    if (steps[i].kind == ChainStep::Scale) {
      if (masked) return describe(steps[i].node) + " scales the capped scores after a mask";
      cap *= steps[i].factor;
    } else if (steps[i].kind == ChainStep::HeadScale || steps[i].kind == ChainStep::Tanh) {
      return describe(steps[i].node) + " follows " + describe(tanh);
    } else {
      masked = true;
    }
  }
  if (!(cap > 0) || !std::isfinite(cap))
    return describe(tanh) + " is scaled by " + std::to_string(cap) + " after it, not by a soft cap > 0";
  m.softcap = cap;
  return "";
}

/// Resolves the ops between Q·Kᵀ and the Softmax into `scale` and `bias`; returns why not, or "".
std::string resolve_steps(Match& m, const Dim& sq, const Dim& skv) {
  const auto& steps = m.chain.steps;
  if (std::string why = take_head_scale(m); !why.empty()) return why;
  for (const ChainStep& s : steps)
    if (s.kind == ChainStep::Regroup) return resolve_windows(m);
  if (std::string why = take_softcap(m); !why.empty()) return why;
  // after[i]: the product of the scales applied after step i (what its mask gets multiplied by).
  std::vector<double> after(steps.size(), 1.0);
  for (size_t i = steps.size(); i-- > 0;) {
    if (i + 1 < steps.size())
      after[i] = after[i + 1] * (steps[i + 1].kind == ChainStep::Scale ? steps[i + 1].factor : 1.0);
    if (steps[i].kind == ChainStep::Scale) m.scale *= steps[i].factor;
  }
  const bool sizes = sq.is_static() && skv.is_static();
  int adds = 0, wheres = 0;
  Value* bool_mask = nullptr;
  // A constant Where's kept positions and its fill as the scores meet it at the Softmax: with an
  // added mask as well, the two become one additive mask (below).
  std::optional<Tensor> where_keep;
  double where_fill = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    const ChainStep& s = steps[i];
    if (s.kind == ChainStep::Scale || s.kind == ChainStep::HeadScale || s.kind == ChainStep::Tanh) continue;
    if (s.kind == ChainStep::ClampLow) {
      // Max(s + m, -FLT_MAX) = s + Max(m, -FLT_MAX) while |s| < 2^103 (s - FLT_MAX rounds to
      // -FLT_MAX): the clamp moves onto the mask, or goes where the mask is finite anyway.
      const ChainStep* add = i > 0 && steps[i - 1].kind == ChainStep::AddMask ? &steps[i - 1] : nullptr;
      if (!add || after[i] != 1) return describe(s.node) + " clamps the scores other than right after an added mask";
      if (const Tensor* mc = constant_of(add->mask)) {
        for (int64_t j = 0; j < mc->numel(); ++j)
          if (!std::isfinite(mc->as_double(j)))
            return describe(s.node) + " clamps an added constant mask that is not finite";
        continue;
      }
      if (m.bias.mask != add->mask || !m.bias.plus.empty() || m.bias.made || m.bias.filled || m.bias.factor != 1)
        return describe(s.node) + " clamps one of several masks";
      m.bias.clamped = true;
      continue;
    }
    const Tensor* c = constant_of(s.mask);
    if (s.kind == ChainStep::WhereMask) {
      if (++wheres > 1) return "more than one Where masks the scores";
      const double fill = s.fill * after[i];
      if (after[i] <= 0 || !(std::isinf(s.fill) ? s.fill < 0 : attention::masks_like_neg_inf(fill)))
        return describe(s.node) + " fills masked scores with " + std::to_string(s.fill) +
               (after[i] != 1 ? " (then scaled)" : "") + ", not a value <= -1e4 that masks like -inf";
      if (!c) {
        // -FLT_MAX written over the scores is -FLT_MAX added to them: s - FLT_MAX rounds to -FLT_MAX
        // for |s| < 2^103, so a fully masked row is uniform either way (FSMT, BART-era masked_fill
        // with finfo.min). Another finite fill would differ there.
        // With added masks: those added before the fill are kept where it keeps the scores (the
        // masked ones are -FLT_MAX whatever they add: MPT's ALiBi, then masked_fill), those added
        // after it are added to its result, as in the graph.
        if (s.fill == -static_cast<double>(std::numeric_limits<float>::max()) && after[i] == 1 &&
            m.qk->outputs[0]->type.dtype == DType::Float32 && !m.bias.filled) {
          m.bias.filled = s.mask;
          m.bias.keep_where_true = s.keep_where_true;
          continue;
        }
        if (!std::isinf(s.fill))
          return describe(s.node) +
                 " has a computed condition and a finite fill: a row with every key masked would differ (the graph "
                 "averages V there, Attention gives 0)";
        if (!s.keep_where_true)
          return describe(s.node) +
                 " has a computed condition that marks the masked positions (Attention's bool mask marks the kept "
                 "ones)";
        bool_mask = s.mask;
        continue;
      }
      Tensor keep = c->clone();
      if (!s.keep_where_true)
        for (int64_t j = 0; j < keep.numel(); ++j) keep.data<uint8_t>()[j] = !keep.data<uint8_t>()[j];
      where_keep = keep.clone();
      where_fill = fill;
      if (sizes && attention::is_causal_constant(keep, sq.value, skv.value, false)) {
        m.bias.causal = true;
        continue;
      }
      if (!std::isinf(s.fill) && (!sizes || attention::has_empty_row(keep, sq.value, skv.value)))
        return describe(s.node) +
               " masks every key of some query row with a finite fill (the graph averages V there, Attention gives 0)";
      if (s.keep_where_true) {
        bool_mask = s.mask;
      } else {
        m.bias.made = std::move(keep);
        m.bias.made_from = s.mask->name + "_keep";
      }
      continue;
    }
    // An added mask.
    if (s.node->outputs[0]->type.shape != m.qk->outputs[0]->type.shape)
      return describe(s.node) + " broadcasts the scores to a larger shape";
    if (!s.mask->type.shape || s.mask->type.shape->empty()) return "the mask '" + s.mask->name + "' is a scalar";
    if (c && sizes && after[i] == 1 && !s.negated && attention::is_causal_constant(*c, sq.value, skv.value, true)) {
      m.bias.causal = true;
      continue;
    }
    if (++adds > 4) return "more than four masks are added to the scores";
    // A term added before a scale is scaled with the scores: exactly, where the scale is a power
    // of two; a subtracted one is negated.
    if (after[i] != 1 && !power_of_two(after[i]))
      return "the mask '" + s.mask->name + "' is added before the scale (x" + std::to_string(after[i]) +
             "); only a power-of-two scale folds exactly";
    const double factor = s.negated ? -after[i] : after[i];
    if (adds >= 2) {
      // A relative-position bias and a padding mask (MPNet, WavLM, T5; Funnel's position and
      // token-type terms, its mask subtracted; XLNet's, scaled with the scores): summed into one,
      // as (scores + a) + b = scores + (a + b) up to one rounding.
      if (!m.bias.mask || m.bias.made)
        return "several masks are added to the scores, and one of them is made from a constant";
      m.bias.plus.emplace_back(s.mask, factor);
      m.bias.after_fill.push_back(m.bias.filled != nullptr);
      continue;
    }
    if (c && factor != 1) {
      Tensor scaled(DType::Float32, c->dims());
      if (c->dtype() != DType::Float32)
        return "the mask '" + s.mask->name + "' is scaled or negated into a new constant and is not float32";
      for (int64_t j = 0; j < c->numel(); ++j)
        scaled.data<float>()[j] = c->data<float>()[j] * static_cast<float>(factor);
      if (sizes && attention::is_causal_constant(scaled, sq.value, skv.value, true)) {
        m.bias.causal = true;
        continue;
      }
      m.bias.made = std::move(scaled);
      m.bias.made_from = s.mask->name + "_scaled";
      m.bias.after_fill.push_back(m.bias.filled != nullptr);
      continue;
    }
    m.bias.mask = s.mask;
    m.bias.factor = factor;
    m.bias.after_fill.push_back(m.bias.filled != nullptr);
  }
  // A constant Where and one added mask (GPT-Neo's local layers: the window's Where with
  // finfo.min, then the padding mask): the Where becomes an added constant, 0 where it keeps a
  // score and its fill where it masks one, and the two masks one sum. Exact where the fill is -inf
  // or -FLT_MAX (s - FLT_MAX rounds to -FLT_MAX for |s| < 2^103, and a fill plus a masking term is
  // -inf either way); another fill that masks like -inf changes no probability of a row that keeps
  // a key, and the constant's rows each keep one (checked above for a finite fill).
  const bool made_keep = m.bias.made && m.bias.made->dtype() == DType::Bool;
  bool where_added = false;
  if (where_keep && (bool_mask || made_keep) && m.bias.mask && m.bias.plus.empty() && !m.bias.filled &&
      (!bool_mask || !m.bias.made) && m.qk->outputs[0]->type.dtype == DType::Float32) {
    Tensor added(DType::Float32, where_keep->dims());
    for (int64_t j = 0; j < added.numel(); ++j)
      added.data<float>()[j] = where_keep->data<uint8_t>()[j] ? 0.0f : static_cast<float>(where_fill);
    m.bias.made_from = (bool_mask ? bool_mask->name : m.bias.made_from) + "_added";
    m.bias.made = std::move(added);
    m.bias.plus = {{m.bias.mask, m.bias.factor}};
    m.bias.after_fill = {false, false};
    m.bias.mask = nullptr;
    m.bias.factor = 1;
    bool_mask = nullptr;
    where_added = true;
  } else if (made_keep && m.bias.mask) {
    return "the scores get two masks (a Where and an Add) besides the causal one";
  }
  if (!where_added && !m.bias.plus.empty() && (m.bias.made || bool_mask))
    return "the scores get three masks (two Adds and a Where or a made one) besides the causal one";
  if (bool_mask && (m.bias.mask || m.bias.made))
    return "the scores get two masks (a Where and an Add) besides the causal one";
  if (bool_mask) m.bias.mask = bool_mask;
  if (!std::isfinite(m.scale) || m.scale == 0)
    return "the scale " + std::to_string(m.scale) + " is not a usable factor";
  return "";
}

/// Finds the operands and checks what the fused node needs; returns why not, or "".
std::string match_operands(Match& m) {
  Value* q = attention::peel_scale(m.qk->input(0), m.scale, m.peeled);
  Value* kt = attention::peel_scale(m.qk->input(1), m.scale, m.peeled);
  double k_scale = 1;
  auto k = attention::match_key_transposed(kt, true, k_scale);
  if (!k) return "Kᵀ '" + kt->name + "' is not a Transpose of K (perm 0,1,3,2 of [B,H,S,D] or 0,2,3,1 of [B,S,H,D])";
  Operand v = attention::match_kv(m.pv->input(1), true);
  if (k->repeat != v.repeat) {  // absorb a GQA repeat only when K and V both have it
    k_scale = 1;
    k = attention::match_key_transposed(kt, false, k_scale);
    v = attention::match_kv(m.pv->input(1), false);
  }
  m.scale *= k_scale;
  m.q = attention::match_query(q);
  m.k = *k;
  m.v = std::move(v);
  const auto qs = bhsd(m.q), ks = bhsd(m.k), vs = bhsd(m.v);
  if (!qs || !ks || !vs || m.q.heads <= 0 || m.k.heads <= 0 || m.v.heads <= 0)
    return "Q, K and V are not all of known 4-D shape [B, H, S, D], so their heads cannot be proven (bind the shapes, "
           "e.g. --batch)";
  if (!same_known((*qs)[0], (*ks)[0]) || !same_known((*qs)[0], (*vs)[0]))
    return "Q, K and V do not have one known batch size (" + shape_str(*qs) + ", " + shape_str(*ks) + ", " +
           shape_str(*vs) + ")";
  if (m.v.heads != m.k.heads || m.v.repeat != m.k.repeat)
    return "K and V have different heads (" + std::to_string(m.k.heads) + " and " + std::to_string(m.v.heads) + ")";
  const int64_t kv_seen = m.k.heads * m.k.repeat;  // K's heads as the MatMul reads them
  if (kv_seen != m.q.heads && kv_seen != 1)
    return "Q has " + std::to_string(m.q.heads) + " heads and K " + std::to_string(kv_seen);
  if (m.q.heads % m.k.heads != 0) return "Q's heads are not a multiple of K's";
  m.merge = attention::match_head_merge(m.pv);
  m.three_d = m.merge && viewable_3d(m.q) && viewable_3d(m.k) && viewable_3d(m.v);
  return "";
}

std::string match(Graph& g, const PassOptions& opts, Node* softmax, Match& m) {
  m.softmax = softmax;
  m.chain = attention::walk_scores(softmax);
  m.qk = m.chain.qk;
  // P·V reads the Softmax's output P, or P' = Where(IsNaN(P), 0, P), torch's safe softmax (the
  // guard goes into the Attention: both give 0 for a row with every key masked).
  m.guard = attention::match_softmax_guard(softmax->outputs[0]);
  Value* probs = m.guard.where ? m.guard.where->outputs[0] : softmax->outputs[0];
  for (Node* c : probs->consumers)
    if (is_op(c, "MatMul") && c->input(0) == probs) m.pv = c;
  if (!m.chain.why.empty()) return m.chain.why;
  if (!m.qk) return "";
  const auto& scores = m.qk->outputs[0]->type.shape;
  if (!m.pv) {
    // Without P·V this is attention only if the scores are known to be [B, H, Sq, Skv].
    if (!scores) m.qk = nullptr;
    if (!m.qk) return "";
    return m.guard.why.empty() ? "the Softmax's output does not feed a MatMul with V" : m.guard.why;
  }
  if (!m.guard.why.empty()) return m.guard.why;
  if (!scores || !is_static(Shape{(*scores)[1]}))
    return "the shape of the scores is unknown, so the heads cannot be proven (bind the shapes, e.g. --batch)";
  const int64_t axis = softmax->attr_int("axis", g.opset("") < 13 ? 1 : -1);
  if (axis != -1 && axis != 3) return "the Softmax is over axis " + std::to_string(axis) + ", not the last (keys) axis";
  if (!has_single_use(m.qk->outputs[0])) return extra_readers(m.qk->outputs[0], "the scores");
  for (const auto& s : m.chain.steps)
    if (!has_single_use(s.node->outputs[0])) return extra_readers(s.node->outputs[0], "the scaled or masked scores");
  if (!has_single_use(probs)) return extra_readers(probs, "the attention probabilities");
  const DType t = m.qk->outputs[0]->type.dtype;
  if (t != DType::Float32 && t != DType::Float16 && t != DType::BFloat16)
    return std::string("the scores are ") + dtype_name(t) + ", not float32, float16 or bfloat16";
  if (std::string why = match_operands(m); !why.empty()) return why;
  if (std::string why = resolve_steps(m, (*scores)[2], (*scores)[3]); !why.empty()) return why;
  if (m.softcap > 0) {
    // fusec's own CUDA attention kernels take the soft cap up to heads of 256 (cuDNN's SDPA has
    // none). A larger one would leave the GPU for the CPU reference, where its parts (two batched
    // products, the elementwise cap and mask, a Softmax) all run on the GPU.
    const Shape* qs = known_rank(m.qk->input(0));
    if (!qs || qs->empty() || !qs->back().is_static() || qs->back().value > kSoftcapMaxHead)
      return "it soft-caps the scores (" + std::to_string(m.softcap) + ") with heads over " +
             std::to_string(kSoftcapMaxHead) + " (or of unknown size), which no CUDA attention kernel takes";
  }
  if (m.head_scale) {
    m.three_d = false;  // the factor multiplies Q's [B, H, S, D] heads
    if (!m.q.v4) return "the scores are scaled per head and Q is not a 4-D tensor to scale";
  }
  if (m.windows > 1) {
    m.three_d = false;  // the windows regroup [B·G, H, S, D] tensors
    for (const Operand* o : {&m.q, &m.k, &m.v}) {
      const auto s = bhsd(*o);
      if (!s || !(*s)[2].is_static() || !(*s)[3].is_static())
        return "the windowed Q, K and V do not have static sequence and head sizes";
    }
  }
  if (g.opset("") >= kStandardAttentionOpset) {
    m.domain = "";
    // ONNX Attention pads a mask shorter than the keys (with −∞) instead of broadcasting it.
    std::optional<int64_t> mask_keys;
    if (m.bias.made) mask_keys = m.bias.made->dims().back();
    std::vector<const Value*> parts = {m.bias.made ? nullptr : m.bias.mask, m.bias.filled};
    for (const auto& [v, f] : m.bias.plus) parts.push_back(v);
    for (const Value* v : parts)  // a sum (or a Where) is as long as its longest operand
      if (v && v->type.shape && !v->type.shape->empty() && v->type.shape->back().is_static())
        mask_keys = std::max(mask_keys.value_or(1), v->type.shape->back().value);
    if (mask_keys == 1 && !((*scores)[3].is_static() && (*scores)[3].value == 1))
      return "the mask broadcasts along the keys (last dim 1), which ONNX Attention reads as padding";
  } else if (opts.portable) {
    return "Attention is not standard ONNX before opset 23 (the model imports opset " + std::to_string(g.opset("")) +
           "); --portable writes standard ops only";
  } else {
    m.domain = "ai.fusec";
  }
  return "";
}

/// A new Transpose(perm) of `x`: K in [B, H, S, D] where the graph only has Kᵀ.
Value* to_bhsd(Graph& g, Value* x, std::vector<int64_t> perm) {
  Value* out = g.add_value(x->name + "_bhsd");
  Node* t = g.add_node("Transpose", {x}, {out}, g.unique_node_name(x->name + "_to_bhsd"));
  t->set_attr("perm", std::move(perm));
  return out;
}

Value* key_of(Graph& g, const attention::Operand& k) {
  if (k.v4) return k.v4;
  if (k.k_from) return to_bhsd(g, k.k_from, k.k_perm);
  return to_bhsd(g, k.bshd, {0, 2, 1, 3});
}

Node* rewrite(Rewriter& r, Match& m) {
  Graph& g = r.graph();
  // Inputs first (they may add a Transpose), while every matched node still exists.
  std::vector<Value*> ins;
  if (m.three_d) {
    ins = {as_3d(g, m.q), as_3d(g, m.k), as_3d(g, m.v)};
  } else {
    ins = {m.q.v4, key_of(g, m.k), m.v.v4};
  }
  if (m.head_scale) {  // s_h·Q: the factor as [1, H, 1, 1]
    const Tensor& c = *constant_of(m.head_scale);
    const int64_t heads = (*bhsd(m.q))[1].value;
    Tensor per_head(c.dtype(), {1, c.numel() == 1 ? 1 : heads, 1, 1});
    std::memcpy(per_head.raw(), c.raw(), c.nbytes());
    Value* f = g.add_initializer(m.head_scale->name + "_on_q", std::move(per_head));
    Value* q = g.add_value(ins[0]->name + "_head_scaled");
    g.add_node("Mul", {ins[0], f}, {q}, g.unique_node_name(ins[0]->name + "_head_scale"));
    ins[0] = q;
  }
  // Windows: [B·G, H, S, D] viewed as [B, G·H, S, D], and the output viewed back.
  auto regroup = [&g](Value* x, const std::vector<int64_t>& dims, const std::string& tag) {
    Value* shape = g.add_initializer(x->name + "_" + tag + "_shape", Tensor::from_int64(dims, {4}));
    Value* out = g.add_value(x->name + "_" + tag);
    g.add_node("Reshape", {x, shape}, {out}, g.unique_node_name(x->name + "_" + tag));
    return out;
  };
  if (m.windows > 1) {
    const Operand* ops[] = {&m.q, &m.k, &m.v};
    for (int i = 0; i < 3; ++i) {
      const Shape s = *bhsd(*ops[i]);
      ins[i] = regroup(ins[i], {-1, m.windows * s[1].value, s[2].value, s[3].value}, "windows");
    }
  }
  if (m.bias.clamped) {
    Value* low =
        g.add_initializer(m.bias.mask->name + "_low", Tensor::from_float({-std::numeric_limits<float>::max()}, {}));
    Value* clamped = g.add_value(m.bias.mask->name + "_clamped");
    g.add_node("Max", {m.bias.mask, low}, {clamped}, g.unique_node_name(clamped->name));
    ins.push_back(clamped);
  } else {
    // The terms (factor·x: -1 a Neg, or a Sub where it is added; another power of two a Mul), the
    // ones added before a -FLT_MAX fill inside its Where, the others added after it.
    struct Term {
      Value* x;
      double factor;
      bool after_fill;
    };
    // (A mask that is not an added term, a bool one or the windows', has no entry: not after a fill.)
    auto after = [&m](size_t i) { return i < m.bias.after_fill.size() && m.bias.after_fill[i]; };
    std::vector<Term> terms;
    if (m.bias.made)
      terms.push_back({g.add_initializer(m.bias.made_from, std::move(*m.bias.made)), 1, after(0)});
    else if (m.bias.mask)
      terms.push_back({m.bias.mask, m.bias.factor, after(0)});
    for (size_t i = 0; i < m.bias.plus.size(); ++i)
      terms.push_back({m.bias.plus[i].first, m.bias.plus[i].second, after(i + 1)});
    auto scaled = [&g](Value* x, double f) {
      if (f == 1 || f == -1) return x;
      Value* c = g.add_initializer(x->name + "_factor", tensor_from(x->type.dtype, {}, {f}));
      Value* y = g.add_value(x->name + "_scaled");
      g.add_node("Mul", {x, c}, {y}, g.unique_node_name(y->name));
      return y;
    };
    auto add_to = [&g, &scaled](Value* sum, Value* x, double f) {
      if (!sum) {
        Value* first = scaled(x, f);
        if (f != -1) return first;
        Value* neg = g.add_value(x->name + "_negated");
        g.add_node("Neg", {x}, {neg}, g.unique_node_name(neg->name));
        return neg;
      }
      Value* t = scaled(x, std::abs(f));
      Value* next = g.add_value(sum->name + (f < 0 ? "_minus_" : "_plus_") + t->name);
      g.add_node(f < 0 ? "Sub" : "Add", {sum, t}, {next}, g.unique_node_name(next->name));
      return next;
    };
    Value* mask = nullptr;
    for (const Term& t : terms)
      if (!t.after_fill) mask = add_to(mask, t.x, t.factor);
    if (m.bias.filled) {
      Value* cond = m.bias.filled;
      Value* kept = mask ? mask : g.add_initializer(cond->name + "_zero", Tensor::from_float({0.0f}, {}));
      Value* low =
          g.add_initializer(cond->name + "_fill", Tensor::from_float({-std::numeric_limits<float>::max()}, {}));
      Value* filled = g.add_value(cond->name + "_added");
      g.add_node("Where", {cond, m.bias.keep_where_true ? kept : low, m.bias.keep_where_true ? low : kept}, {filled},
                 g.unique_node_name(filled->name));
      mask = filled;
    }
    for (const Term& t : terms)
      if (t.after_fill) mask = add_to(mask, t.x, t.factor);
    if (mask) ins.push_back(mask);
  }
  Value* y = m.three_d ? m.merge->outputs[0] : m.pv->outputs[0];
  Value* by_window = nullptr;  // the windowed output [B·G, H, S, Dv] the graph reads
  if (m.windows > 1) {
    by_window = y;
    y = g.add_value(by_window->name + "_images");
  }
  // A merge straight to [B·S, H·Dv]: the 3-D Attention writes [B, S, H·Dv] and a free Reshape
  // gives the merge's shape.
  Value* flat = nullptr;
  if (m.three_d) y = attention::three_d_output(g, y, &flat);

  std::vector<Node*> replaced = {m.qk};
  for (const auto& s : m.chain.steps) replaced.push_back(s.node);
  replaced.push_back(m.softmax);
  if (m.guard.where) replaced.insert(replaced.end(), {m.guard.isnan, m.guard.where});
  replaced.push_back(m.pv);
  if (m.three_d) replaced.insert(replaced.end(), {m.merge->input(0)->producer, m.merge});
  const std::string name = m.qk->name;
  Replaced gone = r.remove(replaced);
  Node* fused = r.add("Attention", ins, {y}, name, m.domain, gone.origins);
  attention::add_flatten(g, y, flat, name);
  if (by_window) {
    const Shape& s = *by_window->type.shape;
    Value* dims = g.add_initializer(by_window->name + "_shape",
                                    Tensor::from_int64({-1, s[1].value, s[2].value, s[3].value}, {4}));
    g.add_node("Reshape", {y, dims}, {by_window}, g.unique_node_name(name + "_windows"));
  }
  // The operands' transposes, reshapes, repeats and scales go too where nothing else reads them.
  std::vector<Node*> candidates = m.peeled;
  for (const Operand* o : {&m.q, &m.k, &m.v}) candidates.insert(candidates.end(), o->nodes.begin(), o->nodes.end());
  attention::remove_unread(r, fused, candidates);

  fused->set_attr("scale", static_cast<float>(m.scale));
  if (m.softcap > 0) fused->set_attr("softcap", static_cast<float>(m.softcap));
  if (m.bias.causal) fused->set_attr("is_causal", int64_t{1});
  if (m.three_d) {
    fused->set_attr("q_num_heads", m.q.heads);
    fused->set_attr("kv_num_heads", m.k.heads);
  }
  g.remove_unused_values();
  return fused;
}

}  // namespace

bool FuseAttentionPass::run(Graph& g, PassContext& ctx) {
  Rewriter r(g, ctx, kPass);
  // The Softmaxes first: split_folded_heads deletes the views it makes redundant, which a list of
  // every node would then still hold.
  std::vector<Node*> softmaxes;
  for (Node* n : g.node_list())
    if (is_op(n, "Softmax")) softmaxes.push_back(n);
  for (Node* sm : softmaxes) {
    if (r.removed(sm)) continue;
    // Terms added to a finer view of the scores (ViTDet's decomposed relative positions) become a
    // mask added to the scores themselves.
    std::string hoisted;
    std::vector<std::string> views;
    if (attention::hoist_view_bias(g, sm, &hoisted, &views)) r.rewrote(hoisted, views, "");
    // Rank-5 cores ([B, G, H, S, D]: MaxViT) become rank 4 first, where Attention can take them.
    const auto& rank = sm->outputs[0]->type.shape;
    bool merged = false;
    if (rank && rank->size() == 5 && !(ctx.opts.portable && g.opset("") < kStandardAttentionOpset)) {
      std::string why5;
      merged = attention::merge_batch_dims(g, sm, &why5);
      // Said only where Q·Kᵀ is right behind the Softmax: a rank-5 Softmax elsewhere is not attention.
      if (!merged && attention::scores_matmul_behind(sm)) {
        r.near_miss(describe(sm) + " over [B, G, H, S, D] scores not fused into Attention", why5);
        continue;
      }
    }
    Match m;
    std::string why = match(g, ctx.opts, sm, m);
    // Rank-3 cores whose batch folds batch and heads ([B·H, S, D]: nn.MultiheadAttention returning
    // its weights, BART-era transformers) become [B, H, S, D] first, where Attention can take them.
    bool heads_split = false;
    if ((!m.qk || !why.empty()) && rank && (rank->size() == 3 || rank->size() == 4) &&
        attention::rank3_scores_behind(sm) && !(ctx.opts.portable && g.opset("") < kStandardAttentionOpset)) {
      std::string why3;
      heads_split = attention::split_folded_heads(g, sm, &why3);
      if (!heads_split) {
        r.near_miss(describe(sm) + " over scores of folded batch and heads ([B·H, S, S]) not fused into Attention",
                    why3);
        continue;
      }
      m = Match{};
      why = match(g, ctx.opts, sm, m);
    }
    if (!m.qk && why.empty()) continue;  // no Q·Kᵀ behind this Softmax: not attention
    if (!why.empty()) {
      r.near_miss((m.qk ? what_of(m) : describe(sm)) + " not fused into Attention", why);
      continue;
    }
    const std::string what = what_of(m);
    Node* fused = rewrite(r, m);
    std::string form = m.three_d ? "3-D, heads " + std::to_string(m.q.heads) + "/" + std::to_string(m.k.heads) : "4-D";
    if (fused->attr_int("is_causal", 0)) form += ", causal";
    if (m.windows > 1) form += ", " + std::to_string(m.windows) + " windows an image";
    if (fused->inputs.size() > 3) form += ", mask";
    if (merged) form += ", batch and group dims merged";
    if (heads_split) form += ", heads folded into the batch";
    r.rewrote(what + " -> " + (m.domain.empty() ? "" : m.domain + ".") + describe(fused) + " (" + form + ")",
              fused->fused_from, fused->name);
  }
  // ONNX Attention that the model already holds in the 4-D form (torch's exporter writes SDPA so at
  // opset 23) behind head splits, a GQA repeat of K and V and before the head merge: the 3-D form
  // over the splits' inputs, as the softmax form above is fused (attention_standard.h).
  for (Node* n : g.node_list()) {
    if (r.removed(n) || !is_op(n, "Attention")) continue;
    const std::string what = describe(n);
    std::string why;
    if (Node* fused = attention::absorb_standard_views(r, n, &why))
      r.rewrote(what + ", its head splits, repeats and merge -> " + describe(fused) + " (3-D, heads " +
                    std::to_string(fused->attr_int("q_num_heads", 0)) + "/" +
                    std::to_string(fused->attr_int("kv_num_heads", 0)) + ")",
                fused->fused_from, fused->name);
    else if (!why.empty())
      r.near_miss(what + " kept in the 4-D form", why);
  }
  // Constant masks of any Attention (just written or already in the model) that mask nothing or
  // repeat one row for every query: dropped or stored once (attention_mask.h).
  const bool masks_changed = simplify_attention_masks(g, ctx, kPass);
  return r.changed() || masks_changed;
}

}  // namespace fusec
