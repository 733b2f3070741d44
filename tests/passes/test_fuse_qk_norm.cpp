// fuse_qk_norm: a per-head norm of Q or K (QK-norm: Qwen3's SimplifiedLayerNorm after the head
// split, Gemma 3's after the Transpose too, Persimmon's LayerNormalization) goes into the Rotary
// after it, and a constant scalar on Q in front of the rotation (ESM) moves behind it; the head
// split then moves behind the rotation. The numbers are the CPU reference's, before and after;
// each guard leaves the graph alone with its reason. Then merge_qkv packs two normalized rotations
// into one with a row of scale per head, and the whole pipeline gives Qwen3's one product a layer.
// A norm over the whole projection (OLMo 2) goes in as one run of heads (norm_groups), and merge_qkv
// packs two such rotations as Q's run then K's.
#include "passes/fuse_qk_norm.h"

#include "passes/merge_qkv.h"
#include "passes/pattern.h"
#include "pass_test_util.h"
#include "test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

constexpr int64_t B = 2, S = 5, H = 3, D = 8, E = H * D;

Value* ints(GraphBuilder& b, const std::string& name, std::vector<int64_t> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return b.initializer(name, int64s(std::move(v), {n}));
}

struct Path {
  bool transpose = true;       // the norm after the Transpose (Gemma 3), else before it (Qwen3)
  bool layer_norm = false;     // LayerNormalization with a bias (Persimmon) instead of RMS
  bool scaled = false;         // Mul(x, 0.125) instead of a norm (ESM's query)
  bool norm_read_too = false;  // the norm's output is also a graph output
  int64_t axis = -1;
  bool scale_input = false;  // the norm's scale is a graph input
  std::vector<int64_t> scale_dims = {D};
};

/// p [B, S, E] -> Reshape [B, S, H, D] -> [Transpose(0, 2, 1, 3)] -> norm (or scale) -> Rotary
/// (tables [1, 1, S, D] after the Transpose, [1, S, 1, D] before) -> [Transpose after, when the
/// norm came first] -> output [B, H, S, D].
std::unique_ptr<Graph> query_path(const Path& o) {
  GraphBuilder b(17);
  Value* p = b.input("p", DType::Float32, {B, S, E});
  Value* v = b.node("Reshape", {p, ints(b, "heads", {B, S, H, D})}, {}, "view");
  const std::vector<NamedAttribute> perm = {attr("perm", std::vector<int64_t>{0, 2, 1, 3})};
  if (o.transpose) v = b.node("Transpose", {v}, perm, "transpose");
  std::vector<Value*> extra;
  if (o.scaled) {
    v = b.node("Mul", {v, b.initializer("c", Tensor::scalar_float(0.125f))}, {}, "scale");
  } else {
    Value* gamma = o.scale_input ? b.input("gamma", DType::Float32, shape_of(o.scale_dims))
                                 : b.initializer("gamma", uniform_floats(o.scale_dims, 3));
    std::vector<NamedAttribute> at = {attr("axis", o.axis), attr("epsilon", 1e-6f)};
    if (o.layer_norm)
      v = b.node("LayerNormalization", {v, gamma, b.initializer("beta", uniform_floats({D}, 4))}, at, "q_norm");
    else
      v = b.node_n("SimplifiedLayerNorm", {v, gamma}, 1, at, "q_norm", "ai.fusec")[0];
    if (o.norm_read_too) extra.push_back(v);
  }
  const std::vector<int64_t> td = o.transpose ? std::vector<int64_t>{1, 1, S, D} : std::vector<int64_t>{1, S, 1, D};
  Value* cos = b.initializer("cos", uniform_floats(td, 1));
  Value* sin = b.initializer("sin", uniform_floats(td, 2));
  v = b.node_n("Rotary", {v, cos, sin}, 1, {}, "rope", "ai.fusec")[0];
  if (!o.transpose) v = b.node("Transpose", {v}, perm, "transpose");
  b.output(v);
  for (Value* e : extra) b.output(e);
  return b.build();
}

Outcome run_pass(std::unique_ptr<Graph> g) { return run_one_pass<FuseQkNormPass>(std::move(g)); }

/// The one Rotary of `g`, which must now read the projection p per head of D.
const Node* rotation_on_the_projection(const Graph& g) {
  const Node* rot = find_op(g, "Rotary");
  EXPECT_TRUE(rot);
  if (!rot) return nullptr;
  EXPECT_EQ(rot->input(0)->name, "p");
  EXPECT_EQ(rot->attr_int("head_size", 0), D);
  return rot;
}

}  // namespace

TEST(FuseQkNorm, TheNormGoesIntoTheRotationAndTheHeadSplitMovesBehind) {
  for (bool transpose : {true, false}) {
    SCOPED_TRACE(transpose ? "norm after the Transpose (Gemma 3)" : "norm before it (Qwen3)");
    Path o;
    o.transpose = transpose;
    Outcome r = run_pass(query_path(o));
    EXPECT_TRUE(r.changed);
    EXPECT_EQ(count(*r.optimized, "SimplifiedLayerNorm", "ai.fusec"), 0);
    const Node* rot = rotation_on_the_projection(*r.optimized);
    ASSERT_TRUE(rot);
    EXPECT_EQ(rot->attr_int("norm", 0), 1);
    EXPECT_FLOAT_EQ(rot->attr_float("epsilon", 0), 1e-6f);
    ASSERT_EQ(rot->inputs.size(), 4u);
    EXPECT_EQ(rot->input(3)->name, "gamma");
    EXPECT_EQ(rot->fused_from, (std::vector<std::string>{"q_norm", "rope"}));
    // What follows the rotation is the head split, then the Transpose: the form fuse_attention takes.
    const Node* reshape = sole_consumer(rot->outputs[0]);
    ASSERT_TRUE(reshape);
    EXPECT_EQ(reshape->op_type, "Reshape");
    const Node* tr = sole_consumer(reshape->outputs[0]);
    ASSERT_TRUE(tr);
    EXPECT_EQ(tr->op_type, "Transpose");
    expect_same_numbers(*r.original, *r.optimized, 7);
  }
}

TEST(FuseQkNorm, LayerNormWithABiasAndAScaleWithLeadingOnes) {
  {
    Path o;
    o.layer_norm = true;
    Outcome r = run_pass(query_path(o));
    const Node* rot = rotation_on_the_projection(*r.optimized);
    ASSERT_TRUE(rot);
    EXPECT_EQ(rot->attr_int("norm", 0), 2);
    ASSERT_EQ(rot->inputs.size(), 5u);
    EXPECT_EQ(rot->input(4)->name, "beta");
    EXPECT_EQ(count(*r.optimized, "LayerNormalization"), 0);
    expect_same_numbers(*r.original, *r.optimized, 8);
  }
  {
    // RMSNorm's scale as [1, 1, 1, D]: one row of D, taken as [D].
    Path o;
    o.scale_dims = {1, 1, 1, D};
    Outcome r = run_pass(query_path(o));
    const Node* rot = rotation_on_the_projection(*r.optimized);
    ASSERT_TRUE(rot);
    ASSERT_EQ(rot->inputs.size(), 4u);
    EXPECT_EQ(constant_of(rot->input(3))->dims(), std::vector<int64_t>{D});
    expect_same_numbers(*r.original, *r.optimized, 10);
  }
}

TEST(FuseQkNorm, AScalarOnTheQueryMovesBehindTheRotation) {
  Path o;
  o.scaled = true;
  Outcome r = run_pass(query_path(o));
  const Node* rot = rotation_on_the_projection(*r.optimized);
  ASSERT_TRUE(rot);
  EXPECT_EQ(rot->attr_int("norm", 0), 0);
  EXPECT_EQ(rot->inputs.size(), 3u);
  // Rotary -> Reshape -> Transpose -> Mul: fuse_attention folds the Mul into its scale.
  const Node* n = rot;
  for (const char* op : {"Reshape", "Transpose", "Mul"}) {
    n = sole_consumer(n->outputs[0]);
    ASSERT_TRUE(n) << op;
    EXPECT_EQ(n->op_type, op);
  }
  expect_same_numbers(*r.original, *r.optimized, 9);
}

TEST(FuseQkNorm, NormsThatAreNotPerHeadOrReadElsewhereStay) {
  {
    Path o;
    o.norm_read_too = true;
    expect_near_miss(run_pass(query_path(o)), "fuse_qk_norm", "is read outside the rotation");
  }
  {
    Path o;
    o.axis = -2;
    o.scale_dims = {S, D};
    expect_near_miss(run_pass(query_path(o)), "fuse_qk_norm", "normalizes more than the last axis");
  }
  {
    Path o;
    o.scale_input = true;
    expect_near_miss(run_pass(query_path(o)), "fuse_qk_norm", "scale is not a constant row");
  }
  {
    // A rotation with nothing in front of it to take: silent, unchanged.
    GraphBuilder b(17);
    Value* x = b.input("x", DType::Float32, {B, H, S, D});
    Value* cos = b.initializer("cos", uniform_floats({1, 1, S, D}, 1));
    Value* sin = b.initializer("sin", uniform_floats({1, 1, S, D}, 2));
    b.output(b.node_n("Rotary", {x, cos, sin}, 1, {}, "rope", "ai.fusec")[0]);
    Outcome r = run_pass(b.build());
    EXPECT_FALSE(r.changed);
    EXPECT_TRUE(r.ctx.near_misses.empty());
    expect_unchanged(*r.original, *r.optimized);
  }
}

TEST(FuseQkNorm, MergeQkvPacksTwoNormalizedRotationsWithARowPerHead) {
  // Qwen3's layer after fuse_qk_norm: bias-free projections, Q (4 heads) and K (2) each rotated
  // per head with its own norm, one 3-D attention. merge_qkv's one rotation of the packed rows
  // normalizes Q's heads with Q's row and K's with K's: [6, D].
  const int64_t hq = 4, hkv = 2, hidden = 16;
  for (bool k_unnormalized : {false, true}) {
    SCOPED_TRACE(k_unnormalized ? "only Q normalized" : "both normalized");
    GraphBuilder b(17);
    Value* x = b.input("x", DType::Float32, {B, S, hidden});
    Value* cos = b.initializer("cos", uniform_floats({1, S, 1, D}, 1));
    Value* sin = b.initializer("sin", uniform_floats({1, S, 1, D}, 2));
    std::vector<Value*> qkv;
    unsigned seed = 10;
    for (const std::string n : {"q", "k", "v"}) {
      const int64_t width = (n == "q" ? hq : hkv) * D;
      Value* y = b.node("MatMul", {x, b.initializer("w" + n, uniform_floats({hidden, width}, seed++))}, {}, n);
      if (n != "v") {
        std::vector<Value*> ins = {y, cos, sin};
        std::vector<NamedAttribute> at = {attr("head_size", D)};
        if (n == "q" || !k_unnormalized) {
          ins.push_back(b.initializer(n + "_norm", uniform_floats({D}, seed++)));
          at.push_back(attr("norm", int64_t{1}));
          at.push_back(attr("epsilon", 1e-6f));
        }
        y = b.node_n("Rotary", ins, 1, at, "rope_" + n, "ai.fusec")[0];
      }
      qkv.push_back(y);
    }
    b.output(
        b.node_n("Attention", qkv, 1, {attr("q_num_heads", hq), attr("kv_num_heads", hkv)}, "attn", "ai.fusec")[0]);
    Outcome o = run_one_pass<MergeQkvPass>(b.build());
    if (k_unnormalized) {
      expect_near_miss(o, "merge_qkv", "normalize their heads differently");
      continue;
    }
    const Node* attn = node_named(*o.optimized, "attn");
    ASSERT_TRUE(attn);
    const Node* rot = attn->input(0)->producer;
    ASSERT_TRUE(rot && rot->op_type == "Rotary");
    EXPECT_EQ(rot->attr_int("rotated", 0), (hq + hkv) * D);
    EXPECT_EQ(rot->attr_int("norm", 0), 1);
    ASSERT_EQ(rot->inputs.size(), 4u);
    const Tensor* rows = constant_of(rot->input(3));
    ASSERT_TRUE(rows);
    EXPECT_EQ(rows->dims(), (std::vector<int64_t>{hq + hkv, D}));
    const Tensor *qn = constant_of(node_named(*o.original, "rope_q")->input(3)),
                 *kn = constant_of(node_named(*o.original, "rope_k")->input(3));
    for (int64_t h = 0; h < hq + hkv; ++h)
      for (int64_t j = 0; j < D; ++j)
        EXPECT_EQ(rows->data<float>()[h * D + j], (h < hq ? qn : kn)->data<float>()[j]) << h << " " << j;
    expect_same_numbers(*o.original, *o.optimized, 11);
  }
}

namespace {

/// OLMo 2's Q and K after fuse_rotary: each projection [B, S, heads·D] normalized whole
/// (SimplifiedLayerNorm, or LayerNormalization with a bias) and rotated per head of D.
Value* normed_projection(GraphBuilder& b, Value* x, const std::string& n, int64_t heads, int64_t hidden,
                         bool layer_norm, Value* cos, Value* sin, unsigned seed) {
  const int64_t width = heads * D;
  Value* y = b.node("MatMul", {x, b.initializer("w" + n, uniform_floats({hidden, width}, seed))}, {}, n);
  Value* gamma = b.initializer(n + "_gamma", uniform_floats({width}, seed + 1));
  const std::vector<NamedAttribute> at = {attr("axis", int64_t{-1}), attr("epsilon", 1e-6f)};
  if (layer_norm)
    y = b.node("LayerNormalization", {y, gamma, b.initializer(n + "_beta", uniform_floats({width}, seed + 2))}, at,
               n + "_norm");
  else
    y = b.node_n("SimplifiedLayerNorm", {y, gamma}, 1, at, n + "_norm", "ai.fusec")[0];
  return b.node_n("Rotary", {y, cos, sin}, 1, {attr("head_size", D)}, "rope_" + n, "ai.fusec")[0];
}

}  // namespace

TEST(FuseQkNorm, AWholeProjectionNormNormalizesTheRowsHeadsAsOneRun) {
  // OLMo 2 normalizes Q's [H·D] before the head split: the Rotary takes it with norm_groups [H]
  // and the scale as [H, D] rows; the numbers stay the unfused graph's.
  for (bool layer_norm : {false, true}) {
    SCOPED_TRACE(layer_norm ? "LayerNormalization with a bias" : "RMS");
    GraphBuilder b(17);
    Value* x = b.input("x", DType::Float32, {B, S, 16});
    Value* cos = b.initializer("cos", uniform_floats({1, S, 1, D}, 1));
    Value* sin = b.initializer("sin", uniform_floats({1, S, 1, D}, 2));
    b.output(normed_projection(b, x, "q", H, 16, layer_norm, cos, sin, 20));
    Outcome r = run_pass(b.build());
    EXPECT_TRUE(r.changed);
    const Node* rot = find_op(*r.optimized, "Rotary");
    ASSERT_TRUE(rot);
    ASSERT_TRUE(rot->input(0)->producer);
    EXPECT_EQ(rot->input(0)->producer->op_type, "MatMul");
    EXPECT_EQ(rot->attr_int("norm", 0), layer_norm ? 2 : 1);
    EXPECT_EQ(rot->attr_ints("norm_groups"), std::vector<int64_t>{H});
    ASSERT_EQ(rot->inputs.size(), layer_norm ? 5u : 4u);
    for (size_t i = 3; i < rot->inputs.size(); ++i)
      EXPECT_EQ(constant_of(rot->input(i))->dims(), (std::vector<int64_t>{H, D}));
    EXPECT_EQ(count(*r.optimized, "SimplifiedLayerNorm", "ai.fusec") + count(*r.optimized, "LayerNormalization"), 0);
    expect_same_numbers(*r.original, *r.optimized, 12);
  }
}

TEST(FuseQkNorm, MergeQkvPacksWholeProjectionNormsAsTwoRuns) {
  // Q (4 heads) and K (2) each normalized whole: the packed rotation normalizes Q's heads as one
  // run and K's as another (norm_groups [4, 2]), with Q's rows of scale, then K's.
  const int64_t hq = 4, hkv = 2, hidden = 16;
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {B, S, hidden});
  Value* cos = b.initializer("cos", uniform_floats({1, S, 1, D}, 1));
  Value* sin = b.initializer("sin", uniform_floats({1, S, 1, D}, 2));
  Value* q = normed_projection(b, x, "q", hq, hidden, false, cos, sin, 30);
  Value* k = normed_projection(b, x, "k", hkv, hidden, false, cos, sin, 40);
  Value* v = b.node("MatMul", {x, b.initializer("wv", uniform_floats({hidden, hkv * D}, 50))}, {}, "v");
  b.output(
      b.node_n("Attention", {q, k, v}, 1, {attr("q_num_heads", hq), attr("kv_num_heads", hkv)}, "attn", "ai.fusec")[0]);
  Outcome n = run_one_pass<FuseQkNormPass>(b.build());
  ASSERT_TRUE(n.changed);
  Outcome o = run_one_pass<MergeQkvPass>(n.optimized->clone());
  const Node* attn = node_named(*o.optimized, "attn");
  ASSERT_TRUE(attn);
  const Node* rot = attn->input(0)->producer;
  ASSERT_TRUE(rot && rot->op_type == "Rotary");
  EXPECT_EQ(rot->attr_int("rotated", 0), (hq + hkv) * D);
  EXPECT_EQ(rot->attr_ints("norm_groups"), (std::vector<int64_t>{hq, hkv}));
  const Tensor* rows = constant_of(rot->input(3));
  ASSERT_TRUE(rows);
  EXPECT_EQ(rows->dims(), (std::vector<int64_t>{hq + hkv, D}));
  const Tensor *qg = constant_of(node_named(*n.original, "q_norm")->input(1)),
               *kg = constant_of(node_named(*n.original, "k_norm")->input(1));
  for (int64_t i = 0; i < (hq + hkv) * D; ++i)
    EXPECT_EQ(rows->data<float>()[i], i < hq * D ? qg->data<float>()[i] : kg->data<float>()[i - hq * D]) << i;
  expect_same_numbers(*n.original, *o.optimized, 13);
}
