// Softmax, LogSoftmax, Hardmax and the two losses on the CPU reference.
#include <cfloat>
#include <cmath>
#include <limits>

#include "backend/cpu/kernels/exp_vec.h"
#include "test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

Tensor run1(const std::string& op, const Tensor& x, std::vector<NamedAttribute> attrs, int64_t opset = 13) {
  GraphBuilder b(opset);
  b.output(b.node(op, {b.input("x", x.dtype(), shape_of(x.dims()))}, std::move(attrs)));
  auto g = b.build();
  return run_cpu(*g, {x})[0];
}

/// Runs a loss op (NLL or SCE) with an optional weight and returns every output.
std::vector<Tensor> loss(const std::string& op, const Tensor& x, const Tensor& t, const Tensor* w,
                         std::vector<NamedAttribute> attrs, size_t n_out = 1) {
  GraphBuilder b(13);
  std::vector<Value*> ins{b.input("x", x.dtype(), shape_of(x.dims())), b.input("t", t.dtype(), shape_of(t.dims()))};
  std::vector<Tensor> feeds{x, t};
  if (w) {
    ins.push_back(b.input("w", w->dtype(), shape_of(w->dims())));
    feeds.push_back(*w);
  }
  for (Value* v : b.node_n(op, ins, n_out, std::move(attrs))) b.output(v);
  auto g = b.build();
  return run_cpu(*g, feeds);
}

}  // namespace

TEST(CpuSoftmax, LastAxisByHand) {
  // softmax(log 1, log 2, log 3) = (1, 2, 3) / 6.
  const Tensor x = floats({0, std::log(2.f), std::log(3.f)}, {1, 3});
  expect_close(run1("Softmax", x, {}), floats({1 / 6.f, 2 / 6.f, 3 / 6.f}, {1, 3}));
}

TEST(CpuSoftmax, Opset11CoercesTo2D) {
  // axis=1 of [2, 2, 2]: each batch row of 4 values is one distribution.
  const Tensor x = floats({0, 0, 0, 0, 1, 1, 1, 1}, {2, 2, 2});
  expect_close(run1("Softmax", x, {}, 11), floats(std::vector<float>(8, 0.25f), {2, 2, 2}));
}

TEST(CpuSoftmax, MiddleAxisOpset13) {
  // axis=1 of [1, 2, 2]: pairs (x[0][0][k], x[0][1][k]).
  const Tensor x = floats({0, 0, std::log(3.f), 0}, {1, 2, 2});
  expect_close(run1("Softmax", x, {attr("axis", int64_t{1})}), floats({0.25f, 0.5f, 0.75f, 0.5f}, {1, 2, 2}));
}

TEST(CpuLogSoftmax, LargeNumbersStayFinite) {
  const Tensor x = floats({1000, 1000, 10, 0}, {2, 2});
  const float l = std::log1p(std::exp(-10.f));
  expect_close(run1("LogSoftmax", x, {}), floats({-std::log(2.f), -std::log(2.f), -l, -10 - l}, {2, 2}));
}

TEST(CpuHardmax, FirstMaximumWins) {
  const Tensor x = floats({1, 3, 3, 0, 2, 2}, {2, 3});
  expect_close(run1("Hardmax", x, {}), floats({0, 1, 0, 0, 1, 0}, {2, 3}));
  expect_close(run1("Hardmax", x, {attr("axis", int64_t{0})}), floats({1, 1, 1, 0, 0, 0}, {2, 3}));
}

TEST(CpuExpVec, AccurateOverTheNormalRange) {
  // Within 2 ulp of exp (in double, rounded) over the arguments a softmax produces.
  for (int i = 0; i <= 100000; ++i) {
    const float x = -87.3f * static_cast<float>(i) / 100000.0f;
    const float want = static_cast<float>(std::exp(static_cast<double>(x)));
    const float got = cpu::exp_vec(x);
    ASSERT_GE(got, FLT_MIN) << x;
    ASSERT_LE(std::fabs(got - want), 2 * (std::nextafter(want, INFINITY) - want)) << x;
  }
  EXPECT_EQ(cpu::exp_vec(0.0f), 1.0f);
}

TEST(CpuExpVec, UnderflowIsExactlyZeroNeverSubnormal) {
  // Below -87.3, e^x < FLT_MIN: 0, not a tiny value that 1/sum would turn subnormal (and every
  // multiply reading it slow); -inf too; NaN stays NaN.
  for (float x : {-87.4f, -88.0f, -103.9f, -104.0f, -10000.0f, -FLT_MAX, -std::numeric_limits<float>::infinity()})
    EXPECT_EQ(cpu::exp_vec(x), 0.0f) << x;
  EXPECT_TRUE(std::isnan(cpu::exp_vec(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(cpu::exp_vec(-std::numeric_limits<float>::quiet_NaN())));
}

TEST(CpuSoftmax, MaskedScoresGiveExactZeros) {
  // BERT's additive mask: -10000 (or finfo.min) on padded keys. Their probabilities are exactly
  // 0, and no probability is subnormal, in both layouts.
  std::vector<float> v;
  for (int i = 0; i < 64; ++i)
    v.push_back(i % 3 == 0 ? -10000.0f + 0.01f * static_cast<float>(i) : 0.1f * static_cast<float>(i % 5));
  v[1] = -FLT_MAX;
  const Tensor x = floats(v, {1, 64});
  const Tensor y = run1("Softmax", x, {});
  const Tensor yt = run1("Softmax", x.reshaped({64, 1}), {attr("axis", int64_t{0})});
  for (int i = 0; i < 64; ++i) {
    const float p = y.data<float>()[i], pt = yt.data<float>()[i];
    EXPECT_NEAR(p, pt, 1e-7f) << i;
    if (i % 3 == 0 || i == 1)
      EXPECT_EQ(p, 0.0f) << i;
    else
      EXPECT_GE(p, FLT_MIN) << i;
  }
}

TEST(CpuSoftmax, ScalarIsAnError) { EXPECT_THROW(run1("Softmax", floats({1}, {}), {}), Error); }

TEST(CpuNllLoss, WeightedMeanWithIgnoreIndex) {
  // input [N=3, C=2] log-probs, targets {0, 1, 0}.
  const Tensor x = floats({-1, -2, -3, -4, -5, -6}, {3, 2});
  const Tensor t = int64s({0, 1, 0}, {3});
  const Tensor w = floats({2, 3}, {2});
  // none: -x[n, t] * w[t] = {2, 12, 10}
  expect_close(loss("NegativeLogLikelihoodLoss", x, t, &w, {attr("reduction", std::string("none"))})[0],
               floats({2, 12, 10}, {3}));
  // mean: 24 / (2 + 3 + 2)
  expect_close(loss("NegativeLogLikelihoodLoss", x, t, &w, {})[0], floats({24.f / 7}, {}));
  // ignore class 0: only n=1 counts -> 12 / 3
  expect_close(loss("NegativeLogLikelihoodLoss", x, t, &w, {attr("ignore_index", int64_t{0})})[0], floats({4}, {}));
  // sum without weights, spatial dims: [N=1, C=2, d=2], targets {1, 0}
  const Tensor x3 = floats({-1, -2, -3, -4}, {1, 2, 2});
  expect_close(loss("NegativeLogLikelihoodLoss", x3, int64s({1, 0}, {1, 2}), nullptr,
                    {attr("reduction", std::string("sum"))})[0],
               floats({5}, {}));
}

TEST(CpuNllLoss, TargetOutOfRangeIsAnError) {
  const Tensor x = floats({-1, -2}, {1, 2});
  EXPECT_THROW(loss("NegativeLogLikelihoodLoss", x, int64s({2}, {1}), nullptr, {}), Error);
  EXPECT_THROW(loss("NegativeLogLikelihoodLoss", x, int64s({0}, {1}), nullptr, {attr("reduction", std::string("avg"))}),
               Error);
}

TEST(CpuSoftmaxCrossEntropyLoss, LossAndLogProb) {
  // Scores (0, log 3): log-softmax = (log 1/4, log 3/4).
  const Tensor x = floats({0, std::log(3.f), 0, std::log(3.f)}, {2, 2});
  const Tensor t = int64s({1, 0}, {2});
  auto out = loss("SoftmaxCrossEntropyLoss", x, t, nullptr, {}, 2);
  const float a = std::log(4.f / 3), b = std::log(4.f);
  expect_close(out[0], floats({(a + b) / 2}, {}));
  expect_close(out[1], floats({-b, -a, -b, -a}, {2, 2}));
}
