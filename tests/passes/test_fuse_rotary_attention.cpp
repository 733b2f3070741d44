// fuse_rotary_attention: a Rotary of packed QKV's Q and K heads goes into the packed ai.fusec
// Attention reading it, with the same numbers; guarded cases are left alone with a near-miss; and
// in the whole pipeline a Llama-style block ends with no Rotary node.
#include "passes/fuse_rotary_attention.h"

#include "pass_test_util.h"
#include "test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

constexpr int64_t B = 2, S = 6, Hq = 4, Hkv = 2, D = 8, W = (Hq + 2 * Hkv) * D;

struct Block {
  std::vector<int64_t> table = {1, S, 1, D};
  int64_t rotated = (Hq + Hkv) * D;
  int64_t head_size = D;
  bool rotated_read_elsewhere = false;
};

/// Rotary(qkv, cos, sin) -> Attention(., "", "", mask), GQA, causal.
std::unique_ptr<Graph> block(const Block& o = {}) {
  GraphBuilder b(17);
  Value* qkv = b.input("qkv", DType::Float32, {B, S, W});
  Value* mask = b.input("mask", DType::Float32, {B, 1, 1, S});
  Value* cs = b.initializer("cos", uniform_floats(o.table, 1));
  Value* sn = b.initializer("sin", uniform_floats(o.table, 2));
  Value* r = b.node_n("Rotary", {qkv, cs, sn}, 1, {attr("head_size", o.head_size), attr("rotated", o.rotated)}, "rope",
                      "ai.fusec")[0];
  if (o.rotated_read_elsewhere) b.output(r);
  b.output(b.node_n("Attention", {r, nullptr, nullptr, mask}, 1,
                    {attr("q_num_heads", Hq), attr("kv_num_heads", Hkv), attr("is_causal", int64_t{1})}, "attn",
                    "ai.fusec")[0]);
  return b.build();
}

Outcome run_pass(std::unique_ptr<Graph> g) { return run_one_pass<FuseRotaryAttentionPass>(std::move(g)); }

}  // namespace

TEST(FuseRotaryAttention, RotationGoesIntoTheAttentionWithTheSameNumbers) {
  for (std::vector<int64_t> table :
       {std::vector<int64_t>{1, S, 1, D}, std::vector<int64_t>{B, S, 1, D}, std::vector<int64_t>{S, 1, D}}) {
    SCOPED_TRACE(dims_str(table));
    Block o;
    o.table = table;
    Outcome r = run_pass(block(o));
    EXPECT_TRUE(r.changed);
    EXPECT_EQ(count(*r.optimized, "Rotary", "ai.fusec"), 0);
    const Node* a = node_named(*r.optimized, "attn");
    ASSERT_TRUE(a);
    EXPECT_EQ(a->input(0)->name, "qkv");
    ASSERT_TRUE(a->input(4) && a->input(5));
    EXPECT_EQ(a->input(4)->name, "cos");
    EXPECT_EQ(a->input(5)->name, "sin");
    EXPECT_EQ(a->input(3)->name, "mask");
    EXPECT_EQ(a->attr_int("is_causal", 0), 1);
    EXPECT_EQ(r.ctx.rewrites[0].replaced, (std::vector<std::string>{"rope", "attn"}));
    expect_same_numbers(*r.original, *r.optimized, 5);
  }
}

TEST(FuseRotaryAttention, NearMisses) {
  {
    Block o;
    o.rotated_read_elsewhere = true;
    expect_near_miss(run_pass(block(o)), "fuse_rotary_attention", "the rotated QKV 'rope_out");
  }
  {
    Block o;
    o.rotated = Hq * D;  // only Q's heads
    expect_near_miss(run_pass(block(o)), "fuse_rotary_attention", "does not cover exactly Q's and K's heads");
  }
  {
    Block o;
    o.table = {1, S, Hq + Hkv, D};  // a rotation per head
    expect_near_miss(run_pass(block(o)), "fuse_rotary_attention", "differs from head to head");
  }
  {
    Block o;
    o.head_size = D / 2;  // rotated in halves of the attention's heads
    o.table = {1, S, 1, D / 2};
    o.rotated = (Hq + Hkv) * D;
    expect_near_miss(run_pass(block(o)), "fuse_rotary_attention", "head size is not the attention's 8");
  }
}

TEST(FuseRotaryAttention, PipelineLeavesNoRotaryInALlamaBlock) {
  // The default pipeline over the block: the rotation ends inside the attention.
  auto g = block();
  infer_shapes(*g);
  auto original = g->clone();
  PipelineOptions po;
  optimize_graph(*g, po);
  EXPECT_EQ(count_any_domain(*g, "Rotary"), 0);
  EXPECT_EQ(count(*g, "Attention", "ai.fusec"), 1);
  expect_same_numbers(*original, *g, 6);
}
