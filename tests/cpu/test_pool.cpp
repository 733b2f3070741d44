// Pools on the CPU reference: hand-computed windows with padding, ceil_mode, dilations, the
// MaxPool Indices output in both storage orders, and the Global forms.
#include <cmath>
#include <string>

#include "test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

std::vector<Tensor> run_pool(const std::string& op, const Tensor& x, std::vector<NamedAttribute> attrs,
                             size_t outputs = 1, int64_t opset = 17) {
  GraphBuilder b(opset);
  Value* v = b.input("x", x.dtype(), shape_of(x.dims()));
  for (Value* o : b.node_n(op, {v}, outputs, std::move(attrs))) b.output(o);
  auto g = b.build();
  return run_cpu(*g, {x});
}

// 4x4 input 1..16.
Tensor grid4() {
  std::vector<float> v(16);
  for (int i = 0; i < 16; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i + 1);
  return floats(v, {1, 1, 4, 4});
}

std::vector<int64_t> ints(std::initializer_list<int64_t> v) { return v; }

}  // namespace

TEST(CpuMaxPool, StridesPadsAndIndices) {
  auto out = run_pool("MaxPool", grid4(), {attr("kernel_shape", ints({2, 2})), attr("strides", ints({2, 2}))}, 2);
  expect_close(out[0], floats({6, 8, 14, 16}, {1, 1, 2, 2}));
  expect_close(out[1], int64s({5, 7, 13, 15}, {1, 1, 2, 2}));
  // Column-major indices over the spatial dims: (h, w) -> h + w·H.
  out = run_pool("MaxPool", grid4(),
                 {attr("kernel_shape", ints({2, 2})), attr("strides", ints({2, 2})), attr("storage_order", int64_t{1})},
                 2);
  expect_close(out[1], int64s({5, 13, 7, 15}, {1, 1, 2, 2}));
  // Padding is never the maximum, even for negative inputs.
  Tensor neg = floats({-1, -2, -3, -4}, {1, 1, 2, 2});
  out = run_pool("MaxPool", neg, {attr("kernel_shape", ints({2, 2})), attr("pads", ints({1, 1, 1, 1}))});
  expect_close(out[0], floats({-1, -1, -2, -1, -1, -2, -3, -3, -4}, {1, 1, 3, 3}));
}

TEST(CpuMaxPool, CeilModeAndDilation) {
  // 4x4, kernel 3, stride 2: floor gives 1x1, ceil 2x2 (the last windows are clipped).
  auto out =
      run_pool("MaxPool", grid4(),
               {attr("kernel_shape", ints({3, 3})), attr("strides", ints({2, 2})), attr("ceil_mode", int64_t{1})});
  expect_close(out[0], floats({11, 12, 15, 16}, {1, 1, 2, 2}));
  // Dilation 2 with a 2x2 kernel reads (0,0),(0,2),(2,0),(2,2) relative to each start.
  out = run_pool("MaxPool", grid4(), {attr("kernel_shape", ints({2, 2})), attr("dilations", ints({2, 2}))});
  expect_close(out[0], floats({11, 12, 15, 16}, {1, 1, 2, 2}));
  // ceil_mode never starts a window in the end padding: 4 wide, kernel 2, stride 2, end pad 1
  // -> windows start at 0 and 2, not 4.
  Tensor x = floats({1, 2, 3, 4}, {1, 1, 4});
  out = run_pool("MaxPool", x,
                 {attr("kernel_shape", ints({2})), attr("strides", ints({2})), attr("pads", ints({0, 1})),
                  attr("ceil_mode", int64_t{1})});
  expect_close(out[0], floats({2, 4}, {1, 1, 2}));
  // ... but a window that starts inside the input and runs into the padding is kept.
  x = floats({1, 2, 3, 4, 5}, {1, 1, 5});
  out = run_pool("MaxPool", x,
                 {attr("kernel_shape", ints({2})), attr("strides", ints({2})), attr("ceil_mode", int64_t{1})});
  expect_close(out[0], floats({2, 4, 5}, {1, 1, 3}));
}

TEST(CpuMaxPool, Int8AndSameUpper3D) {
  Tensor x(DType::Int8, {1, 1, 2, 2, 2});
  for (int i = 0; i < 8; ++i) x.data<int8_t>()[i] = static_cast<int8_t>(i * (i % 2 ? -1 : 1));  // 0,-1,2,-3,4,-5,6,-7
  auto out =
      run_pool("MaxPool", x, {attr("kernel_shape", ints({2, 2, 2})), attr("auto_pad", std::string("SAME_UPPER"))});
  Tensor want(DType::Int8, {1, 1, 2, 2, 2});
  const int8_t w[8] = {6, -1, 6, -3, 6, -5, 6, -7};
  for (int i = 0; i < 8; ++i) want.data<int8_t>()[i] = w[i];
  expect_close(out[0], want);
}

TEST(CpuAveragePool, CountIncludePad) {
  Tensor x = floats({1, 2, 3, 4}, {1, 1, 2, 2});
  // Kernel 2, pad 1: corner windows hold one input value.
  auto out = run_pool("AveragePool", x, {attr("kernel_shape", ints({2, 2})), attr("pads", ints({1, 1, 1, 1}))});
  expect_close(out[0], floats({1, 1.5, 2, 2, 2.5, 3, 3, 3.5, 4}, {1, 1, 3, 3}));
  out = run_pool(
      "AveragePool", x,
      {attr("kernel_shape", ints({2, 2})), attr("pads", ints({1, 1, 1, 1})), attr("count_include_pad", int64_t{1})});
  expect_close(out[0], floats({0.25, 0.75, 0.5, 1, 2.5, 1.5, 0.75, 1.75, 1}, {1, 1, 3, 3}));
}

TEST(CpuAveragePool, CeilModeDividesByTheClippedWindow) {
  auto out =
      run_pool("AveragePool", grid4(),
               {attr("kernel_shape", ints({3, 3})), attr("strides", ints({2, 2})), attr("ceil_mode", int64_t{1})});
  // Windows: rows 0-2/cols 0-2 (mean 6), cols 2-3 (mean 7.5), rows 2-3 (mean 12), both (mean 13.5).
  expect_close(out[0], floats({6, 7.5, 12, 13.5}, {1, 1, 2, 2}));
}

TEST(CpuLpPool, TwoNorm) {
  Tensor x = floats({3, 4, 0, 0, 6, 8}, {1, 1, 6});
  auto out = run_pool("LpPool", x, {attr("kernel_shape", ints({2})), attr("strides", ints({2}))});
  expect_close(out[0], floats({5, 0, 10}, {1, 1, 3}));
  out = run_pool("LpPool", x, {attr("kernel_shape", ints({2})), attr("strides", ints({2})), attr("p", int64_t{1})});
  expect_close(out[0], floats({7, 0, 14}, {1, 1, 3}));
}

TEST(CpuGlobalPool, AverageMaxLp) {
  Tensor x = floats({1, 2, 3, 4, -1, -2, -3, -4}, {1, 2, 2, 2});
  expect_close(run_pool("GlobalAveragePool", x, {})[0], floats({2.5, -2.5}, {1, 2, 1, 1}));
  expect_close(run_pool("GlobalMaxPool", x, {})[0], floats({4, -1}, {1, 2, 1, 1}));
  expect_close(run_pool("GlobalLpPool", x, {})[0], floats({std::sqrt(30.f), std::sqrt(30.f)}, {1, 2, 1, 1}));
}

TEST(CpuPool, BadAttributesAreErrors) {
  EXPECT_THROW(run_pool("MaxPool", grid4(), {attr("kernel_shape", ints({2}))}), Error);     // rank
  EXPECT_THROW(run_pool("MaxPool", grid4(), {attr("kernel_shape", ints({5, 5}))}), Error);  // window
  EXPECT_THROW(run_pool("AveragePool", grid4(), {attr("kernel_shape", ints({2, 2})), attr("strides", ints({0, 1}))}),
               Error);
  EXPECT_THROW(run_pool("MaxPool", grid4(), {}), Error);  // kernel_shape
  // dilations do not exist before AveragePool 19.
  EXPECT_THROW(run_pool("AveragePool", grid4(), {attr("kernel_shape", ints({2, 2})), attr("dilations", ints({1, 1}))}),
               Error);
}

TEST(CpuPool, MaxUnpoolUndoesMaxPoolIndices) {
  // MaxPool 2x2 stride 2 over 1..16 picks the bottom-right of each window; unpooling puts the
  // maxima back there and zeros elsewhere.
  const auto pooled =
      run_pool("MaxPool", grid4(), {attr("kernel_shape", ints({2, 2})), attr("strides", ints({2, 2}))}, 2);
  GraphBuilder b(11);
  Value* x = b.input("x", DType::Float32, shape_of({1, 1, 2, 2}));
  Value* i = b.input("i", DType::Int64, shape_of({1, 1, 2, 2}));
  b.output(b.node("MaxUnpool", {x, i}, {attr("kernel_shape", ints({2, 2})), attr("strides", ints({2, 2}))}));
  auto g = b.build();
  expect_close(run_cpu(*g, {pooled[0], pooled[1]})[0],
               floats({0, 0, 0, 0, 0, 6, 0, 8, 0, 0, 0, 0, 0, 14, 0, 16}, {1, 1, 4, 4}));
  // output_shape larger than the unpooled dims: the unpooled 4x4 is its leading corner.
  GraphBuilder b2(11);
  Value* x2 = b2.input("x", DType::Float32, shape_of({1, 1, 2, 2}));
  Value* i2 = b2.input("i", DType::Int64, shape_of({1, 1, 2, 2}));
  Value* s2 = b2.initializer("shape", int64s({1, 1, 5, 5}, {4}));
  b2.output(b2.node("MaxUnpool", {x2, i2, s2}, {attr("kernel_shape", ints({2, 2})), attr("strides", ints({2, 2}))}));
  auto g2 = b2.build();
  expect_close(run_cpu(*g2, {pooled[0], pooled[1]})[0],
               floats({0, 0, 0, 0, 0, 0, 6, 0, 8, 0, 0, 0, 0, 0, 0, 0, 14, 0, 16, 0, 0, 0, 0, 0, 0}, {1, 1, 5, 5}));
  // An index outside the unpooled tensor is an error naming the node, not a stray write.
  try {
    run_cpu(*g, {pooled[0], int64s({0, 1, 2, 16}, {1, 1, 2, 2})});
    ADD_FAILURE() << "index 16 of a 16-element tensor";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("index 16 is out of range"), std::string::npos) << e.what();
  }
}
