// Attention over [B, G, H, S, D] tensors (MaxViT's block and grid attention, written as einsums over
// "B G H I D"): the whole pipeline makes it one Attention over [B·G, S, H·D] with the same
// numbers, whatever the scale's side, the bias's rank or the batch's openness; a core whose tensors
// differ from one [B, G] pair to another keeps its ops.
#include <random>

#include "passes/attention_batch.h"
#include "passes/pattern.h"
#include "passes/pipeline.h"
#include "passes/verify.h"
#include "pass_test_util.h"
#include "test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

constexpr int64_t kB = 2, kG = 3, kP = 5, kH = 2, kD = 4, kC = kH * kD;

Tensor seeded(std::vector<int64_t> dims, uint64_t seed, float scale = 0.5f) {
  Tensor t(DType::Float32, dims);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(rng);
  return t;
}

struct Spec {
  bool scale_on_k = true;                       // torchvision scales K; else Q
  std::vector<int64_t> bias = {1, kH, kP, kP};  // the relative-position bias's dims
  bool open_batch = false;                      // B a named dim
};

/// torchvision's RelativePositionalMultiHeadAttention on x [B, G, P, C]: the packed projection,
/// chunk, head split, the two einsums with the bias and the Softmax between, the head merge and
/// the output projection.
std::unique_ptr<Graph> maxvit_attention(const Spec& s) {
  GraphBuilder b(17);
  const Dim batch = s.open_batch ? Dim::sym("batch") : Dim(kB);
  Value* x = b.input("x", DType::Float32, Shape{batch, kG, kP, kC});
  Value* qkv = b.node("MatMul", {x, b.initializer("w_qkv", seeded({kC, 3 * kC}, 1))}, {}, "to_qkv");
  qkv = b.node("Add", {qkv, b.initializer("b_qkv", seeded({3 * kC}, 2))}, {}, "to_qkv_bias");
  auto parts = b.node_n("Split", {qkv, b.initializer("split", int64s({kC, kC, kC}, {3}))}, 3,
                        {attr("axis", int64_t{-1})}, "chunk");
  const int64_t lead = s.open_batch ? -1 : kB;
  Value* heads_shape = b.initializer("heads_shape", int64s({lead, kG, kP, kH, kD}, {5}));
  std::vector<Value*> qkv5;
  for (int i = 0; i < 3; ++i) {
    const std::string n = std::string(1, "qkv"[i]);
    Value* r = b.node("Reshape", {parts[i], heads_shape}, {}, n + "_heads");
    qkv5.push_back(b.node("Transpose", {r}, {attr("perm", std::vector<int64_t>{0, 1, 3, 2, 4})}, n + "_perm"));
  }
  Value* scale = b.initializer("scale", floats({0.5f}, {}));
  Value*& scaled = qkv5[s.scale_on_k ? 1 : 0];
  scaled = b.node("Mul", {scaled, scale}, {}, "scale_mul");
  Value* dot = b.node("Einsum", {qkv5[0], qkv5[1]}, {attr("equation", std::string("bghid,bghjd->bghij"))}, "einsum_qk");
  dot = b.node("Add", {dot, b.initializer("rel_bias", seeded(s.bias, 3, 1.0f))}, {}, "bias_add");
  Value* p = b.node("Softmax", {dot}, {attr("axis", int64_t{-1})}, "softmax");
  Value* o = b.node("Einsum", {p, qkv5[2]}, {attr("equation", std::string("bghij,bghjd->bghid"))}, "einsum_pv");
  o = b.node("Transpose", {o}, {attr("perm", std::vector<int64_t>{0, 1, 3, 2, 4})}, "o_perm");
  o = b.node("Reshape", {o, b.initializer("merge_shape", int64s({lead, kG, kP, kC}, {4}))}, {}, "o_merge");
  o = b.node("MatMul", {o, b.initializer("w_o", seeded({kC, kC}, 4))}, {}, "merge");
  b.output(b.node("Add", {o, b.initializer("b_o", seeded({kC}, 5))}, {}, "merge_bias"));
  return b.build();
}

void expect_one_attention(const PipelineOutcome& r) {
  for (const auto& m : r.opt.near_misses) ADD_FAILURE() << "near miss: " << m.what << " | " << m.reason;
  EXPECT_EQ(count(*r.optimized, "Attention", "ai.fusec"), 1);
  // merge_qkv packs the chunked projection once the chunk splits a 3-D tensor: no Split copy left.
  for (const char* gone : {"Einsum", "Softmax", "Transpose", "Split"}) EXPECT_EQ(count(*r.optimized, gone), 0) << gone;
  for (const auto& n : r.optimized->nodes())
    if (n->op_type == "Attention") {
      EXPECT_EQ(n->attr_int("q_num_heads", 0), kH);  // the 3-D form: Q, K, V read as [B·G, P, H·D]
      ASSERT_EQ(n->inputs.size(), 4u);               // packed QKV, "", "", the bias as the mask
      EXPECT_EQ(n->inputs[1], nullptr);
    }
  Graph& a = *r.original;
  Graph& b = *r.optimized;
  if (a.inputs[0]->type.shape && !(*a.inputs[0]->type.shape)[0].is_static()) {
    bind_open_dims(a);
    bind_open_dims(b);
    infer_shapes(a);
    infer_shapes(b);
  }
  expect_same_numbers(a, b, 17);
}

}  // namespace

TEST(AttentionBatch, MaxVitAttentionBecomesOneAttentionOverTheMergedBatch) {
  PipelineOutcome r = run_full_pipeline(maxvit_attention({}));
  expect_one_attention(r);
  bool said = false;
  for (const auto& w : r.opt.rewrites) said |= w.what.find("batch and group dims merged") != std::string::npos;
  EXPECT_TRUE(said);
}

TEST(AttentionBatch, ScaleOnQRankFiveBiasAndAnOpenBatch) {
  Spec on_q;
  on_q.scale_on_k = false;
  {
    SCOPED_TRACE("scale on Q");
    expect_one_attention(run_full_pipeline(maxvit_attention(on_q)));
  }
  Spec rank5;
  rank5.bias = {1, 1, kH, kP, kP};
  {
    SCOPED_TRACE("rank-5 bias");
    expect_one_attention(run_full_pipeline(maxvit_attention(rank5)));
  }
  Spec open;
  open.open_batch = true;
  SCOPED_TRACE("open batch");
  expect_one_attention(run_full_pipeline(maxvit_attention(open)));
}

TEST(AttentionBatch, ABiasThatDiffersFromGroupToGroupKeepsTheCore) {
  Spec s;
  s.bias = {1, kG, kH, kP, kP};
  PipelineOutcome r = run_full_pipeline(maxvit_attention(s));
  EXPECT_EQ(count(*r.optimized, "Attention", "ai.fusec"), 0);
  EXPECT_EQ(count(*r.optimized, "Softmax"), 1);
  expect_same_numbers(*r.original, *r.optimized, 18);
  // --explain says why, naming the Add of the bias.
  const NearMiss* m = find_near_miss(r.opt.near_misses, "fuse_attention", "over [B, G, H, S, D] scores");
  ASSERT_NE(m, nullptr);
  EXPECT_NE(m->reason.find("Add 'bias_add'"), std::string::npos) << m->reason;
}
