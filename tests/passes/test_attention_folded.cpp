// Attention over [B·H, S, D] tensors (torch's F.multi_head_attention_forward when
// nn.MultiheadAttention returns its weights, the module's default; transformers' BART-era bmm
// attention): the whole pipeline makes it one Attention with the same numbers, sequence-first or
// batch-first, without a mask, with a padding mask per folded head, a causal constant, or a mask
// added to a [B, H, S, S] view of the scores; a core whose probabilities are also read elsewhere
// keeps its ops and says why.
#include "passes/attention_folded.h"
#include "passes/pattern.h"
#include "passes/pipeline.h"
#include "pass_test_util.h"
#include "test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

constexpr int64_t kS = 6, kB = 2, kH = 3, kD = 4, kE = kH * kD, kN = kB * kH;

enum class Mask { None, Padding, Causal };

struct Spec {
  bool batch_first = false;  // x [B, S, E], transposed to [S, B, E] first
  Mask mask = Mask::None;
  bool weights_read = false;  // the probabilities are also a graph output
};

/// F.multi_head_attention_forward(need_weights=True) as the exporters write it: the packed in
/// projection, the head fold [S, B, E] -> [S, B·H, D] -> [B·H, S, D], Q scaled, Kᵀ by one Transpose,
/// bmm, the mask added (baddbmm), Softmax, bmm with V, and back to [S, B, E] through the output
/// projection.
std::unique_ptr<Graph> mha(const Spec& s) {
  GraphBuilder b(17);
  Value* x = s.batch_first ? b.input("x", DType::Float32, {kB, kS, kE}) : b.input("x", DType::Float32, {kS, kB, kE});
  if (s.batch_first) x = b.node("Transpose", {x}, {attr("perm", std::vector<int64_t>{1, 0, 2})}, "seq_first");
  Value* qkv = b.node("MatMul", {x, b.initializer("w_in", uniform_floats({kE, 3 * kE}, 1))}, {}, "in_proj");
  qkv = b.node("Add", {qkv, b.initializer("b_in", uniform_floats({3 * kE}, 2))}, {}, "in_proj_bias");
  auto parts = b.node_n("Split", {qkv, b.initializer("split", int64s({kE, kE, kE}, {3}))}, 3,
                        {attr("axis", int64_t{-1})}, "chunk");
  Value* fold = b.initializer("fold", int64s({kS, kN, kD}, {3}));
  auto folded = [&](int i, std::vector<int64_t> perm) {
    const std::string n(1, "qkv"[i]);
    Value* r = b.node("Reshape", {parts[static_cast<size_t>(i)], fold}, {}, n + "_fold");
    return b.node("Transpose", {r}, {attr("perm", perm)}, n + "_batch_first");
  };
  Value* q = b.node("Mul", {folded(0, {1, 0, 2}), b.initializer("scale", floats({0.5f}, {}))}, {}, "q_scale");
  Value* kt = folded(1, {1, 2, 0});
  Value* v = folded(2, {1, 0, 2});
  Value* scores = b.node("MatMul", {q, kt}, {}, "bmm_qk");
  if (s.mask == Mask::Padding)
    scores = b.node("Add", {b.input("key_mask", DType::Float32, {kN, 1, kS}), scores}, {}, "baddbmm");
  if (s.mask == Mask::Causal) {
    Tensor causal(DType::Float32, {1, kS, kS});
    for (int64_t i = 0; i < kS; ++i)
      for (int64_t j = 0; j < kS; ++j) causal.data<float>()[i * kS + j] = j > i ? -1e9f : 0.0f;
    scores = b.node("Add", {b.initializer("causal", causal), scores}, {}, "baddbmm");
  }
  Value* p = b.node("Softmax", {scores}, {attr("axis", int64_t{-1})}, "softmax");
  Value* o = b.node("MatMul", {p, v}, {}, "bmm_pv");
  o = b.node("Transpose", {o}, {attr("perm", std::vector<int64_t>{1, 0, 2})}, "o_seq_first");
  o = b.node("Reshape", {o, b.initializer("rows", int64s({kS * kB, kE}, {2}))}, {}, "o_rows");
  o = b.node("MatMul", {o, b.initializer("w_out", uniform_floats({kE, kE}, 3))}, {}, "out_proj");
  o = b.node("Add", {o, b.initializer("b_out", uniform_floats({kE}, 4))}, {}, "out_proj_bias");
  o = b.node("Reshape", {o, b.initializer("unrows", int64s({kS, kB, kE}, {3}))}, {}, "o_unrows");
  if (s.batch_first) o = b.node("Transpose", {o}, {attr("perm", std::vector<int64_t>{1, 0, 2})}, "batch_first");
  b.output(o);
  if (s.weights_read) b.output(p);
  return b.build();
}

}  // namespace

TEST(AttentionFolded, MultiheadAttentionWithItsWeightsBecomesOneAttention) {
  for (bool batch_first : {false, true})
    for (Mask mask : {Mask::None, Mask::Padding, Mask::Causal}) {
      SCOPED_TRACE(std::string(batch_first ? "batch-first" : "sequence-first") + ", mask " +
                   std::to_string(static_cast<int>(mask)));
      Spec s;
      s.batch_first = batch_first;
      s.mask = mask;
      PipelineOutcome r = run_full_pipeline(mha(s));
      for (const auto& m : r.opt.near_misses)
        if (m.pass == "fuse_attention") ADD_FAILURE() << "near miss: " << m.what << " | " << m.reason;
      EXPECT_EQ(count_any_domain(*r.optimized, "Attention"), 1);
      EXPECT_EQ(count(*r.optimized, "Softmax"), 0);
      bool said = false;
      for (const auto& w : r.opt.rewrites) said |= w.what.find("heads folded into the batch") != std::string::npos;
      EXPECT_TRUE(said);
      for (const auto& n : r.optimized->nodes())
        if (n->op_type == "Attention") {
          EXPECT_EQ(n->inputs.size(), mask == Mask::Padding ? 4u : 3u);  // a causal constant is is_causal
          if (mask == Mask::Causal) EXPECT_EQ(n->attr_int("is_causal", 0), 1);
        }
      expect_same_numbers(*r.original, *r.optimized, 31);
    }
}

TEST(AttentionFolded, ProbabilitiesReadElsewhereKeepTheCore) {
  Spec s;
  s.weights_read = true;
  PipelineOutcome r = run_full_pipeline(mha(s));
  EXPECT_EQ(count_any_domain(*r.optimized, "Attention"), 0);
  EXPECT_EQ(count(*r.optimized, "Softmax"), 1);
  bool said = false;
  for (const auto& m : r.opt.near_misses)
    said |= m.pass == "fuse_attention" && m.reason.find("are read outside the attention") != std::string::npos;
  EXPECT_TRUE(said);
  for (const auto& n : r.optimized->nodes())  // nothing was rewritten to rank 4
    if (n->op_type == "Softmax") EXPECT_EQ(n->outputs[0]->type.shape->size(), 3u);
  expect_same_numbers(*r.original, *r.optimized, 32);
}

TEST(AttentionFolded, ARankThreeSoftmaxWithoutTwoProductsIsLeftAlone) {
  // Softmax(2·s)·V, the scores a graph input: one product, no attention core, nothing rewritten.
  GraphBuilder b(17);
  Value* scores = b.input("s", DType::Float32, {kN, kS, kS});
  Value* v = b.input("v", DType::Float32, {kN, kS, kD});
  Value* p = b.node("Softmax", {b.node("Mul", {scores, b.initializer("two", floats({2.0f}, {}))}, {}, "scale")},
                    {attr("axis", int64_t{-1})}, "softmax");
  b.output(b.node("MatMul", {p, v}, {}, "pv"));
  auto g = b.build();
  infer_shapes(*g);
  Node* sm = nullptr;
  for (Node* n : g->node_list())
    if (n->op_type == "Softmax") sm = n;
  auto before = g->clone();
  EXPECT_FALSE(attention::rank3_scores_behind(sm));
  std::string why;
  EXPECT_FALSE(attention::split_folded_heads(*g, sm, &why));
  EXPECT_NE(why.find("1 MatMuls"), std::string::npos) << why;
  expect_unchanged(*before, *g);
}

namespace {

/// transformers' older attention classes (XGLM, MVP, TrOCR, FSMT, LED...): Q, K and V viewed
/// [B·H, T, D] from their [B, H, T, D] head splits, bmm, the scores viewed [B, H, T, S] for the
/// mask and back, Softmax, bmm, then viewed [B, H, T, D] again for the head merge. With
/// `softmax_on_view` the Softmax runs on the [B, H, T, S] view and its output is viewed back
/// (BLOOM).
std::unique_ptr<Graph> bart_era(bool softmax_on_view) {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {kB, kS, kE});
  Value* mask = b.input("mask", DType::Float32, {kB, 1, kS, kS});
  Value* heads = b.initializer("heads", int64s({kB, kS, kH, kD}, {4}));
  Value* fold = b.initializer("fold", int64s({kN, kS, kD}, {3}));
  auto proj = [&](const std::string& n, unsigned seed) {
    Value* p = b.node("MatMul", {x, b.initializer("w_" + n, uniform_floats({kE, kE}, seed))}, {}, n + "_proj");
    p = b.node("Reshape", {p, heads}, {}, n + "_heads");
    p = b.node("Transpose", {p}, {attr("perm", std::vector<int64_t>{0, 2, 1, 3})}, n + "_bhsd");
    return b.node("Reshape", {p, fold}, {}, n + "_fold");
  };
  Value* q = b.node("Mul", {proj("q", 11), b.initializer("scale", floats({0.5f}, {}))}, {}, "q_scale");
  Value* kt = b.node("Transpose", {proj("k", 12)}, {attr("perm", std::vector<int64_t>{0, 2, 1})}, "k_t");
  Value* v = proj("v", 13);
  Value* s = b.node("MatMul", {q, kt}, {}, "bmm");
  Value* scores4 = b.initializer("scores4", int64s({kB, kH, kS, kS}, {4}));
  Value* scores3 = b.initializer("scores3", int64s({kN, kS, kS}, {3}));
  s = b.node("Add", {b.node("Reshape", {s, scores4}, {}, "scores_view"), mask}, {}, "add_mask");
  Value* p = softmax_on_view
                 ? b.node("Reshape", {b.node("Softmax", {s}, {attr("axis", int64_t{-1})}, "softmax"), scores3}, {},
                          "probs_fold")
                 : b.node("Softmax", {b.node("Reshape", {s, scores3}, {}, "scores_fold")}, {attr("axis", int64_t{-1})},
                          "softmax");
  Value* o = b.node("MatMul", {p, v}, {}, "bmm_pv");
  o = b.node("Reshape", {o, b.initializer("out4", int64s({kB, kH, kS, kD}, {4}))}, {}, "out_view");
  o = b.node("Transpose", {o}, {attr("perm", std::vector<int64_t>{0, 2, 1, 3})}, "out_bshd");
  b.output(b.node("Reshape", {o, b.initializer("merge", int64s({kB, kS, kE}, {3}))}, {}, "out_merge"));
  return b.build();
}

}  // namespace

TEST(AttentionFolded, BartEraAttentionWithItsMaskOnAFourDViewBecomesOneAttention) {
  // B and H come from the core's views of B·H, and the views go. Also with the Softmax itself on
  // the view (BLOOM).
  for (bool softmax_on_view : {false, true}) {
    SCOPED_TRACE(softmax_on_view ? "Softmax on the [B, H, T, S] view" : "Softmax on [B·H, T, S]");
    PipelineOutcome r = run_full_pipeline(bart_era(softmax_on_view));
    for (const auto& m : r.opt.near_misses)
      if (m.pass == "fuse_attention") ADD_FAILURE() << "near miss: " << m.what << " | " << m.reason;
    EXPECT_EQ(count_any_domain(*r.optimized, "Attention"), 1);
    EXPECT_EQ(count(*r.optimized, "Softmax"), 0);
    for (const auto& n : r.optimized->nodes())
      if (n->op_type == "Attention") EXPECT_EQ(n->inputs.size(), 4u);  // the mask
    expect_same_numbers(*r.original, *r.optimized, 33);
  }
}
