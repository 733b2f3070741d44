// fuse_attention: softmax(Q·Kᵀ·scale [+ mask])·V with the head split/merge around it -> one
// Attention node. Each exporter form (BERT legacy and dynamo, SDPA's split scale, GPT-2's causal
// Where, Llama's RoPE + repeat_kv + additive causal constant) fuses, to the 3-D form where the head
// split and merge are visible and to the 4-D form otherwise, with the same numbers on the CPU; each
// guard leaves the graph alone with its reason.
#include "passes/fuse_attention.h"

#include <cmath>
#include <limits>

#include "ir/half.h"
#include "passes/canonicalize.h"
#include "passes/pattern.h"
#include "passes/pipeline.h"
#include "passes/verify.h"
#include "pass_test_util.h"
#include "test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

/// One attention block on graph inputs xq [B, Sq, Hq·D], xk, xv [B, Skv, Hkv·D], in the op
/// sequence of the form chosen.
struct Spec {
  int64_t batch = 2, sq = 4, skv = 4, hq = 2, hkv = 2, d = 4;
  int64_t opset = 17;
  // BERT legacy / dynamo Kᵀ; Via3d: torch's SDPA decomposition over repeated keys (Mistral, Qwen2):
  // Reshape [B·H, S, D] -> Transpose(0,2,1) -> Reshape [B, H, D, S], the repeat's Expand merged
  // straight into the first Reshape.
  enum class Kt { Direct0231, Via0132, Via3d } kt = Kt::Direct0231;
  enum class Scale { Div, Mul, QandK, None } scale = Scale::Div;  // QandK: torch SDPA's D^-¼ on each
  // AddWhereInput: SDPA with a bool mask input `keep` [B, 1, 1, Skv] as both exporters write it,
  // Add(scores, Where(keep, 0, fill)); WhereInput: Where(keep, scores, fill).
  enum class Mask {
    None,
    AddInput,
    WhereCausal,
    AddCausal,
    WhereCausalAndAdd,
    WhereBand,
    // GPT-Neo's local layers: a window of 2 keys (i - 2 < j <= i) kept by a constant Where with
    // finfo.min, then the padding mask `mask` added; or the Where's condition marking the masked
    // keys (Where(masked, finfo.min, scores)).
    WhereWindowAndAdd,
    WhereMaskedWindowAndAdd,
    AddWhereInput,
    WhereInput,
    AddBiasAndInput,  // MPNet, T5: a relative-position bias input [1, H, Sq, Skv], then `mask`
    // Funnel: a position bias and a token-type bias [B, H, Sq, Skv] added, then `mask` subtracted
    // (scores - 1e6·(1 - attention_mask)).
    FunnelTerms,
    SubInput,          // Sub(scores, mask): the mask negated
    SubConstant,       // Sub(scores, constant [1, 1, Sq, Skv]): a negated constant
    InputMinusScores,  // Sub(mask, scores): not fused
    // A constant bias [1, H, Sq, Skv] added, then Where(keep, ·, fill) (MPT: ALiBi, then
    // masked_fill), or the Where first and the bias added after it.
    BiasThenWhereInput,
    WhereInputThenBias,
    AddFiveInputs  // five added inputs: not fused
  } mask = Mask::None;
  float fill = -INFINITY;  // the masked value of AddWhereInput / WhereInput (dynamo: -FLT_MAX)
  // torch's safe softmax after the Softmax, P' = Where(IsNaN(P), 0, P), or a look-alike that is not it.
  enum class Guard { None, Safe, NonZeroFill, IsNaNOfScores, IsNaNSecondReader, ProbsInTrueBranch } guard = Guard::None;
  bool mask_before_scale = false;
  bool merge = true;        // Transpose(0,2,1,3) -> Reshape [B, S, H·D] after P·V
  bool merge_flat = false;  // ... -> Reshape [B·S, H·D] instead (GPT-2's dynamo export)
  bool open_batch = false;  // Q, K and V's batch a named dim (the targets write it as 0 or -1)
  bool rope = false;        // an elementwise op on Q and K after the head split (forces the 4-D form)
  bool per_head = false;    // ... before the head split's Transpose instead, on [B, S, H, D] (Qwen3's norms)
  bool repeat = false;      // GQA repeat_kv on K and V
  bool probs_output = false;
  // Swin V2's learned temperature: the scores times a constant [Hq, 1, 1], before the mask (or
  // after it, which does not fuse).
  enum class HeadScale { None, BeforeMask, AfterMask } head_scale = HeadScale::None;
  int64_t softmax_axis = -1;
  DType dtype = DType::Float32;
  // Gemma 2's soft cap after the scale: Div(c) -> Tanh -> Mul(c); `softcap_after_mask` puts it
  // after the mask instead (not Attention's order), `softcap_scale_after_mask` scales by c there.
  float softcap = 0;
  bool softcap_after_mask = false, softcap_scale_after_mask = false;
};

Tensor constant_floats(std::vector<int64_t> dims, float from, float step) {
  int64_t n = 1;
  for (int64_t x : dims) n *= x;
  return floats(ramp(static_cast<size_t>(n), from, step), std::move(dims));
}

/// A float32 constant in the graph's float type.
Tensor as_type(const Tensor& f, DType t) {
  if (t == DType::Float32) return f;
  Tensor out(t, f.dims());
  for (int64_t i = 0; i < f.numel(); ++i) {
    const float v = f.data<float>()[i];
    if (t == DType::Float16)
      out.data<uint16_t>()[i] = float_to_half(v);
    else if (t == DType::BFloat16)
      out.data<uint16_t>()[i] = float_to_bf16(v);
    else
      out.data<double>()[i] = v;
  }
  return out;
}

Tensor causal_bool(int64_t sq, int64_t skv, int64_t offset = 0) {
  Tensor t(DType::Bool, {1, 1, sq, skv});
  for (int64_t i = 0; i < sq; ++i)
    for (int64_t j = 0; j < skv; ++j) t.data<uint8_t>()[i * skv + j] = j <= i + offset;
  return t;
}

std::unique_ptr<Graph> build(const Spec& s) {
  GraphBuilder b(s.opset);
  const DType t = s.dtype;
  auto shape = [](std::vector<int64_t> v) { return int64s(v, {static_cast<int64_t>(v.size())}); };
  const Dim batch = s.open_batch ? Dim::sym("N") : Dim(s.batch);
  Value* xq = b.input("xq", t, {batch, s.sq, s.hq * s.d});
  Value* xk = b.input("xk", t, {batch, s.skv, s.hkv * s.d});
  Value* xv = b.input("xv", t, {batch, s.skv, s.hkv * s.d});
  auto split = [&](Value* x, int64_t heads, const std::string& n) {
    return b.node("Reshape", {x, b.initializer(n + "_shape", shape({0, 0, heads, s.d}))}, {}, n + "_split");
  };
  auto to_bhsd = [&](Value* x, const std::string& n) {
    return b.node("Transpose", {x}, {attr("perm", std::vector<int64_t>{0, 2, 1, 3})}, n + "_bhsd");
  };
  auto repeat = [&](Value* x, const std::string& n) {
    const int64_t r = s.hq / s.hkv;
    Value* u = b.node("Unsqueeze", {x, b.initializer(n + "_axes", int64s({2}, {1}))}, {}, n + "_unsqueeze");
    Value* e =
        b.node("Expand", {u, b.initializer(n + "_expand", shape({s.batch, s.hkv, r, s.skv, s.d}))}, {}, n + "_expand");
    return b.node("Reshape", {e, b.initializer(n + "_merged", shape({s.batch, s.hq, s.skv, s.d}))}, {}, n + "_repeat");
  };
  auto scalar = [&](const std::string& n, float v) { return b.initializer(n, as_type(floats({v}, {}), t)); };
  const float root_d = std::sqrt(static_cast<float>(s.d));

  Value* q_bshd = split(xq, s.hq, "q");
  Value* k_bshd = split(xk, s.hkv, "k");
  if (s.per_head) {
    q_bshd = b.node("Mul", {q_bshd, b.initializer("norm_q", as_type(constant_floats({s.d}, 0.5f, 0.03f), t))}, {},
                    "q_norm");
    k_bshd = b.node("Mul", {k_bshd, b.initializer("norm_k", as_type(constant_floats({s.d}, 0.5f, 0.02f), t))}, {},
                    "k_norm");
  }
  Value* q = to_bhsd(q_bshd, "q");
  Value* v = to_bhsd(split(xv, s.hkv, "v"), "v");
  if (s.rope)
    q = b.node("Mul", {q, b.initializer("rope_q", as_type(constant_floats({1, 1, s.sq, s.d}, 0.5f, 0.03f), t))}, {},
               "q_rope");
  Value* kt;
  if (s.kt == Spec::Kt::Direct0231 && !s.rope && !s.repeat) {
    kt = b.node("Transpose", {k_bshd}, {attr("perm", std::vector<int64_t>{0, 2, 3, 1})}, "k_t");
  } else if (s.kt == Spec::Kt::Via3d) {
    Value* k = to_bhsd(k_bshd, "k");
    if (s.repeat) {
      const int64_t r = s.hq / s.hkv;
      Value* u = b.node("Unsqueeze", {k, b.initializer("k_axes", int64s({2}, {1}))}, {}, "k_unsqueeze");
      k = b.node("Expand", {u, b.initializer("k_expand", shape({s.batch, s.hkv, r, s.skv, s.d}))}, {}, "k_expand");
    }
    Value* k3 = b.node("Reshape", {k, b.initializer("k_flat", shape({s.batch * s.hq, s.skv, s.d}))}, {}, "k_flat");
    Value* t = b.node("Transpose", {k3}, {attr("perm", std::vector<int64_t>{0, 2, 1})}, "k_t3");
    kt = b.node("Reshape", {t, b.initializer("k_t_shape", shape({s.batch, s.hq, s.d, s.skv}))}, {}, "k_t");
  } else {
    Value* k = to_bhsd(k_bshd, "k");
    if (s.rope)
      k = b.node("Mul", {k, b.initializer("rope_k", as_type(constant_floats({1, 1, s.skv, s.d}, 0.5f, 0.02f), t))}, {},
                 "k_rope");
    if (s.repeat) k = repeat(k, "k");
    kt = b.node("Transpose", {k}, {attr("perm", std::vector<int64_t>{0, 1, 3, 2})}, "k_t");
  }
  if (s.repeat) v = repeat(v, "v");
  if (s.scale == Spec::Scale::QandK) {
    Value* c = scalar("quarter_root", 1 / std::sqrt(root_d));
    q = b.node("Mul", {q, c}, {}, "q_scale");
    kt = b.node("Mul", {kt, c}, {}, "k_scale");
  }
  Value* x = b.node("MatMul", {q, kt}, {}, "qk");
  auto head_scale = [&] {
    return b.node("Mul", {x, b.initializer("temperature", as_type(constant_floats({s.hq, 1, 1}, 0.7f, 0.45f), t))}, {},
                  "head_scale");
  };
  if (s.head_scale == Spec::HeadScale::BeforeMask) x = head_scale();
  auto add_mask = [&]() -> Value* {
    switch (s.mask) {
      case Spec::Mask::AddInput:
        return b.node("Add", {x, b.input("mask", t, {s.batch, 1, 1, s.skv})}, {}, "mask_add");
      case Spec::Mask::AddBiasAndInput:
      case Spec::Mask::AddFiveInputs: {
        Value* y = b.node("Add", {x, b.input("position_bias", t, {1, s.hq, s.sq, s.skv})}, {}, "bias_add");
        y = b.node("Add", {y, b.input("mask", t, {s.batch, 1, 1, s.skv})}, {}, "mask_add");
        if (s.mask == Spec::Mask::AddBiasAndInput) return y;
        for (const char* n : {"third", "fourth", "fifth"})
          y = b.node("Add", {y, b.input(n, t, {s.batch, 1, s.sq, 1})}, {}, std::string(n) + "_add");
        return y;
      }
      case Spec::Mask::FunnelTerms: {
        Value* y = b.node("Add", {x, b.input("position_bias", t, {1, s.hq, s.sq, s.skv})}, {}, "bias_add");
        y = b.node("Add", {y, b.input("token_type", t, {s.batch, s.hq, s.sq, s.skv})}, {}, "token_type_add");
        return b.node("Sub", {y, b.input("mask", t, {s.batch, 1, 1, s.skv})}, {}, "mask_sub");
      }
      case Spec::Mask::SubInput:
        return b.node("Sub", {x, b.input("mask", t, {s.batch, 1, 1, s.skv})}, {}, "mask_sub");
      case Spec::Mask::SubConstant:
        return b.node("Sub", {x, b.initializer("bias", as_type(constant_floats({1, 1, s.sq, s.skv}, -1.0f, 0.25f), t))},
                      {}, "bias_sub");
      case Spec::Mask::InputMinusScores:
        return b.node("Sub", {b.input("mask", t, {s.batch, 1, 1, s.skv}), x}, {}, "mask_sub");
      case Spec::Mask::AddCausal: {
        Tensor m(DType::Float32, {1, 1, s.sq, s.skv});
        for (int64_t i = 0; i < s.sq; ++i)
          for (int64_t j = 0; j < s.skv; ++j) m.data<float>()[i * s.skv + j] = j <= i ? 0.0f : -3.4e38f;
        return b.node("Add", {x, b.initializer("causal_add", as_type(m, t))}, {}, "mask_add");
      }
      case Spec::Mask::WhereCausal:
      case Spec::Mask::WhereCausalAndAdd:
      case Spec::Mask::WhereBand: {
        Tensor cond = causal_bool(s.sq, s.skv, s.mask == Spec::Mask::WhereBand ? s.skv - s.sq : 0);
        Value* w =
            b.node("Where", {b.initializer("causal", cond), x, scalar("min_value", -3.4e38f)}, {}, "causal_where");
        if (s.mask != Spec::Mask::WhereCausalAndAdd) return w;
        return b.node("Add", {w, b.input("mask", t, {s.batch, 1, 1, s.skv})}, {}, "mask_add");
      }
      case Spec::Mask::WhereWindowAndAdd:
      case Spec::Mask::WhereMaskedWindowAndAdd: {
        const bool marks_masked = s.mask == Spec::Mask::WhereMaskedWindowAndAdd;
        Tensor cond(DType::Bool, {1, 1, s.sq, s.skv});
        for (int64_t i = 0; i < s.sq; ++i)
          for (int64_t j = 0; j < s.skv; ++j)
            cond.data<uint8_t>()[i * s.skv + j] = (j <= i && j > i - 2) != marks_masked;
        Value* c = b.initializer("window", cond);
        Value* fill = scalar("min_value", -3.4028234663852886e38f);
        Value* w = marks_masked ? b.node("Where", {c, fill, x}, {}, "window_where")
                                : b.node("Where", {c, x, fill}, {}, "window_where");
        return b.node("Add", {w, b.input("mask", t, {s.batch, 1, 1, s.skv})}, {}, "mask_add");
      }
      case Spec::Mask::AddWhereInput: {
        Value* keep = b.input("keep", DType::Bool, {s.batch, 1, 1, s.skv});
        Value* m = b.node("Where", {keep, scalar("mask_zero", 0.0f), scalar("mask_fill", s.fill)}, {}, "mask_where");
        return b.node("Add", {x, m}, {}, "mask_add");
      }
      case Spec::Mask::WhereInput:
        return b.node("Where", {b.input("keep", DType::Bool, {s.batch, 1, 1, s.skv}), x, scalar("mask_fill", s.fill)},
                      {}, "mask_where");
      case Spec::Mask::BiasThenWhereInput:
      case Spec::Mask::WhereInputThenBias: {
        const bool bias_first = s.mask == Spec::Mask::BiasThenWhereInput;
        Value* bias = b.initializer("alibi", as_type(constant_floats({1, s.hq, s.sq, s.skv}, -2.0f, 0.125f), t));
        if (bias_first) x = b.node("Add", {x, bias}, {}, "bias_add");
        x = b.node("Where", {b.input("keep", DType::Bool, {s.batch, 1, 1, s.skv}), x, scalar("mask_fill", s.fill)}, {},
                   "mask_where");
        return bias_first ? x : b.node("Add", {x, bias}, {}, "bias_add");
      }
      case Spec::Mask::None:
        return x;
    }
    return x;
  };
  if (s.mask_before_scale) x = add_mask();
  if (s.scale == Spec::Scale::Div) x = b.node("Div", {x, scalar("root_d", root_d)}, {}, "scale");
  if (s.scale == Spec::Scale::Mul) x = b.node("Mul", {x, scalar("inv_root_d", 1 / root_d)}, {}, "scale");
  auto soft_cap = [&](bool scale_after_mask) {
    x = b.node("Div", {x, scalar("cap", s.softcap)}, {}, "cap_div");
    x = b.node("Tanh", {x}, {}, "cap_tanh");
    if (scale_after_mask) x = add_mask();
    x = b.node("Mul", {x, scalar("cap_again", s.softcap)}, {}, "cap_mul");
  };
  if (s.softcap != 0 && !s.softcap_after_mask) soft_cap(s.softcap_scale_after_mask);
  if (!s.mask_before_scale && !s.softcap_scale_after_mask) x = add_mask();
  if (s.softcap != 0 && s.softcap_after_mask) soft_cap(false);
  if (s.head_scale == Spec::HeadScale::AfterMask) x = head_scale();
  Value* p = b.node("Softmax", {x}, {attr("axis", s.softmax_axis)}, "softmax");
  if (s.probs_output) b.output(p);
  if (s.guard != Spec::Guard::None) {
    Value* nan = b.node("IsNaN", {s.guard == Spec::Guard::IsNaNOfScores ? x : p}, {}, "guard_isnan");
    if (s.guard == Spec::Guard::IsNaNSecondReader) b.output(b.node("Not", {nan}, {}, "other_reader"));
    Value* zero = scalar("guard_zero", s.guard == Spec::Guard::NonZeroFill ? 0.5f : 0.0f);
    p = s.guard == Spec::Guard::ProbsInTrueBranch ? b.node("Where", {nan, p, zero}, {}, "guard")
                                                  : b.node("Where", {nan, zero, p}, {}, "guard");
  }
  Value* y = b.node("MatMul", {p, v}, {}, "pv");
  if (s.merge) {
    y = b.node("Transpose", {y}, {attr("perm", std::vector<int64_t>{0, 2, 1, 3})}, "merge_t");
    y = b.node("Reshape",
               {y, b.initializer("merged", s.merge_flat ? shape({s.open_batch ? -1 : s.batch * s.sq, s.hq * s.d})
                                                        : shape({0, 0, s.hq * s.d}))},
               {}, "merge_r");
  }
  b.output(y);
  return b.build();
}

Outcome fuse(const Spec& s, PassOptions opts = {}) { return run_one_pass<FuseAttentionPass>(build(s), opts); }

void expect_same_numbers(const Outcome& o) { fusec::test::expect_same_numbers(*o.original, *o.optimized, 7); }

/// The one fused node, checked for the common facts: named after Q·Kᵀ, fused_from starting there.
const Node* fused_node(const Outcome& o, const std::string& domain) {
  EXPECT_TRUE(o.changed);
  EXPECT_TRUE(o.ctx.near_misses.empty()) << o.ctx.near_misses[0].reason;
  EXPECT_EQ(count(*o.optimized, "Attention", domain), 1);
  EXPECT_EQ(count(*o.optimized, "Softmax"), 0);
  EXPECT_EQ(count(*o.optimized, "MatMul"), 0);
  const Node* n = find_op(*o.optimized, "Attention");
  if (!n) return nullptr;
  EXPECT_EQ(n->name, "qk");
  EXPECT_FALSE(n->fused_from.empty());
  if (!n->fused_from.empty()) EXPECT_EQ(n->fused_from[0], "qk");
  return n;
}

/// The node that makes the mask of `o`'s one fused ai.fusec Attention (its input 3), or null with
/// the failure recorded.
const Node* fused_mask(const Outcome& o) {
  const Node* n = fused_node(o, "ai.fusec");
  if (!n || n->inputs.size() != 4 || !n->inputs[3] || !n->inputs[3]->producer) {
    ADD_FAILURE() << "no fused Attention whose mask a node makes";
    return nullptr;
  }
  return n->inputs[3]->producer;
}

bool fused_from_has(const Node* n, const std::string& name) {
  return std::find(n->fused_from.begin(), n->fused_from.end(), name) != n->fused_from.end();
}

void expect_near_miss(const Spec& s, const std::string& reason, PassOptions opts = {}) {
  Outcome o = fuse(s, opts);
  EXPECT_FALSE(o.changed);
  EXPECT_EQ(graph_difference(*o.original, *o.optimized), "");
  ASSERT_EQ(o.ctx.near_misses.size(), 1u);
  EXPECT_EQ(o.ctx.near_misses[0].pass, "fuse_attention");
  EXPECT_EQ(o.ctx.near_misses[0].what, "MatMul 'qk' -> Softmax 'softmax' -> MatMul 'pv' not fused into Attention");
  EXPECT_EQ(o.ctx.near_misses[0].reason, reason);
}

}  // namespace

TEST(FuseAttention, BertLegacyBecomesThreeDWithNoTransposeLeft) {
  // HF BERT, torch.onnx legacy: Kᵀ = Transpose(0,2,3,1) of the head split, Div by √D, Add of the
  // extended mask [B, 1, 1, S].
  Spec s;
  s.mask = Spec::Mask::AddInput;
  Outcome o = fuse(s);
  const Node* n = fused_node(o, "ai.fusec");
  ASSERT_TRUE(n);
  EXPECT_EQ(count(*o.optimized, "Transpose"), 0);
  EXPECT_EQ(count(*o.optimized, "Reshape"), 0);
  EXPECT_EQ(o.optimized->nodes().size(), 1u);
  EXPECT_EQ(n->inputs[0]->name, "xq");
  EXPECT_EQ(n->inputs[1]->name, "xk");
  EXPECT_EQ(n->inputs[2]->name, "xv");
  EXPECT_EQ(n->inputs[3]->name, "mask");
  EXPECT_EQ(n->attr_int("q_num_heads", 0), 2);
  EXPECT_EQ(n->attr_int("kv_num_heads", 0), 2);
  EXPECT_EQ(n->attr_int("is_causal", 0), 0);
  EXPECT_FLOAT_EQ(n->attr_float("scale", 0), 0.5f);
  for (const char* name : {"qk", "scale", "mask_add", "softmax", "pv", "merge_t", "merge_r", "q_bhsd", "q_split", "k_t",
                           "k_split", "v_bhsd", "v_split"})
    EXPECT_TRUE(fused_from_has(n, name)) << name;
  EXPECT_EQ(o.optimized->opset("ai.fusec"), 1);
  EXPECT_EQ(o.ctx.rewrites.size(), 1u);
  expect_same_numbers(o);
}

TEST(FuseAttention, HeadMergeStraightToTwoDIsThreeDAndAReshape) {
  // torch.export writes GPT-2's head merge and the flattening for c_proj's Gemm as one view,
  // [B, H, S, D] -> Transpose(0,2,1,3) -> Reshape [B·S, H·D].
  Spec s;
  s.merge_flat = true;
  Outcome o = fuse(s);
  const Node* n = fused_node(o, "ai.fusec");
  ASSERT_TRUE(n);
  EXPECT_EQ(n->attr_int("q_num_heads", 0), 2);
  EXPECT_EQ(count(*o.optimized, "Transpose"), 0);
  ASSERT_EQ(count(*o.optimized, "Reshape"), 1);
  const Node* r = find_op(*o.optimized, "Reshape");
  EXPECT_EQ(r->inputs[0], n->outputs[0]);
  EXPECT_EQ(r->outputs[0], o.optimized->outputs[0]);
  EXPECT_EQ(o.optimized->outputs[0]->type.shape, (Shape{s.batch * s.sq, s.hq * s.d}));
  expect_same_numbers(o);
}

// The same over an open batch: the merged rows are the product "4·N" (ir/dim_values.h).
TEST(FuseAttention, HeadMergeStraightToTwoDOverAnOpenBatchIsThreeD) {
  Spec s;
  s.merge_flat = true;
  s.open_batch = true;
  Outcome o = fuse(s);
  const Node* n = fused_node(o, "ai.fusec");
  ASSERT_TRUE(n);
  EXPECT_EQ(n->attr_int("q_num_heads", 0), 2);
  EXPECT_EQ(count(*o.optimized, "Transpose"), 0);
  bind_open_dims(*o.original);
  bind_open_dims(*o.optimized);
  expect_same_numbers(o);
}

TEST(FuseAttention, DynamoKeyTransposeAndMulScale) {
  // dynamo: K's head split is Transpose(0,2,1,3), then k.transpose(-1,-2) = Transpose(0,1,3,2);
  // the scale as Mul by 1/√D.
  Spec s;
  s.kt = Spec::Kt::Via0132;
  s.scale = Spec::Scale::Mul;
  s.mask = Spec::Mask::AddInput;
  Outcome o = fuse(s);
  const Node* n = fused_node(o, "ai.fusec");
  ASSERT_TRUE(n);
  EXPECT_EQ(o.optimized->nodes().size(), 1u);
  EXPECT_FLOAT_EQ(n->attr_float("scale", 0), 0.5f);
  expect_same_numbers(o);
}

TEST(FuseAttention, SdpaScaleOnQAndKMultiplies) {
  // torch's SDPA decomposition: Mul(Q, D^-¼) and Mul(Kᵀ, D^-¼): scale = D^-½.
  Spec s;
  s.kt = Spec::Kt::Via0132;
  s.scale = Spec::Scale::QandK;
  s.d = 8;
  Outcome o = fuse(s);
  const Node* n = fused_node(o, "ai.fusec");
  ASSERT_TRUE(n);
  EXPECT_EQ(o.optimized->nodes().size(), 1u);
  EXPECT_NEAR(n->attr_float("scale", 0), 1 / std::sqrt(8.0), 1e-7);
  EXPECT_TRUE(fused_from_has(n, "q_scale") && fused_from_has(n, "k_scale"));
  expect_same_numbers(o);
}

TEST(FuseAttention, SoftmaxAxisThreeIsTheLastAxis) {
  // The legacy exporter may write the keys' axis as 3 rather than -1.
  Spec s;
  s.softmax_axis = 3;
  Outcome o = fuse(s);
  ASSERT_TRUE(fused_node(o, "ai.fusec"));
  expect_same_numbers(o);
}

TEST(FuseAttention, NoScaleIsScaleOne) {
  Spec s;
  s.scale = Spec::Scale::None;
  Outcome o = fuse(s);
  const Node* n = fused_node(o, "ai.fusec");
  ASSERT_TRUE(n);
  EXPECT_FLOAT_EQ(n->attr_float("scale", 0), 1.0f);
  expect_same_numbers(o);
}

TEST(FuseAttention, Opset23WritesTheStandardOp) {
  Spec s;
  s.opset = 23;
  s.mask = Spec::Mask::AddInput;
  Outcome o = fuse(s);
  const Node* n = fused_node(o, "");
  ASSERT_TRUE(n);
  EXPECT_EQ(o.optimized->opset("ai.fusec"), 0);
  EXPECT_EQ(n->attr_int("q_num_heads", 0), 2);
  expect_same_numbers(o);
  // --portable is fine there: the op is standard.
  EXPECT_EQ(count(*fuse(s, PassOptions{true}).optimized, "Attention"), 1);
}

TEST(FuseAttention, Gpt2CausalWhereBecomesIsCausal) {
  // GPT-2: Where(bias[:, :, :S, :S], scores, finfo.min) with the constant lower triangle, then the
  // padding mask added; also with Sq != Skv (upper-left triangle, as ONNX Attention without cache).
  for (auto [sq, skv] : {std::pair<int64_t, int64_t>{4, 4}, {3, 5}}) {
    for (bool with_add : {false, true}) {
      SCOPED_TRACE(std::to_string(sq) + "x" + std::to_string(skv) + (with_add ? " + add" : ""));
      Spec s;
      s.sq = sq;
      s.skv = skv;
      s.kt = Spec::Kt::Via0132;
      s.mask = with_add ? Spec::Mask::WhereCausalAndAdd : Spec::Mask::WhereCausal;
      Outcome o = fuse(s);
      const Node* n = fused_node(o, "ai.fusec");
      ASSERT_TRUE(n);
      EXPECT_EQ(n->attr_int("is_causal", 0), 1);
      EXPECT_EQ(n->inputs.size(), with_add ? 4u : 3u);
      EXPECT_EQ(o.optimized->find_value("causal"), nullptr);  // the triangle constant is gone
      expect_same_numbers(o);
    }
  }
}

TEST(FuseAttention, NonTriangleWhereStaysABoolMask) {
  // A bottom-right aligned band (j <= i + Skv - Sq) is not ONNX's upper-left causal: kept as a mask.
  Spec s;
  s.sq = 3;
  s.skv = 5;
  s.mask = Spec::Mask::WhereBand;
  Outcome o = fuse(s);
  const Node* n = fused_node(o, "ai.fusec");
  ASSERT_TRUE(n);
  EXPECT_EQ(n->attr_int("is_causal", 0), 0);
  ASSERT_EQ(n->inputs.size(), 4u);
  EXPECT_EQ(n->inputs[3]->name, "causal");
  EXPECT_EQ(n->inputs[3]->type.dtype, DType::Bool);
  expect_same_numbers(o);
}

TEST(FuseAttention, AConstantWhereAndAnAddedMaskBecomeOneAddedMask) {
  // GPT-Neo's local layers: the window's constant Where (keeping, or marking the masked keys) and
  // the padding mask added after it are one mask, the Where's fill added where it masks.
  for (auto mask : {Spec::Mask::WhereWindowAndAdd, Spec::Mask::WhereMaskedWindowAndAdd}) {
    SCOPED_TRACE(mask == Spec::Mask::WhereWindowAndAdd ? "keeps" : "marks the masked");
    Spec s;
    s.mask = mask;
    Outcome o = fuse(s);
    const Node* n = fused_node(o, "ai.fusec");
    ASSERT_TRUE(n);
    EXPECT_EQ(n->attr_int("is_causal", 0), 0);
    ASSERT_EQ(n->inputs.size(), 4u);
    const Node* sum = n->inputs[3]->producer;
    ASSERT_TRUE(sum);
    EXPECT_EQ(sum->op_type, "Add");
    EXPECT_EQ(sum->inputs[1]->name, "mask");
    const Tensor* added = constant_of(sum->inputs[0]);
    ASSERT_TRUE(added);
    EXPECT_EQ(added->dtype(), DType::Float32);
    expect_same_numbers(o);
  }
}

TEST(FuseAttention, TwoAddedMasksAreSummedIntoOne) {
  Spec s;
  s.sq = 3;
  s.skv = 5;
  s.mask = Spec::Mask::AddBiasAndInput;
  Outcome o = fuse(s);
  const Node* sum = fused_mask(o);
  ASSERT_TRUE(sum);
  EXPECT_EQ(sum->op_type, "Add");
  EXPECT_EQ(sum->inputs[0]->name, "position_bias");
  EXPECT_EQ(sum->inputs[1]->name, "mask");
  expect_same_numbers(o);
  s.mask = Spec::Mask::AddFiveInputs;
  expect_near_miss(s, "more than four masks are added to the scores");
}

TEST(FuseAttention, SubtractedMasksAreNegatedOrSubtractedFromTheSum) {
  Spec s;
  s.sq = 3;
  s.skv = 5;
  // Funnel's three terms: (position_bias + token_type) - mask.
  s.mask = Spec::Mask::FunnelTerms;
  Outcome o = fuse(s);
  const Node* sub = fused_mask(o);
  ASSERT_TRUE(sub);
  EXPECT_EQ(sub->op_type, "Sub");
  EXPECT_EQ(sub->inputs[1]->name, "mask");
  ASSERT_TRUE(sub->inputs[0]->producer);
  EXPECT_EQ(sub->inputs[0]->producer->op_type, "Add");
  EXPECT_EQ(sub->inputs[0]->producer->inputs[0]->name, "position_bias");
  EXPECT_EQ(sub->inputs[0]->producer->inputs[1]->name, "token_type");
  expect_same_numbers(o);
  // One subtracted input: the node reads its negation.
  s.mask = Spec::Mask::SubInput;
  o = fuse(s);
  const Node* neg = fused_mask(o);
  ASSERT_TRUE(neg);
  EXPECT_EQ(neg->op_type, "Neg");
  EXPECT_EQ(neg->inputs[0]->name, "mask");
  expect_same_numbers(o);
  // A subtracted constant becomes its negation, also before a power-of-two scale.
  s.mask = Spec::Mask::SubConstant;
  for (bool before : {false, true}) {
    s.mask_before_scale = before;
    s.scale = before ? Spec::Scale::Mul : Spec::Scale::Div;
    s.d = before ? 16 : 4;  // 1/sqrt(16): a power of two
    o = fuse(s);
    const Node* n = fused_node(o, "ai.fusec");
    ASSERT_TRUE(n);
    ASSERT_EQ(n->inputs.size(), 4u);
    const Tensor* c = constant_of(n->inputs[3]);
    ASSERT_TRUE(c);
    EXPECT_FLOAT_EQ(c->as_double(0), before ? 0.25 : 1.0);  // -(-1.0) · (1/4 before the scale)
    expect_same_numbers(o);
  }
}

TEST(FuseAttention, NearMissScoresSubtractedFromAMask) {
  Spec s;
  s.mask = Spec::Mask::InputMinusScores;
  Outcome o = fuse(s);
  EXPECT_FALSE(o.changed);
  ASSERT_EQ(o.ctx.near_misses.size(), 1u);
  EXPECT_EQ(o.ctx.near_misses[0].reason, "Sub 'mask_sub' subtracts the scores from 'mask'");
}

TEST(FuseAttention, LlamaRopeRepeatKvAndAdditiveCausalConstant) {
  // Llama: RoPE on Q and K after the head split (4-D form), repeat_kv for 4 query heads over 2 kv
  // heads (absorbed: K and V enter with 2 heads), the causal mask as an additive constant.
  Spec s;
  s.hq = 4;
  s.hkv = 2;
  s.rope = true;
  s.repeat = true;
  s.scale = Spec::Scale::Mul;
  s.mask = Spec::Mask::AddCausal;
  Outcome o = fuse(s);
  const Node* n = fused_node(o, "ai.fusec");
  ASSERT_TRUE(n);
  EXPECT_EQ(n->attr_int("is_causal", 0), 1);
  EXPECT_EQ(n->inputs.size(), 3u);
  EXPECT_FALSE(n->has_attr("q_num_heads"));  // 4-D: the heads are the tensors' dim 1
  EXPECT_EQ(n->inputs[0]->name, "q_rope_out");
  EXPECT_EQ(n->inputs[1]->name, "k_rope_out");
  EXPECT_EQ(n->inputs[2]->name, "v_bhsd_out");
  EXPECT_EQ(count(*o.optimized, "Expand"), 0);
  EXPECT_EQ(count(*o.optimized, "Unsqueeze"), 0);
  for (const char* name : {"k_repeat", "k_expand", "k_unsqueeze", "v_repeat", "k_t"})
    EXPECT_TRUE(fused_from_has(n, name)) << name;
  // What must stay stays: Q's and K's head-split transposes feed RoPE, the merge stays after Y.
  EXPECT_EQ(count(*o.optimized, "Transpose"), 4);
  expect_same_numbers(o);
}

TEST(FuseAttention, OperandsWrittenPerHeadAreReadThroughAViewInThreeD) {
  // Qwen3 / Gemma 3: a per-head norm (and RoPE) on [B, S, H, D] between the head split's Reshape
  // and its Transpose. The 3-D form reads those tensors through a Reshape [0, 0, H·D] (a view),
  // so no Transpose is left, GQA's repeat included.
  for (bool gqa : {false, true}) {
    SCOPED_TRACE(gqa ? "GQA" : "MHA");
    Spec s;
    s.per_head = true;
    s.kt = Spec::Kt::Via0132;
    if (gqa) s.hq = 4, s.hkv = 2, s.repeat = true;
    Outcome o = fuse(s);
    const Node* n = fused_node(o, "ai.fusec");
    ASSERT_TRUE(n);
    EXPECT_EQ(n->attr_int("q_num_heads", 0), s.hq);
    EXPECT_EQ(n->attr_int("kv_num_heads", 0), s.hkv);
    EXPECT_EQ(count(*o.optimized, "Transpose"), 0);
    ASSERT_TRUE(n->inputs[0]->producer);
    EXPECT_EQ(n->inputs[0]->producer->op_type, "Reshape");
    EXPECT_EQ(n->inputs[0]->producer->input(0)->name, "q_norm_out");
    expect_same_numbers(o);
  }
}

TEST(FuseAttention, RepeatKvAbsorbedInThreeD) {
  // GQA without RoPE: the 3-D form with kv_num_heads 2 for 6 query heads.
  Spec s;
  s.hq = 6;
  s.hkv = 2;
  s.repeat = true;
  Outcome o = fuse(s);
  const Node* n = fused_node(o, "ai.fusec");
  ASSERT_TRUE(n);
  EXPECT_EQ(n->attr_int("q_num_heads", 0), 6);
  EXPECT_EQ(n->attr_int("kv_num_heads", 0), 2);
  EXPECT_EQ(o.optimized->nodes().size(), 1u);
  expect_same_numbers(o);
}

TEST(FuseAttention, FourDWhenTheOutputIsNotMerged) {
  // No head merge after P·V: the 4-D form on the transposed tensors; BERT-legacy Kᵀ gets a new
  // Transpose(0,2,1,3) since the graph has no [B, H, S, D] K.
  Spec s;
  s.merge = false;
  Outcome o = fuse(s);
  const Node* n = fused_node(o, "ai.fusec");
  ASSERT_TRUE(n);
  EXPECT_EQ(n->inputs[0]->name, "q_bhsd_out");
  EXPECT_EQ(n->inputs[2]->name, "v_bhsd_out");
  ASSERT_TRUE(n->inputs[1]->producer);
  EXPECT_EQ(n->inputs[1]->producer->attr_ints("perm"), (std::vector<int64_t>{0, 2, 1, 3}));
  EXPECT_EQ(n->outputs[0]->name, "pv_out");
  EXPECT_FALSE(fused_from_has(n, "q_bhsd"));  // still in the graph
  EXPECT_TRUE(fused_from_has(n, "k_t"));
  expect_same_numbers(o);
}

TEST(FuseAttention, PowerOfTwoScaleFoldsIntoAConstantMaskBeforeIt) {
  // (QKᵀ + m)/2 = QKᵀ/2 + m/2 exactly: the mask constant is rewritten as m/2.
  Spec s;
  s.mask = Spec::Mask::AddCausal;
  s.mask_before_scale = true;
  Outcome o = fuse(s);
  const Node* n = fused_node(o, "ai.fusec");
  ASSERT_TRUE(n);
  EXPECT_EQ(n->attr_int("is_causal", 0), 1);  // -3.4e38/2 still masks like -inf
  expect_same_numbers(o);
}

TEST(FuseAttention, Float16) {
  Spec s;
  s.dtype = DType::Float16;
  s.mask = Spec::Mask::AddInput;
  Outcome o = fuse(s);
  ASSERT_TRUE(fused_node(o, "ai.fusec"));
  VerifyResult v = verify_equivalence(*o.original, *o.optimized, 2, 7, {1e-2, 1e-3});
  EXPECT_TRUE(v.ok);
}

TEST(FuseAttention, PipelineSeesThroughDropoutAndFusesOnce) {
  // In the pipeline cleanup removes an inference Dropout between Softmax and P·V first.
  auto g = build(Spec{});
  Node* pv = nullptr;
  for (const auto& n : g->nodes())
    if (n->name == "pv") pv = n.get();
  ASSERT_TRUE(pv);
  Value* drop = g->add_value("dropped");
  g->add_node("Dropout", {pv->inputs[0]}, {drop}, "dropout");
  g->set_input(pv, 0, drop);
  g->topo_sort();
  infer_shapes(*g);
  auto original = g->clone();
  optimize_graph(*g, PipelineOptions{});
  EXPECT_EQ(count(*g, "Attention", "ai.fusec"), 1);
  EXPECT_EQ(count(*g, "Dropout"), 0);
  VerifyResult v = verify_equivalence(*original, *g, 2, 7, {1e-4, 1e-5});
  EXPECT_TRUE(v.ok);
}

TEST(FuseAttention, NearMissSoftmaxNotOverTheKeys) {
  Spec s;
  s.softmax_axis = 2;
  expect_near_miss(s, "the Softmax is over axis 2, not the last (keys) axis");
}

TEST(FuseAttention, NearMissMaskBeforeANonPowerOfTwoScale) {
  Spec s;
  s.d = 3;  // scale 1/√3
  s.mask = Spec::Mask::AddInput;
  s.mask_before_scale = true;
  expect_near_miss(s, "the mask 'mask' is added before the scale (x0.577350); only a power-of-two scale folds exactly");
}

TEST(FuseAttention, ComputedMasksBeforeAPowerOfTwoScaleAreScaledWithIt) {
  // (QKᵀ + m)/2 = QKᵀ/2 + m/2 exactly for a computed m too (XLNet adds its position and segment
  // terms before the scale): the node reads m times 1/2; several terms are scaled and summed.
  Spec s;
  s.d = 4;
  s.mask_before_scale = true;
  for (Spec::Mask form : {Spec::Mask::AddInput, Spec::Mask::FunnelTerms}) {
    s.mask = form;
    Outcome o = fuse(s);
    const Node* last = fused_mask(o);
    ASSERT_TRUE(last);
    if (form == Spec::Mask::AddInput) {
      EXPECT_EQ(last->op_type, "Mul");
      EXPECT_EQ(last->inputs[0]->name, "mask");
      ASSERT_TRUE(constant_of(last->inputs[1]));
      EXPECT_EQ(constant_of(last->inputs[1])->as_double(0), 0.5);
    } else {
      EXPECT_EQ(last->op_type, "Sub");  // (0.5·position_bias + 0.5·token_type) - 0.5·mask
      ASSERT_TRUE(last->inputs[1]->producer);
      EXPECT_EQ(last->inputs[1]->producer->op_type, "Mul");
    }
    expect_same_numbers(o);
  }
}

TEST(FuseAttention, NearMissScaleNotAConstant) {
  auto g = build(Spec{});
  Node* scale = nullptr;
  for (const auto& n : g->nodes())
    if (n->name == "scale") scale = n.get();
  ASSERT_TRUE(scale);
  Value* s = g->add_named_value("runtime_scale");
  s->type = {DType::Float32, Shape{}};
  s->is_graph_input = true;
  g->inputs.push_back(s);
  g->set_input(scale, 1, s);
  Outcome o = run_one_pass<FuseAttentionPass>(std::move(g));
  EXPECT_FALSE(o.changed);
  ASSERT_EQ(o.ctx.near_misses.size(), 1u);
  EXPECT_EQ(o.ctx.near_misses[0].reason,
            "Div 'scale' scales the scores by 'runtime_scale', which is not a constant scalar");
}

TEST(FuseAttention, NearMissProbabilitiesReadElsewhere) {
  Spec s;
  s.probs_output = true;
  expect_near_miss(s, "the attention probabilities 'softmax_out' are a graph output");
}

TEST(FuseAttention, NearMissUnknownShapes) {
  // The head split's target is computed at run time: the heads cannot be proven.
  auto g = build(Spec{});
  for (const auto& n : g->nodes())
    if (n->name == "q_split") {
      Value* target = g->add_named_value("runtime_shape");
      target->type = {DType::Int64, Shape{4}};
      target->is_graph_input = true;
      g->inputs.push_back(target);
      g->set_input(n.get(), 1, target);
    }
  for (Value* v : g->values())
    if (!v->is_graph_input && !v->is_initializer()) v->type.shape.reset();
  Outcome o = run_one_pass<FuseAttentionPass>(std::move(g));
  EXPECT_FALSE(o.changed);
  ASSERT_EQ(o.ctx.near_misses.size(), 1u);
  EXPECT_EQ(o.ctx.near_misses[0].reason,
            "Q, K and V are not all of known 4-D shape [B, H, S, D], so their heads cannot be proven (bind the shapes, "
            "e.g. --batch)");
}

TEST(FuseAttention, NearMissNotFloat) {
  Spec s;
  s.dtype = DType::Float64;
  expect_near_miss(s, "the scores are float64, not float32, float16 or bfloat16");
}

TEST(FuseAttention, NearMissPortableBeforeOpset23) {
  expect_near_miss(Spec{},
                   "Attention is not standard ONNX before opset 23 (the model imports opset 17); --portable writes "
                   "standard ops only",
                   PassOptions{true});
}

TEST(FuseAttention, NearMissFiniteFillThatEmptiesARow) {
  // A constant Where condition with an all-false row and a finite fill: the graph averages V over
  // that row where Attention would give zeros.
  Spec s;
  s.sq = 3;
  s.skv = 5;
  s.mask = Spec::Mask::WhereCausal;
  auto g = build(s);
  Value* cond = g->find_value("causal");
  Tensor c = cond->initializer->clone();
  for (int64_t j = 0; j < 5; ++j) c.data<uint8_t>()[j] = 0;      // query 0 sees nothing
  for (int64_t j = 0; j < 5; ++j) c.data<uint8_t>()[5 + j] = 1;  // not a triangle any more
  cond->initializer = std::make_shared<Tensor>(std::move(c));
  Outcome o = run_one_pass<FuseAttentionPass>(std::move(g));
  EXPECT_FALSE(o.changed);
  ASSERT_EQ(o.ctx.near_misses.size(), 1u);
  EXPECT_EQ(o.ctx.near_misses[0].reason,
            "Where 'causal_where' masks every key of some query row with a finite fill (the graph averages V there, "
            "Attention gives 0)");
}

TEST(FuseAttention, NotAttentionIsSilent) {
  // A classifier's Softmax over a 2-D MatMul: no near-miss.
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {2, 8});
  Value* logits = b.node("MatMul", {x, b.initializer("w", constant_floats({8, 3}, -0.5f, 0.05f))}, {}, "fc");
  b.output(b.node("Softmax", {logits}, {attr("axis", int64_t{-1})}, "softmax"));
  Outcome o = run_one_pass<FuseAttentionPass>(b.build());
  EXPECT_FALSE(o.changed);
  EXPECT_TRUE(o.ctx.near_misses.empty());
}

// ---- torch's safe softmax: P' = Where(IsNaN(P), 0, P) between the Softmax and P·V -------------

namespace {

/// Runs the original and the optimized graph of a Spec with a `keep` input on the CPU, with batch 0
/// keeping every key but the last and batch 1 keeping none (a padding-only sequence: every query
/// row of it fully masked). Expects the same finite outputs; returns the optimized graph's output.
Tensor run_with_empty_rows(const Outcome& o, const Spec& s) {
  Tensor keep(DType::Bool, {s.batch, 1, 1, s.skv});
  for (int64_t j = 0; j < s.skv; ++j) {
    keep.data<uint8_t>()[j] = j + 1 < s.skv;
    keep.data<uint8_t>()[s.skv + j] = 0;
  }
  const std::vector<Tensor> in = {uniform_floats({s.batch, s.sq, s.hq * s.d}, 31),
                                  uniform_floats({s.batch, s.skv, s.hkv * s.d}, 32),
                                  uniform_floats({s.batch, s.skv, s.hkv * s.d}, 33), keep};
  auto original = o.original->clone(), optimized = o.optimized->clone();
  const Tensor want = run_cpu(*original, in)[0], got = run_cpu(*optimized, in)[0];
  for (int64_t i = 0; i < want.numel(); ++i) {
    EXPECT_TRUE(std::isfinite(want.as_double(i))) << "original, element " << i;
    EXPECT_TRUE(std::isfinite(got.as_double(i))) << "optimized, element " << i;
  }
  expect_close(got, want, 1e-5, 1e-6);
  return got;
}

/// Element (b, i, c) of a [B, S, H·D] output.
float at(const Tensor& y, const Spec& s, int64_t b, int64_t i, int64_t c) {
  return y.data<float>()[(b * s.sq + i) * s.hq * s.d + c];
}

/// The near-miss of a guard look-alike: P·V is not reached, so the what names Q·Kᵀ and the Softmax.
void expect_guard_near_miss(const Spec& s, const std::string& reason) {
  Outcome o = fuse(s);
  EXPECT_FALSE(o.changed);
  EXPECT_EQ(graph_difference(*o.original, *o.optimized), "");
  ASSERT_EQ(o.ctx.near_misses.size(), 1u);
  EXPECT_EQ(o.ctx.near_misses[0].what, "MatMul 'qk' -> Softmax 'softmax' not fused into Attention");
  EXPECT_EQ(o.ctx.near_misses[0].reason, reason);
}

}  // namespace

TEST(FuseAttention, SafeSoftmaxWithMinusInfinityFillGivesZeroRows) {
  // Legacy SDPA export: Add(S, Where(keep, 0, -inf)), Softmax, Where(IsNaN(P), 0, P). A fully masked
  // row is NaN after the Softmax and 0 after the guard; Attention gives 0 there too. At opset 17
  // (ai.fusec) and 23 (ONNX Attention).
  for (int64_t opset : {17, 23}) {
    SCOPED_TRACE("opset " + std::to_string(opset));
    Spec s;
    s.opset = opset;
    s.kt = Spec::Kt::Via0132;
    s.scale = Spec::Scale::QandK;
    s.mask = Spec::Mask::AddWhereInput;
    s.guard = Spec::Guard::Safe;
    Outcome o = fuse(s);
    const Node* n = fused_node(o, opset >= 23 ? "" : "ai.fusec");
    ASSERT_TRUE(n);
    EXPECT_EQ(count(*o.optimized, "IsNaN"), 0);
    EXPECT_EQ(count(*o.optimized, "Where"), 1);  // the mask's own Where, now Attention's additive mask
    ASSERT_EQ(n->inputs.size(), 4u);
    EXPECT_EQ(n->inputs[3]->name, "mask_where_out");
    EXPECT_TRUE(fused_from_has(n, "guard") && fused_from_has(n, "guard_isnan"));
    EXPECT_NE(o.ctx.rewrites[0].what.find("Where 'guard' (safe softmax)"), std::string::npos) << o.ctx.rewrites[0].what;
    expect_same_numbers(o);
    const Tensor y = run_with_empty_rows(o, s);
    for (int64_t i = 0; i < s.sq; ++i)
      for (int64_t c = 0; c < s.hq * s.d; ++c) EXPECT_EQ(at(y, s, 1, i, c), 0.0f) << "row " << i << " col " << c;
  }
}

namespace {

/// Every row of the fully masked second sequence (run_with_empty_rows) is the mean of its V rows, as
/// the graph gives when the masked scores stay finite (-FLT_MAX).
void expect_empty_rows_average_v(const Outcome& o, const Spec& s) {
  const Tensor y = run_with_empty_rows(o, s);
  const Tensor v = uniform_floats({s.batch, s.skv, s.hkv * s.d}, 33);
  for (int64_t c = 0; c < s.hq * s.d; ++c) {
    double mean = 0;
    for (int64_t j = 0; j < s.skv; ++j) mean += v.data<float>()[(s.skv + j) * s.hkv * s.d + c];
    mean /= static_cast<double>(s.skv);
    for (int64_t i = 0; i < s.sq; ++i) EXPECT_NEAR(at(y, s, 1, i, c), mean, 1e-6) << "row " << i << " col " << c;
  }
}

}  // namespace

TEST(FuseAttention, SafeSoftmaxWithFltMaxFillAveragesVInFullyMaskedRows) {
  // Dynamo SDPA export: the fill is -FLT_MAX. A fully masked row stays finite (every score becomes
  // -FLT_MAX), its Softmax is uniform, the guard sees no NaN: the graph gives mean(V) there. The
  // additive mask goes to Attention unchanged, which gives the same; turning the fill into -inf or
  // a bool mask would give 0 and fail here.
  Spec s;
  s.kt = Spec::Kt::Via0132;
  s.scale = Spec::Scale::QandK;
  s.mask = Spec::Mask::AddWhereInput;
  s.fill = -std::numeric_limits<float>::max();
  s.guard = Spec::Guard::Safe;
  Outcome o = fuse(s);
  const Node* n = fused_node(o, "ai.fusec");
  ASSERT_TRUE(n);
  ASSERT_EQ(n->inputs.size(), 4u);
  EXPECT_EQ(n->inputs[3]->type.dtype, DType::Float32);
  expect_same_numbers(o);
  expect_empty_rows_average_v(o, s);
}

TEST(FuseAttention, SafeSoftmaxAfterAMinusInfinityWhereBecomesABoolMask) {
  // Where(keep, S, -inf) with the guard: Attention's bool mask excludes the same keys, and its zero
  // rows are the guard's.
  Spec s;
  s.mask = Spec::Mask::WhereInput;
  s.guard = Spec::Guard::Safe;
  Outcome o = fuse(s);
  const Node* n = fused_node(o, "ai.fusec");
  ASSERT_TRUE(n);
  ASSERT_EQ(n->inputs.size(), 4u);
  EXPECT_EQ(n->inputs[3]->name, "keep");
  EXPECT_EQ(o.optimized->nodes().size(), 1u);
  expect_same_numbers(o);
  const Tensor y = run_with_empty_rows(o, s);
  for (int64_t c = 0; c < s.hq * s.d; ++c) EXPECT_EQ(at(y, s, 1, 0, c), 0.0f);
}

TEST(FuseAttention, AnFltMaxFillWithAnAddedBiasBecomesOneMask) {
  // MPT: the scores plus ALiBi, then masked_fill with finfo.min: Attention reads Where(keep, bias,
  // -FLT_MAX) (the masked scores are -FLT_MAX whatever the bias added). The bias added after the
  // fill instead: Where(keep, 0, -FLT_MAX) + bias. Fully masked rows stay uniform in both.
  for (Spec::Mask form : {Spec::Mask::BiasThenWhereInput, Spec::Mask::WhereInputThenBias}) {
    SCOPED_TRACE(form == Spec::Mask::BiasThenWhereInput ? "bias, then the fill" : "the fill, then the bias");
    Spec s;
    s.mask = form;
    s.fill = -std::numeric_limits<float>::max();
    s.guard = Spec::Guard::Safe;
    Outcome o = fuse(s);
    const Node* mask = fused_mask(o);
    ASSERT_TRUE(mask);
    if (form == Spec::Mask::BiasThenWhereInput) {
      EXPECT_EQ(mask->op_type, "Where");
      EXPECT_EQ(mask->input(0)->name, "keep");
      EXPECT_EQ(mask->input(1)->name, "alibi");
    } else {
      EXPECT_EQ(mask->op_type, "Add");
      ASSERT_TRUE(mask->input(0)->producer);
      EXPECT_EQ(mask->input(0)->producer->op_type, "Where");
      EXPECT_EQ(mask->input(1)->name, "alibi");
    }
    expect_same_numbers(o);
    expect_empty_rows_average_v(o, s);
  }
}

TEST(FuseAttention, SafeSoftmaxAfterAnFltMaxWhereFillBecomesAnAddedMask) {
  // Where(keep, S, -FLT_MAX) writes -FLT_MAX over the scores, which is -FLT_MAX added to them (S -
  // FLT_MAX rounds to -FLT_MAX): Attention reads the additive mask Where(keep, 0, -FLT_MAX), and a
  // fully masked row is uniform (mean of V) in both, where a bool mask would give 0.
  Spec s;
  s.mask = Spec::Mask::WhereInput;
  s.fill = -std::numeric_limits<float>::max();
  s.guard = Spec::Guard::Safe;
  Outcome o = fuse(s);
  const Node* added = fused_mask(o);
  ASSERT_TRUE(added && added->op_type == "Where");
  EXPECT_EQ(added->input(0)->name, "keep");
  expect_same_numbers(o);
  expect_empty_rows_average_v(o, s);
}

TEST(FuseAttention, NearMissAnotherFiniteWhereFillWithAComputedCondition) {
  // -1e9 written over the scores is not -1e9 added to them where a row is fully masked (S - 1e9
  // still differs from key to key): stays as it is.
  Spec s;
  s.mask = Spec::Mask::WhereInput;
  s.fill = -1e9f;
  s.guard = Spec::Guard::Safe;
  Outcome o = fuse(s);
  EXPECT_FALSE(o.changed);
  expect_unchanged(*o.original, *o.optimized);
  ASSERT_EQ(o.ctx.near_misses.size(), 1u);
  EXPECT_NE(o.ctx.near_misses[0].reason.find("has a computed condition and a finite fill"), std::string::npos)
      << o.ctx.near_misses[0].reason;
}

TEST(FuseAttention, NearMissGuardWithANonZeroFill) {
  Spec s;
  s.mask = Spec::Mask::AddWhereInput;
  s.guard = Spec::Guard::NonZeroFill;
  expect_guard_near_miss(
      s,
      "Where 'guard' writes 'guard_zero' where the probabilities are NaN, not a constant 0 (torch's safe "
      "softmax; Attention gives 0 for a row with every key masked)");
}

TEST(FuseAttention, NearMissGuardTestingAnotherTensor) {
  Spec s;
  s.mask = Spec::Mask::AddWhereInput;
  s.guard = Spec::Guard::IsNaNOfScores;
  expect_guard_near_miss(
      s,
      "Where 'guard' tests IsNaN of 'mask_add_out', not of the Softmax's output (torch's safe softmax is "
      "Where(IsNaN(P), 0, P))");
}

TEST(FuseAttention, NearMissGuardIsNaNWithASecondReader) {
  Spec s;
  s.mask = Spec::Mask::AddWhereInput;
  s.guard = Spec::Guard::IsNaNSecondReader;
  expect_guard_near_miss(
      s,
      "IsNaN 'guard_isnan' of the attention probabilities has 2 readers; only the Where of torch's safe "
      "softmax may read it");
}

TEST(FuseAttention, NearMissGuardWithTheProbabilitiesInTheTrueBranch) {
  // Where(IsNaN(P), P, 0) keeps only the NaNs: not the guard.
  Spec s;
  s.mask = Spec::Mask::AddWhereInput;
  s.guard = Spec::Guard::ProbsInTrueBranch;
  expect_guard_near_miss(
      s,
      "IsNaN 'guard_isnan' of the attention probabilities feeds Where 'guard', not Where(IsNaN(P), 0, P) "
      "(torch's safe softmax)");
}

TEST(FuseAttention, NearMissGuardedProbabilitiesAlsoAGraphOutput) {
  Spec s;
  s.mask = Spec::Mask::AddWhereInput;
  s.guard = Spec::Guard::Safe;
  s.probs_output = true;
  expect_guard_near_miss(
      s,
      "the attention probabilities 'softmax_out' are a graph output; only torch's safe-softmax guard "
      "(IsNaN and Where) may read them");
}

namespace {

/// Swin's shifted-window attention on Q, K, V [B·G, H, N, D] inputs: a per-head bias [1, H, N, N]
/// added to the scores, then the scores regrouped [B, G, H, N, N] for a mask per window
/// ([1, G, 1, N, N]: 0 or -100, as torchvision writes it) and merged back. `window_mask` gives the
/// window mask's dims (an image dim other than 1 makes it differ from image to image);
/// `merge_back` false reshapes the scores once (no pair).
std::unique_ptr<Graph> build_windows(std::vector<int64_t> window_mask = {1, 4, 1, 5, 5}, bool merge_back = true,
                                     DType t = DType::Float32) {
  const int64_t B = 2, G = 4, H = 2, N = 5, D = 8;
  GraphBuilder b(17);
  auto shape = [](std::vector<int64_t> v) { return int64s(v, {static_cast<int64_t>(v.size())}); };
  Value* q = b.input("q", t, {B * G, H, N, D});
  Value* k = b.input("k", t, {B * G, H, N, D});
  Value* v = b.input("v", t, {B * G, H, N, D});
  Value* qs = b.node("Mul", {q, b.initializer("q_scale", as_type(floats({0.35f}, {}), t))}, {}, "q_mul");
  Value* kt = b.node("Transpose", {k}, {attr("perm", std::vector<int64_t>{0, 1, 3, 2})}, "k_t");
  Value* x = b.node("MatMul", {qs, kt}, {}, "qk");
  x = b.node("Add", {x, b.initializer("bias", as_type(constant_floats({1, H, N, N}, -0.4f, 0.013f), t))}, {},
             "bias_add");
  x = b.node("Reshape", {x, b.initializer("split_shape", shape({B, G, H, N, N}))}, {}, "split");
  Tensor wm(DType::Float32, window_mask);
  for (int64_t i = 0; i < wm.numel(); ++i) wm.data<float>()[i] = (i * 7) % 5 == 0 ? -100.0f : 0.0f;
  x = b.node("Add", {x, b.initializer("window_mask", as_type(wm, t))}, {}, "window_add");
  if (merge_back) x = b.node("Reshape", {x, b.initializer("merge_shape", shape({B * G, H, N, N}))}, {}, "merge");
  Value* p = b.node("Softmax", {x}, {attr("axis", int64_t{-1})}, "softmax");
  if (!merge_back) p = b.node("Reshape", {p, b.initializer("p_shape", shape({B * G, H, N, N}))}, {}, "p_merge");
  b.output(b.node("MatMul", {p, v}, {}, "pv"));
  return b.build();
}

}  // namespace

TEST(FuseAttention, ShiftedWindowsBecomeHeadsWithOneSummedMask) {
  Outcome o = run_one_pass<FuseAttentionPass>(build_windows());
  const Node* n = fused_node(o, "ai.fusec");
  ASSERT_TRUE(n);
  // Q, K and V [8, 2, 5, 8] viewed as [2, 8, 5, 8]: 4 windows of 2 heads are 8 heads of an image.
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(n->inputs[i]->producer);
    EXPECT_EQ(n->inputs[i]->producer->op_type, "Reshape");
    EXPECT_EQ(shape_str(*n->inputs[i]->type.shape), "2x8x5x8");
  }
  ASSERT_EQ(n->inputs.size(), 4u);
  const Tensor* mask = constant_of(n->inputs[3]);
  ASSERT_TRUE(mask);
  EXPECT_EQ(mask->dims(), (std::vector<int64_t>{1, 8, 5, 5}));
  EXPECT_EQ(count(*o.optimized, "Add"), 0);
  EXPECT_NEAR(n->attr_float("scale", 0), 0.35f, 1e-7);
  expect_same_numbers(o);
}

TEST(FuseAttention, NearMissWindowMaskThatDiffersFromImageToImage) {
  Outcome o = run_one_pass<FuseAttentionPass>(build_windows({2, 4, 1, 5, 5}));
  EXPECT_FALSE(o.changed);
  ASSERT_EQ(o.ctx.near_misses.size(), 1u);
  EXPECT_EQ(o.ctx.near_misses[0].reason,
            "the mask 'window_mask' differs from image to image (windows need one mask for all)");
}

TEST(FuseAttention, NearMissScoresReshapedWithoutTheMergeBack) {
  Outcome o = run_one_pass<FuseAttentionPass>(build_windows({1, 4, 1, 5, 5}, false));
  EXPECT_FALSE(o.changed);
  EXPECT_EQ(graph_difference(*o.original, *o.optimized), "");
}

TEST(FuseAttention, SdpaKeyTransposedInThreeDOverRepeatedKeys) {
  // Mistral's, Qwen2's and Gemma's dynamo exports: Kᵀ through [B·H, S, D], the repeat_kv's Expand
  // merged straight into it. The repeat is absorbed and the 3-D form is written.
  Spec s;
  s.kt = Spec::Kt::Via3d;
  s.hq = 4;
  s.hkv = 2;
  s.repeat = true;
  s.mask = Spec::Mask::AddInput;
  Outcome o = fuse(s);
  const Node* n = fused_node(o, "ai.fusec");
  ASSERT_TRUE(n);
  EXPECT_EQ(n->attr_int("q_num_heads", 0), 4);
  EXPECT_EQ(n->attr_int("kv_num_heads", 0), 2);
  EXPECT_EQ(count(*o.optimized, "Expand"), 0);
  EXPECT_EQ(count(*o.optimized, "Transpose"), 0);
  expect_same_numbers(o);
}

TEST(FuseAttention, SdpaKeyTransposedInThreeDWithoutRepeat) {
  // Over a 4-D K the three nodes are canonicalize's transpose of whole groups, which runs first in
  // the pipeline; fuse_attention then sees Transpose(K, 0,1,3,2).
  Spec s;
  s.kt = Spec::Kt::Via3d;
  auto g = build(s);
  infer_shapes(*g);
  Outcome o;
  o.original = g->clone();
  PassContext canon;
  EXPECT_TRUE(CanonicalizePass().run(*g, canon));
  g->topo_sort();
  infer_shapes(*g);
  o.changed = FuseAttentionPass().run(*g, o.ctx);
  g->topo_sort();
  infer_shapes(*g);
  o.optimized = std::move(g);
  const Node* n = fused_node(o, "ai.fusec");
  ASSERT_TRUE(n);
  EXPECT_EQ(count(*o.optimized, "Transpose"), 0);
  expect_same_numbers(o);
}

TEST(FuseAttention, PerHeadScaleMovesOntoQ) {
  // (Q·Kᵀ)·s_h = (s_h·Q)·Kᵀ: the factor becomes a Mul on the 4-D Q, the scale stays 1/√D.
  Spec s;
  s.head_scale = Spec::HeadScale::BeforeMask;
  s.mask = Spec::Mask::AddInput;
  Outcome o = fuse(s);
  const Node* n = fused_node(o, "ai.fusec");
  ASSERT_TRUE(n);
  ASSERT_TRUE(n->inputs[0]->producer);
  EXPECT_EQ(n->inputs[0]->producer->op_type, "Mul");
  const Tensor* f = constant_of(n->inputs[0]->producer->input(1));
  ASSERT_TRUE(f);
  EXPECT_EQ(f->dims(), (std::vector<int64_t>{1, 2, 1, 1}));
  EXPECT_NEAR(n->attr_float("scale", 0), 0.5f, 1e-7);  // 1/√4
  expect_same_numbers(o);
}

TEST(FuseAttention, NearMissPerHeadScaleAfterTheMask) {
  Spec s;
  s.head_scale = Spec::HeadScale::AfterMask;
  s.mask = Spec::Mask::AddInput;
  expect_near_miss(s, "Mul 'head_scale' scales the masked scores per head");
}

TEST(FuseAttention, ShiftedWindowsInFloat16SumTheirMasksInFloat16) {
  Outcome o = run_one_pass<FuseAttentionPass>(build_windows({1, 4, 1, 5, 5}, true, DType::Float16));
  const Node* n = fused_node(o, "ai.fusec");
  ASSERT_TRUE(n);
  ASSERT_EQ(n->inputs.size(), 4u);
  const Tensor* mask = constant_of(n->inputs[3]);
  ASSERT_TRUE(mask);
  EXPECT_EQ(mask->dtype(), DType::Float16);
  VerifyResult v = verify_equivalence(*o.original, *o.optimized, 2, 7, {1e-2, 1e-3});
  EXPECT_TRUE(v.ok);
}

namespace {

/// softmax(0.5·Q·Kᵀ)·V over the given operands as the graph's output, through fuse_attention.
Outcome fuse_plain_core(GraphBuilder& b, Value* q, Value* kt, Value* v) {
  Value* s =
      b.node("Mul", {b.node("MatMul", {q, kt}, {}, "qk"), b.initializer("scale", floats({0.5f}, {}))}, {}, "scale_mul");
  b.output(b.node("MatMul", {b.node("Softmax", {s}, {attr("axis", int64_t{-1})}, "softmax"), v}, {}, "pv"));
  return run_one_pass<FuseAttentionPass>(b.build());
}

}  // namespace

TEST(FuseAttention, KeyTransposedFromASequenceFirstTensor) {
  // nn.TransformerEncoder's default layout once compose_movement has merged its transposes: Q, K
  // and V are Transposes of [S, B, H, D] tensors, Kᵀ one Transpose(1,2,3,0). K is then made as
  // Transpose(1,2,0,3) of that tensor, and the 4-D form is written.
  constexpr int64_t S = 5, B = 2, H = 3, D = 4;
  GraphBuilder b(17);
  auto seq_first = [&](const char* n) { return b.input(n, DType::Float32, {S, B, H, D}); };
  Value* q = b.node("Transpose", {seq_first("q")}, {attr("perm", std::vector<int64_t>{1, 2, 0, 3})}, "q_t");
  Value* kt = b.node("Transpose", {seq_first("k")}, {attr("perm", std::vector<int64_t>{1, 2, 3, 0})}, "k_t");
  Value* v = b.node("Transpose", {seq_first("v")}, {attr("perm", std::vector<int64_t>{1, 2, 0, 3})}, "v_t");
  Outcome o = fuse_plain_core(b, q, kt, v);
  ASSERT_EQ(count_any_domain(*o.optimized, "Attention"), 1);
  EXPECT_EQ(count(*o.optimized, "Softmax"), 0);
  for (const auto& n : o.optimized->nodes())
    if (n->op_type == "Transpose" && n->input(0)->name == "k")
      EXPECT_EQ(n->attr_ints("perm"), (std::vector<int64_t>{1, 2, 0, 3}));
  expect_same_numbers(*o.original, *o.optimized, 41);
}

TEST(FuseAttention, KeyStoredTransposed) {
  // CoAtNet's attention: the conv projection chunked along D gives Kᵀ [B, H, D, S] as a tensor of
  // its own (a Slice), Q a Transpose of its chunk. K is made as Kᵀ's Transpose(0,1,3,2).
  constexpr int64_t B = 2, H = 3, D = 4, S = 5;
  GraphBuilder b(17);
  Value* qkv = b.input("qkv", DType::Float32, {B, H, 3 * D, S});
  Value* axis = b.initializer("axis", int64s({2}, {1}));
  auto chunk = [&](int i) {
    return b.node("Slice",
                  {qkv, b.initializer("start" + std::to_string(i), int64s({i * D}, {1})),
                   b.initializer("end" + std::to_string(i), int64s({(i + 1) * D}, {1})), axis},
                  {}, "chunk" + std::to_string(i));
  };
  Value* q = b.node("Transpose", {chunk(0)}, {attr("perm", std::vector<int64_t>{0, 1, 3, 2})}, "q_t");
  Value* kt = chunk(1);
  Value* v = b.node("Transpose", {chunk(2)}, {attr("perm", std::vector<int64_t>{0, 1, 3, 2})}, "v_t");
  Outcome o = fuse_plain_core(b, q, kt, v);
  ASSERT_EQ(count_any_domain(*o.optimized, "Attention"), 1);
  EXPECT_EQ(count(*o.optimized, "Softmax"), 0);
  expect_same_numbers(*o.original, *o.optimized, 42);
}

namespace {

/// softmax(Max(0.5·Q·Kᵀ + mask, low))·V over [2, 3, 5, 4] inputs, through fuse_attention (XGLM).
Outcome fuse_clamped(float low) {
  GraphBuilder b(17);
  auto input = [&](const char* n) { return b.input(n, DType::Float32, {2, 3, 5, 4}); };
  Value* q = input("q");
  Value* kt = b.node("Transpose", {input("k")}, {attr("perm", std::vector<int64_t>{0, 1, 3, 2})}, "k_t");
  Value* v = input("v");
  Value* s =
      b.node("Mul", {b.node("MatMul", {q, kt}, {}, "qk"), b.initializer("scale", floats({0.5f}, {}))}, {}, "scale_mul");
  s = b.node("Add", {s, b.input("mask", DType::Float32, {2, 1, 5, 5})}, {}, "add_mask");
  s = b.node("Max", {s, b.initializer("low", floats({low}, {}))}, {}, "clamp");
  b.output(b.node("MatMul", {b.node("Softmax", {s}, {attr("axis", int64_t{-1})}, "softmax"), v}, {}, "pv"));
  return run_one_pass<FuseAttentionPass>(b.build());
}

}  // namespace

TEST(FuseAttention, AClampAtFltMaxAfterTheMaskMovesOntoTheMask) {
  // XGLM: Max(S + mask, -FLT_MAX) is S + Max(mask, -FLT_MAX) for any finite S below 2^103.
  Outcome o = fuse_clamped(-std::numeric_limits<float>::max());
  const Node* clamp = fused_mask(o);
  ASSERT_TRUE(clamp && clamp->op_type == "Max");
  EXPECT_EQ(clamp->input(0)->name, "mask");
  expect_same_numbers(*o.original, *o.optimized, 43);
}

TEST(FuseAttention, NearMissAClampAtAnotherValue) {
  expect_near_miss(fuse_clamped(-1e4f), "fuse_attention", "clamps the scores at 'low', not at the constant -FLT_MAX");
}

TEST(FuseAttention, ASoftCapBecomesTheAttentionsSoftcap) {
  // Gemma 2: scores·scale -> c·tanh(· / c) -> + mask. Attention's softcap(scale·QKᵀ) + mask.
  Spec s;
  s.mask = Spec::Mask::AddInput;
  s.softcap = 1.5f;
  Outcome o = fuse(s);
  const Node* n = fused_node(o, "ai.fusec");
  ASSERT_TRUE(n);
  EXPECT_FLOAT_EQ(n->attr_float("softcap", 0), 1.5f);
  EXPECT_FLOAT_EQ(n->attr_float("scale", 0), 0.5f);  // 1/√4, the cap's Div and Mul cancel there
  EXPECT_EQ(count(*o.optimized, "Tanh"), 0);
  expect_same_numbers(o);
  // Opset 23 writes ONNX's own Attention, which has the same softcap.
  s.opset = 23;
  Outcome std23 = fuse(s);
  const Node* m = fused_node(std23, "");
  ASSERT_TRUE(m);
  EXPECT_FLOAT_EQ(m->attr_float("softcap", 0), 1.5f);
  expect_same_numbers(std23);
}

TEST(FuseAttention, NearMissSoftCapsThatAreNotAttentionsOrder) {
  {
    Spec s;
    s.mask = Spec::Mask::AddInput;
    s.softcap = 1.5f;
    s.softcap_after_mask = true;  // the cap after the mask: the masked keys would be capped too
    expect_near_miss(s, "Add 'mask_add' comes before Tanh 'cap_tanh' (a soft cap takes the scaled scores)");
  }
  {
    Spec s;
    s.mask = Spec::Mask::AddInput;
    s.softcap = 1.5f;
    s.softcap_scale_after_mask = true;
    expect_near_miss(s, "Mul 'cap_mul' scales the capped scores after a mask");
  }
  {
    // Heads of 264: no CUDA attention kernel takes a soft cap there.
    Spec s;
    s.d = 264;
    s.softcap = 30;
    expect_near_miss(s,
                     "it soft-caps the scores (30.000000) with heads over 256 (or of unknown size), which no CUDA "
                     "attention kernel takes");
  }
}

namespace {

/// torch's exporter at opset 23: the head splits, repeat_kv on K and V, a 4-D ONNX Attention (a
/// bool mask [B, 1, Sq, Skv]) and the head merge, to [B, S, H·D] or, `flat`, [B·S, H·D].
std::unique_ptr<Graph> standard_attention(bool repeat, bool flat, bool merge = true) {
  const int64_t B = 2, S = 5, Hq = 4, Hkv = repeat ? 2 : 4, D = 8;
  GraphBuilder b(23);
  auto shape = [](std::vector<int64_t> v) { return int64s(v, {static_cast<int64_t>(v.size())}); };
  auto split = [&](const char* n, int64_t heads) {
    Value* x = b.input(std::string("x") + n, DType::Float32, {B, S, heads * D});
    Value* r = b.node("Reshape", {x, b.initializer(std::string(n) + "_shape", shape({B, S, heads, D}))}, {},
                      std::string(n) + "_split");
    Value* t = b.node("Transpose", {r}, {attr("perm", std::vector<int64_t>{0, 2, 1, 3})}, std::string(n) + "_bhsd");
    if (!repeat || heads == Hq) return t;
    Value* u = b.node("Unsqueeze", {t, b.initializer(std::string(n) + "_axes", int64s({2}, {1}))}, {},
                      std::string(n) + "_unsqueeze");
    Value* e = b.node("Expand", {u, b.initializer(std::string(n) + "_expand", shape({B, Hkv, Hq / Hkv, S, D}))}, {},
                      std::string(n) + "_expand");
    return b.node("Reshape", {e, b.initializer(std::string(n) + "_merged", shape({B, Hq, S, D}))}, {},
                  std::string(n) + "_repeat");
  };
  Value* q = split("q", Hq);
  Value* k = split("k", Hkv);
  Value* v = split("v", Hkv);
  Value* mask = b.input("mask", DType::Bool, {B, 1, S, S});
  Value* y = b.node("Attention", {q, k, v, mask}, {attr("scale", 0.25f)}, "sdpa");
  if (merge) {
    Value* t = b.node("Transpose", {y}, {attr("perm", std::vector<int64_t>{0, 2, 1, 3})}, "merge_t");
    y = b.node("Reshape", {t, b.initializer("merge_shape", flat ? shape({B * S, Hq * D}) : shape({B, S, Hq * D}))}, {},
               "merge");
  }
  b.output(y);
  return b.build();
}

}  // namespace

// An ONNX Attention the exporter wrote (opset 23) loses its views: the 3-D form over the splits'
// inputs with Attention's own grouped heads, its attributes kept, nothing else left (but the
// Reshape of a merge to [B·S, H·D]).
TEST(FuseAttention, StandardAttentionTakesItsHeadSplitsRepeatsAndMerge) {
  for (bool repeat : {false, true})
    for (bool flat : {false, true}) {
      SCOPED_TRACE(std::string(repeat ? "repeat_kv" : "no repeat") + (flat ? ", flat merge" : ""));
      Outcome o = run_one_pass<FuseAttentionPass>(standard_attention(repeat, flat));
      EXPECT_TRUE(o.changed);
      ASSERT_EQ(count(*o.optimized, "Attention"), 1);
      const Node* n = find_op(*o.optimized, "Attention");
      EXPECT_EQ(n->domain, "");
      EXPECT_EQ(n->attr_int("q_num_heads", 0), 4);
      EXPECT_EQ(n->attr_int("kv_num_heads", 0), repeat ? 2 : 4);
      EXPECT_FLOAT_EQ(n->attr_float("scale", 0), 0.25f);
      EXPECT_EQ(n->inputs[0]->name, "xq");
      EXPECT_EQ(n->inputs[3]->name, "mask");
      EXPECT_EQ(o.optimized->nodes().size(), flat ? 2u : 1u);
      EXPECT_EQ(count(*o.optimized, "Expand") + count(*o.optimized, "Transpose"), 0);
      expect_same_numbers(o);
    }
  // Without the merge the node stays 4-D, and says why.
  Outcome kept = run_one_pass<FuseAttentionPass>(standard_attention(true, false, false));
  EXPECT_FALSE(kept.changed);
  EXPECT_NE(find_near_miss(kept.ctx.near_misses, "", "not merged back"), nullptr);
}
