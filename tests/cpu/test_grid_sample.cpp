// GridSample on the CPU reference. Expected values are the ONNX reference implementation's
// (onnx.reference, onnx 1.23) for the same inputs; torch 2.15's grid_sample gives the same to 1e-7.
#include <cmath>
#include <limits>
#include <numeric>

#include "ir/cost.h"
#include "ir/half.h"
#include "test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

std::unique_ptr<Graph> grid_sample_graph(const Tensor& x, const Tensor& grid, std::vector<NamedAttribute> attrs,
                                         int64_t opset) {
  GraphBuilder b(opset);
  Value* xv = b.input("x", x.dtype(), shape_of(x.dims()));
  Value* gv = b.input("grid", grid.dtype(), shape_of(grid.dims()));
  b.output(b.node("GridSample", {xv, gv}, std::move(attrs)));
  return b.build();
}

Tensor grid_sample(const Tensor& x, const Tensor& grid, std::vector<NamedAttribute> attrs, int64_t opset = 20) {
  auto g = grid_sample_graph(x, grid, std::move(attrs), opset);
  return run_cpu(*g, {x, grid})[0];
}

std::string run_error(const Tensor& x, const Tensor& grid, std::vector<NamedAttribute> attrs, int64_t opset) {
  try {
    grid_sample(x, grid, std::move(attrs), opset);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

NamedAttribute mode(const std::string& m) { return attr("mode", m); }
NamedAttribute padding(const std::string& p) { return attr("padding_mode", p); }
NamedAttribute aligned() { return attr("align_corners", int64_t{1}); }

/// X [2, 1, 2, 3, 4] = 0.5 i - 3 and its grid [2, 1, 2, 2, 3]: some points outside [-1, 1].
Tensor volume() {
  std::vector<float> v(48);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.5f * static_cast<float>(i) - 3;
  return floats(v, {2, 1, 2, 3, 4});
}
Tensor volume_grid() {
  return floats({-1.1f, 0.3f,   0.9f,        0.25f,   -0.6f, -0.2f, 1,     1,     -1,   0.77f,   0.05f,   0.4f,
                 0.99f, -0.27f, -0.8099999f, -0.225f, 0.54f, 0.18f, -0.9f, -0.9f, 0.9f, -0.693f, -0.045f, -0.36f},
                {2, 1, 2, 2, 3});
}
Tensor image() { return floats({0.5f, 1.5f, -2, 3, 4, -1, 0, 2, 1, 1, 3, -3}, {1, 1, 3, 4}); }
Tensor far_grid() { return floats({-3.7f, 2.9f, 2.2f, -1.9f, 0.1f, 0.6f, -0.5f, 5.3f}, {1, 2, 2, 2}); }

}  // namespace

TEST(CpuGridSample, TrilinearOverThreeAxes) {
  expect_close(grid_sample(volume(), volume_grid(), {}),
               floats({1.062f, 0, 0.3125f, 5.808f, 4.194373f, 17.225f, 4.095001f, 11.762f}, {2, 1, 1, 2, 2}), 1e-5,
               1e-5);
}

TEST(CpuGridSample, NearestReflectedAtTheCornerCenters) {
  expect_close(grid_sample(volume(), volume_grid(), {mode("nearest"), padding("reflection"), aligned()}),
               floats({5, -2, 2.5f, 6.5f, 12.5f, 19.5f, 15, 11}, {2, 1, 1, 2, 2}));
}

TEST(CpuGridSample, CubicOnOneAxisEachPadding) {
  const Tensor x = floats({1, -2, 4, 0.5f, 3, -1}, {1, 1, 6});
  const Tensor g = floats({-1.3f, -0.95f, -0.2f, 0.33f, 0.999f, 1.6f}, {1, 6, 1});
  expect_close(grid_sample(x, g, {mode("cubic"), padding("border")}),
               floats({1, 1.332718f, 3.700376f, 1.754676f, -1.377237f, -1}, {1, 1, 6}), 1e-5, 1e-5);
  expect_close(grid_sample(x, g, {mode("cubic")}),
               floats({-0.108f, 0.9997806f, 3.700376f, 1.754676f, -0.8806118f, 0}, {1, 1, 6}), 1e-5, 1e-5);
}

// Points several widths outside the image reflect back and forth until they land inside.
TEST(CpuGridSample, ReflectionFarOutside) {
  expect_close(grid_sample(image(), far_grid(), {mode("cubic"), padding("reflection")}),
               floats({-2.148546f, -1.117496f, 2.794026f, 0.791348f}, {1, 1, 2, 2}), 1e-5, 1e-5);
  expect_close(grid_sample(image(), far_grid(), {mode("linear"), padding("reflection"), aligned()}),
               floats({-1.6475f, -0.64f, 1.24f, 0.7749999f}, {1, 1, 2, 2}), 1e-5, 1e-5);
  // Opset 16 spells the modes bilinear and bicubic; the results are the same.
  expect_close(grid_sample(image(), far_grid(), {mode("bicubic"), padding("reflection")}, 16),
               floats({-2.148546f, -1.117496f, 2.794026f, 0.791348f}, {1, 1, 2, 2}), 1e-5, 1e-5);
}

TEST(CpuGridSample, NearestRoundsHalfwayToEven) {
  // Along W (4 wide): -0.5 -> 1.0 (x = 1.0 exactly), 0 -> 1.5 -> 2, 0.5 -> 2.5 -> 2; H row 1.
  const Tensor g = floats({-0.5f, 0, 0, 0, 0.5f, 0, 0.25f, -0.3333334f}, {1, 2, 2, 2});
  expect_close(grid_sample(image(), g, {mode("nearest")}, 16), floats({4, 0, 0, -2}, {1, 1, 2, 2}));
}

TEST(CpuGridSample, HalfDataAndAGridOfAnotherType) {
  Tensor x = image();
  Tensor xh(DType::Float16, x.dims());
  for (int64_t i = 0; i < x.numel(); ++i) xh.data<uint16_t>()[i] = float_to_half(x.data<float>()[i]);
  const Tensor y = grid_sample(xh, far_grid(), {mode("linear"), padding("reflection"), aligned()});
  ASSERT_EQ(y.dtype(), DType::Float16);
  for (int64_t i = 0; i < 4; ++i)
    EXPECT_NEAR(half_to_float(y.data<uint16_t>()[i]), (std::vector<float>{-1.6475f, -0.64f, 1.24f, 0.775f})[i], 2e-3);
}

// A NaN coordinate reads nothing under zeros padding, and has no position under the others.
TEST(CpuGridSample, NanCoordinates) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor g = floats({nan, 0, 0, 0}, {1, 1, 2, 2});
  const Tensor zeros = grid_sample(image(), g, {});
  EXPECT_EQ(zeros.data<float>()[0], 0);
  EXPECT_FALSE(std::isnan(zeros.data<float>()[1]));
  for (const char* p : {"border", "reflection"}) {
    const Tensor y = grid_sample(image(), g, {padding(p)});
    EXPECT_TRUE(std::isnan(y.data<float>()[0])) << p;
    EXPECT_FALSE(std::isnan(y.data<float>()[1])) << p;
  }
}

TEST(CpuGridSample, ShapesFollowTheGrid) {
  GraphBuilder b(20);
  Value* x = b.input("x", DType::Float32, {Dim::sym("N"), 3, 17, 9});
  Value* g = b.input("g", DType::Float32, {Dim::sym("N"), 5, 7, 2});
  b.output(b.node("GridSample", {x, g}, {}));
  auto graph = b.build();
  infer_shapes(*graph);
  EXPECT_EQ(*graph->outputs[0]->type.shape, (Shape{Dim::sym("N"), 3, 5, 7}));
  const auto c = node_cost(*graph, *graph->nodes()[0]);
  EXPECT_FALSE(c.has_value());  // symbolic batch: no cost yet
  auto fixed = grid_sample_graph(floats(std::vector<float>(2 * 3 * 4 * 4), {2, 3, 4, 4}),
                                 floats(std::vector<float>(2 * 5 * 7 * 2), {2, 5, 7, 2}), {mode("cubic")}, 20);
  infer_shapes(*fixed);
  const auto fc = node_cost(*fixed, *fixed->nodes()[0]);
  ASSERT_TRUE(fc.has_value());
  EXPECT_EQ(fc->flops, 2.0 * 16 * (2 * 3 * 5 * 7));
}

TEST(CpuGridSample, BadInputsNameTheProblem) {
  const Tensor x = image();
  auto has = [](const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; };
  std::string e = run_error(x, floats({0, 0, 0}, {1, 1, 1, 3}), {}, 20);
  EXPECT_TRUE(has(e, "grid's last dim must be 2")) << e;
  e = run_error(x, floats({0, 0}, {1, 1, 2}), {}, 20);
  EXPECT_TRUE(has(e, "rank")) << e;
  e = run_error(x, far_grid(), {mode("linear")}, 16);
  EXPECT_TRUE(has(e, "mode 'linear' is not one of bilinear, nearest, bicubic (opset 16)")) << e;
  e = run_error(x, far_grid(), {mode("bicubic")}, 20);
  EXPECT_TRUE(has(e, "mode 'bicubic' is not one of linear, nearest, cubic (opset 20)")) << e;
  e = run_error(x, far_grid(), {padding("wrap")}, 20);
  EXPECT_TRUE(has(e, "padding_mode 'wrap'")) << e;
  e = run_error(x, far_grid(), {attr("align_corners", int64_t{2})}, 20);
  EXPECT_TRUE(has(e, "align_corners must be 0 or 1")) << e;
  e = run_error(volume(), volume_grid(), {}, 16);
  EXPECT_TRUE(has(e, "before opset 20 takes 4-D inputs")) << e;
  e = run_error(x, floats(std::vector<float>(16), {2, 2, 2, 2}), {}, 20);
  EXPECT_TRUE(has(e, "X's batch is 1 but the grid's is 2")) << e;
  e = run_error(floats({}, {1, 1, 0, 4}), far_grid(), {}, 20);
  EXPECT_TRUE(has(e, "empty spatial axis")) << e;
  EXPECT_TRUE(has(e, "GridSample")) << e;
}

namespace {

/// AffineGrid(theta, size) with size a graph input (its value known only at run time) or an
/// initializer.
Tensor affine_grid(const Tensor& theta, std::vector<int64_t> size, bool align, bool size_known = true) {
  GraphBuilder b(20);
  Value* t = b.input("theta", theta.dtype(), shape_of(theta.dims()));
  const int64_t n = static_cast<int64_t>(size.size());
  Tensor sz = int64s(size, {n});
  Value* s = size_known ? b.initializer("size", sz) : b.input("size", DType::Int64, Shape{n});
  b.output(b.node("AffineGrid", {t, s}, {attr("align_corners", int64_t{align ? 1 : 0})}));
  auto g = b.build();
  std::vector<Tensor> feeds{theta};
  if (!size_known) feeds.push_back(sz);
  return run_cpu(*g, feeds)[0];
}

}  // namespace

TEST(CpuAffineGrid, TwoAxesByHand) {
  // theta = [[2, 0, 0.5], [0, -1, 0]]: x' = 2x + 0.5, y' = -y, on an H 2 x W 3 grid.
  const Tensor theta = floats({2, 0, 0.5f, 0, -1, 0}, {1, 2, 3});
  // align_corners 0: x in {-2/3, 0, 2/3}, y in {-1/2, 1/2}.
  std::vector<float> want;
  for (float y : {-0.5f, 0.5f})
    for (float x : {-2.0f / 3, 0.0f, 2.0f / 3}) want.insert(want.end(), {2 * x + 0.5f, -y});
  for (bool known : {true, false})
    expect_close(affine_grid(theta, {1, 5, 2, 3}, false, known), floats(want, {1, 2, 3, 2}));
  // align_corners 1: x in {-1, 0, 1}, y in {-1, 1}.
  want.clear();
  for (float y : {-1.0f, 1.0f})
    for (float x : {-1.0f, 0.0f, 1.0f}) want.insert(want.end(), {2 * x + 0.5f, -y});
  expect_close(affine_grid(theta, {1, 5, 2, 3}, true), floats(want, {1, 2, 3, 2}));
}

TEST(CpuAffineGrid, ThreeAxesIdentityIsTheBaseGrid) {
  const Tensor theta = floats(
      {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, /* second batch: a shift */ 1, 0, 0, 1, 0, 1, 0, 0, 0, 0, 1, 0}, {2, 3, 4});
  const Tensor g = affine_grid(theta, {2, 1, 2, 1, 3}, false);
  ASSERT_EQ(g.dims(), (std::vector<int64_t>{2, 2, 1, 3, 3}));
  const float* p = g.data<float>();
  // batch 0, d 1, h 0, w 2: (x, y, z) = (2/3, 0, 1/2); batch 1 adds 1 to x.
  const int64_t at = ((0 * 2 + 1) * 1 + 0) * 3 + 2;
  EXPECT_FLOAT_EQ(p[at * 3 + 0], 2.0f / 3);
  EXPECT_FLOAT_EQ(p[at * 3 + 1], 0.0f);
  EXPECT_FLOAT_EQ(p[at * 3 + 2], 0.5f);
  EXPECT_FLOAT_EQ(p[(at + 6) * 3 + 0], 2.0f / 3 + 1);
}

TEST(CpuAffineGrid, BadInputsNameTheProblem) {
  auto error = [](const Tensor& theta, std::vector<int64_t> size, bool known) {
    try {
      affine_grid(theta, std::move(size), false, known);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const Tensor theta2 = floats(std::vector<float>(6), {1, 2, 3});
  std::string e = error(theta2, {1, 1, 2, 2, 2}, true);
  EXPECT_NE(e.find("theta is for 2 spatial axes but size has 3"), std::string::npos) << e;
  e = error(theta2, {1, 1, 2, 2, 2}, false);  // size's value known only at run time
  EXPECT_NE(e.find("theta is for 2 spatial axes but size has 3"), std::string::npos) << e;
  e = error(floats(std::vector<float>(8), {1, 2, 4}), {1, 1, 2, 2}, true);
  EXPECT_NE(e.find("theta must be [N, 2, 3] or [N, 3, 4]"), std::string::npos) << e;
  e = error(theta2, {1, 1, 2}, true);
  EXPECT_NE(e.find("size must hold 4 values"), std::string::npos) << e;
  e = error(theta2, {2, 1, 2, 2}, true);
  EXPECT_NE(e.find("theta's batch is 1 but size's is 2"), std::string::npos) << e;
}
