// hoist_view_bias: terms added to a finer view of the scores (ViTDet's decomposed relative
// positions: [N, S, S] viewed [N, qh, qw, kh, kw], a term per key row and one per key column, viewed
// back) become one mask added to the scores, and the whole pipeline then makes the core one
// Attention with the same numbers; a term computed from the scores, or a second view that does not
// undo the first, leaves the graph as it was.
#include "passes/attention_view_bias.h"
#include "passes/pattern.h"
#include "passes/pipeline.h"
#include "pass_test_util.h"
#include "test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

constexpr int64_t kN = 6, kHw = 3, kS = kHw * kHw, kD = 4;  // N = B·H = 2·3, a 3x3 grid of tokens

enum class Form { ViTDet, OneTerm, TermFromScores, ViewNotUndone };

/// softmax(R2(R1(q·kᵀ·scale) + rel_h + rel_w))·v over graph inputs q, k, v [N, S, D]; rel_h and
/// rel_w computed from q (as ViTDet does: Q times a table, one term per key row or key column).
std::unique_ptr<Graph> vitdet(Form f) {
  GraphBuilder b(17);
  Value* q = b.input("q", DType::Float32, {kN, kS, kD});
  Value* k = b.input("k", DType::Float32, {kN, kS, kD});
  Value* v = b.input("v", DType::Float32, {kN, kS, kD});
  auto shape = [&](const std::string& n, std::vector<int64_t> d) {
    return b.initializer(n, int64s(d, {static_cast<int64_t>(d.size())}));
  };
  Value* kt = b.node("Transpose", {k}, {attr("perm", std::vector<int64_t>{0, 2, 1})}, "kt");
  Value* qs = b.node("Mul", {q, b.initializer("scale", floats({0.5f}, {}))}, {}, "q_scale");
  Value* s = b.node("MatMul", {qs, kt}, {}, "qk");
  // rel_h [N, qh, qw, kh, 1] and rel_w [N, qh, qw, 1, kw]: Q [N, S, D] times a [D, kHw] table.
  auto rel = [&](const std::string& n, std::vector<int64_t> view, uint64_t seed) {
    Value* t = b.node("MatMul", {q, b.initializer(n + "_table", uniform_floats({kD, kHw}, seed))}, {}, n + "_q");
    return b.node("Reshape", {t, shape(n + "_view", std::move(view))}, {}, n);
  };
  Value* rel_h = rel("rel_h", {kN, kHw, kHw, kHw, 1}, 5);
  Value* rel_w = rel("rel_w", {kN, kHw, kHw, 1, kHw}, 6);
  if (f == Form::TermFromScores)  // a term read off the scores themselves
    rel_w =
        b.node("Reshape",
               {b.node("ReduceMax", {s}, {attr("keepdims", int64_t{1}), attr("axes", std::vector<int64_t>{2})}, "smax"),
                shape("smax_view", {kN, 1, 1, kHw, kHw})},
               {}, "rel_from_scores");
  Value* fine = b.node("Reshape", {s, shape("fine", {kN, kHw, kHw, kHw, kHw})}, {}, "scores_fine");
  fine = b.node("Add", {fine, rel_h}, {}, "add_h");
  if (f != Form::OneTerm) fine = b.node("Add", {fine, rel_w}, {}, "add_w");
  const std::vector<int64_t> back =
      f == Form::ViewNotUndone ? std::vector<int64_t>{kN, kS * kHw, kHw} : std::vector<int64_t>{kN, kS, kS};
  Value* scores = b.node("Reshape", {fine, shape("coarse", back)}, {}, "scores_back");
  Value* p = b.node("Softmax", {scores}, {attr("axis", int64_t{-1})}, "softmax");
  if (f == Form::ViewNotUndone) p = b.node("Reshape", {p, shape("probs", {kN, kS, kS})}, {}, "probs");
  b.output(b.node("MatMul", {p, v}, {}, "pv"));
  return b.build();
}

Node* softmax_of(Graph& g) {
  for (Node* n : g.node_list())
    if (n->op_type == "Softmax") return n;
  return nullptr;
}

}  // namespace

TEST(AttentionViewBias, TermsOnAFinerViewBecomeOneAddedMask) {
  auto g = vitdet(Form::ViTDet);
  infer_shapes(*g);
  auto before = g->clone();
  Node* sm = softmax_of(*g);
  std::string what;
  ASSERT_TRUE(attention::hoist_view_bias(*g, sm, &what));
  EXPECT_EQ(what,
            "Reshape 'scores_fine' + Add 'add_h' + Add 'add_w' + Reshape 'scores_back' -> the scores 'qk_out' plus 2 "
            "term(s) viewed as them");
  // Softmax(Add(q·kᵀ, Reshape(Expand(rel_h + rel_w)))): the views of the scores are gone.
  const Node* add = sm->input(0)->producer;
  ASSERT_TRUE(add && add->op_type == "Add");
  EXPECT_EQ(add->input(0)->producer->name, "qk");
  const Node* view = add->input(1)->producer;
  ASSERT_TRUE(view && view->op_type == "Reshape");
  ASSERT_TRUE(view->input(0)->producer);
  EXPECT_EQ(view->input(0)->producer->op_type, "Add");  // rel_h + rel_w already covers the view
  EXPECT_EQ(count(*g, "Reshape"), 3);                   // rel_h's, rel_w's, the bias's
  expect_same_numbers(*before, *g, 51);

  // One term alone is expanded to the finer view first; either way the pipeline fuses the core.
  for (Form f : {Form::ViTDet, Form::OneTerm}) {
    SCOPED_TRACE(f == Form::ViTDet ? "two terms" : "one term");
    if (f == Form::OneTerm) {
      auto one = vitdet(f);
      infer_shapes(*one);
      auto one_before = one->clone();
      ASSERT_TRUE(attention::hoist_view_bias(*one, softmax_of(*one)));
      EXPECT_EQ(count(*one, "Expand"), 1);
      expect_same_numbers(*one_before, *one, 53);
    }
    PipelineOutcome r = run_full_pipeline(vitdet(f));
    for (const auto& m : r.opt.near_misses)
      if (m.pass == "fuse_attention") ADD_FAILURE() << "near miss: " << m.what << " | " << m.reason;
    EXPECT_EQ(count_any_domain(*r.optimized, "Attention"), 1);
    EXPECT_EQ(count(*r.optimized, "Softmax"), 0);
    expect_same_numbers(*r.original, *r.optimized, 52);
  }
}

TEST(AttentionViewBias, ATermFromTheScoresOrAViewNotUndoneIsLeftAlone) {
  for (Form f : {Form::TermFromScores, Form::ViewNotUndone}) {
    SCOPED_TRACE(f == Form::TermFromScores ? "term from the scores" : "view not undone");
    auto g = vitdet(f);
    infer_shapes(*g);
    auto before = g->clone();
    EXPECT_FALSE(attention::hoist_view_bias(*g, softmax_of(*g)));
    expect_unchanged(*before, *g);
  }
}
