// Shape ops: Reshape, Flatten, Squeeze, Unsqueeze, Shape, Size, Identity, Dropout, EyeLike, Trilu,
// CumSum, OneHot — values on the CPU reference and what inference knows at import.
#include "ir/half.h"
#include "test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

std::vector<float> iota_f(int n) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = static_cast<float>(i);
  return v;
}

Tensor int32s(std::vector<int32_t> v, std::vector<int64_t> dims) {
  Tensor t(DType::Int32, std::move(dims));
  std::copy(v.begin(), v.end(), t.data<int32_t>());
  return t;
}

Tensor bools(std::vector<uint8_t> v, std::vector<int64_t> dims) {
  Tensor t(DType::Bool, std::move(dims));
  std::copy(v.begin(), v.end(), t.data<uint8_t>());
  return t;
}

Tensor scalar_i64(int64_t v) { return int64s({v}, {}); }

}  // namespace

// ---- Reshape ----

TEST(CpuReshape, ZeroCopiesAndMinusOneInfers) {
  GraphBuilder b;
  Value* x = b.input("x", DType::Float32, {2, 3, 4});
  Value* s = b.initializer("s", int64s({0, -1}, {2}));
  Value* y = b.node("Reshape", {x, s});
  b.output(y);
  auto g = b.build();
  auto out = run_cpu(*g, {floats(iota_f(24), {2, 3, 4})});
  expect_close(out[0], floats(iota_f(24), {2, 12}));
}

TEST(CpuReshape, AllowZeroKeepsLiteralZero) {
  GraphBuilder b(14);
  Value* x = b.input("x", DType::Float32, {0, 3, 4});
  Value* s = b.initializer("s", int64s({3, 4, 0}, {3}));
  b.output(b.node("Reshape", {x, s}, {attr("allowzero", int64_t{1})}));
  auto g = b.build();
  auto out = run_cpu(*g, {Tensor(DType::Float32, {0, 3, 4})});
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{3, 4, 0}));
}

TEST(CpuReshape, SymbolicBatchCancelsAtImport) {
  GraphBuilder b;
  Value* x = b.input("x", DType::Float32, {Dim::sym("N"), 3, 4});
  Value* s = b.initializer("s", int64s({0, -1}, {2}));
  Value* y = b.node("Reshape", {x, s});
  b.output(y);
  auto g = b.build();
  infer_shapes(*g);
  ASSERT_TRUE(g->outputs[0]->type.shape);
  EXPECT_EQ(shape_str(*g->outputs[0]->type.shape), shape_str({Dim::sym("N"), 12}));
}

TEST(CpuReshape, MinusOneTakesTheLeftoverSymbol) {
  GraphBuilder b;
  Value* x = b.input("x", DType::Float32, {Dim::sym("N"), 3, 4});
  Value* s = b.initializer("s", int64s({-1, 12}, {2}));
  b.output(b.node("Reshape", {x, s}));
  auto g = b.build();
  infer_shapes(*g);
  EXPECT_EQ(shape_str(*g->outputs[0]->type.shape), shape_str({Dim::sym("N"), 12}));
  auto out = run_cpu(*g, {floats(iota_f(24), {2, 3, 4})});
  expect_close(out[0], floats(iota_f(24), {2, 12}));
}

TEST(CpuReshape, UnknownShapeValueGivesRankOnly) {
  GraphBuilder b;
  Value* x = b.input("x", DType::Float32, {2, 6});
  Value* s = b.input("s", DType::Int64, {3});
  b.output(b.node("Reshape", {x, s}));
  auto g = b.build();
  infer_shapes(*g);
  ASSERT_TRUE(g->outputs[0]->type.shape);
  EXPECT_EQ(g->outputs[0]->type.shape->size(), 3u);
  EXPECT_FALSE((*g->outputs[0]->type.shape)[0].is_static());
  auto out = run_cpu(*g, {floats(iota_f(12), {2, 6}), int64s({3, -1, 2}, {3})});
  expect_close(out[0], floats(iota_f(12), {3, 2, 2}));
}

TEST(CpuReshape, ShapeOfAnotherTensorIsStaticAtImport) {
  GraphBuilder b;
  Value* x = b.input("x", DType::Float32, {3, 4});
  Value* like = b.input("like", DType::Float32, {2, 6});
  Value* y = b.node("Reshape", {x, b.node("Shape", {like})});
  b.output(y);
  auto g = b.build();
  infer_shapes(*g);
  ASSERT_TRUE(g->outputs[0]->type.shape);
  EXPECT_EQ(static_dims(*g->outputs[0]->type.shape), (std::vector<int64_t>{2, 6}));
}

TEST(CpuReshape, BadShapesAreErrors) {
  for (std::vector<int64_t> bad : {std::vector<int64_t>{-1, -1}, {5, 5}, {-2, 6}, {0, 0, 0, 1}}) {
    GraphBuilder b;
    Value* x = b.input("x", DType::Float32, {2, 6});
    Value* s = b.initializer("s", int64s(bad, {static_cast<int64_t>(bad.size())}));
    b.output(b.node("Reshape", {x, s}));
    auto g = b.build();
    EXPECT_THROW(infer_shapes(*g), Error);
  }
}

// ---- Flatten ----

TEST(CpuFlatten, AxesIncludingNegativeAndZero) {
  struct Case {
    int64_t axis;
    std::vector<int64_t> want;
  };
  for (const Case& c : {Case{1, {2, 12}}, Case{0, {1, 24}}, Case{3, {24, 1}}, Case{-1, {6, 4}}}) {
    GraphBuilder b;
    Value* x = b.input("x", DType::Float32, {2, 3, 4});
    b.output(b.node("Flatten", {x}, {attr("axis", c.axis)}));
    auto g = b.build();
    auto out = run_cpu(*g, {floats(iota_f(24), {2, 3, 4})});
    expect_close(out[0], floats(iota_f(24), c.want));
  }
}

TEST(CpuFlatten, SymbolicLeadingDimAndBadAxis) {
  GraphBuilder b;
  Value* x = b.input("x", DType::Float32, {Dim::sym("N"), 3, 4});
  b.output(b.node("Flatten", {x}));
  auto g = b.build();
  infer_shapes(*g);
  EXPECT_EQ(shape_str(*g->outputs[0]->type.shape), shape_str({Dim::sym("N"), 12}));

  GraphBuilder b2;
  Value* x2 = b2.input("x", DType::Float32, {2, 3});
  b2.output(b2.node("Flatten", {x2}, {attr("axis", int64_t{3})}));
  auto g2 = b2.build();
  EXPECT_THROW(infer_shapes(*g2), Error);
}

// ---- Squeeze / Unsqueeze ----

TEST(CpuSqueeze, AxesInputNegative) {
  GraphBuilder b;
  Value* x = b.input("x", DType::Float32, {1, 3, 1, 2});
  Value* a = b.initializer("a", int64s({-2}, {1}));
  b.output(b.node("Squeeze", {x, a}));
  auto g = b.build();
  auto out = run_cpu(*g, {floats(iota_f(6), {1, 3, 1, 2})});
  expect_close(out[0], floats(iota_f(6), {1, 3, 2}));
}

TEST(CpuSqueeze, NoAxesRemovesAllOnes) {
  GraphBuilder b;
  Value* x = b.input("x", DType::Float32, {1, 3, 1, 2});
  b.output(b.node("Squeeze", {x}));
  auto g = b.build();
  auto out = run_cpu(*g, {floats(iota_f(6), {1, 3, 1, 2})});
  expect_close(out[0], floats(iota_f(6), {3, 2}));
}

TEST(CpuSqueeze, AttributeFormBeforeOpset13) {
  GraphBuilder b(11);
  Value* x = b.input("x", DType::Float32, {1, 3, 1});
  b.output(b.node("Squeeze", {x}, {attr("axes", std::vector<int64_t>{0, 2})}));
  auto g = b.build();
  auto out = run_cpu(*g, {floats(iota_f(3), {1, 3, 1})});
  expect_close(out[0], floats(iota_f(3), {3}));
}

TEST(CpuSqueeze, NonUnitAxisIsAnError) {
  GraphBuilder b;
  Value* x = b.input("x", DType::Float32, {2, 3});
  Value* a = b.initializer("a", int64s({0}, {1}));
  b.output(b.node("Squeeze", {x, a}));
  auto g = b.build();
  EXPECT_THROW(infer_shapes(*g), Error);
}

TEST(CpuUnsqueeze, AxesAgainstOutputRank) {
  GraphBuilder b;
  Value* x = b.input("x", DType::Float32, {3, 4});
  Value* a = b.initializer("a", int64s({-1, 0}, {2}));
  b.output(b.node("Unsqueeze", {x, a}));
  auto g = b.build();
  auto out = run_cpu(*g, {floats(iota_f(12), {3, 4})});
  expect_close(out[0], floats(iota_f(12), {1, 3, 4, 1}));
}

TEST(CpuUnsqueeze, AttributeFormAndRepeatedAxisError) {
  GraphBuilder b(11);
  Value* x = b.input("x", DType::Float32, {3});
  b.output(b.node("Unsqueeze", {x}, {attr("axes", std::vector<int64_t>{1})}));
  auto g = b.build();
  auto out = run_cpu(*g, {floats(iota_f(3), {3})});
  expect_close(out[0], floats(iota_f(3), {3, 1}));

  GraphBuilder b2;
  Value* x2 = b2.input("x", DType::Float32, {3});
  Value* a2 = b2.initializer("a", int64s({0, -3}, {2}));
  b2.output(b2.node("Unsqueeze", {x2, a2}));
  auto g2 = b2.build();
  EXPECT_THROW(infer_shapes(*g2), Error);
}

// ---- Shape / Size / Identity ----

TEST(CpuShape, StartEndClampAndNegative) {
  struct Case {
    int64_t start;
    std::optional<int64_t> end;
    std::vector<int64_t> want;
  };
  for (const Case& c : {Case{0, std::nullopt, {2, 3, 4}}, Case{-1, std::nullopt, {4}}, Case{1, -1, {3}},
                        Case{-10, 10, {2, 3, 4}}, Case{2, 1, {}}}) {
    GraphBuilder b(15);
    Value* x = b.input("x", DType::Float32, {2, 3, 4});
    std::vector<NamedAttribute> attrs{attr("start", c.start)};
    if (c.end) attrs.push_back(attr("end", *c.end));
    b.output(b.node("Shape", {x}, attrs));
    auto g = b.build();
    auto out = run_cpu(*g, {floats(iota_f(24), {2, 3, 4})});
    expect_close(out[0], int64s(c.want, {static_cast<int64_t>(c.want.size())}));
  }
}

TEST(CpuShape, SymbolicInputKnowsLength) {
  GraphBuilder b;
  Value* x = b.input("x", DType::Float32, {Dim::sym("N"), 3});
  b.output(b.node("Shape", {x}));
  auto g = b.build();
  infer_shapes(*g);
  EXPECT_EQ(static_dims(*g->outputs[0]->type.shape), (std::vector<int64_t>{2}));
  auto out = run_cpu(*g, {floats(iota_f(15), {5, 3})});
  expect_close(out[0], int64s({5, 3}, {2}));
}

TEST(CpuSize, CountsElements) {
  GraphBuilder b;
  Value* x = b.input("x", DType::Float32, {2, 3, 4});
  b.output(b.node("Size", {x}));
  auto g = b.build();
  auto out = run_cpu(*g, {floats(iota_f(24), {2, 3, 4})});
  expect_close(out[0], scalar_i64(24));
}

TEST(CpuIdentity, CopiesInt32) {
  GraphBuilder b;
  Value* x = b.input("x", DType::Int32, {3});
  b.output(b.node("Identity", {x}));
  auto g = b.build();
  auto out = run_cpu(*g, {int32s({1, -2, 3}, {3})});
  expect_close(out[0], int32s({1, -2, 3}, {3}));
}

// ---- Dropout ----

TEST(CpuDropout, InferenceIsIdentityWithTrueMask) {
  GraphBuilder b(13);
  Value* x = b.input("x", DType::Float32, {2, 2});
  Value* r = b.initializer("r", Tensor::scalar_float(0.3f));
  auto outs = b.node_n("Dropout", {x, r}, 2, {attr("seed", int64_t{0})});
  b.output(outs[0]);
  b.output(outs[1]);
  auto g = b.build();
  auto out = run_cpu(*g, {floats({1, 2, 3, 4}, {2, 2})});
  expect_close(out[0], floats({1, 2, 3, 4}, {2, 2}));
  expect_close(out[1], bools({1, 1, 1, 1}, {2, 2}));
}

TEST(CpuDropout, Opset7MaskHasInputType) {
  GraphBuilder b(7);
  Value* x = b.input("x", DType::Float32, {3});
  auto outs = b.node_n("Dropout", {x}, 2, {attr("ratio", 0.2f)});
  b.output(outs[0]);
  b.output(outs[1]);
  auto g = b.build();
  auto out = run_cpu(*g, {floats({1, 2, 3}, {3})});
  expect_close(out[0], floats({1, 2, 3}, {3}));
  expect_close(out[1], floats({1, 1, 1}, {3}));
}

TEST(CpuDropout, TrainingModeIsRejectedUnlessRatioZero) {
  for (float ratio : {0.0f, 0.5f}) {
    GraphBuilder b(13);
    Value* x = b.input("x", DType::Float32, {2});
    Value* r = b.initializer("r", Tensor::scalar_float(ratio));
    Value* t = b.initializer("t", bools({1}, {}));
    b.output(b.node("Dropout", {x, r, t}));
    auto g = b.build();
    if (ratio == 0) {
      auto out = run_cpu(*g, {floats({1, 2}, {2})});
      expect_close(out[0], floats({1, 2}, {2}));
    } else {
      EXPECT_THROW(run_cpu(*g, {floats({1, 2}, {2})}), Error);
    }
  }
}

// ---- EyeLike ----

TEST(CpuEyeLike, OffsetDiagonalAndDtype) {
  GraphBuilder b;
  Value* x = b.input("x", DType::Int32, {3, 4});
  b.output(b.node("EyeLike", {x}, {attr("k", int64_t{1}), attr("dtype", int64_t{1})}));
  b.output(b.node("EyeLike", {x}, {attr("k", int64_t{-2})}));
  auto g = b.build();
  auto out = run_cpu(*g, {Tensor(DType::Int32, {3, 4})});
  expect_close(out[0], floats({0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1}, {3, 4}));
  expect_close(out[1], int32s({0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0}, {3, 4}));
}

TEST(CpuEyeLike, RejectsNon2D) {
  GraphBuilder b;
  Value* x = b.input("x", DType::Float32, {3});
  b.output(b.node("EyeLike", {x}));
  auto g = b.build();
  EXPECT_THROW(infer_shapes(*g), Error);
}

// ---- Trilu ----

TEST(CpuTrilu, UpperAndLowerWithK) {
  auto x = floats(iota_f(12), {3, 4});  // rows 0..3, 4..7, 8..11
  struct Case {
    int64_t upper, k;
    std::vector<float> want;
  };
  for (const Case& c :
       {Case{1, 0, {0, 1, 2, 3, 0, 5, 6, 7, 0, 0, 10, 11}}, Case{1, -1, {0, 1, 2, 3, 4, 5, 6, 7, 0, 9, 10, 11}},
        Case{0, 0, {0, 0, 0, 0, 4, 5, 0, 0, 8, 9, 10, 0}}, Case{0, 1, {0, 1, 0, 0, 4, 5, 6, 0, 8, 9, 10, 11}},
        Case{0, -5, std::vector<float>(12, 0)}, Case{1, 100, std::vector<float>(12, 0)}, Case{0, 100, iota_f(12)}}) {
    GraphBuilder b;
    Value* in = b.input("x", DType::Float32, {3, 4});
    Value* k = b.initializer("k", scalar_i64(c.k));
    b.output(b.node("Trilu", {in, k}, {attr("upper", c.upper)}));
    auto g = b.build();
    auto out = run_cpu(*g, {x});
    expect_close(out[0], floats(c.want, {3, 4}));
  }
}

TEST(CpuTrilu, BatchedDefaultUpper) {
  GraphBuilder b;
  Value* in = b.input("x", DType::Int64, {2, 2, 2});
  b.output(b.node("Trilu", {in}));
  auto g = b.build();
  auto out = run_cpu(*g, {int64s({1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 2})});
  expect_close(out[0], int64s({1, 2, 0, 4, 5, 6, 0, 8}, {2, 2, 2}));
}

// ---- CumSum ----

TEST(CpuCumSum, ExclusiveReverseAndAxes) {
  struct Case {
    int64_t axis, exclusive, reverse;
    std::vector<float> want;
  };
  // x = [[1, 2, 3], [4, 5, 6]]
  for (const Case& c :
       {Case{1, 0, 0, {1, 3, 6, 4, 9, 15}}, Case{0, 0, 0, {1, 2, 3, 5, 7, 9}}, Case{-1, 1, 0, {0, 1, 3, 0, 4, 9}},
        Case{1, 0, 1, {6, 5, 3, 15, 11, 6}}, Case{1, 1, 1, {5, 3, 0, 11, 6, 0}}}) {
    GraphBuilder b;
    Value* x = b.input("x", DType::Float32, {2, 3});
    Value* a = b.initializer("a", int32s({static_cast<int32_t>(c.axis)}, {}));
    b.output(b.node("CumSum", {x, a}, {attr("exclusive", c.exclusive), attr("reverse", c.reverse)}));
    auto g = b.build();
    auto out = run_cpu(*g, {floats({1, 2, 3, 4, 5, 6}, {2, 3})});
    expect_close(out[0], floats(c.want, {2, 3}));
  }
}

TEST(CpuCumSum, Int64AndBadAxis) {
  GraphBuilder b;
  Value* x = b.input("x", DType::Int64, {4});
  Value* a = b.input("a", DType::Int64, {});
  b.output(b.node("CumSum", {x, a}));
  auto g = b.build();
  auto out = run_cpu(*g, {int64s({1, 2, 3, 4}, {4}), scalar_i64(0)});
  expect_close(out[0], int64s({1, 3, 6, 10}, {4}));
  EXPECT_THROW(run_cpu(*g, {int64s({1, 2, 3, 4}, {4}), scalar_i64(1)}), Error);
}

// ---- OneHot ----

TEST(CpuOneHot, LastAxisNegativeAndOutOfRangeIndices) {
  GraphBuilder b;
  Value* ind = b.input("i", DType::Int64, {4});
  Value* depth = b.initializer("d", floats({3}, {}));
  Value* vals = b.initializer("v", floats({-1, 5}, {2}));
  b.output(b.node("OneHot", {ind, depth, vals}));
  auto g = b.build();
  auto out = run_cpu(*g, {int64s({0, -1, 3, -4}, {4})});
  expect_close(out[0], floats({5, -1, -1, -1, -1, 5, -1, -1, -1, -1, -1, -1}, {4, 3}));
}

TEST(CpuOneHot, AxisZeroFloatIndices) {
  GraphBuilder b(11);
  Value* ind = b.input("i", DType::Float32, {2});
  Value* depth = b.initializer("d", scalar_i64(3));
  Value* vals = b.initializer("v", int64s({0, 1}, {2}));
  b.output(b.node("OneHot", {ind, depth, vals}, {attr("axis", int64_t{0})}));
  auto g = b.build();
  auto out = run_cpu(*g, {floats({2.7f, 0}, {2})});
  expect_close(out[0], int64s({0, 1, 0, 0, 1, 0}, {3, 2}));
}

TEST(CpuOneHot, BadDepthIsAnError) {
  GraphBuilder b;
  Value* ind = b.input("i", DType::Int64, {2});
  Value* depth = b.initializer("d", scalar_i64(0));
  Value* vals = b.initializer("v", floats({0, 1}, {2}));
  b.output(b.node("OneHot", {ind, depth, vals}));
  auto g = b.build();
  EXPECT_THROW(infer_shapes(*g), Error);
}

TEST(CpuCumSum, Float16ComputesInFloat) {
  GraphBuilder b;
  Value* x = b.input("x", DType::Float16, {3});
  Value* a = b.initializer("a", scalar_i64(0));
  b.output(b.node("CumSum", {x, a}));
  auto g = b.build();
  Tensor in(DType::Float16, {3});
  for (int i = 0; i < 3; ++i) in.data<uint16_t>()[i] = float_to_half(0.5f * (i + 1));
  auto out = run_cpu(*g, {in});
  ASSERT_EQ(out[0].dtype(), DType::Float16);
  EXPECT_EQ(out[0].as_double(0), 0.5);
  EXPECT_EQ(out[0].as_double(1), 1.5);
  EXPECT_EQ(out[0].as_double(2), 3.0);
}

// Sizes past the parallel and blocking thresholds (several MiB, inner lanes > one block).
TEST(CpuShapeOps, LargeTensorsTakeParallelPaths) {
  const int64_t rows = 3, cols = 300000;
  std::vector<float> v(rows * cols);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 7);
  GraphBuilder b;
  Value* x = b.input("x", DType::Float32, {rows, cols});
  Value* a = b.initializer("a", scalar_i64(0));
  b.output(b.node("CumSum", {x, a}));
  b.output(b.node("Flatten", {x}, {attr("axis", int64_t{0})}));
  auto g = b.build();
  auto out = run_cpu(*g, {floats(v, {rows, cols})});
  std::vector<float> want = v;
  for (int64_t r = 1; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) want[r * cols + c] += want[(r - 1) * cols + c];
  expect_close(out[0], floats(want, {rows, cols}));
  expect_close(out[1], floats(v, {1, rows * cols}));
}
