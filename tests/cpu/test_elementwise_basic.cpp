#include "test_util.h"

using namespace fusec;
using namespace fusec::test;

TEST(CpuAdd, BroadcastsRowVector) {
  GraphBuilder b;
  Value* x = b.input("x", DType::Float32, {2, 3});
  Value* y = b.input("y", DType::Float32, {3});
  b.output(b.node("Add", {x, y}));
  auto g = b.build();
  auto out = run_cpu(*g, {floats({1, 2, 3, 4, 5, 6}, {2, 3}), floats({10, 20, 30}, {3})});
  expect_close(out[0], floats({11, 22, 33, 14, 25, 36}, {2, 3}));
}

TEST(CpuDiv, IntegerDivisionByZeroIsAnError) {
  GraphBuilder b;
  Value* x = b.input("x", DType::Int64, {2});
  Value* y = b.input("y", DType::Int64, {2});
  b.output(b.node("Div", {x, y}));
  auto g = b.build();
  EXPECT_THROW(run_cpu(*g, {int64s({4, 6}, {2}), int64s({2, 0}, {2})}), Error);
}
