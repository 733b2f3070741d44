// canonicalize: each exporter spelling becomes the one form, with the same numbers; what only
// looks like it is left alone.
#include "passes/canonicalize.h"

#include "pass_test_util.h"
#include "test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

Outcome run_pass(std::unique_ptr<Graph> g) { return run_one_pass<CanonicalizePass>(std::move(g)); }

void expect_rewritten_exactly(const Outcome& o) {
  EXPECT_TRUE(o.changed);
  expect_same_numbers(*o.original, *o.optimized, 3, {0, 0});  // bit for bit
}

void expect_left_alone(const Outcome& o) {
  EXPECT_FALSE(o.changed);
  expect_unchanged(*o.original, *o.optimized);
}

Value* shape_const(GraphBuilder& b, const std::string& name, std::vector<int64_t> dims) {
  const int64_t n = static_cast<int64_t>(dims.size());
  return b.initializer(name, int64s(std::move(dims), {n}));
}

/// dynamo's Kᵀ: Reshape [B,H,S,D] -> [B·H,S,D], Transpose(0,2,1), Reshape -> [B,H,D,S].
std::unique_ptr<Graph> dynamo_k_transpose(std::vector<int64_t> bhsd, std::vector<int64_t> mid,
                                          std::vector<int64_t> perm, std::vector<int64_t> out) {
  GraphBuilder b(20);
  Value* k = b.input("k", DType::Float32, Shape(bhsd.begin(), bhsd.end()));
  Value* k3 = b.node("Reshape", {k, shape_const(b, "s3", mid)}, {}, "to3d");
  Value* t = b.node("Transpose", {k3}, {attr("perm", perm)}, "swap");
  b.output(b.node("Reshape", {t, shape_const(b, "s4", out)}, {}, "to4d"));
  return b.build();
}

}  // namespace

TEST(Canonicalize, TransposeThroughAMergedViewIsOneTranspose) {
  // [2,3,5,4] -> [6,5,4] -> perm 0,2,1 -> [6,4,5] -> [2,3,4,5]: the last two dims of K swapped.
  Outcome o = run_pass(dynamo_k_transpose({2, 3, 5, 4}, {6, 5, 4}, {0, 2, 1}, {2, 3, 4, 5}));
  expect_rewritten_exactly(o);
  ASSERT_EQ(o.optimized->nodes().size(), 1u);
  const Node* t = find_op(*o.optimized, "Transpose");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->attr_ints("perm"), (std::vector<int64_t>{0, 1, 3, 2}));
  EXPECT_EQ(t->name, "to4d");
  EXPECT_EQ(t->fused_from, (std::vector<std::string>{"to3d", "swap", "to4d"}));
  EXPECT_EQ(t->inputs[0]->name, "k");
}

TEST(Canonicalize, TransposeOfGroupsKeepsUnitDimsAndMovesWholeRuns) {
  // Batch 1 (a unit dim joins the run after it), and a permutation that moves a merged run.
  Outcome a = run_pass(dynamo_k_transpose({1, 3, 5, 4}, {3, 5, 4}, {0, 2, 1}, {1, 3, 4, 5}));
  expect_rewritten_exactly(a);
  EXPECT_EQ(find_op(*a.optimized, "Transpose")->attr_ints("perm"), (std::vector<int64_t>{0, 1, 3, 2}));
  // [2,3,5,4] -> [2,15,4] -> perm 2,0,1 -> [4,2,15] -> [4,2,3,5]
  Outcome b = run_pass(dynamo_k_transpose({2, 3, 5, 4}, {2, 15, 4}, {2, 0, 1}, {4, 2, 3, 5}));
  expect_rewritten_exactly(b);
  EXPECT_EQ(find_op(*b.optimized, "Transpose")->attr_ints("perm"), (std::vector<int64_t>{3, 0, 1, 2}));
}

TEST(Canonicalize, TransposeThatSplitsARunIsLeftAlone) {
  // The outer Reshape does not restore the groups ([6,4,5] -> [3,2,4,5] regroups 6 as 3x2): not a
  // transpose of K, the elements land elsewhere.
  expect_left_alone(run_pass(dynamo_k_transpose({2, 3, 5, 4}, {6, 5, 4}, {0, 2, 1}, {3, 2, 4, 5})));
  // The first Reshape is not a merge of runs ([2,3,5,4] -> [10,3,4] mixes dims).
  expect_left_alone(run_pass(dynamo_k_transpose({2, 3, 5, 4}, {10, 3, 4}, {0, 2, 1}, {10, 4, 3})));
}

TEST(Canonicalize, DivideOneByYIsReciprocal) {
  GraphBuilder b(17);
  Value* y = b.input("y", DType::Float32, {2, 8});
  Value* one = b.initializer("one", floats({1.0f}, {}));
  b.output(b.node("Div", {one, y}, {}, "inv"));
  Outcome o = run_pass(b.build());
  expect_rewritten_exactly(o);
  const Node* r = find_op(*o.optimized, "Reciprocal");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->name, "inv");
  EXPECT_EQ(o.optimized->nodes().size(), 1u);
}

TEST(Canonicalize, DivideByYOfAnythingButOneIsLeftAlone) {
  for (int c = 0; c < 3; ++c) {
    SCOPED_TRACE(c);
    GraphBuilder b(17);
    Value* y = b.input("y", DType::Float32, {2, 8});
    if (c == 0) b.output(b.node("Div", {b.initializer("two", floats({2.0f}, {})), y}));  // 2 / y
    if (c == 1) b.output(b.node("Div", {y, b.initializer("one", floats({1.0f}, {}))}));  // y / 1
    if (c == 2)  // a 1 that broadcasts y up to a bigger shape
      b.output(b.node("Div", {b.initializer("ones", floats(std::vector<float>(24, 1.0f), {3, 1, 8})), y}));
    expect_left_alone(run_pass(b.build()));
  }
}

TEST(Canonicalize, GatherOfEveryElementInOrderIsAReshape) {
  GraphBuilder b(20);
  Value* x = b.input("x", DType::Float32, {2, 6});
  Value* flat = b.node("Reshape", {x, shape_const(b, "flat", {-1})}, {}, "flatten");
  std::vector<int64_t> iota(12);
  for (int64_t i = 0; i < 12; ++i) iota[i] = i;
  b.output(b.node("Gather", {flat, b.initializer("idx", int64s(iota, {2, 6, 1, 1}))}, {attr("axis", int64_t{0})},
                  "as_strided"));
  Outcome o = run_pass(b.build());
  expect_rewritten_exactly(o);
  EXPECT_EQ(count(*o.optimized, "Gather"), 0);
  EXPECT_EQ(count(*o.optimized, "Reshape"), 2);
  EXPECT_EQ(o.optimized->outputs[0]->type.shape, (Shape{2, 6, 1, 1}));
}

TEST(Canonicalize, GatherOfSomeElementsIsLeftAlone) {
  GraphBuilder b(20);
  Value* x = b.input("x", DType::Float32, {12});
  std::vector<int64_t> idx = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 10};  // one pair swapped
  b.output(b.node("Gather", {x, b.initializer("idx", int64s(idx, {12}))}, {attr("axis", int64_t{0})}));
  expect_left_alone(run_pass(b.build()));
}

TEST(Canonicalize, DivideOneByYOverAnOpenBatchIsReciprocal) {
  // y and the quotient share the batch's name: the 1 broadcasts nothing for any binding.
  GraphBuilder b(17);
  Value* y = b.input("y", DType::Float32, {Dim::sym("N"), 8});
  b.output(b.node("Div", {b.initializer("one", floats({1.0f}, {})), y}, {}, "inv"));
  Outcome o = run_pass(b.build());
  EXPECT_TRUE(o.changed);
  ASSERT_TRUE(find_op(*o.optimized, "Reciprocal"));
  bind_open_dims(*o.original);
  bind_open_dims(*o.optimized);
  expect_same_numbers(*o.original, *o.optimized, 3, {0, 0});
  // An unnamed open dim could be 1 where the quotient's is not: left alone.
  GraphBuilder c(17);
  Value* z = c.input("z", DType::Float32, {Dim(), 8});
  c.output(c.node("Div", {c.initializer("one", floats({1.0f}, {})), z}, {}, "inv"));
  expect_left_alone(run_pass(c.build()));
}

TEST(Canonicalize, TransposeThroughAMergedViewOverAnOpenBatchIsOneTranspose) {
  // dynamo's Kᵀ with the batch left open: [N, H, S, D] -> [-1, S, D] ([H·N, S, D]) -> Transpose ->
  // [-1, H, D, S] ([N, H, D, S]).
  GraphBuilder b(20);
  Value* k = b.input("k", DType::Float32, {Dim::sym("N"), 3, 5, 4});
  Value* k3 = b.node("Reshape", {k, shape_const(b, "s3", {-1, 5, 4})}, {}, "to3d");
  Value* t = b.node("Transpose", {k3}, {attr("perm", std::vector<int64_t>{0, 2, 1})}, "swap");
  b.output(b.node("Reshape", {t, shape_const(b, "s4", {-1, 3, 4, 5})}, {}, "to4d"));
  Outcome o = run_pass(b.build());
  EXPECT_TRUE(o.changed);
  const Node* tr = find_op(*o.optimized, "Transpose");
  ASSERT_TRUE(tr);
  EXPECT_EQ(tr->attr_ints("perm"), (std::vector<int64_t>{0, 1, 3, 2}));
  EXPECT_EQ(o.optimized->nodes().size(), 1u);
  bind_open_dims(*o.original);
  bind_open_dims(*o.optimized);
  expect_same_numbers(*o.original, *o.optimized, 3, {0, 0});
}

namespace {

/// Einsum(a [dims_a], b [dims_b], equation) as a graph's only node.
std::unique_ptr<Graph> einsum(const std::string& eq, std::vector<int64_t> dims_a, std::vector<int64_t> dims_b) {
  GraphBuilder b(17);
  Value* x = b.input("a", DType::Float32, Shape(dims_a.begin(), dims_a.end()));
  Value* y = b.input("b", DType::Float32, Shape(dims_b.begin(), dims_b.end()));
  b.output(b.node("Einsum", {x, y}, {attr("equation", eq)}, "einsum"));
  return b.build();
}

}  // namespace

TEST(Canonicalize, EinsumScoresAreMatMulWithBTransposed) {
  // MaxViT's Q·Kᵀ: "BGHID,BGHJD->BGHIJ" is MatMul(a, Transpose(b, 0,1,2,4,3)).
  Outcome o = run_pass(einsum("BGHID,BGHJD->BGHIJ", {2, 3, 2, 5, 4}, {2, 3, 2, 6, 4}));
  EXPECT_TRUE(o.changed);
  expect_same_numbers(*o.original, *o.optimized, 3, {0, 0});
  EXPECT_EQ(count(*o.optimized, "Einsum"), 0);
  const Node* mm = find_op(*o.optimized, "MatMul");
  ASSERT_TRUE(mm);
  EXPECT_EQ(mm->name, "einsum");
  EXPECT_EQ(mm->inputs[0]->name, "a");
  ASSERT_TRUE(mm->inputs[1]->producer);
  EXPECT_EQ(mm->inputs[1]->producer->attr_ints("perm"), (std::vector<int64_t>{0, 1, 2, 4, 3}));
  EXPECT_EQ(o.optimized->nodes().size(), 2u);
}

TEST(Canonicalize, EinsumProductsWithOutputTransposeAreMatMul) {
  // P·V needs no transpose; "bij,bjk->bki" needs one on the output, "ji,bjk->bik" one on a and
  // broadcasts nothing (a has no batch label: not a matrix product here, left alone).
  Outcome pv = run_pass(einsum("bhij,bhjd->bhid", {2, 3, 5, 6}, {2, 3, 6, 4}));
  EXPECT_TRUE(pv.changed);
  EXPECT_EQ(pv.optimized->nodes().size(), 1u);
  expect_same_numbers(*pv.original, *pv.optimized, 3, {0, 0});
  Outcome out_t = run_pass(einsum("bij,bjk->bki", {2, 5, 6}, {2, 6, 4}));
  EXPECT_TRUE(out_t.changed);
  EXPECT_EQ(count(*out_t.optimized, "Transpose"), 1);
  expect_same_numbers(*out_t.original, *out_t.optimized, 3, {0, 0});
}

TEST(Canonicalize, EinsumWithSeveralLabelsOfAKindMergesThem) {
  // MViT-V2's relative positions: rows b, y, t, w, batch h, contracted c, column k. Merged by
  // Reshapes around one batched MatMul; two row labels and two contracted ones too.
  Outcome mvit = run_pass(einsum("bythwc,hkc->bythwk", {2, 1, 3, 2, 4, 5}, {2, 6, 5}));
  EXPECT_TRUE(mvit.changed);
  EXPECT_EQ(count(*mvit.optimized, "Einsum"), 0);
  EXPECT_EQ(count(*mvit.optimized, "MatMul"), 1);
  EXPECT_EQ(count(*mvit.optimized, "Reshape"), 3);
  expect_same_numbers(*mvit.original, *mvit.optimized, 3, {0, 0});
  Outcome rows = run_pass(einsum("bijk,bkl->bijl", {2, 3, 5, 6}, {2, 6, 4}));
  EXPECT_TRUE(rows.changed);
  expect_same_numbers(*rows.original, *rows.optimized, 4, {0, 0});
  Outcome ks = run_pass(einsum("bpq,pqd->bd", {2, 3, 5}, {3, 5, 4}));
  EXPECT_TRUE(ks.changed);
  expect_same_numbers(*ks.original, *ks.optimized, 5, {0, 0});
}

TEST(Canonicalize, EinsumThatIsNotOneMatrixProductIsLeftAlone) {
  // A label summed out of one operand alone, an ellipsis: left as Einsum.
  expect_left_alone(run_pass(einsum("bij,bjk->bk", {2, 5, 6}, {2, 6, 4})));
  expect_left_alone(run_pass(einsum("...ij,...jk->...ik", {2, 5, 6}, {2, 6, 4})));
  // Without batch labels it is a plain MatMul.
  Outcome plain = run_pass(einsum("ij,jk->ik", {5, 6}, {6, 4}));
  EXPECT_TRUE(plain.changed);
  EXPECT_EQ(plain.optimized->nodes().size(), 1u);
}

namespace {

/// torch's slice_scatter(x, Slice(x) [+ b]) along `axis` of x [dims] over [s, s + n), as the
/// dynamo export writes it: ScatterND of rows s..s+n-1 between Transposes swapping `axis` and 0.
std::unique_ptr<Graph> slice_update(std::vector<int64_t> dims, int64_t axis, int64_t s, int64_t n, bool add) {
  GraphBuilder b(18);
  Value* x = b.input("x", DType::Float32, Shape(dims.begin(), dims.end()));
  auto i64 = [&](const std::string& name, int64_t v) { return b.initializer(name, Tensor::from_int64({v}, {1})); };
  Value* sl =
      b.node("Slice", {x, i64("starts", s), i64("ends", s + n), i64("axes", axis), i64("steps", 1)}, {}, "slice");
  std::vector<int64_t> bd = dims;
  bd[static_cast<size_t>(axis)] = n;
  Value* upd = add ? b.node("Add", {sl, b.input("b", DType::Float32, Shape(bd.begin(), bd.end()))}, {}, "add") : sl;
  std::vector<int64_t> perm(dims.size());
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[0], perm[static_cast<size_t>(axis)]);
  const bool moved = axis != 0;
  Value* data = moved ? b.node("Transpose", {x}, {attr("perm", perm)}, "to_front") : x;
  Value* u = moved ? b.node("Transpose", {upd}, {attr("perm", perm)}, "upd_to_front") : upd;
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < n; ++i) rows.push_back(s + i);
  Value* y = b.node("ScatterND", {data, b.initializer("rows", Tensor::from_int64(rows, {n, 1})), u}, {}, "scatter");
  if (moved) y = b.node("Transpose", {y}, {attr("perm", perm)}, "back");
  b.output(y);
  return b.build();
}

}  // namespace

TEST(Canonicalize, SliceUpdateIsAnAddOfTheUpdatePaddedWithZeros) {
  for (int64_t axis : {0, 2, 3}) {
    SCOPED_TRACE("axis " + std::to_string(axis));
    Outcome o = run_pass(slice_update({2, 3, 7, 5}, axis, 1, axis == 3 ? 4 : 1, true));
    EXPECT_TRUE(o.changed);
    EXPECT_EQ(count(*o.optimized, "ScatterND"), 0);
    EXPECT_EQ(count(*o.optimized, "Pad"), 1);
    expect_same_numbers(*o.original, *o.optimized, 6, {0, 0});
  }
  // The slice written back unchanged (the update is the slice itself): the data as it was.
  Outcome same = run_pass(slice_update({2, 3, 7, 5}, 2, 2, 3, false));
  EXPECT_TRUE(same.changed);
  EXPECT_EQ(count(*same.optimized, "ScatterND"), 0);
  EXPECT_EQ(count(*same.optimized, "Pad"), 0);
  expect_same_numbers(*same.original, *same.optimized, 7, {0, 0});
}

TEST(Canonicalize, ScatterThatIsNotASliceUpdateIsLeftAlone) {
  // Rows that are not consecutive, and an update that is not the data's own slice plus something.
  {
    GraphBuilder b(18);
    Value* x = b.input("x", DType::Float32, {6, 4});
    Value* u = b.input("u", DType::Float32, {2, 4});
    b.output(b.node("ScatterND", {x, b.initializer("rows", Tensor::from_int64({1, 3}, {2, 1})), u}, {}, "scatter"));
    expect_left_alone(run_pass(b.build()));
  }
  {
    GraphBuilder b(18);
    Value* x = b.input("x", DType::Float32, {6, 4});
    Value* other = b.input("other", DType::Float32, {6, 4});
    auto i64 = [&](const std::string& name, int64_t v) { return b.initializer(name, Tensor::from_int64({v}, {1})); };
    Value* sl = b.node("Slice", {other, i64("starts", 1), i64("ends", 3), i64("axes", 0)}, {}, "slice");
    Value* u = b.node("Add", {sl, b.input("b", DType::Float32, {2, 4})}, {}, "add");
    b.output(b.node("ScatterND", {x, b.initializer("rows", Tensor::from_int64({1, 2}, {2, 1})), u}, {}, "scatter"));
    expect_left_alone(run_pass(b.build()));
  }
}

TEST(Canonicalize, SwishOfAlphaOneIsXTimesSigmoid) {
  GraphBuilder b(24);
  Value* x = b.input("x", DType::Float32, Shape{2, 7});
  b.output(b.node("Swish", {x}, {}, "act"));
  Outcome o = run_pass(b.build());
  expect_rewritten_exactly(o);
  ASSERT_EQ(o.optimized->nodes().size(), 2u);
  const Node* mul = find_op(*o.optimized, "Mul");
  const Node* sig = find_op(*o.optimized, "Sigmoid");
  ASSERT_TRUE(mul && sig);
  EXPECT_EQ(mul->name, "act");
  EXPECT_EQ(sig->inputs[0]->name, "x");
  EXPECT_EQ(mul->inputs[1], sig->outputs[0]);
}

TEST(Canonicalize, SwishOfAnotherAlphaIsLeftAlone) {
  GraphBuilder b(24);
  Value* x = b.input("x", DType::Float32, Shape{2, 7});
  b.output(b.node("Swish", {x}, {attr("alpha", 1.702f)}, "act"));
  expect_left_alone(run_pass(b.build()));
}
