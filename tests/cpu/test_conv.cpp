// Conv and ConvTranspose on the CPU reference: hand-computed cases, then every path (im2col +
// GEMM, 1×1 without im2col, depthwise direct, per-group tasks) against direct loops over 1-D,
// 2-D and 3-D with groups, strides, dilations, pads and auto_pad.
#include <algorithm>
#include <random>
#include <string>

#include "test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

Tensor run_one(const std::string& op, const std::vector<Tensor>& ins, std::vector<NamedAttribute> attrs = {}) {
  GraphBuilder b;
  std::vector<Value*> vs;
  for (size_t i = 0; i < ins.size(); ++i)
    vs.push_back(b.input("x" + std::to_string(i), ins[i].dtype(), shape_of(ins[i].dims())));
  b.output(b.node(op, vs, std::move(attrs)));
  auto g = b.build();
  return run_cpu(*g, ins)[0];
}

struct ConvCase {
  std::vector<int64_t> x, w;  // X and W dims
  int64_t group;
  std::vector<int64_t> strides, dilations, pads;
  bool bias;
};

/// Index of a multi-dim position in row-major dims.
int64_t flat(const std::vector<int64_t>& dims, const std::vector<int64_t>& pos) {
  int64_t o = 0;
  for (size_t i = 0; i < dims.size(); ++i) o = o * dims[i] + pos[i];
  return o;
}

/// Advances `pos` through `dims` like an odometer; false after the last position.
bool next(std::vector<int64_t>& pos, const std::vector<int64_t>& dims) {
  for (size_t i = dims.size(); i-- > 0;) {
    if (++pos[i] < dims[i]) return true;
    pos[i] = 0;
  }
  return false;
}

Tensor naive_conv(const Tensor& x, const Tensor& w, const Tensor* b, const ConvCase& c) {
  const size_t nd = x.rank() - 2;
  const int64_t N = x.dim(0), C = x.dim(1), M = w.dim(0), Cg = C / c.group, Mg = M / c.group;
  std::vector<int64_t> out{N, M}, in(x.dims().begin() + 2, x.dims().end()), k(w.dims().begin() + 2, w.dims().end());
  for (size_t i = 0; i < nd; ++i)
    out.push_back((in[i] + c.pads[i] + c.pads[i + nd] - ((k[i] - 1) * c.dilations[i] + 1)) / c.strides[i] + 1);
  Tensor y(DType::Float32, out);
  std::vector<int64_t> op(out.size(), 0);
  do {
    const int64_t n = op[0], m = op[1], grp = m / Mg;
    double s = b ? b->data<float>()[m] : 0;
    for (int64_t cc = 0; cc < Cg; ++cc) {
      std::vector<int64_t> kp(nd, 0);
      do {
        std::vector<int64_t> xp{n, grp * Cg + cc};
        bool inside = true;
        for (size_t i = 0; i < nd; ++i) {
          const int64_t p = op[i + 2] * c.strides[i] - c.pads[i] + kp[i] * c.dilations[i];
          inside = inside && p >= 0 && p < in[i];
          xp.push_back(p);
        }
        if (!inside) continue;
        std::vector<int64_t> wp{m, cc};
        wp.insert(wp.end(), kp.begin(), kp.end());
        s += static_cast<double>(x.data<float>()[flat(x.dims(), xp)]) * w.data<float>()[flat(w.dims(), wp)];
      } while (next(kp, k));
    }
    y.data<float>()[flat(out, op)] = static_cast<float>(s);
  } while (next(op, out));
  return y;
}

std::vector<NamedAttribute> conv_attrs(const ConvCase& c) {
  return {attr("group", c.group), attr("strides", c.strides), attr("dilations", c.dilations), attr("pads", c.pads)};
}

Tensor naive_conv_transpose(const Tensor& x, const Tensor& w, const Tensor* b, int64_t group,
                            const std::vector<int64_t>& strides, const std::vector<int64_t>& dilations,
                            const std::vector<int64_t>& pads, const std::vector<int64_t>& out_spatial) {
  const size_t nd = x.rank() - 2;
  const int64_t N = x.dim(0), C = x.dim(1), Cg = C / group, Mg = w.dim(1), M = Mg * group;
  std::vector<int64_t> out{N, M};
  out.insert(out.end(), out_spatial.begin(), out_spatial.end());
  std::vector<int64_t> k(w.dims().begin() + 2, w.dims().end());
  Tensor y(DType::Float32, out);
  std::vector<double> acc(static_cast<size_t>(y.numel()), 0.0);
  std::vector<int64_t> xp(x.rank(), 0);
  do {
    const int64_t n = xp[0], c = xp[1], grp = c / Cg;
    for (int64_t mm = 0; mm < Mg; ++mm) {
      std::vector<int64_t> kp(nd, 0);
      do {
        std::vector<int64_t> yp{n, grp * Mg + mm};
        bool inside = true;
        for (size_t i = 0; i < nd; ++i) {
          const int64_t p = xp[i + 2] * strides[i] - pads[i] + kp[i] * dilations[i];
          inside = inside && p >= 0 && p < out_spatial[i];
          yp.push_back(p);
        }
        if (!inside) continue;
        std::vector<int64_t> wp{c, mm};
        wp.insert(wp.end(), kp.begin(), kp.end());
        acc[static_cast<size_t>(flat(out, yp))] +=
            static_cast<double>(x.data<float>()[flat(x.dims(), xp)]) * w.data<float>()[flat(w.dims(), wp)];
      } while (next(kp, k));
    }
  } while (next(xp, x.dims()));
  for (int64_t i = 0; i < y.numel(); ++i)
    y.data<float>()[i] =
        static_cast<float>(acc[static_cast<size_t>(i)] + (b ? b->data<float>()[(i / (y.numel() / N / M)) % M] : 0));
  return y;
}

}  // namespace

TEST(CpuConv, HandComputed2x2Kernel) {
  // 3x3 input 1..9, 2x2 kernel of ones: each output sums a 2x2 block; bias 1.
  auto y = run_one("Conv", {floats({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3}), floats({1, 1, 1, 1}, {1, 1, 2, 2}),
                            floats({1}, {1})});
  expect_close(y, floats({13, 17, 25, 29}, {1, 1, 2, 2}));
  // Padding 1, stride 2: corners see 2x2 blocks of the input.
  y = run_one("Conv",
              {floats({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3}), floats({1, 1, 1, 1, 1, 1, 1, 1, 1}, {1, 1, 3, 3})},
              {attr("pads", std::vector<int64_t>{1, 1, 1, 1}), attr("strides", std::vector<int64_t>{2, 2})});
  expect_close(y, floats({12, 16, 24, 28}, {1, 1, 2, 2}));
}

TEST(CpuConv, MatchesDirectLoops) {
  const std::vector<ConvCase> cases = {
      // 2-D: plain, strided+padded+dilated, grouped, depthwise (with multiplier), 1x1, batch.
      {{1, 3, 7, 6}, {4, 3, 3, 3}, 1, {1, 1}, {1, 1}, {0, 0, 0, 0}, true},
      {{2, 4, 9, 8}, {6, 4, 3, 2}, 1, {2, 1}, {2, 1}, {1, 0, 2, 1}, false},
      {{1, 6, 5, 5}, {4, 3, 3, 3}, 2, {1, 1}, {1, 1}, {1, 1, 1, 1}, true},
      {{2, 4, 8, 7}, {8, 1, 3, 3}, 4, {2, 2}, {1, 1}, {1, 1, 1, 1}, true},
      {{1, 5, 6, 6}, {5, 1, 3, 3}, 5, {1, 1}, {2, 2}, {2, 2, 2, 2}, false},
      {{3, 8, 5, 4}, {6, 8, 1, 1}, 1, {1, 1}, {1, 1}, {0, 0, 0, 0}, true},
      {{1, 8, 5, 4}, {6, 8, 1, 1}, 1, {2, 2}, {1, 1}, {0, 0, 0, 0}, false},
      // Many small groups (the one-task-per-thread path).
      {{4, 16, 6, 6}, {16, 2, 3, 3}, 8, {1, 1}, {1, 1}, {1, 1, 1, 1}, true},
      // 1-D and 3-D.
      {{2, 3, 11}, {5, 3, 3}, 1, {2}, {2}, {1, 2}, true},
      {{1, 4, 9}, {4, 1, 5}, 4, {1}, {1}, {2, 2}, false},
      {{1, 2, 5, 6, 4}, {3, 2, 2, 3, 2}, 1, {1, 2, 1}, {1, 1, 2}, {0, 1, 1, 1, 0, 0}, true},
      {{1, 4, 4, 5, 5}, {4, 1, 3, 3, 3}, 4, {1, 1, 1}, {1, 1, 1}, {1, 1, 1, 1, 1, 1}, true},
  };
  unsigned seed = 100;
  for (const auto& c : cases) {
    SCOPED_TRACE("X " + dims_str(c.x) + " W " + dims_str(c.w) + " group " + std::to_string(c.group));
    Tensor x = uniform_floats(c.x, seed++), w = uniform_floats(c.w, seed++), b = uniform_floats({c.w[0]}, seed++);
    std::vector<Tensor> ins{x, w};
    if (c.bias) ins.push_back(b);
    expect_close(run_one("Conv", ins, conv_attrs(c)), naive_conv(x, w, c.bias ? &b : nullptr, c), 1e-4, 1e-5);
  }
}

TEST(CpuConv, AutoPad) {
  Tensor x = uniform_floats({1, 2, 7, 6}, 1), w = uniform_floats({3, 2, 3, 2}, 2);
  // SAME_UPPER with stride 2: out = ceil(in / 2); total pad (H: 2, W: 0 -> begin 1/0, end 1/0).
  auto y = run_one("Conv", {x, w},
                   {attr("auto_pad", std::string("SAME_UPPER")), attr("strides", std::vector<int64_t>{2, 2})});
  ConvCase c{{1, 2, 7, 6}, {3, 2, 3, 2}, 1, {2, 2}, {1, 1}, {1, 0, 1, 0}, false};
  expect_close(y, naive_conv(x, w, nullptr, c), 1e-4, 1e-5);
  // SAME_LOWER with stride 1: H pad 2 (1/1), W pad 1 (begin 1, end 0).
  y = run_one("Conv", {x, w}, {attr("auto_pad", std::string("SAME_LOWER"))});
  c = {{1, 2, 7, 6}, {3, 2, 3, 2}, 1, {1, 1}, {1, 1}, {1, 1, 1, 0}, false};
  expect_close(y, naive_conv(x, w, nullptr, c), 1e-4, 1e-5);
  y = run_one("Conv", {x, w}, {attr("auto_pad", std::string("VALID")), attr("pads", std::vector<int64_t>{1, 1, 1, 1})});
  c = {{1, 2, 7, 6}, {3, 2, 3, 2}, 1, {1, 1}, {1, 1}, {0, 0, 0, 0}, false};
  expect_close(y, naive_conv(x, w, nullptr, c), 1e-4, 1e-5);
}

TEST(CpuConv, BadShapesAreErrors) {
  Tensor x = uniform_floats({1, 3, 5, 5}, 1);
  EXPECT_THROW(run_one("Conv", {x, uniform_floats({2, 2, 3, 3}, 2)}), Error);                               // channels
  EXPECT_THROW(run_one("Conv", {x, uniform_floats({2, 1, 3, 3}, 2)}, {attr("group", int64_t{2})}), Error);  // group
  EXPECT_THROW(run_one("Conv", {x, uniform_floats({2, 3, 7, 7}, 2)}), Error);                               // window
  EXPECT_THROW(run_one("Conv", {x, uniform_floats({2, 3, 3, 3}, 2), uniform_floats({3}, 3)}), Error);       // bias
  EXPECT_THROW(run_one("Conv", {x, uniform_floats({2, 3, 3, 3}, 2)}, {attr("auto_pad", std::string("SAME"))}), Error);
}

TEST(CpuConvTranspose, HandComputed) {
  // 2x2 input, 2x2 kernel of ones, stride 2: each input value fills its own 2x2 block.
  auto y = run_one("ConvTranspose", {floats({1, 2, 3, 4}, {1, 1, 2, 2}), floats({1, 1, 1, 1}, {1, 1, 2, 2})},
                   {attr("strides", std::vector<int64_t>{2, 2})});
  expect_close(y, floats({1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4}, {1, 1, 4, 4}));
  // Stride 1: overlapping blocks add up.
  y = run_one("ConvTranspose", {floats({1, 2}, {1, 1, 2}), floats({1, 10}, {1, 1, 2})});
  expect_close(y, floats({1, 12, 20}, {1, 1, 3}));
}

TEST(CpuConvTranspose, MatchesDirectLoops) {
  struct Case {
    std::vector<int64_t> x, w;
    int64_t group;
    std::vector<int64_t> strides, dilations, pads, output_padding;
    bool bias;
  };
  const std::vector<Case> cases = {
      {{1, 3, 4, 5}, {3, 2, 3, 3}, 1, {2, 2}, {1, 1}, {1, 1, 1, 1}, {1, 0}, true},
      {{2, 4, 3, 3}, {4, 3, 2, 3}, 2, {1, 2}, {2, 1}, {0, 1, 1, 0}, {0, 1}, false},
      {{1, 4, 5}, {4, 2, 3}, 1, {3}, {1}, {1, 0}, {2}, true},
      {{1, 2, 3, 3, 2}, {2, 2, 2, 2, 2}, 1, {2, 1, 2}, {1, 1, 1}, {0, 0, 1, 0, 0, 0}, {1, 0, 0}, true},
      {{2, 6, 4, 4}, {6, 5, 1, 1}, 1, {1, 1}, {1, 1}, {0, 0, 0, 0}, {0, 0}, true},  // 1x1: no col2im
  };
  unsigned seed = 200;
  for (const auto& c : cases) {
    SCOPED_TRACE("X " + dims_str(c.x) + " W " + dims_str(c.w));
    const size_t nd = c.x.size() - 2;
    Tensor x = uniform_floats(c.x, seed++), w = uniform_floats(c.w, seed++),
           b = uniform_floats({c.w[1] * c.group}, seed++);
    std::vector<int64_t> out;
    for (size_t i = 0; i < nd; ++i)
      out.push_back(c.strides[i] * (c.x[i + 2] - 1) + c.output_padding[i] + (c.w[i + 2] - 1) * c.dilations[i] + 1 -
                    c.pads[i] - c.pads[i + nd]);
    std::vector<Tensor> ins{x, w};
    if (c.bias) ins.push_back(b);
    auto y = run_one("ConvTranspose", ins,
                     {attr("group", c.group), attr("strides", c.strides), attr("dilations", c.dilations),
                      attr("pads", c.pads), attr("output_padding", c.output_padding)});
    expect_close(y, naive_conv_transpose(x, w, c.bias ? &b : nullptr, c.group, c.strides, c.dilations, c.pads, out),
                 1e-4, 1e-5);
  }
}

TEST(CpuConvTranspose, EmptyInputWithAHugeDimGivesTheBias) {
  // [1, 1, 2^32, 0]: no input value, so every output is the bias. The scatter walks only the input
  // positions that land in the output (fuzz finding 16 walked all 2^32 rows per tap and channel).
  Tensor x(DType::Float32, {1, 1, int64_t{1} << 32, 0});
  Tensor w = uniform_floats({1, 2, 3, 3}, 3), b = floats({0.5f, -2.0f}, {2});
  auto y = run_one("ConvTranspose", {x, w, b},
                   {attr("strides", std::vector<int64_t>{3, 2}), attr("output_padding", std::vector<int64_t>{1, 1}),
                    attr("output_shape", std::vector<int64_t>{10, 8})});
  std::vector<float> want(2 * 10 * 8);
  std::fill(want.begin(), want.begin() + 80, 0.5f);
  std::fill(want.begin() + 80, want.end(), -2.0f);
  expect_close(y, floats(want, {1, 2, 10, 8}));
}

TEST(CpuConvTranspose, OutputShapeAndAutoPad) {
  Tensor x = uniform_floats({1, 1, 3, 3}, 1), w = uniform_floats({1, 2, 3, 3}, 2);
  // output_shape 7x7 with stride 2: full size 7, no padding.
  auto y = run_one("ConvTranspose", {x, w},
                   {attr("strides", std::vector<int64_t>{2, 2}), attr("output_shape", std::vector<int64_t>{7, 7})});
  expect_close(y, naive_conv_transpose(x, w, nullptr, 1, {2, 2}, {1, 1}, {0, 0, 0, 0}, {7, 7}), 1e-4, 1e-5);
  // output_shape 6x5: total padding 1 and 2; NOTSET puts the larger half first.
  y = run_one("ConvTranspose", {x, w},
              {attr("strides", std::vector<int64_t>{2, 2}), attr("output_shape", std::vector<int64_t>{6, 5})});
  expect_close(y, naive_conv_transpose(x, w, nullptr, 1, {2, 2}, {1, 1}, {1, 1, 0, 1}, {6, 5}), 1e-4, 1e-5);
  // SAME_UPPER: output in·stride = 6, total padding 1, the smaller half first.
  y = run_one("ConvTranspose", {x, w},
              {attr("strides", std::vector<int64_t>{2, 2}), attr("auto_pad", std::string("SAME_UPPER"))});
  expect_close(y, naive_conv_transpose(x, w, nullptr, 1, {2, 2}, {1, 1}, {0, 0, 1, 1}, {6, 6}), 1e-4, 1e-5);
}
