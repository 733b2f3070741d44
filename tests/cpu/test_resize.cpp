// Resize / Upsample on the CPU reference. Expected values are the ONNX reference implementation's
// (onnx.reference, onnx 1.23) for the same inputs.
#include <numeric>

#include "backend/cpu/kernels/common.h"
#include "ir/cost.h"
#include "test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

struct In {
  Tensor t;
  bool constant = false;
};
In absent() { return {Tensor(), false}; }

std::unique_ptr<Graph> one_node(const std::string& op, const std::vector<In>& ins, std::vector<NamedAttribute> attrs,
                                int64_t opset, std::vector<Tensor>* feeds) {
  GraphBuilder b(opset);
  std::vector<Value*> vals;
  for (size_t i = 0; i < ins.size(); ++i) {
    const std::string name = "in" + std::to_string(i);
    if (!ins[i].t.defined())
      vals.push_back(nullptr);
    else if (ins[i].constant)
      vals.push_back(b.initializer(name, ins[i].t));
    else {
      vals.push_back(b.input(name, ins[i].t.dtype(), shape_of(ins[i].t.dims())));
      if (feeds) feeds->push_back(ins[i].t);
    }
  }
  b.output(b.node(op, vals, std::move(attrs)));
  return b.build();
}

Tensor resize(const std::vector<In>& ins, std::vector<NamedAttribute> attrs, int64_t opset = 13,
              const std::string& op = "Resize") {
  std::vector<Tensor> feeds;
  auto g = one_node(op, ins, std::move(attrs), opset, &feeds);
  return run_cpu(*g, feeds)[0];
}

Tensor image4x4() {
  std::vector<float> v(16);
  std::iota(v.begin(), v.end(), 1.0f);
  return floats(v, {1, 1, 4, 4});
}
Tensor image2x2() { return floats({1, 2, 3, 4}, {1, 1, 2, 2}); }
Tensor scales(std::vector<float> s) {
  const int64_t n = static_cast<int64_t>(s.size());
  return floats(std::move(s), {n});
}
NamedAttribute mode(const std::string& m) { return attr("mode", m); }
NamedAttribute ctm(const std::string& m) { return attr("coordinate_transformation_mode", m); }

}  // namespace

TEST(CpuResize, NearestUpsampleAsymmetric) {
  Tensor y = resize({{image2x2()}, absent(), {scales({1, 1, 2, 3})}},
                    {ctm("asymmetric"), attr("nearest_mode", std::string("floor"))});
  expect_close(y, floats({1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4}, {1, 1, 4, 6}));
}

TEST(CpuResize, NearestWorksOnIntegers) {
  Tensor x(DType::Int8, {1, 3});
  x.data<int8_t>()[0] = -5;
  x.data<int8_t>()[1] = 7;
  x.data<int8_t>()[2] = 100;
  Tensor y = resize({{x}, absent(), {scales({1, 0.5f})}}, {});
  ASSERT_EQ(y.dims(), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(y.data<int8_t>()[0], -5);  // half_pixel: (0 + 0.5) / 0.5 - 0.5 = 0.5, round_prefer_floor -> 0
  Tensor c = resize({{x}, absent(), {scales({1, 0.5f})}}, {attr("nearest_mode", std::string("round_prefer_ceil"))});
  EXPECT_EQ(c.data<int8_t>()[0], 7);
}

TEST(CpuResize, LinearHalfPixelUpsample) {
  Tensor y = resize({{image2x2()}, absent(), {scales({1, 1, 2, 2})}}, {mode("linear")});
  expect_close(y, floats({1, 1.25f, 1.75f, 2, 1.5f, 1.75f, 2.25f, 2.5f, 2.5f, 2.75f, 3.25f, 3.5f, 3, 3.25f, 3.75f, 4},
                         {1, 1, 4, 4}));
}

TEST(CpuResize, LinearAlignCorners) {
  Tensor y = resize({{image2x2()}, absent(), {scales({1, 1, 2, 2})}}, {mode("linear"), ctm("align_corners")});
  expect_close(y, floats({1, 1.3333333f, 1.6666666f, 2, 1.6666666f, 2, 2.3333333f, 2.6666667f, 2.3333333f, 2.6666667f,
                          3, 3.3333333f, 3, 3.3333333f, 3.6666667f, 4},
                         {1, 1, 4, 4}));
}

TEST(CpuResize, CubicDownsample) {
  Tensor y = resize({{image4x4()}, absent(), {scales({1, 1, 0.8f, 0.8f})}}, {mode("cubic")});
  expect_close(y, floats({1.47119141f, 2.78125f, 4.08251953f, 6.71142578f, 8.02148438f, 9.32275391f, 11.91650391f,
                          13.2265625f, 14.52783108f},
                         {1, 1, 3, 3}));
}

TEST(CpuResize, AntialiasLinearDownsample) {
  Tensor y = resize({{image4x4()}, absent(), {scales({1, 1, 0.5f, 0.5f})}},
                    {mode("linear"), attr("antialias", int64_t{1})}, 18);
  expect_close(y, floats({4.125f, 5.875f, 11.125f, 12.875f}, {1, 1, 2, 2}));
}

TEST(CpuResize, TfCropAndResizeExtrapolates) {
  Tensor roi = floats({0, 0, 0.4f, 0.6f, 1, 1, 1.2f, 1.7f}, {8});
  Tensor y = resize({{image4x4()}, {roi}, absent(), {int64s({1, 1, 3, 3}, {4})}},
                    {mode("linear"), ctm("tf_crop_and_resize"), attr("extrapolation_value", 10.0f)});
  expect_close(y, floats({7.6f, 10, 10, 12.4f, 10, 10, 10, 10, 10}, {1, 1, 3, 3}));
}

TEST(CpuResize, HalfPixelSymmetricOnOneAxis) {
  Tensor y =
      resize({{image4x4()}, absent(), {scales({1, 1, 1, 0.75f})}}, {mode("linear"), ctm("half_pixel_symmetric")}, 19);
  expect_close(y, floats({1.1666666f, 2.5f, 3.8333333f, 5.1666665f, 6.5f, 7.8333335f, 9.166667f, 10.5f, 11.833333f,
                          13.166667f, 14.5f, 15.833333f},
                         {1, 1, 4, 3}));
}

TEST(CpuResize, SizesWithAxesAndKeepAspectRatio) {
  Tensor y = resize(
      {{image2x2()}, absent(), absent(), {int64s({7, 8}, {2})}},
      {attr("axes", std::vector<int64_t>{2, 3}), attr("keep_aspect_ratio_policy", std::string("not_larger"))}, 19);
  EXPECT_EQ(y.dims(), (std::vector<int64_t>{1, 1, 7, 7}));
}

TEST(CpuResize, Float16LinearComputesInFloat) {
  Tensor x(DType::Float16, {1, 1, 1, 2});
  x.data<uint16_t>()[0] = 0x3C00;  // 1.0
  x.data<uint16_t>()[1] = 0x4000;  // 2.0
  Tensor y = resize({{x}, absent(), {scales({1, 1, 1, 2})}}, {mode("linear")});
  ASSERT_EQ(y.dtype(), DType::Float16);
  expect_close(cpu::to_float32(y), floats({1, 1.25f, 1.75f, 2}, {1, 1, 1, 4}));
}

TEST(CpuResize, ErrorsAreBadInput) {
  // Both scales and sizes; neither; an unknown mode.
  EXPECT_THROW(resize({{image2x2()}, absent(), {scales({1, 1, 2, 2})}, {int64s({1, 1, 4, 4}, {4})}}, {}), Error);
  EXPECT_THROW(resize({{image2x2()}, absent(), {scales({1, 2})}}, {}), Error);
  EXPECT_THROW(resize({{image2x2()}, absent(), {scales({1, 1, 2, 2})}}, {mode("area")}), Error);
}

TEST(CpuResize, UnknownScalesGivePartialShapeAtImport) {
  auto g = one_node("Resize", {{image2x2()}, absent(), {scales({1, 1, 2, 2})}}, {}, 13, nullptr);
  infer_shapes(*g);
  const Shape& s = *g->outputs[0]->type.shape;
  ASSERT_EQ(s.size(), 4u);
  EXPECT_FALSE(s[2].is_static());
  auto c = one_node("Resize", {{image2x2()}, absent(), {scales({1, 1, 2, 3}), true}}, {}, 13, nullptr);
  infer_shapes(*c);
  EXPECT_EQ(*c->outputs[0]->type.shape, (Shape{1, 1, 4, 6}));
}

TEST(CpuUpsample, Opset9InputAndOpset7Attribute) {
  Tensor want = floats({1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4}, {1, 1, 4, 6});
  expect_close(resize({{image2x2()}, {scales({1, 1, 2, 3})}}, {}, 9, "Upsample"), want);
  expect_close(resize({{image2x2()}}, {attr("scales", std::vector<float>{1, 1, 2, 3})}, 7, "Upsample"), want);
  // Linear Upsample is asymmetric: x_ori = x / scale.
  expect_close(resize({{floats({1, 3}, {1, 2})}, {scales({1, 2})}}, {mode("linear")}, 9, "Upsample"),
               floats({1, 2, 3, 3}, {1, 4}));
}

TEST(ResizeCost, LinearCountsTapsPerResampledAxis) {
  // 2x2 -> 4x4: the last axis pass makes 2x4 outputs, the next 4x4, two taps each (2 flops/tap).
  auto g = one_node("Resize", {{image2x2()}, absent(), {scales({1, 1, 2, 2}), true}}, {mode("linear")}, 13, nullptr);
  infer_shapes(*g);
  auto c = node_cost(*g, *g->nodes()[0]);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->flops, 2 * 2 * (8 + 16));
  EXPECT_EQ(c->bytes_read, 16 + 16);
  EXPECT_EQ(c->bytes_written, 64);
  auto n = one_node("Resize", {{image2x2()}, absent(), {scales({1, 1, 2, 2}), true}}, {}, 13, nullptr);
  infer_shapes(*n);
  EXPECT_EQ(node_cost(*n, *n->nodes()[0])->flops, 0);
}

TEST(CpuResize, SymbolicBatchSurvivesInference) {
  GraphBuilder b(13);
  Value* x = b.input("x", DType::Float32, {Dim::sym("N"), 3, 2, 2});
  Value* s = b.initializer("s", scales({1, 1, 2, 2}));
  b.output(b.node("Resize", {x, nullptr, s}, {mode("linear")}));
  auto g = b.build();
  infer_shapes(*g);
  EXPECT_EQ(*g->outputs[0]->type.shape, (Shape{Dim::sym("N"), 3, 4, 4}));
}
