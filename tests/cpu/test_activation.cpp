// Activation functions on the CPU reference, against their formulas.
#include <algorithm>
#include <cmath>
#include <functional>

#include "ir/half.h"
#include "test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

Tensor run_act(const std::string& op, const std::vector<Tensor>& inputs, std::vector<NamedAttribute> attrs = {},
               int64_t opset = 17, const std::string& domain = "") {
  GraphBuilder b(opset);
  std::vector<Value*> ins;
  for (size_t i = 0; i < inputs.size(); ++i)
    ins.push_back(b.input("x" + std::to_string(i), inputs[i].dtype(), shape_of(inputs[i].dims())));
  b.output(b.node_n(op, ins, 1, std::move(attrs), "", domain)[0]);
  auto g = b.build();
  return run_cpu(*g, inputs)[0];
}

const std::vector<float> kX = {-3.0f, -1.0f, -0.25f, 0.0f, 0.5f, 2.0f, 4.0f};

/// Expects op(kX) == f(kX) elementwise (f in double).
void expect_formula(const std::string& op, const std::function<double(double)>& f,
                    std::vector<NamedAttribute> attrs = {}, int64_t opset = 17) {
  std::vector<float> want;
  for (float v : kX) want.push_back(static_cast<float>(f(v)));
  SCOPED_TRACE(op);
  expect_close(run_act(op, {floats(kX, {7})}, std::move(attrs), opset), floats(want, {7}));
}

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

}  // namespace

TEST(CpuActivation, MatchFormulas) {
  expect_formula("Relu", [](double x) { return x > 0 ? x : 0; });
  expect_formula("LeakyRelu", [](double x) { return x < 0 ? 0.01 * x : x; });
  expect_formula("LeakyRelu", [](double x) { return x < 0 ? 0.2 * x : x; }, {attr("alpha", 0.2f)});
  expect_formula("Sigmoid", sigmoid);
  expect_formula("HardSigmoid", [](double x) { return std::clamp(0.2 * x + 0.5, 0.0, 1.0); });
  expect_formula("HardSigmoid", [](double x) { return std::clamp(0.5 * x + 0.6, 0.0, 1.0); },
                 {attr("alpha", 0.5f), attr("beta", 0.6f)});
  expect_formula(
      "HardSwish", [](double x) { return x * std::clamp(x / 6 + 0.5, 0.0, 1.0); }, {}, 14);
  expect_formula("Tanh", [](double x) { return std::tanh(x); });
  expect_formula("Elu", [](double x) { return x < 0 ? 2 * (std::exp(x) - 1) : x; }, {attr("alpha", 2.0f)});
  expect_formula("Selu", [](double x) {
    const double a = 1.67326319217681884765625, g = 1.05070102214813232421875;
    return x > 0 ? g * x : g * (a * std::exp(x) - a);
  });
  expect_formula("Celu", [](double x) { return std::max(0.0, x) + std::min(0.0, 2 * (std::exp(x / 2) - 1)); },
                 {attr("alpha", 2.0f)});
  expect_formula("Softplus", [](double x) { return std::log(std::exp(x) + 1); });
  expect_formula("Softsign", [](double x) { return x / (1 + std::fabs(x)); });
  expect_formula("ThresholdedRelu", [](double x) { return x > 1 ? x : 0; });
  expect_formula("Shrink", [](double x) { return x < -0.5 ? x : x > 0.5 ? x : 0; });
  expect_formula("Shrink", [](double x) { return x < -1  ? x + 1.5
                                                 : x > 1 ? x - 1.5
                                                         : 0; },
                 {attr("lambd", 1.0f), attr("bias", 1.5f)});
  expect_formula(
      "Mish", [](double x) { return x * std::tanh(std::log1p(std::exp(x))); }, {}, 18);
  expect_formula(
      "Swish", [](double x) { return x / (1 + std::exp(-x)); }, {}, 24);
  expect_formula(
      "Swish", [](double x) { return x / (1 + std::exp(-1.702 * x)); }, {attr("alpha", 1.702f)}, 24);
  expect_formula(
      "Gelu", [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }, {}, 20);
  expect_formula(
      "Gelu", [](double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); },
      {attr("approximate", std::string("tanh"))}, 20);
}

TEST(CpuActivation, StableAtExtremes) {
  auto out = run_act("Softplus", {floats({100.0f, -100.0f}, {2})});
  expect_close(out, floats({100.0f, std::exp(-100.0f)}, {2}));
  out = run_act("Sigmoid", {floats({-100.0f, 100.0f}, {2})});
  expect_close(out, floats({static_cast<float>(sigmoid(-100)), 1.0f}, {2}), 1e-5, 0);
  out = run_act("Mish", {floats({100.0f}, {1})}, {}, 18);
  expect_close(out, floats({100.0f}, {1}));
}

TEST(CpuActivation, IntegerAndHalfInputs) {
  Tensor i(DType::Int32, {3});
  i.data<int32_t>()[0] = -4;
  i.data<int32_t>()[1] = 0;
  i.data<int32_t>()[2] = 7;
  Tensor want(DType::Int32, {3});
  want.data<int32_t>()[2] = 7;
  expect_close(run_act("Relu", {i}, {}, 14), want);

  Tensor h(DType::Float16, {2});
  h.data<uint16_t>()[0] = float_to_half(-1.0f);
  h.data<uint16_t>()[1] = float_to_half(2.0f);
  Tensor got = run_act("LeakyRelu", {h}, {attr("alpha", 0.5f)});
  ASSERT_EQ(got.dtype(), DType::Float16);
  EXPECT_EQ(half_to_float(got.data<uint16_t>()[0]), -0.5f);
  EXPECT_EQ(half_to_float(got.data<uint16_t>()[1]), 2.0f);

  EXPECT_THROW(run_act("Sigmoid", {i}), Error);
}

TEST(CpuPRelu, SlopeBroadcastsOntoX) {
  auto x = floats({-1, 2, -3, 4, -5, 6}, {2, 3});
  expect_close(run_act("PRelu", {x, floats({0.5f, 0.1f, 2}, {3})}), floats({-0.5f, 2, -6, 4, -0.5f, 6}, {2, 3}));
  expect_close(run_act("PRelu", {x, floats({0.5f}, {1})}), floats({-0.5f, 2, -1.5f, 4, -2.5f, 6}, {2, 3}));
  expect_close(run_act("PRelu", {x, floats({1, 2}, {2, 1})}), floats({-1, 2, -3, 4, -10, 6}, {2, 3}));
  // Slope may not grow X.
  EXPECT_THROW(run_act("PRelu", {floats({-1, 1}, {2}), floats({1, 2, 3, 4}, {2, 2})}), Error);
  EXPECT_THROW(run_act("PRelu", {x, floats({1, 2}, {2})}), Error);
}

TEST(CpuPRelu, Opset6SlopeIsPerChannel) {
  // X 1x2x2, slope (2): channel c uses slope[c] (axis 1), which numpy broadcasting would not do.
  auto x = floats({-1, -2, -3, 4}, {1, 2, 2});
  expect_close(run_act("PRelu", {x, floats({0.5f, 3}, {2})}, {}, 6), floats({-0.5f, -1, -9, 4}, {1, 2, 2}));
}

TEST(CpuGelu, FusecDomainAtAnyOpset) {
  auto out = run_act("Gelu", {floats({-1, 0, 1}, {3})}, {}, 13, "ai.fusec");
  auto g = [](double x) { return static_cast<float>(0.5 * x * (1 + std::erf(x / std::sqrt(2.0)))); };
  expect_close(out, floats({g(-1), 0, g(1)}, {3}));
  // ai.onnx Gelu needs opset 20.
  EXPECT_THROW(run_act("Gelu", {floats({1}, {1})}, {}, 17), Error);
  EXPECT_THROW(run_act("Gelu", {floats({1}, {1})}, {attr("approximate", std::string("fast"))}, 20), Error);
}
