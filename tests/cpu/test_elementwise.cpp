// Elementwise arithmetic, math, comparison, logic, Where, Cast and Clip on the CPU reference.
#include <cmath>
#include <limits>

#include "ir/half.h"
#include "ir/op_schema.h"
#include "test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

template <typename T>
Tensor make(DType dt, std::vector<T> v, std::vector<int64_t> dims) {
  Tensor t(dt, std::move(dims));
  for (size_t i = 0; i < v.size(); ++i) t.data<T>()[i] = v[i];
  return t;
}
Tensor bools(std::vector<uint8_t> v, std::vector<int64_t> dims) { return make<uint8_t>(DType::Bool, v, dims); }
Tensor int32s(std::vector<int32_t> v, std::vector<int64_t> dims) { return make<int32_t>(DType::Int32, v, dims); }
Tensor doubles(std::vector<double> v, std::vector<int64_t> dims) { return make<double>(DType::Float64, v, dims); }
Tensor halves(std::vector<float> v, std::vector<int64_t> dims) {
  Tensor t(DType::Float16, std::move(dims));
  for (size_t i = 0; i < v.size(); ++i) t.data<uint16_t>()[i] = float_to_half(v[i]);
  return t;
}

/// Builds a one-node graph over `inputs` (graph inputs x0, x1, ...; an undefined tensor is a
/// left-out optional input) and runs it.
std::vector<Tensor> run_op(const std::string& op, const std::vector<Tensor>& inputs,
                           std::vector<NamedAttribute> attrs = {}, int64_t opset = 17) {
  GraphBuilder b(opset);
  std::vector<Value*> ins;
  std::vector<Tensor> feeds;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) {
      ins.push_back(nullptr);
      continue;
    }
    ins.push_back(b.input("x" + std::to_string(i), inputs[i].dtype(), shape_of(inputs[i].dims())));
    feeds.push_back(inputs[i]);
  }
  b.output(b.node(op, ins, std::move(attrs)));
  auto g = b.build();
  return run_cpu(*g, feeds);
}
Tensor run1(const std::string& op, const std::vector<Tensor>& inputs, std::vector<NamedAttribute> attrs = {},
            int64_t opset = 17) {
  return run_op(op, inputs, std::move(attrs), opset)[0];
}

}  // namespace

// ---- binary arithmetic ----

TEST(CpuArithmetic, IntegerOpsTruncateAndWrap) {
  expect_close(run1("Div", {int32s({7, -7, 7, -7}, {4}), int32s({2, 2, -2, -2}, {4})}), int32s({3, -3, -3, 3}, {4}));
  expect_close(run1("Div", {int64s({INT64_MIN}, {1}), int64s({-1}, {1})}), int64s({INT64_MIN}, {1}));
  expect_close(run1("Sub", {int32s({5, 0}, {2}), int32s({7, 1}, {1, 2})}), int32s({-2, -1}, {1, 2}));
  expect_close(run1("Mul", {int32s({INT32_MAX}, {1}), int32s({2}, {1})}), int32s({-2}, {1}));
  expect_close(run1("Add", {make<uint8_t>(DType::UInt8, {250, 3}, {2}), make<uint8_t>(DType::UInt8, {10, 4}, {2})}),
               make<uint8_t>(DType::UInt8, {4, 7}, {2}));
}

TEST(CpuArithmetic, BroadcastsBothWays) {
  auto out = run1("Mul", {floats({1, 2, 3}, {3, 1}), floats({10, 20}, {1, 2})});
  expect_close(out, floats({10, 20, 20, 40, 30, 60}, {3, 2}));
}

TEST(CpuArithmetic, LongRowsCutIntoPiecesMatchTheElementwiseRule) {
  // Shapes whose merged rows are too few for the threads and long enough to be cut into pieces
  // (common.h's broadcast_rows): one row of every element, a row broadcast over two, a scalar, and
  // an inner run that is not a multiple of the piece. Each element is checked against the rule.
  struct Shapes {
    std::vector<int64_t> a, b;
  };
  const Shapes cases[] = {{{3, 70001}, {3, 70001}}, {{2, 1, 90000}, {90000}}, {{200003}, {1}}, {{1}, {2, 65537}}};
  for (const auto& c : cases) {
    const Tensor a = uniform_floats(c.a, 1), b = uniform_floats(c.b, 2);
    const Tensor out = run1("Sub", {a, b});
    const auto& od = out.dims();
    const auto idx = [&](const std::vector<int64_t>& d, int64_t flat) {
      // The input element that output element `flat` reads, by numpy's broadcasting.
      int64_t in = 0, stride = 1;
      for (size_t i = 0; i < d.size(); ++i) {
        const size_t oa = od.size() - 1 - i, ia = d.size() - 1 - i;
        int64_t rem = flat;
        for (size_t k = od.size() - 1; k > oa; --k) rem /= od[k];
        if (d[ia] != 1) in += (rem % od[oa]) * stride;
        stride *= d[ia];
      }
      return in;
    };
    for (int64_t i = 0; i < out.numel(); ++i) {
      const float want = a.data<float>()[idx(c.a, i)] - b.data<float>()[idx(c.b, i)];
      ASSERT_EQ(out.data<float>()[i], want) << dims_str(c.a) << " - " << dims_str(c.b) << ", element " << i;
    }
  }
  Tensor cond = bools(std::vector<uint8_t>(70000, 1), {70000});
  const Tensor x = uniform_floats({2, 70000}, 3);
  const Tensor y = uniform_floats({1}, 4);
  for (int64_t i = 0; i < 70000; i += 3) cond.data<uint8_t>()[i] = 0;
  const Tensor w = run1("Where", {cond, x, y});
  for (int64_t i = 0; i < w.numel(); ++i)
    ASSERT_EQ(w.data<float>()[i], cond.data<uint8_t>()[i % 70000] ? x.data<float>()[i] : y.data<float>()[0]) << i;
}

TEST(CpuArithmetic, LegacyBroadcastWithAxis) {
  // Opset 6: B (3) lines up with A's axis 1 of 2x3x2.
  auto out = run1("Add", {floats({0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1}, {2, 3, 2}), floats({10, 20, 30}, {3})},
                  {attr("broadcast", int64_t{1}), attr("axis", int64_t{1})}, 6);
  expect_close(out, floats({10, 10, 20, 20, 30, 30, 11, 11, 21, 21, 31, 31}, {2, 3, 2}));
  // Without axis: trailing alignment.
  out = run1("Sub", {floats({5, 6, 7, 8}, {2, 2}), floats({1, 2}, {2})}, {attr("broadcast", int64_t{1})}, 6);
  expect_close(out, floats({4, 4, 6, 6}, {2, 2}));
  // broadcast=0 with different shapes is an error.
  EXPECT_THROW(run1("Add", {floats({1, 2}, {2}), floats({1}, {1})}, {}, 6), Error);
}

TEST(CpuArithmetic, HalfComputesInFloat) {
  auto out = run1("Add", {halves({1.5f, 2.25f}, {2}), halves({0.25f, -1.0f}, {2})});
  expect_close(out, halves({1.75f, 1.25f}, {2}));
}

TEST(CpuArithmetic, BFloat16ComputesInFloat) {
  auto bf = [](std::vector<float> v, std::vector<int64_t> dims) {
    Tensor t(DType::BFloat16, std::move(dims));
    for (size_t i = 0; i < v.size(); ++i) t.data<uint16_t>()[i] = float_to_bf16(v[i]);
    return t;
  };
  expect_close(run1("Mul", {bf({1.5f, -2.0f}, {2}), bf({4.0f}, {1})}), bf({6.0f, -8.0f}, {2}));
  expect_close(run1("Less", {bf({1.5f, -2.0f}, {2}), bf({0.0f}, {1})}), bools({0, 1}, {2}));
  expect_close(run1("Sqrt", {bf({4.0f, 9.0f}, {2})}), bf({2.0f, 3.0f}, {2}));
}

TEST(CpuArithmetic, MismatchedShapesOrTypesAreErrors) {
  EXPECT_THROW(run1("Add", {floats({1, 2, 3}, {3}), floats({1, 2}, {2})}), Error);
  EXPECT_THROW(run1("Add", {floats({1}, {1}), int64s({1}, {1})}), Error);
  EXPECT_THROW(run1("Add", {bools({1}, {1}), bools({1}, {1})}), Error);
}

TEST(CpuPow, FloatAndMixedTypes) {
  expect_close(run1("Pow", {floats({2, 3, 4}, {3}), floats({2}, {1})}), floats({4, 9, 16}, {3}));
  expect_close(run1("Pow", {floats({2, 3}, {2}), int64s({3, -1}, {2})}), floats({8, 1.0f / 3}, {2}));
  expect_close(run1("Pow", {int32s({1, 2, 3}, {3}), floats({1, 2, 3}, {3})}), int32s({1, 4, 27}, {3}));
  expect_close(run1("Pow", {int64s({2, -3, 2, -1}, {4}), int64s({10, 3, -1, -3}, {4})}),
               int64s({1024, -27, 0, -1}, {4}));
  // Before opset 12 the exponent must have the base's (float) type.
  EXPECT_THROW(run1("Pow", {floats({2}, {1}), int64s({3}, {1})}, {}, 11), Error);
}

TEST(CpuMod, IntegerSignFollowsDivisorUnlessFmod) {
  auto a = int64s({-4, 7, 5, 4, -7, 8}, {6});
  auto b = int64s({2, -3, 8, -2, 3, 5}, {6});
  expect_close(run1("Mod", {a, b}), int64s({0, -2, 5, 0, 2, 3}, {6}));
  expect_close(run1("Mod", {a, b}, {attr("fmod", int64_t{1})}), int64s({0, 1, 5, 0, -1, 3}, {6}));
  expect_close(run1("Mod", {floats({-4.5f, 7.5f}, {2}), floats({2, -2}, {2})}, {attr("fmod", int64_t{1})}),
               floats({-0.5f, 1.5f}, {2}));
  EXPECT_THROW(run1("Mod", {int32s({1}, {1}), int32s({0}, {1})}), Error);
  EXPECT_THROW(run1("Mod", {floats({1}, {1}), floats({2}, {1})}), Error);  // float needs fmod=1 before 28
}

TEST(CpuMod, FloatFlooredModuloFromOpset28) {
  const float inf = std::numeric_limits<float>::infinity();
  auto a = floats({-4.5f, 7.5f, 0.0f, -0.0f, 3.0f, -3.0f, inf, 2.0f}, {8});
  auto b = floats({2, -2, -5, 5, inf, inf, 3, 0}, {8});
  Tensor y = run1("Mod", {a, b}, {}, 28);
  const float* p = y.data<float>();
  EXPECT_EQ(p[0], 1.5f);  // the divisor's sign
  EXPECT_EQ(p[1], -0.5f);
  EXPECT_TRUE(p[2] == 0 && std::signbit(p[2]));  // a zero takes the divisor's sign
  EXPECT_TRUE(p[3] == 0 && !std::signbit(p[3]));
  EXPECT_EQ(p[4], 3.0f);  // same signs: x
  EXPECT_EQ(p[5], inf);   // different signs: y
  EXPECT_TRUE(std::isnan(p[6]));
  EXPECT_TRUE(std::isnan(p[7]));
  EXPECT_THROW(run1("Mod", {a, b}, {attr("fmod", int64_t{2})}, 28), Error);
}

// ---- variadic ----

TEST(CpuVariadic, BroadcastsThreeInputs) {
  auto a = floats({1, 5, 3, 4}, {2, 2}), b = floats({2, 2}, {2}), c = floats({0}, {1});
  expect_close(run1("Max", {a, b, c}), floats({2, 5, 3, 4}, {2, 2}));
  expect_close(run1("Min", {a, b, c}), floats({0, 0, 0, 0}, {2, 2}));
  expect_close(run1("Sum", {a, b, c}), floats({3, 7, 5, 6}, {2, 2}));
  expect_close(run1("Mean", {a, b, floats({3}, {1})}), floats({2, 10.0f / 3, 8.0f / 3, 3}, {2, 2}));
  expect_close(run1("Sum", {a}), a);
  expect_close(run1("Max", {int32s({1, -5}, {2}), int32s({-1, 3}, {2})}), int32s({1, 3}, {2}));
}

TEST(CpuVariadic, MaxMinPropagateNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto out = run1("Max", {floats({nan, 1}, {2}), floats({1, nan}, {2})});
  EXPECT_TRUE(std::isnan(out.data<float>()[0]));
  EXPECT_TRUE(std::isnan(out.data<float>()[1]));
  out = run1("Min", {floats({nan, 1}, {2}), floats({1, nan}, {2})});
  EXPECT_TRUE(std::isnan(out.data<float>()[0]));
  EXPECT_TRUE(std::isnan(out.data<float>()[1]));
}

// ---- unary ----

TEST(CpuUnary, MatchesLibm) {
  const std::vector<float> x = {0.1f, 0.5f, 0.9f};
  struct Case {
    const char* op;
    double (*f)(double);
  };
  const Case cases[] = {
      {"Sqrt", [](double v) { return std::sqrt(v); }},   {"Exp", [](double v) { return std::exp(v); }},
      {"Log", [](double v) { return std::log(v); }},     {"Erf", [](double v) { return std::erf(v); }},
      {"Sin", [](double v) { return std::sin(v); }},     {"Cos", [](double v) { return std::cos(v); }},
      {"Tan", [](double v) { return std::tan(v); }},     {"Asin", [](double v) { return std::asin(v); }},
      {"Acos", [](double v) { return std::acos(v); }},   {"Atan", [](double v) { return std::atan(v); }},
      {"Sinh", [](double v) { return std::sinh(v); }},   {"Cosh", [](double v) { return std::cosh(v); }},
      {"Asinh", [](double v) { return std::asinh(v); }}, {"Atanh", [](double v) { return std::atanh(v); }},
      {"Reciprocal", [](double v) { return 1 / v; }},    {"Neg", [](double v) { return -v; }},
  };
  for (const auto& c : cases) {
    std::vector<float> want;
    for (float v : x) want.push_back(static_cast<float>(c.f(v)));
    SCOPED_TRACE(c.op);
    expect_close(run1(c.op, {floats(x, {3})}), floats(want, {3}));
  }
  expect_close(run1("Acosh", {floats({1, 2, 10}, {3})}), floats({0, std::acosh(2.0f), std::acosh(10.0f)}, {3}));
}

TEST(CpuUnary, RoundingAndSign) {
  auto x = floats({0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.7f, 2.2f}, {7});
  expect_close(run1("Round", {x}), floats({0, 2, 2, 0, -2, -3, 2}, {7}));
  expect_close(run1("Floor", {x}), floats({0, 1, 2, -1, -2, -3, 2}, {7}));
  expect_close(run1("Ceil", {x}), floats({1, 2, 3, 0, -1, -2, 3}, {7}));
  expect_close(run1("Sign", {floats({-2, 0, 3}, {3})}), floats({-1, 0, 1}, {3}));
  expect_close(run1("Sign", {int32s({-2, 0, 3}, {3})}), int32s({-1, 0, 1}, {3}));
  expect_close(run1("Abs", {int64s({-2, 0, 3}, {3})}), int64s({2, 0, 3}, {3}));
  expect_close(run1("Abs", {doubles({-2.5, 1}, {2})}), doubles({2.5, 1}, {2}));
  expect_close(run1("Neg", {int32s({-2, 5}, {2})}), int32s({2, -5}, {2}));
  EXPECT_THROW(run1("Neg", {make<uint8_t>(DType::UInt8, {1}, {1})}), Error);
  EXPECT_THROW(run1("Sqrt", {int32s({4}, {1})}), Error);
}

TEST(CpuUnary, IsNaNAndIsInf) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  auto x = floats({-inf, 1, nan, inf}, {4});
  expect_close(run1("IsNaN", {x}), bools({0, 0, 1, 0}, {4}));
  expect_close(run1("IsInf", {x}), bools({1, 0, 0, 1}, {4}));
  expect_close(run1("IsInf", {x}, {attr("detect_negative", int64_t{0})}), bools({0, 0, 0, 1}, {4}));
  expect_close(run1("IsInf", {x}, {attr("detect_positive", int64_t{0})}), bools({1, 0, 0, 0}, {4}));
}

// ---- comparison and logic ----

TEST(CpuCompare, BroadcastToBool) {
  auto a = int32s({1, 2, 3, 4}, {2, 2}), b = int32s({2, 3}, {2});
  expect_close(run1("Equal", {a, b}), bools({0, 0, 0, 0}, {2, 2}));
  expect_close(run1("Less", {a, b}), bools({1, 1, 0, 0}, {2, 2}));
  expect_close(run1("Greater", {a, b}), bools({0, 0, 1, 1}, {2, 2}));
  expect_close(run1("LessOrEqual", {a, int32s({3}, {1})}), bools({1, 1, 1, 0}, {2, 2}));
  expect_close(run1("GreaterOrEqual", {floats({1, 2}, {2}), floats({2, 2}, {2})}), bools({0, 1}, {2}));
  expect_close(run1("Equal", {bools({1, 0}, {2}), bools({1, 1}, {2})}), bools({1, 0}, {2}));
  EXPECT_THROW(run1("Less", {floats({1}, {1}), int32s({1}, {1})}), Error);
}

TEST(CpuLogic, AndOrXorNot) {
  auto a = bools({0, 0, 1, 1}, {2, 2}), b = bools({0, 1}, {2});
  expect_close(run1("And", {a, b}), bools({0, 0, 0, 1}, {2, 2}));
  expect_close(run1("Or", {a, b}), bools({0, 1, 1, 1}, {2, 2}));
  expect_close(run1("Xor", {a, b}), bools({0, 1, 1, 0}, {2, 2}));
  expect_close(run1("Not", {b}), bools({1, 0}, {2}));
  EXPECT_THROW(run1("And", {int32s({1}, {1}), int32s({1}, {1})}), Error);
}

TEST(CpuBitShift, LeftAndRight) {
  auto x = make<uint8_t>(DType::UInt8, {16, 4, 1, 255}, {4});
  auto s = make<uint8_t>(DType::UInt8, {1, 2, 3, 9}, {4});
  expect_close(run1("BitShift", {x, s}, {attr("direction", std::string("LEFT"))}),
               make<uint8_t>(DType::UInt8, {32, 16, 8, 0}, {4}));
  expect_close(run1("BitShift", {x, s}, {attr("direction", std::string("RIGHT"))}),
               make<uint8_t>(DType::UInt8, {8, 1, 0, 0}, {4}));
  EXPECT_THROW(run1("BitShift", {x, s}, {attr("direction", std::string("UP"))}), Error);
}

TEST(CpuBitShift, SignedTypesFromOpset28) {
  auto x = int32s({-16, 16, -1, 1 << 30, -7, 5}, {6});
  auto s = int32s({2, 2, 40, 2, -1, 32}, {6});
  // Right: arithmetic; a shift outside [0, 32) leaves the sign fill.
  expect_close(run1("BitShift", {x, s}, {attr("direction", std::string("RIGHT"))}, 28),
               int32s({-4, 4, -1, 1 << 28, -1, 0}, {6}));
  // Left: bits past the sign bit drop (1 << 30 shifted by 2 is 0).
  expect_close(run1("BitShift", {x, s}, {attr("direction", std::string("LEFT"))}, 28),
               int32s({-64, 64, 0, 0, 0, 0}, {6}));
  auto i8 = make<int8_t>(DType::Int8, {-128, 64, -3}, {3});
  auto s8 = make<int8_t>(DType::Int8, {7, 1, 1}, {3});
  expect_close(run1("BitShift", {i8, s8}, {attr("direction", std::string("RIGHT"))}, 28),
               make<int8_t>(DType::Int8, {-1, 32, -2}, {3}));
  expect_close(run1("BitShift", {i8, s8}, {attr("direction", std::string("LEFT"))}, 28),
               make<int8_t>(DType::Int8, {0, -128, -6}, {3}));
  // Before opset 28 only uint8 shifts.
  EXPECT_THROW(run1("BitShift", {x, s}, {attr("direction", std::string("LEFT"))}, 27), Error);
}

TEST(CpuBitwise, AndOrXorNotOverIntegerTypes) {
  auto a = int32s({12, -1, 0x0F0F, -8}, {2, 2});
  auto b = int32s({10, 6}, {2});
  expect_close(run1("BitwiseAnd", {a, b}, {}, 18), int32s({8, 6, 0x0F0F & 10, -8 & 6}, {2, 2}));
  expect_close(run1("BitwiseOr", {a, b}, {}, 18), int32s({14, -1, 0x0F0F | 10, -8 | 6}, {2, 2}));
  expect_close(run1("BitwiseXor", {a, b}, {}, 18), int32s({6, -7, 0x0F0F ^ 10, -8 ^ 6}, {2, 2}));
  expect_close(run1("BitwiseNot", {a}, {}, 18), int32s({~12, 0, ~0x0F0F, 7}, {2, 2}));
  auto u = make<uint8_t>(DType::UInt8, {0xF0, 0x0F}, {2});
  expect_close(run1("BitwiseNot", {u}, {}, 18), make<uint8_t>(DType::UInt8, {0x0F, 0xF0}, {2}));
  EXPECT_THROW(run1("BitwiseAnd", {floats({1}, {1}), floats({1}, {1})}, {}, 18), Error);
  EXPECT_THROW(run1("BitwiseOr", {a, int64s({1}, {1})}, {}, 18), Error);  // one type
}

TEST(CpuWhere, ThreeWayBroadcast) {
  auto c = bools({1, 0}, {2, 1});
  auto x = floats({1, 2, 3}, {3});
  auto y = floats({-1}, {1});
  expect_close(run1("Where", {c, x, y}), floats({1, 2, 3, -1, -1, -1}, {2, 3}));
  auto h = run1("Where", {c, halves({1, 2, 3}, {3}), halves({-1}, {1})});
  expect_close(h, halves({1, 2, 3, -1, -1, -1}, {2, 3}));
  EXPECT_THROW(run1("Where", {c, x, int32s({1}, {1})}), Error);
  EXPECT_THROW(run1("Where", {floats({1}, {1}), x, y}), Error);
}

// ---- conversion ----

TEST(CpuCast, ConvertsBetweenTypes) {
  auto to = [](DType t) { return attr("to", static_cast<int64_t>(t)); };
  expect_close(run1("Cast", {floats({1.7f, -1.7f, 0}, {3})}, {to(DType::Int32)}), int32s({1, -1, 0}, {3}));
  expect_close(run1("Cast", {floats({1.7f, 0}, {2})}, {to(DType::Bool)}), bools({1, 0}, {2}));
  expect_close(run1("Cast", {int64s({3, -2}, {2})}, {to(DType::Float64)}), doubles({3, -2}, {2}));
  auto h = run1("Cast", {floats({1.0f, 0.1f, 65504.0f}, {3})}, {to(DType::Float16)});
  ASSERT_EQ(h.dtype(), DType::Float16);
  EXPECT_EQ(h.data<uint16_t>()[0], 0x3c00);
  EXPECT_EQ(h.data<uint16_t>()[1], float_to_half(0.1f));
  EXPECT_EQ(h.data<uint16_t>()[2], 0x7bff);
  auto back = run1("Cast", {h}, {to(DType::Float32)});
  expect_close(back, floats({1.0f, 0.0999755859375f, 65504.0f}, {3}), 0, 0);
  auto bf = run1("Cast", {floats({1.0f, 3.140625f}, {2})}, {to(DType::BFloat16)});
  EXPECT_EQ(bf.data<uint16_t>()[0], 0x3f80);
  EXPECT_EQ(bf16_to_float(bf.data<uint16_t>()[1]), 3.140625f);
  // Double -> half rounds once: 1 + 2^-11 + 2^-40 is just above the halfway point between two
  // halves, so it rounds up (a detour through float would round to even, i.e. down).
  auto dh = run1("Cast", {doubles({1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40)}, {1})}, {to(DType::Float16)});
  EXPECT_EQ(dh.data<uint16_t>()[0], 0x3c01);
  // Opset 19 declares `saturate`.
  expect_close(run1("Cast", {floats({2}, {1})}, {to(DType::Int64), attr("saturate", int64_t{0})}, 19),
               int64s({2}, {1}));
  EXPECT_THROW(run1("Cast", {floats({2}, {1})}, {attr("to", int64_t{8})}), Error);  // string
}

TEST(CpuCast, CastLikeTakesTheSecondInputsType) {
  expect_close(run1("CastLike", {floats({1.5f, -2}, {2}), int64s({0}, {1})}), int64s({1, -2}, {2}));
  expect_close(run1("CastLike", {int32s({7}, {1}), doubles({}, {0})}), doubles({7}, {1}));
}

TEST(CpuClip, AttributesBeforeOpset11) {
  auto out = run1("Clip", {floats({-2, 0, 2}, {3})}, {attr("min", -1.0f), attr("max", 1.0f)}, 6);
  expect_close(out, floats({-1, 0, 1}, {3}));
  out = run1("Clip", {floats({-2, 0, 2}, {3})}, {attr("max", 1.0f)}, 6);
  expect_close(out, floats({-2, 0, 1}, {3}));
}

TEST(CpuClip, OptionalInputsSince11) {
  auto x = floats({-2, 0, 2}, {3});
  expect_close(run1("Clip", {x, floats({-1}, {}), floats({1}, {})}), floats({-1, 0, 1}, {3}));
  expect_close(run1("Clip", {x, Tensor(), floats({1}, {})}), floats({-2, 0, 1}, {3}));
  expect_close(run1("Clip", {x}), x);
  // min > max: everything becomes max.
  expect_close(run1("Clip", {x, floats({1}, {}), floats({-1}, {})}), floats({-1, -1, -1}, {3}));
  auto i8 = make<int8_t>(DType::Int8, {-128, 0, 127}, {3});
  expect_close(run1("Clip", {i8, make<int8_t>(DType::Int8, {-5}, {})}), make<int8_t>(DType::Int8, {-5, 0, 127}, {3}));
  expect_close(run1("Clip", {halves({-2, 0.5f, 2}, {3}), halves({-1}, {}), halves({1}, {})}),
               halves({-1, 0.5f, 1}, {3}));
  EXPECT_THROW(run1("Clip", {x, floats({-1, 0}, {2})}), Error);
  EXPECT_THROW(run1("Clip", {x, doubles({-1}, {})}), Error);
}

// ---- cost ----

TEST(ElementwiseCost, FlopsPerElement) {
  auto cost_of = [](const std::string& op, std::vector<std::vector<int64_t>> in_dims, std::vector<DType> in_types,
                    std::vector<int64_t> out_dims, DType out_type) {
    const OpSchema* s = OpRegistry::global().find("", op, 17);
    Node n;
    n.op_type = op;
    std::vector<std::vector<int64_t>> outs = {out_dims};
    std::vector<DType> out_types = {out_type};
    CostContext c{n, in_dims, in_types, outs, out_types};
    return s->cost(c);
  };
  Cost add = cost_of("Add", {{4, 8}, {8}}, {DType::Float32, DType::Float32}, {4, 8}, DType::Float32);
  EXPECT_EQ(add.flops, 32);
  EXPECT_EQ(add.bytes_read, 4 * 40);
  EXPECT_EQ(add.bytes_written, 4 * 32);
  Cost sum = cost_of("Sum", {{10}, {10}, {10}}, {DType::Float32, DType::Float32, DType::Float32}, {10}, DType::Float32);
  EXPECT_EQ(sum.flops, 20);
  Cost cast = cost_of("Cast", {{10}}, {DType::Float32}, {10}, DType::Float16);
  EXPECT_EQ(cast.flops, 0);
  EXPECT_EQ(cast.bytes_written, 20);
  Cost exp = cost_of("Exp", {{10}}, {DType::Float32}, {10}, DType::Float32);
  EXPECT_GE(exp.flops, 40);
}
