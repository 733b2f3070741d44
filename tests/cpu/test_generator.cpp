// Generator ops: Constant (every value_* form), ConstantOfShape, Range.
#include "test_util.h"

using namespace fusec;
using namespace fusec::test;

TEST(CpuConstant, TensorValue) {
  GraphBuilder b;
  b.output(b.node("Constant", {}, {attr("value", floats({1, 2, 3, 4}, {2, 2}))}));
  auto g = b.build();
  auto out = run_cpu(*g, {});
  expect_close(out[0], floats({1, 2, 3, 4}, {2, 2}));
}

TEST(CpuConstant, ScalarAndListForms) {
  GraphBuilder b;
  b.output(b.node("Constant", {}, {attr("value_float", 2.5f)}));
  b.output(b.node("Constant", {}, {attr("value_floats", std::vector<float>{1, 2})}));
  b.output(b.node("Constant", {}, {attr("value_int", int64_t{7})}));
  b.output(b.node("Constant", {}, {attr("value_ints", std::vector<int64_t>{3, -4, 5})}));
  auto g = b.build();
  auto out = run_cpu(*g, {});
  expect_close(out[0], Tensor::scalar_float(2.5f));
  expect_close(out[1], floats({1, 2}, {2}));
  expect_close(out[2], int64s({7}, {}));
  expect_close(out[3], int64s({3, -4, 5}, {3}));
}

TEST(CpuConstant, StringsAndDoubleValuesAreErrors) {
  {
    GraphBuilder b;
    b.output(b.node("Constant", {}, {attr("value_string", std::string("hi"))}));
    auto g = b.build();
    try {
      infer_shapes(*g);
      FAIL() << "expected an error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("not supported"), std::string::npos) << e.what();
    }
  }
  {
    GraphBuilder b;
    b.output(b.node("Constant", {}, {attr("value_int", int64_t{1}), attr("value_float", 1.0f)}));
    auto g = b.build();
    EXPECT_THROW(infer_shapes(*g), Error);
  }
  {
    GraphBuilder b(11);  // value_* forms arrived in opset 12
    b.output(b.node("Constant", {}, {attr("value_int", int64_t{1})}));
    auto g = b.build();
    EXPECT_THROW(infer_shapes(*g), Error);
  }
}

TEST(CpuConstantOfShape, IntValueAndDefault) {
  GraphBuilder b;
  Value* s = b.input("s", DType::Int64, {2});
  b.output(b.node("ConstantOfShape", {s}, {attr("value", int64s({9}, {1}))}));
  b.output(b.node("ConstantOfShape", {s}));
  auto g = b.build();
  infer_shapes(*g);
  EXPECT_EQ(g->outputs[0]->type.shape->size(), 2u);  // rank known, dims not
  auto out = run_cpu(*g, {int64s({2, 3}, {2})});
  expect_close(out[0], int64s({9, 9, 9, 9, 9, 9}, {2, 3}));
  expect_close(out[1], floats(std::vector<float>(6, 0), {2, 3}));
}

TEST(CpuConstantOfShape, EmptyShapeGivesScalarAndNegativeIsError) {
  GraphBuilder b;
  Value* s = b.initializer("s", int64s({}, {0}));
  b.output(b.node("ConstantOfShape", {s}, {attr("value", floats({4}, {1}))}));
  auto g = b.build();
  auto out = run_cpu(*g, {});
  expect_close(out[0], Tensor::scalar_float(4));

  GraphBuilder b2;
  Value* s2 = b2.initializer("s", int64s({2, -1}, {2}));
  b2.output(b2.node("ConstantOfShape", {s2}));
  auto g2 = b2.build();
  EXPECT_THROW(infer_shapes(*g2), Error);
}

TEST(CpuRange, IntNegativeDeltaFromInputs) {
  GraphBuilder b;
  Value* s = b.input("s", DType::Int32, {});
  Value* l = b.input("l", DType::Int32, {});
  Value* d = b.input("d", DType::Int32, {});
  b.output(b.node("Range", {s, l, d}));
  auto g = b.build();
  infer_shapes(*g);
  ASSERT_EQ(g->outputs[0]->type.shape->size(), 1u);
  EXPECT_FALSE((*g->outputs[0]->type.shape)[0].is_static());
  auto i32 = [](int32_t v) {
    Tensor t(DType::Int32, {});
    *t.data<int32_t>() = v;
    return t;
  };
  auto out = run_cpu(*g, {i32(10), i32(4), i32(-3)});
  Tensor want(DType::Int32, {2});
  want.data<int32_t>()[0] = 10;
  want.data<int32_t>()[1] = 7;
  expect_close(out[0], want);
  auto empty = run_cpu(*g, {i32(1), i32(5), i32(-1)});
  EXPECT_EQ(empty[0].dims(), (std::vector<int64_t>{0}));
}

TEST(CpuRange, FloatConstantsAreStaticAtImport) {
  GraphBuilder b;
  Value* s = b.initializer("s", Tensor::scalar_float(1));
  Value* l = b.initializer("l", Tensor::scalar_float(2));
  Value* d = b.initializer("d", Tensor::scalar_float(0.3f));
  b.output(b.node("Range", {s, l, d}));
  auto g = b.build();
  infer_shapes(*g);
  EXPECT_EQ(static_dims(*g->outputs[0]->type.shape), (std::vector<int64_t>{4}));
  auto out = run_cpu(*g, {});
  expect_close(out[0], floats({1, 1.3f, 1.6f, 1.9f}, {4}));
}

TEST(CpuRange, ZeroDeltaAndMixedTypesAreErrors) {
  {
    GraphBuilder b;
    Value* s = b.initializer("s", int64s({0}, {}));
    Value* l = b.initializer("l", int64s({5}, {}));
    Value* d = b.initializer("d", int64s({0}, {}));
    b.output(b.node("Range", {s, l, d}));
    auto g = b.build();
    EXPECT_THROW(infer_shapes(*g), Error);
  }
  {
    GraphBuilder b;
    Value* s = b.initializer("s", int64s({0}, {}));
    Value* l = b.initializer("l", Tensor::scalar_float(5));
    Value* d = b.initializer("d", int64s({1}, {}));
    b.output(b.node("Range", {s, l, d}));
    auto g = b.build();
    EXPECT_THROW(infer_shapes(*g), Error);
  }
}
