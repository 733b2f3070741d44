// What inference carries of a shape vector's elements when the batch is left open (ir/dim_values.h):
// the Shape -> Gather -> Unsqueeze -> Concat targets of exporters' Reshape, Expand, ConstantOfShape
// and Range keep their known and named entries, so the outputs keep their head counts and sizes.
#include <gtest/gtest.h>

#include "ir/dim_values.h"
#include "ir/error.h"
#include "ir/graph_builder.h"
#include "passes/infer_shapes.h"
#include "test_util.h"

using namespace fusec;

namespace {

Value* ints(GraphBuilder& b, const std::string& name, std::vector<int64_t> v, bool scalar = false) {
  const std::vector<int64_t> dims = scalar ? std::vector<int64_t>{} : std::vector<int64_t>{int64_t(v.size())};
  return b.initializer(name, Tensor::from_int64(v, dims));
}

/// Element i of x's shape as a one-element vector, the way exporters write it.
Value* dim_of(GraphBuilder& b, Value* x, int64_t i, const std::string& tag) {
  Value* s = b.node("Shape", {x}, {}, tag + "_shape");
  Value* g = b.node("Gather", {s, ints(b, tag + "_i", {i}, true)}, {}, tag + "_gather");
  return b.node("Unsqueeze", {g, ints(b, tag + "_axes", {0})}, {}, tag + "_unsq");
}

std::string shape_of(const Value* v) { return v->type.shape ? shape_str(*v->type.shape) : "unranked"; }

}  // namespace

TEST(DimValues, AHeadSplitOverAnOpenBatchKeepsItsHeads) {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {Dim::sym("N"), 5, 24});
  Value* target = b.node("Concat", {dim_of(b, x, 0, "n"), dim_of(b, x, 1, "s"), ints(b, "m1", {-1}), ints(b, "d", {8})},
                         {attr("axis", int64_t{0})}, "target");
  Value* y = b.node("Reshape", {x, target}, {}, "split");
  b.output(y);
  auto g = b.build();
  infer_shapes(*g);
  EXPECT_EQ(shape_of(y), "Nx5x3x8");
  // The same graph runs: at run time every value is known.
  g->inputs[0]->type.shape = Shape{2, 5, 24};
  auto out = test::run_cpu(*g, {test::uniform_floats({2, 5, 24}, 1)});
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{2, 5, 3, 8}));
}

TEST(DimValues, NamedDimsCancelWhenTheRestIsInferred) {
  // [N, S, 768] -> [N, S, 12, -1]: N and S stand on both sides, so -1 is 64.
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {Dim::sym("N"), Dim::sym("S"), 768});
  Value* target = b.node("Concat", {dim_of(b, x, 0, "n"), dim_of(b, x, 1, "s"), ints(b, "h", {12, -1})},
                         {attr("axis", int64_t{0})}, "target");
  Value* y = b.node("Reshape", {x, target}, {}, "split");
  // And back: [N, S, -1] from the split's own shape, sliced (Shape start/end, Slice).
  Value* sh = b.node("Shape", {y}, {attr("start", int64_t{0}), attr("end", int64_t{2})}, "sh");
  Value* ns = b.node("Slice", {sh, ints(b, "st", {0}), ints(b, "en", {2})}, {}, "ns");
  Value* back = b.node("Concat", {ns, ints(b, "m1", {-1})}, {attr("axis", int64_t{0})}, "back_target");
  Value* z = b.node("Reshape", {y, back}, {}, "merge");
  b.output(z);
  auto g = b.build();
  infer_shapes(*g);
  EXPECT_EQ(shape_of(y), "NxSx12x64");
  EXPECT_EQ(shape_of(z), "NxSx768");
}

TEST(DimValues, TheExpandOfAMaskThroughWhereEqualMinusOne) {
  // torch's legacy exporter writes expand(N, -1, S, S) as Where(Equal(v, -1), ones, v).
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {Dim::sym("N"), 7});
  Value* m = b.input("m", DType::Float32, {Dim::sym("N"), 1, 1, 7});
  Value* v = b.node("Concat", {dim_of(b, x, 0, "n"), ints(b, "rest", {-1, 7, 7})}, {attr("axis", int64_t{0})}, "v");
  Value* eq = b.node("Equal", {v, ints(b, "minus1", {-1}, true)}, {}, "eq");
  Value* w = b.node("Where", {eq, ints(b, "ones", {1, 1, 1, 1}), v}, {}, "w");
  Value* e = b.node("Expand", {m, w}, {}, "expand");
  b.output(e);
  auto g = b.build();
  infer_shapes(*g);
  EXPECT_EQ(shape_of(e), "Nx1x7x7");
}

TEST(DimValues, RangeAndConstantOfShapeOverANamedDim) {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {Dim::sym("N"), 7});
  Value* s = b.node("Shape", {x}, {}, "s");
  Value* n = b.node("Gather", {s, ints(b, "i0", {0}, true)}, {}, "n");
  Value* r = b.node("Range", {ints(b, "zero", {0}, true), n, ints(b, "one", {1}, true)}, {}, "arange");
  Value* c = b.node("ConstantOfShape", {s}, {}, "zeros");
  // x * 1 and x + 0 keep the dim; a dim is never equal to a negative number.
  Value* same =
      b.node("Mul", {b.node("Add", {s, ints(b, "z2", {0, 0})}, {}, "add0"), ints(b, "o", {1}, true)}, {}, "mul1");
  Value* c2 = b.node("ConstantOfShape", {same}, {}, "zeros2");
  b.output(r);
  b.output(c);
  b.output(c2);
  auto g = b.build();
  infer_shapes(*g);
  EXPECT_EQ(shape_of(r), "N");
  EXPECT_EQ(shape_of(c), "Nx7");
  EXPECT_EQ(shape_of(c2), "Nx7");
}

TEST(DimValues, AnImpossibleTargetIsStillAnError) {
  // N cancels, and 5 x 24 is no multiple of 7.
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {Dim::sym("N"), 5, 24});
  Value* target =
      b.node("Concat", {dim_of(b, x, 0, "n"), ints(b, "rest", {7, -1})}, {attr("axis", int64_t{0})}, "target");
  b.output(b.node("Reshape", {x, target}, {}, "bad"));
  auto g = b.build();
  try {
    infer_shapes(*g);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot reshape Nx5x24 to Nx7x-1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("bad"), std::string::npos) << e.what();
  }
}

TEST(DimValues, WhatIsNotKnownStaysUnknown) {
  // An unnamed open dim carries nothing, and a dim of another name does not cancel.
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {Dim(), Dim::sym("S"), 24});
  Value* y = b.input("y", DType::Float32, {Dim::sym("M"), 4});
  Value* t1 = b.node("Concat", {dim_of(b, x, 0, "a"), ints(b, "r1", {-1, 8})}, {attr("axis", int64_t{0})}, "t1");
  Value* r1 = b.node("Reshape", {x, t1}, {}, "r1");
  Value* t2 = b.node("Concat", {dim_of(b, y, 0, "m"), ints(b, "r2", {-1, 8})}, {attr("axis", int64_t{0})}, "t2");
  Value* r2 = b.node("Reshape", {x, t2}, {}, "r2");
  b.output(r1);
  b.output(r2);
  auto g = b.build();
  infer_shapes(*g);
  EXPECT_EQ(shape_of(r1), "?x?x8");
  EXPECT_EQ(shape_of(r2), "Mx?x8");
}

TEST(DimValues, AViewThatMergesTheBatchKeepsItsProduct) {
  // dynamo's Kᵀ: [N, 12, 5, 8] -> [N·12, 5, 8] (target N * 12 computed from the shape), and back.
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {Dim::sym("N"), 12, 5, 8});
  Value* n12 = b.node("Mul", {dim_of(b, x, 0, "n"), ints(b, "twelve", {12})}, {}, "n12");
  Value* t1 = b.node("Concat", {n12, ints(b, "sd", {5, 8})}, {attr("axis", int64_t{0})}, "t1");
  Value* y = b.node("Reshape", {x, t1}, {}, "merge");
  Value* t2 = b.node("Concat", {dim_of(b, x, 0, "m"), ints(b, "rest", {12, 5, -1})}, {attr("axis", int64_t{0})}, "t2");
  Value* z = b.node("Reshape", {y, t2}, {}, "split");
  Value* f = b.node("Flatten", {x}, {attr("axis", int64_t{2})}, "flat");
  Value* w = b.node("Reshape", {f, ints(b, "t3", {-1, 40})}, {}, "same");
  b.output(z);
  b.output(w);
  auto g = b.build();
  infer_shapes(*g);
  EXPECT_EQ(shape_of(y), "12\xC2\xB7Nx5x8");
  EXPECT_EQ(shape_of(z), "Nx12x5x8");
  EXPECT_EQ(shape_of(f), "12\xC2\xB7Nx40");
  EXPECT_EQ(shape_of(w), "12\xC2\xB7Nx40");
}
