// fuse_attention's mask simplification (passes/attention_mask.h): a constant mask that masks
// nothing goes, one that repeats a row for every query is stored once; anything else stays. Each
// positive case checks the numbers on the CPU reference are unchanged.
#include <cstring>

#include "passes/attention_mask.h"
#include "passes/fuse_attention.h"
#include "passes/verify.h"
#include "pass_test_util.h"
#include "test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

constexpr int64_t B = 2, H = 3, S = 5, T = 7, D = 4;

/// Q [B,H,S,D], K and V [B,H,T,D] inputs -> one Attention with `mask` as input 3 (an initializer),
/// or a graph input when `mask_is_input`.
std::unique_ptr<Graph> attention_with(Tensor mask, bool standard = false, bool mask_is_input = false) {
  GraphBuilder b(standard ? 23 : 17);
  if (!standard) b.graph().opsets["ai.fusec"] = 1;
  Value* q = b.input("q", DType::Float32, {B, H, S, D});
  Value* k = b.input("k", DType::Float32, {B, H, T, D});
  Value* v = b.input("v", DType::Float32, {B, H, T, D});
  std::vector<Dim> md(mask.dims().begin(), mask.dims().end());
  Value* m = mask_is_input ? b.input("mask", mask.dtype(), md) : b.initializer("mask", std::move(mask));
  b.output(b.node_n("Attention", {q, k, v, m}, 1, {}, "attn", standard ? "" : "ai.fusec")[0]);
  return b.build();
}

Outcome simplify(std::unique_ptr<Graph> g) { return run_one_pass<FuseAttentionPass>(std::move(g)); }

void expect_same_numbers(const Outcome& o) {
  fusec::test::expect_same_numbers(*o.original, *o.optimized, 7, {1e-6, 1e-7});
}

Tensor bools(std::vector<int64_t> dims, bool value) {
  Tensor t(DType::Bool, std::move(dims));
  std::memset(t.raw(), value ? 1 : 0, t.nbytes());
  return t;
}

/// [B, 1, S, T]: per batch one row of 0 / -1e4 values, repeated for every query row.
Tensor repeated_rows(float first_row_bias) {
  Tensor t(DType::Float32, {B, 1, S, T});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < S; ++i)
      for (int64_t j = 0; j < T; ++j) t.data<float>()[(b * S + i) * T + j] = j < T - 1 - b ? first_row_bias : -1e4f;
  return t;
}

}  // namespace

TEST(AttentionMask, ZeroAdditiveMaskIsDropped) {
  auto o = simplify(attention_with(Tensor(DType::Float32, {B, 1, S, T})));
  ASSERT_TRUE(o.changed);
  const Node* n = find_op(*o.optimized, "Attention");
  EXPECT_EQ(n->input(3), nullptr);
  EXPECT_EQ(n->inputs.size(), 3u) << "a trailing left-out input is not kept";
  EXPECT_EQ(o.optimized->find_value("mask"), nullptr) << "the unused initializer goes";
  ASSERT_EQ(o.ctx.rewrites.size(), 1u);
  EXPECT_EQ(o.ctx.rewrites[0].pass, "fuse_attention");
  EXPECT_NE(o.ctx.rewrites[0].what.find("masks nothing"), std::string::npos) << o.ctx.rewrites[0].what;
  expect_same_numbers(o);
}

TEST(AttentionMask, AllTrueBoolMaskIsDroppedFromTheStandardOp) {
  auto o = simplify(attention_with(bools({S, T}, true), /*standard=*/true));
  ASSERT_TRUE(o.changed);
  EXPECT_EQ(find_op(*o.optimized, "Attention")->input(3), nullptr);
  expect_same_numbers(o);
}

TEST(AttentionMask, RepeatedRowsAreStoredOnce) {
  auto o = simplify(attention_with(repeated_rows(0.0f)));
  ASSERT_TRUE(o.changed);
  const Value* m = find_op(*o.optimized, "Attention")->input(3);
  ASSERT_NE(m, nullptr);
  ASSERT_TRUE(m->is_initializer());
  EXPECT_EQ(m->initializer->dims(), (std::vector<int64_t>{B, 1, 1, T}));
  EXPECT_FLOAT_EQ(m->initializer->data<float>()[T - 1], -1e4f);      // batch 0's last key is masked
  EXPECT_FLOAT_EQ(m->initializer->data<float>()[T + T - 2], -1e4f);  // batch 1's last two are
  expect_same_numbers(o);
}

TEST(AttentionMask, OtherMasksStay) {
  // Rows differ (a causal-like band), a mask computed at run time, one that adds a constant to
  // every score (not 0: it could only be dropped because softmax cancels it, which fusec leaves be),
  // and a bool mask with one false.
  Tensor band(DType::Float32, {S, T});
  for (int64_t i = 0; i < S; ++i)
    for (int64_t j = 0; j < T; ++j) band.data<float>()[i * T + j] = j > i + 2 ? -1e4f : 0.0f;
  Tensor one_false = bools({B, 1, 1, T}, true);
  static_cast<unsigned char*>(one_false.raw())[3] = 0;
  std::vector<std::unique_ptr<Graph>> graphs;
  graphs.push_back(attention_with(band));
  graphs.push_back(attention_with(repeated_rows(0.0f), false, /*mask_is_input=*/true));
  Tensor shift(DType::Float32, {B, 1, 1, T});
  for (int64_t i = 0; i < shift.numel(); ++i) shift.data<float>()[i] = 0.5f;
  graphs.push_back(attention_with(shift));
  graphs.push_back(attention_with(one_false));
  for (auto& g : graphs) {
    auto o = simplify(std::move(g));
    EXPECT_FALSE(o.changed);
    EXPECT_NE(find_op(*o.optimized, "Attention")->input(3), nullptr);
  }
}
