// Reduce* and ArgMax/ArgMin on the CPU reference: hand-computed values, both axes forms, the
// layouts the kernel distinguishes (inner reduced, inner kept, several reduced blocks), errors.
#include <cmath>

#include "test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

/// Runs a one-node graph `op` on x (and an optional int64 axes input) and returns its output.
Tensor reduce(const std::string& op, const Tensor& x, std::vector<NamedAttribute> attrs, int64_t opset,
              const std::vector<int64_t>* axes = nullptr) {
  GraphBuilder b(opset);
  Value* in = b.input("x", x.dtype(), shape_of(x.dims()));
  std::vector<Value*> ins{in};
  std::vector<Tensor> feeds{x};
  if (axes) {
    ins.push_back(b.input("axes", DType::Int64, {static_cast<int64_t>(axes->size())}));
    feeds.push_back(int64s(*axes, {static_cast<int64_t>(axes->size())}));
  }
  b.output(b.node(op, ins, std::move(attrs)));
  auto g = b.build();
  return run_cpu(*g, feeds)[0];
}

Tensor int32s(std::vector<int32_t> v, std::vector<int64_t> dims) {
  Tensor t(DType::Int32, std::move(dims));
  for (size_t i = 0; i < v.size(); ++i) t.data<int32_t>()[i] = v[i];
  return t;
}

const Tensor kX23 = floats({1, 2, 3, 4, 5, 6}, {2, 3});

}  // namespace

TEST(CpuReduce, SumAxesAttributeKeepdims) {
  expect_close(reduce("ReduceSum", kX23, {attr("axes", std::vector<int64_t>{1})}, 11), floats({6, 15}, {2, 1}));
}

TEST(CpuReduce, SumAxesInputNegativeNoKeepdims) {
  std::vector<int64_t> axes{-2};
  expect_close(reduce("ReduceSum", kX23, {attr("keepdims", int64_t{0})}, 13, &axes), floats({5, 7, 9}, {3}));
}

TEST(CpuReduce, MeanWithoutAxesReducesEverything) {
  expect_close(reduce("ReduceMean", kX23, {}, 13), floats({3.5f}, {1, 1}));
  expect_close(reduce("ReduceMean", kX23, {attr("keepdims", int64_t{0})}, 18), floats({3.5f}, {}));
}

TEST(CpuReduce, NoopWithEmptyAxesReturnsInput) {
  expect_close(reduce("ReduceSum", kX23, {attr("noop_with_empty_axes", int64_t{1})}, 13), kX23);
}

TEST(CpuReduce, EachOpByHand) {
  const Tensor x = floats({1, -2, 3, -4}, {2, 2});
  std::vector<int64_t> axes{1};
  auto r = [&](const char* op) { return reduce(op, x, {attr("keepdims", int64_t{0})}, 18, &axes); };
  expect_close(r("ReduceMax"), floats({1, 3}, {2}));
  expect_close(r("ReduceMin"), floats({-2, -4}, {2}));
  expect_close(r("ReduceProd"), floats({-2, -12}, {2}));
  expect_close(r("ReduceL1"), floats({3, 7}, {2}));
  expect_close(r("ReduceL2"), floats({std::sqrt(5.f), 5}, {2}));
  expect_close(r("ReduceSumSquare"), floats({5, 25}, {2}));
  expect_close(r("ReduceLogSumExp"),
               floats({std::log(std::exp(1.f) + std::exp(-2.f)), std::log(std::exp(3.f) + std::exp(-4.f))}, {2}));
  const Tensor pos = floats({1, 2, 3, 4}, {2, 2});
  expect_close(reduce("ReduceLogSum", pos, {attr("keepdims", int64_t{0})}, 18, &axes),
               floats({std::log(3.f), std::log(7.f)}, {2}));
}

TEST(CpuReduce, LogSumExpDoesNotOverflow) {
  std::vector<int64_t> axes{0};
  expect_close(reduce("ReduceLogSumExp", floats({1000, 1000}, {2}), {}, 18, &axes),
               floats({1000 + std::log(2.f)}, {1}));
}

TEST(CpuReduce, MiddleAndSplitAxes) {
  // x[i][j][k] = 100i + 10j + k over [2, 3, 2].
  std::vector<float> v;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 2; ++k) v.push_back(100.f * i + 10.f * j + k);
  const Tensor x = floats(v, {2, 3, 2});
  // Middle axis: the inner (kept) run is contiguous.
  expect_close(reduce("ReduceSum", x, {attr("axes", std::vector<int64_t>{1}), attr("keepdims", int64_t{0})}, 11),
               floats({30, 33, 330, 333}, {2, 2}));
  // Outer and inner axes: two reduced blocks around a kept one.
  expect_close(reduce("ReduceMax", x, {attr("axes", std::vector<int64_t>{0, 2})}, 13),
               floats({101, 111, 121}, {1, 3, 1}));
}

TEST(CpuReduce, IntegerTypes) {
  std::vector<int64_t> axes{1};
  const Tensor x = int32s({1, 7, -3, 4, 5, 6}, {2, 3});
  auto r = [&](const char* op) { return reduce(op, x, {attr("keepdims", int64_t{0})}, 18, &axes); };
  expect_close(r("ReduceSum"), int32s({5, 15}, {2}));
  expect_close(r("ReduceMax"), int32s({7, 6}, {2}));
  expect_close(r("ReduceMin"), int32s({-3, 4}, {2}));
  expect_close(r("ReduceMean"), int32s({1, 5}, {2}));  // 5/3 truncates
}

TEST(CpuReduce, LargeReduceAllRunsInParallelChunks) {
  const int64_t n = 1 << 20;
  const Tensor x = floats(std::vector<float>(n, 0.5f), {1024, 1024});
  expect_close(reduce("ReduceSum", x, {attr("keepdims", int64_t{0})}, 13), floats({n * 0.5f}, {}));
  std::vector<int64_t> axes{0};
  Tensor col = reduce("ReduceMean", x, {}, 18, &axes);
  expect_close(col, floats(std::vector<float>(1024, 0.5f), {1, 1024}));
}

TEST(CpuReduce, BadAxesAreErrors) {
  EXPECT_THROW(reduce("ReduceSum", kX23, {attr("axes", std::vector<int64_t>{2})}, 11), Error);
  std::vector<int64_t> dup{1, -1};
  EXPECT_THROW(reduce("ReduceMax", kX23, {}, 18, &dup), Error);
}

TEST(CpuArgMax, AxisKeepdimsAndLastIndex) {
  const Tensor x = floats({2, 5, 5, 1, 9, 9}, {2, 3});
  expect_close(reduce("ArgMax", x, {attr("axis", int64_t{1})}, 13), int64s({1, 1}, {2, 1}));
  expect_close(
      reduce("ArgMax", x,
             {attr("axis", int64_t{-1}), attr("keepdims", int64_t{0}), attr("select_last_index", int64_t{1})}, 13),
      int64s({2, 2}, {2}));
  expect_close(reduce("ArgMax", x, {attr("keepdims", int64_t{0})}, 13), int64s({0, 1, 1}, {3}));
}

TEST(CpuArgMin, IntegerInput) {
  const Tensor x = int32s({3, -1, 4, -1, 5, 9}, {6});
  expect_close(reduce("ArgMin", x, {}, 13), int64s({1}, {1}));
  expect_close(reduce("ArgMin", x, {attr("select_last_index", int64_t{1})}, 13), int64s({3}, {1}));
  EXPECT_THROW(reduce("ArgMin", x, {attr("axis", int64_t{1})}, 13), Error);
}

TEST(ReduceSchema, KeepsSymbolicDimsAndHandlesUnknownAxes) {
  GraphBuilder b(18);
  Value* x = b.input("x", DType::Float32, {Dim::sym("N"), 3, 4});
  Value* axes = b.initializer("axes", int64s({-2}, {1}));
  Value* dyn = b.input("dyn_axes", DType::Int64, {1});
  b.output(b.node("ReduceMean", {x, axes}));
  b.output(b.node("ReduceMean", {x, dyn}));
  b.output(b.node("ReduceMean", {x, dyn}, {attr("keepdims", int64_t{0})}));
  b.output(b.node("ArgMax", {x}, {attr("axis", int64_t{2}), attr("keepdims", int64_t{0})}));
  auto g = b.build();
  infer_shapes(*g);
  EXPECT_EQ(shape_str(*g->outputs[0]->type.shape), "Nx1x4");
  ASSERT_TRUE(g->outputs[1]->type.shape);  // rank known, dims unknown until the axes are
  EXPECT_EQ(g->outputs[1]->type.shape->size(), 3u);
  EXPECT_FALSE(g->outputs[2]->type.shape);  // without keepdims not even the rank is known
  EXPECT_EQ(shape_str(*g->outputs[3]->type.shape), "Nx3");
  EXPECT_EQ(g->outputs[3]->type.dtype, DType::Int64);
}

TEST(CpuReduce, BoolMaxMinFromOpset20) {
  Tensor x(DType::Bool, {2, 2});
  const uint8_t v[] = {0, 1, 1, 1};
  for (int i = 0; i < 4; ++i) x.data<uint8_t>()[i] = v[i];
  std::vector<int64_t> axes{1};
  Tensor any = reduce("ReduceMax", x, {attr("keepdims", int64_t{0})}, 20, &axes);
  Tensor all = reduce("ReduceMin", x, {attr("keepdims", int64_t{0})}, 20, &axes);
  ASSERT_EQ(any.dtype(), DType::Bool);
  EXPECT_EQ(any.data<uint8_t>()[0], 1);
  EXPECT_EQ(any.data<uint8_t>()[1], 1);
  EXPECT_EQ(all.data<uint8_t>()[0], 0);
  EXPECT_EQ(all.data<uint8_t>()[1], 1);
  EXPECT_THROW(reduce("ReduceSum", x, {}, 20, &axes), Error);
  EXPECT_THROW(reduce("ReduceMax", x, {}, 18, &axes), Error);
}
