// compose_movement: chains of movement ops compose into at most a Slice and a Transpose, row
// permutations move across row-wise products when that saves copies, with the same numbers; what
// would not save a copy, or cannot be one Slice, is left alone.
#include "passes/compose_movement.h"

#include "pass_test_util.h"
#include "test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

Outcome run_pass(std::unique_ptr<Graph> g) { return run_one_pass<ComposeMovementPass>(std::move(g)); }

/// Seeded values in [-1, 1), 1/16 apart.
Tensor weights(std::vector<int64_t> dims, int seed) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(((i * 7 + seed * 13) % 32) - 16) / 16.0f;
  return floats(v, std::move(dims));
}

Value* ints(GraphBuilder& b, const std::string& name, std::vector<int64_t> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return b.initializer(name, int64s(std::move(v), {n}));
}

/// Copies the graph makes: Transposes, Gathers and Slices.
int copies(const Graph& g) { return count(g, "Transpose") + count(g, "Gather") + count(g, "Slice"); }

constexpr int64_t B = 2, S = 5, H = 3, D = 4, E = H * D;

/// torch's sequence-first MultiheadAttention head split as dynamo writes it: x [B,S,E] ->
/// Transpose(1,0,2) -> MatMul(W [E,3E]) + b -> Reshape [S,B,3,E] -> Unsqueeze(0) ->
/// Transpose(3,1,2,0,4) -> Squeeze(3) -> Gather(0, i) -> Reshape [S,B·H,D] -> Transpose(1,0,2) ->
/// Reshape [B,H,S,D], for i = 0, 1, 2: Q, K and V as graph outputs.
/// With `open`, the batch is a named dim and the targets write it as -1.
std::unique_ptr<Graph> sequence_first_head_split(bool open = false) {
  GraphBuilder b(18);
  const int64_t bt = open ? -1 : B;
  Value* x = b.input("x", DType::Float32, {open ? Dim::sym("N") : Dim(B), S, E});
  Value* t = b.node("Transpose", {x}, {attr("perm", std::vector<int64_t>{1, 0, 2})}, "seq_first");
  Value* w = b.initializer("w", weights({E, 3 * E}, 1));
  Value* bias = b.initializer("b", weights({3 * E}, 2));
  Value* lin = b.node("Add", {b.node("MatMul", {t, w}, {}, "proj"), bias}, {}, "proj_bias");
  Value* v = b.node("Reshape", {lin, ints(b, "s1", {S, bt, 3, E})}, {}, "split3");
  v = b.node("Unsqueeze", {v, ints(b, "ax0", {0})}, {}, "unsq");
  v = b.node("Transpose", {v}, {attr("perm", std::vector<int64_t>{3, 1, 2, 0, 4})}, "to_front");
  v = b.node("Squeeze", {v, ints(b, "ax3", {3})}, {}, "sq");
  for (int64_t i = 0; i < 3; ++i) {
    const std::string n = std::to_string(i);
    Value* idx = b.initializer("i" + n, int64s({i}, {}));
    Value* sel = b.node("Gather", {v, idx}, {attr("axis", int64_t{0})}, "select" + n);
    Value* r = b.node("Reshape", {sel, ints(b, "s2_" + n, {S, open ? -1 : B * H, D})}, {}, "heads" + n);
    Value* tr = b.node("Transpose", {r}, {attr("perm", std::vector<int64_t>{1, 0, 2})}, "batch_first" + n);
    b.output(b.node("Reshape", {tr, ints(b, "s3_" + n, {bt, H, S, D})}, {}, "bhsd" + n));
  }
  return b.build();
}

}  // namespace

TEST(ComposeMovement, SequenceFirstHeadSplitBecomesSlicesOfTheProjection) {
  Outcome o = run_pass(sequence_first_head_split());
  EXPECT_TRUE(o.changed);
  expect_same_numbers(*o.original, *o.optimized, 3);
  // Before: the Transpose before the product, Transpose(3,1,2,0,4), three Gathers and three
  // Transposes. After: each of Q, K, V is Slice -> Reshape [B,S,H,D] -> Transpose(0,2,1,3).
  EXPECT_EQ(copies(*o.original), 8);
  EXPECT_EQ(count(*o.optimized, "Slice"), 3);
  EXPECT_EQ(count(*o.optimized, "Gather"), 0);
  EXPECT_EQ(count(*o.optimized, "Transpose"), 3);
  const Node* mm = find_op(*o.optimized, "MatMul");
  ASSERT_TRUE(mm);
  EXPECT_EQ(mm->inputs[0]->name, "x");  // the product reads x: the permutation moved after it
  for (const auto& n : o.optimized->nodes())
    if (n->op_type == "Transpose") EXPECT_EQ(n->attr_ints("perm"), (std::vector<int64_t>{0, 2, 1, 3}));
  for (int i = 0; i < 3; ++i) {
    const Value* v = o.optimized->find_value("bhsd" + std::to_string(i) + "_out");
    ASSERT_TRUE(v);
    EXPECT_TRUE(v->is_graph_output);
  }
}

// The same with the batch left open: the batch is one atom of unknown size that merges with the
// heads (B·H) and never splits, and the new targets write it as 0 or -1.
TEST(ComposeMovement, SequenceFirstHeadSplitComposesWithAnOpenBatch) {
  Outcome o = run_pass(sequence_first_head_split(true));
  EXPECT_TRUE(o.changed);
  EXPECT_EQ(count(*o.optimized, "Slice"), 3);
  EXPECT_EQ(count(*o.optimized, "Gather"), 0);
  EXPECT_EQ(count(*o.optimized, "Transpose"), 3);
  EXPECT_EQ(find_op(*o.optimized, "MatMul")->inputs[0]->name, "x");
  const Value* q = o.optimized->find_value("bhsd0_out");
  ASSERT_TRUE(q && q->type.shape);
  EXPECT_EQ(shape_str(*q->type.shape), "Nx3x5x4");
  bind_open_dims(*o.original, 3);
  bind_open_dims(*o.optimized, 3);
  expect_same_numbers(*o.original, *o.optimized, 3);
}

TEST(ComposeMovement, RowPermutationAfterAGemmMovesBeforeIt) {
  // P·V [B,H,S,D] -> Transpose(2,0,1,3) -> Reshape [S·B,E] -> Gemm -> Reshape [S,B,E] ->
  // Transpose(1,0,2): after, Transpose(0,2,1,3) -> Reshape [B·S,E] -> Gemm -> Reshape [B,S,E].
  GraphBuilder b(18);
  Value* pv = b.input("pv", DType::Float32, {B, H, S, D});
  Value* v = b.node("Transpose", {pv}, {attr("perm", std::vector<int64_t>{2, 0, 1, 3})}, "merge_t");
  v = b.node("Reshape", {v, ints(b, "s1", {S * B, E})}, {}, "flat");
  Value* w = b.initializer("w", weights({E, E}, 4));
  Value* bias = b.initializer("b", weights({E}, 5));
  v = b.node("Gemm", {v, w, bias}, {attr("transB", int64_t{1})}, "out_proj");
  v = b.node("Reshape", {v, ints(b, "s2", {S, B, E})}, {}, "unflat");
  b.output(b.node("Transpose", {v}, {attr("perm", std::vector<int64_t>{1, 0, 2})}, "batch_first"));
  Outcome o = run_pass(b.build());
  EXPECT_TRUE(o.changed);
  expect_same_numbers(*o.original, *o.optimized, 6);
  ASSERT_EQ(count(*o.optimized, "Transpose"), 1);
  EXPECT_EQ(find_op(*o.optimized, "Transpose")->attr_ints("perm"), (std::vector<int64_t>{0, 2, 1, 3}));
  EXPECT_EQ(find_op(*o.optimized, "Transpose")->inputs[0]->name, "pv");
  const Value* y = o.optimized->find_value("batch_first_out");
  ASSERT_TRUE(y);
  EXPECT_TRUE(y->is_graph_output);
  EXPECT_EQ(y->producer->op_type, "Reshape");  // a free view of the Gemm
}

TEST(ComposeMovement, ChainsComposeIntoOneTransposeAndAGatherIntoASlice) {
  // x [4,6,10] -> Reshape [4,2,3,10] -> Gather(axis 1, 1) -> Transpose(2,0,1) -> Reshape [10,12]:
  // a Slice of x's dim 1 (the Gather fixes its leading digit) and one Transpose.
  GraphBuilder b(18);
  Value* x = b.input("x", DType::Float32, {4, 6, 10});
  Value* v = b.node("Reshape", {x, ints(b, "s1", {4, 2, 3, 10})}, {}, "r1");
  v = b.node("Gather", {v, b.initializer("one", int64s({1}, {}))}, {attr("axis", int64_t{1})}, "g");
  v = b.node("Transpose", {v}, {attr("perm", std::vector<int64_t>{2, 0, 1})}, "t1");
  v = b.node("Transpose", {v}, {attr("perm", std::vector<int64_t>{0, 2, 1})}, "t2");
  b.output(b.node("Reshape", {v, ints(b, "s2", {10, 12})}, {}, "r2"));
  Outcome o = run_pass(b.build());
  EXPECT_TRUE(o.changed);
  expect_same_numbers(*o.original, *o.optimized, 7, {0, 0});  // movement only: bit for bit
  EXPECT_EQ(count(*o.optimized, "Slice"), 1);
  EXPECT_EQ(count(*o.optimized, "Transpose"), 1);
  EXPECT_EQ(count(*o.optimized, "Gather"), 0);
  ASSERT_TRUE(o.optimized->find_value("r2_out"));
  EXPECT_EQ(o.optimized->find_value("r2_out")->producer->op_type, "Reshape");
}

TEST(ComposeMovement, WhatWouldNotSaveACopyIsLeftAlone) {
  {  // one Transpose: nothing to compose
    GraphBuilder b(18);
    Value* x = b.input("x", DType::Float32, {3, 4});
    b.output(b.node("Transpose", {x}, {attr("perm", std::vector<int64_t>{1, 0})}, "t"));
    Outcome o = run_pass(b.build());
    EXPECT_FALSE(o.changed);
    expect_unchanged(*o.original, *o.optimized);
  }
  {  // a Gather of a trailing digit ([4,6] as [4,2,3], index on the 3): no one Slice of x is it
    GraphBuilder b(18);
    Value* x = b.input("x", DType::Float32, {4, 6});
    Value* v = b.node("Reshape", {x, ints(b, "s", {4, 2, 3})}, {}, "r");
    v = b.node("Gather", {v, b.initializer("two", int64s({2}, {}))}, {attr("axis", int64_t{2})}, "g");
    b.output(b.node("Transpose", {v}, {attr("perm", std::vector<int64_t>{1, 0})}, "t"));
    Outcome o = run_pass(b.build());
    EXPECT_FALSE(o.changed);
    expect_unchanged(*o.original, *o.optimized);
  }
  {  // the product's output is also read by a Relu: the Transpose before it must stay
    GraphBuilder b(18);
    Value* x = b.input("x", DType::Float32, {B, S, E});
    Value* t = b.node("Transpose", {x}, {attr("perm", std::vector<int64_t>{1, 0, 2})}, "t");
    Value* y = b.node("MatMul", {t, b.initializer("w", weights({E, E}, 8))}, {}, "mm");
    b.output(b.node("Relu", {y}, {}, "relu"));
    Value* r = b.node("Reshape", {y, ints(b, "s", {S, B, H, D})}, {}, "r");
    b.output(b.node("Transpose", {r}, {attr("perm", std::vector<int64_t>{1, 2, 0, 3})}, "t2"));
    Outcome o = run_pass(b.build());
    EXPECT_FALSE(o.changed);
    expect_unchanged(*o.original, *o.optimized);
  }
}

namespace {

/// x [2,3,8,8] -> Conv (4x4, stride `stride`, `pads`) -> Reshape [2,5,tokens] -> Transpose(0,2,1):
/// ViT's patch embedding at a small size.
std::unique_ptr<Graph> patch_embedding(int64_t stride, std::vector<int64_t> pads, bool relu = false) {
  GraphBuilder b(18);
  Value* x = b.input("x", DType::Float32, {2, 3, 8, 8});
  Value* w = b.initializer("w", weights({5, 3, 4, 4}, 9));
  Value* bias = b.initializer("b", weights({5}, 10));
  Value* y = b.node("Conv", {x, w, bias},
                    {attr("kernel_shape", std::vector<int64_t>{4, 4}), attr("strides", std::vector<int64_t>{stride, stride}),
                     attr("pads", pads)},
                    "patchify");
  if (relu) y = b.node("Relu", {y}, {}, "relu");
  const int64_t side = (8 + pads[0] + pads[2] - 4) / stride + 1;
  Value* r = b.node("Reshape", {y, ints(b, "s", {2, 5, side * side})}, {}, "flatten");
  b.output(b.node("Transpose", {r}, {attr("perm", std::vector<int64_t>{0, 2, 1})}, "tokens"));
  return b.build();
}

}  // namespace

TEST(ComposeMovement, PatchEmbeddingIsAGemmOverPatches) {
  Outcome o = run_pass(patch_embedding(4, {0, 0, 0, 0}));
  EXPECT_TRUE(o.changed);
  expect_same_numbers(*o.original, *o.optimized, 11);
  EXPECT_EQ(count(*o.optimized, "Conv"), 0);
  EXPECT_EQ(count(*o.optimized, "Gemm"), 1);
  // One copy for the patches; the tokens are a free view of the product.
  ASSERT_EQ(count(*o.optimized, "Transpose"), 1);
  EXPECT_EQ(find_op(*o.optimized, "Transpose")->attr_ints("perm"), (std::vector<int64_t>{0, 2, 4, 1, 3, 5}));
  EXPECT_EQ(o.optimized->find_value("tokens_out")->producer->op_type, "Reshape");
}

TEST(ComposeMovement, ConvsThatAreNotPatchEmbeddingsAreLeftAlone) {
  for (int form = 0; form < 3; ++form) {
    // overlapping windows; padding; read by a Relu, not a chain of tokens
    Outcome o = run_pass(form == 0   ? patch_embedding(2, {0, 0, 0, 0})
                         : form == 1 ? patch_embedding(4, {2, 2, 2, 2})
                                     : patch_embedding(4, {0, 0, 0, 0}, true));
    EXPECT_FALSE(o.changed) << "form " << form;
    expect_unchanged(*o.original, *o.optimized);
  }
}
