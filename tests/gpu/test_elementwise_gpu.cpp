// NVRTC-generated elementwise kernels against the CPU reference: every registered op at fp32
// (1e-5), fp16 and bf16 (1e-2), integer and bool ops exactly, broadcasting classes (scalar, row,
// column, middle dim, rank 1..5, both sides), odd sizes, FusedElementwise programs, NaN/inf
// inputs for the NaN-sensitive ops, the NVRTC disk cache, and a bandwidth report.
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "backend/cpu/kernels/common.h"
#include "backend/cuda/core/cuda_op.h"
#include "backend/cuda/ops/elementwise/elementwise_codegen.h"
#include "backend/cuda/core/nvrtc_module.h"
#include "backend/cuda/ops/elementwise/epilogue.cuh"
#include "gpu_test_util.h"
#include "ir/switches.h"

using namespace fusec;
using namespace fusec::test;

namespace {

/// Fresh seeds; a call, so that several in one expression are well defined.
struct Seeds {
  uint64_t s;
  uint64_t operator()() { return ++s; }
};

const Precision kFloatPrecisions[] = {Precision::FP32, Precision::FP16, Precision::BF16};

/// Random values rounded to multiples of `step` (exact in float16/bfloat16 for small ranges), for
/// ops that jump at some input (Floor, comparisons, Cast to int): rounding the inputs to half
/// storage must not move them across the jump.
Tensor quantized(DType dtype, std::vector<int64_t> dims, uint64_t seed, double lo, double hi, double step) {
  Tensor f = random_tensor(DType::Float64, dims, seed, lo, hi);
  for (int64_t i = 0; i < f.numel(); ++i) f.data<double>()[i] = std::round(f.data<double>()[i] / step) * step;
  if (dtype == DType::Float64) return f;
  Tensor out(dtype, dims);
  cpu::convert_tensor(f, out);
  return out;
}

/// Float32 data with NaN, ±inf and ±0 mixed in (every 5th element a special). The finite values
/// stay small, so that fp16 storage of inputs and results cannot overflow where float32 does not.
Tensor with_specials(std::vector<int64_t> dims, uint64_t seed) {
  Tensor t = random_tensor(DType::Float32, dims, seed, -3, 3);
  const float specials[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 100.0f, -100.0f, 0.5f};
  for (int64_t i = 0; i < t.numel(); i += 5) t.data<float>()[i] = specials[(i / 5 + seed) % 8];
  return t;
}

Tensor ints(DType dtype, std::vector<int64_t> dims, uint64_t seed, double lo, double hi, bool no_zero = false) {
  Tensor t = random_tensor(dtype, dims, seed, lo, hi);
  if (no_zero)
    for (int64_t i = 0; i < t.numel(); ++i)
      if (t.as_int64(i) == 0) {
        Tensor one = Tensor::from_int64({1}, {1});
        Tensor conv(dtype, {1});
        cpu::convert_tensor(one, conv);
        std::memcpy(static_cast<char*>(t.raw()) + i * dtype_size(dtype), conv.raw(), dtype_size(dtype));
      }
  return t;
}

OpCase unary(const std::string& op, Tensor x, std::vector<NamedAttribute> attrs = {}, int64_t opset = 17) {
  OpCase c;
  c.op = op;
  c.opset = opset;
  c.inputs = {std::move(x)};
  c.attrs = std::move(attrs);
  return c;
}

OpCase binary(const std::string& op, Tensor a, Tensor b, int64_t opset = 17) {
  OpCase c;
  c.op = op;
  c.opset = opset;
  c.inputs = {std::move(a), std::move(b)};
  return c;
}

struct FloatUnary {
  const char* op;
  double lo, hi;
  std::vector<NamedAttribute> attrs;
  int64_t opset = 17;
  double step = 0;  // > 0: quantize (discontinuous op)
};

}  // namespace

TEST(GpuElementwise, FloatUnaryOpsAllPrecisions) {
  FUSEC_REQUIRE_GPU();
  // Input ranges keep each op's condition number small: bfloat16 storage rounds the inputs by up
  // to 2^-9 relative, which tan near pi/2 or acosh near 1 would amplify past the 1e-2 tolerance.
  const std::vector<FloatUnary> ops = {
      {"Abs", -2, 2, {}},
      {"Neg", -2, 2, {}},
      {"Sign", -2, 2, {}},
      {"Reciprocal", 0.5, 2, {}},
      {"Sqrt", 0, 4, {}},
      {"Exp", -4, 4, {}},
      {"Log", 0.1, 10, {}},
      {"Floor", -4, 4, {}, 17, 0.125},
      {"Ceil", -4, 4, {}, 17, 0.125},
      {"Round", -4, 4, {}, 17, 0.125},
      {"Erf", -3, 3, {}},
      {"Sin", -3, 3, {}},
      {"Cos", -3, 3, {}},
      {"Tan", -0.8, 0.8, {}},
      {"Asin", -0.99, 0.99, {}},
      {"Acos", -0.99, 0.99, {}},
      {"Atan", -5, 5, {}},
      {"Sinh", -2, 2, {}},
      {"Cosh", -2, 2, {}},
      {"Asinh", -5, 5, {}},
      {"Acosh", 1.5, 5, {}},
      {"Atanh", -0.9, 0.9, {}},
      {"Relu", -2, 2, {}},
      {"Sigmoid", -10, 10, {}},
      {"Tanh", -4, 4, {}},
      {"Softplus", -10, 10, {}},
      {"Softsign", -4, 4, {}},
      {"HardSwish", -5, 5, {}},
      {"Mish", -5, 5, {}, 18},
      {"Swish", -8, 8, {}, 24},
      {"Swish", -8, 8, {attr("alpha", 1.702f)}, 24},
      {"Elu", -3, 3, {}},
      {"Elu", -3, 3, {attr("alpha", 0.3f)}},
      {"Selu", -3, 3, {}},
      {"Celu", -3, 3, {attr("alpha", 1.7f)}, 12},
      {"ThresholdedRelu", -2, 2, {attr("alpha", 0.25f)}, 17, 0.125},
      {"Shrink", -2, 2, {}, 17, 0.125},
      {"Shrink", -2, 2, {attr("bias", 0.25f), attr("lambd", 0.75f)}, 17, 0.125},
      {"LeakyRelu", -2, 2, {}},
      {"LeakyRelu", -2, 2, {attr("alpha", 0.2f)}},
      {"HardSigmoid", -5, 5, {}},
      {"HardSigmoid", -5, 5, {attr("alpha", 0.1f), attr("beta", 0.6f)}},
      {"Gelu", -5, 5, {}, 20},
      {"Gelu", -5, 5, {attr("approximate", std::string("tanh"))}, 20},
      {"Clip", -2, 2, {attr("min", -0.5f), attr("max", 1.25f)}, 6},
      {"Clip", -2, 2, {attr("max", 0.5f)}, 6},
  };
  Seeds seed{100};
  for (const auto& u : ops)
    for (const auto& shape : {std::vector<int64_t>{7}, std::vector<int64_t>{3, 1000}, std::vector<int64_t>{4097}}) {
      Tensor x = u.step > 0 ? quantized(DType::Float32, shape, seed(), u.lo, u.hi, u.step)
                            : random_tensor(DType::Float32, shape, seed(), u.lo, u.hi);
      for (Precision p : kFloatPrecisions) {
        SCOPED_TRACE(std::string(u.op) + " " + precision_name(p) + " numel " + std::to_string(x.numel()));
        expect_gpu_matches_cpu(unary(u.op, x, u.attrs, u.opset), p);
      }
    }
  // ai.fusec Gelu (for models below opset 20).
  for (Precision p : kFloatPrecisions)
    for (const char* a : {"none", "tanh"}) {
      OpCase c = unary("Gelu", random_tensor(DType::Float32, {5, 33}, 7, -6, 6), {attr("approximate", std::string(a))});
      c.domain = "ai.fusec";
      expect_gpu_matches_cpu(c, p);
    }
}

TEST(GpuElementwise, FloatBinaryAndVariadicAllPrecisions) {
  FUSEC_REQUIRE_GPU();
  Seeds seed{200};
  for (Precision p : kFloatPrecisions) {
    SCOPED_TRACE(precision_name(p));
    for (const char* op : {"Add", "Sub", "Mul"}) {
      expect_gpu_matches_cpu(binary(op, random_tensor(DType::Float32, {3, 1000}, seed()),
                                    random_tensor(DType::Float32, {3, 1000}, seed())),
                             p);
      expect_gpu_matches_cpu(
          binary(op, random_tensor(DType::Float32, {4097}, seed()), random_tensor(DType::Float32, {}, seed())), p);
    }
    expect_gpu_matches_cpu(binary("Div", random_tensor(DType::Float32, {33, 7}, seed()),
                                  random_tensor(DType::Float32, {7}, seed(), 0.5, 2)),
                           p);
    expect_gpu_matches_cpu(binary("Pow", random_tensor(DType::Float32, {33, 7}, seed(), 0.1, 3),
                                  random_tensor(DType::Float32, {33, 7}, seed(), -2, 2)),
                           p);
    expect_gpu_matches_cpu(
        binary("Pow", random_tensor(DType::Float32, {33, 7}, seed(), -3, 3), ints(DType::Int64, {}, seed(), 2, 3)), p);
    OpCase mod = binary("Mod", quantized(DType::Float32, {5, 64}, seed(), -8, 8, 0.125),
                        quantized(DType::Float32, {64}, seed(), 0.5, 3, 0.5));
    mod.attrs = {attr("fmod", int64_t{1})};
    expect_gpu_matches_cpu(mod, p);
    for (double lo : {0.5, -3.0}) {  // opset 28: the floored modulo of floats, the divisor's sign
      OpCase floor_mod = binary("Mod", quantized(DType::Float32, {5, 64}, seed(), -8, 8, 0.125),
                                quantized(DType::Float32, {64}, seed(), lo, lo + 2.5, 0.5), 28);
      expect_gpu_matches_cpu(floor_mod, p);
    }
    for (const char* op : {"Sum", "Mean", "Max", "Min"}) {
      OpCase c;
      c.op = op;
      c.opset = 13;
      c.inputs = {random_tensor(DType::Float32, {4, 5, 33}, seed()), random_tensor(DType::Float32, {33}, seed()),
                  random_tensor(DType::Float32, {4, 1, 1}, seed()), random_tensor(DType::Float32, {}, seed())};
      expect_gpu_matches_cpu(c, p);
      c.inputs.resize(1);
      expect_gpu_matches_cpu(c, p);
      c.inputs = {random_tensor(DType::Float32, {4097}, seed()), random_tensor(DType::Float32, {4097}, seed())};
      expect_gpu_matches_cpu(c, p);
    }
    for (const char* op : {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"})
      expect_gpu_matches_cpu(binary(op, quantized(DType::Float32, {6, 33}, seed(), -2, 2, 0.5),
                                    quantized(DType::Float32, {33}, seed(), -2, 2, 0.5)),
                             p);
    expect_gpu_matches_cpu(unary("IsNaN", with_specials({3, 41}, seed()), {}, 13), p);
    expect_gpu_matches_cpu(unary("IsInf", with_specials({3, 41}, seed())), p);
    expect_gpu_matches_cpu(unary("IsInf", with_specials({3, 41}, seed()), {attr("detect_positive", int64_t{0})}), p);
    expect_gpu_matches_cpu(unary("IsInf", with_specials({3, 41}, seed()), {attr("detect_negative", int64_t{0})}), p);
    // PRelu: slope broadcast (opset 16) and the per-channel 1-D slope of opset 6.
    expect_gpu_matches_cpu(binary("PRelu", random_tensor(DType::Float32, {2, 3, 5, 7}, seed()),
                                  random_tensor(DType::Float32, {3, 1, 1}, seed()), 16),
                           p);
    expect_gpu_matches_cpu(binary("PRelu", random_tensor(DType::Float32, {2, 3, 5, 7}, seed()),
                                  random_tensor(DType::Float32, {3}, seed()), 6),
                           p);
    expect_gpu_matches_cpu(
        binary("PRelu", random_tensor(DType::Float32, {2, 7}, seed()), random_tensor(DType::Float32, {1}, seed()), 16),
        p);
    // Clip with bound inputs: both, only max, both constant.
    OpCase clip;
    clip.op = "Clip";
    clip.opset = 13;
    clip.inputs = {random_tensor(DType::Float32, {5, 99}, seed(), -2, 2), Tensor::from_float({-0.5f}, {}),
                   Tensor::from_float({0.75f}, {1})};
    expect_gpu_matches_cpu(clip, p);
    clip.constant = {1, 2};
    expect_gpu_matches_cpu(clip, p);
    clip.inputs[1] = Tensor();
    clip.constant = {};
    expect_gpu_matches_cpu(clip, p);
    // Where on floats with a 3-way broadcast.
    OpCase where;
    where.op = "Where";
    where.opset = 16;
    where.inputs = {random_tensor(DType::Bool, {4, 1, 33}, seed()), random_tensor(DType::Float32, {5, 33}, seed()),
                    random_tensor(DType::Float32, {4, 5, 1}, seed())};
    expect_gpu_matches_cpu(where, p);
  }
}

TEST(GpuElementwise, NanAndInfInputs) {
  FUSEC_REQUIRE_GPU();
  Seeds seed{300};
  for (Precision p : kFloatPrecisions) {
    SCOPED_TRACE(precision_name(p));
    for (const char* op : {"Relu", "Sigmoid", "Abs", "Sign", "Neg", "Tanh", "Softplus", "HardSwish", "Exp", "Floor"})
      expect_gpu_matches_cpu(unary(op, with_specials({3, 40}, seed())), p);
    expect_gpu_matches_cpu(unary("LeakyRelu", with_specials({3, 40}, seed())), p);
    expect_gpu_matches_cpu(unary("Clip", with_specials({3, 40}, seed()), {attr("min", -1.0f), attr("max", 1.0f)}, 6),
                           p);
    // Clip with min > max: every element becomes max (NaN stays NaN).
    expect_gpu_matches_cpu(unary("Clip", with_specials({3, 40}, seed()), {attr("min", 1.0f), attr("max", -1.0f)}, 6),
                           p);
    for (const char* op : {"Max", "Min", "Add", "Mul"}) {
      OpCase c = binary(op, with_specials({4, 40}, seed()), with_specials({40}, seed()));
      c.opset = 13;
      expect_gpu_matches_cpu(c, p);
    }
    for (const char* op : {"Equal", "Less", "GreaterOrEqual"})
      expect_gpu_matches_cpu(binary(op, with_specials({4, 40}, seed()), with_specials({4, 40}, seed())), p);
    OpCase fused;
    fused.op = "FusedElementwise";
    fused.domain = "ai.fusec";
    fused.inputs = {with_specials({4, 40}, seed()), with_specials({40}, seed())};
    fused.attrs = {attr("program", std::string("r0 = max i0 i1; r1 = relu r0; r2 = min r1 i0; r3 = clip r2 -1 2; "
                                               "r4 = sigmoid i1; r5 = add r3 r4"))};
    expect_gpu_matches_cpu(fused, p);
  }
}

TEST(GpuElementwise, SigmoidHoldsItsTailAtFloat32) {
  FUSEC_REQUIRE_GPU();
  // Generated kernels take the hardware's exponential and reciprocal for Sigmoid. Band by band, so
  // each band's largest value sets the comparison's scale and the tail answers for its own
  // magnitude (over one wide range, max|ref| = 1 would hide any error below 1e-5). Below -87 the
  // result is denormal and flushed to 0 on the device: formulas.h's sigmoid_fast_f32.
  const std::pair<double, double> bands[] = {{-87, -80}, {-50, -40}, {-16, -8}, {-3, 3}, {8, 16}, {40, 87}};
  Seeds seed{950};
  for (const auto& [lo, hi] : bands) {
    SCOPED_TRACE("x in [" + std::to_string(lo) + ", " + std::to_string(hi) + ")");
    expect_gpu_matches_cpu(unary("Sigmoid", random_tensor(DType::Float32, {4097}, seed(), lo, hi)), Precision::FP32);
    OpCase silu;
    silu.op = "FusedElementwise";
    silu.domain = "ai.fusec";
    silu.inputs = {random_tensor(DType::Float32, {4097}, seed(), lo, hi)};
    silu.attrs = {attr("program", std::string("r0 = sigmoid i0; r1 = mul r0 i0"))};
    expect_gpu_matches_cpu(silu, Precision::FP32);
  }
}

TEST(GpuElementwise, Broadcasting) {
  FUSEC_REQUIRE_GPU();
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> pairs = {
      {{5, 7}, {}},                        // scalar
      {{5, 7}, {7}},                       // row
      {{5, 7}, {5, 1}},                    // column
      {{4, 3, 5}, {4, 1, 5}},              // middle dim
      {{3, 1}, {1, 4}},                    // both sides
      {{4097}, {1}},                       // rank 1
      {{2, 3, 4, 5, 6}, {3, 1, 5, 1}},     // rank 5
      {{2, 1, 4, 1, 6}, {1, 3, 1, 5, 1}},  // rank 5, both sides
      {{8, 768}, {768}},                   // bias row: vectorized along the inner dim
      {{16, 8, 64}, {16, 1, 64}},          // vectorized with a broadcast middle dim
      {{16, 64}, {16, 1}},                 // vectorized, column scalar per vector
      {{1, 1, 1}, {1}},                    // all ones
      {{3, 0, 5}, {5}},                    // empty
  };
  Seeds seed{400};
  for (const auto& [a, b] : pairs)
    for (Precision p : kFloatPrecisions) {
      SCOPED_TRACE(::testing::PrintToString(a) + " with " + ::testing::PrintToString(b) + " at " + precision_name(p));
      expect_gpu_matches_cpu(
          binary("Add", random_tensor(DType::Float32, a, seed()), random_tensor(DType::Float32, b, seed())), p);
      expect_gpu_matches_cpu(
          binary("Sub", random_tensor(DType::Float32, b, seed()), random_tensor(DType::Float32, a, seed())), p);
    }
  // Integer add with broadcasting (exact) and legacy (opset 6) broadcast with an axis.
  expect_gpu_matches_cpu(
      binary("Add", ints(DType::Int64, {2, 3, 4, 5}, 1, -1000, 1000), ints(DType::Int64, {3, 1, 5}, 2, -1000, 1000)),
      Precision::FP32);
  OpCase legacy =
      binary("Mul", random_tensor(DType::Float32, {2, 3, 4, 5}, 3), random_tensor(DType::Float32, {3, 4}, 4), 6);
  legacy.attrs = {attr("broadcast", int64_t{1}), attr("axis", int64_t{1})};
  expect_gpu_matches_cpu(legacy, Precision::FP32);
  legacy.inputs[1] = random_tensor(DType::Float32, {5}, 5);
  legacy.attrs = {attr("broadcast", int64_t{1})};
  expect_gpu_matches_cpu(legacy, Precision::FP16);
}

TEST(GpuElementwise, IntegerOpsExact) {
  FUSEC_REQUIRE_GPU();
  Seeds seed{500};
  for (DType t : {DType::Int32, DType::Int64, DType::Int8, DType::Int16, DType::UInt8}) {
    SCOPED_TRACE(dtype_name(t));
    const bool u = t == DType::UInt8;
    const double lo = u ? 0 : -100, hi = 100;
    for (const char* op : {"Add", "Sub", "Mul"}) {
      expect_gpu_matches_cpu(binary(op, ints(t, {7, 33}, seed(), lo, hi), ints(t, {33}, seed(), lo, hi)),
                             Precision::FP32);
      expect_gpu_matches_cpu(binary(op, ints(t, {4097}, seed(), lo, hi), ints(t, {4097}, seed(), lo, hi)),
                             Precision::FP32);
    }
    expect_gpu_matches_cpu(
        binary("Div", ints(t, {7, 33}, seed(), lo, hi), ints(t, {7, 1}, seed(), u ? 1 : -9, 9, true)), Precision::FP32);
    for (int64_t fm : {0, 1}) {
      OpCase mod = binary("Mod", ints(t, {7, 33}, seed(), lo, hi), ints(t, {33}, seed(), u ? 1 : -9, 9, true));
      mod.attrs = {attr("fmod", fm)};
      expect_gpu_matches_cpu(mod, Precision::FP32);
    }
    for (const char* op : {"Abs", "Sign", "Relu"})
      expect_gpu_matches_cpu(unary(op, ints(t, {5, 41}, seed(), lo, hi)), Precision::FP32);
    if (!u) expect_gpu_matches_cpu(unary("Neg", ints(t, {5, 41}, seed(), lo, hi)), Precision::FP32);
    for (const char* op : {"Sum", "Max", "Min"}) {  // Mean is float-only (schema)
      OpCase c;
      c.op = op;
      c.opset = 13;
      c.inputs = {ints(t, {3, 5, 7}, seed(), lo, hi), ints(t, {7}, seed(), lo, hi), ints(t, {3, 1, 1}, seed(), lo, hi)};
      expect_gpu_matches_cpu(c, Precision::FP32);
    }
    for (const char* op : {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"})
      expect_gpu_matches_cpu(
          binary(op, ints(t, {6, 33}, seed(), lo / 10, hi / 10), ints(t, {33}, seed(), lo / 10, hi / 10)),
          Precision::FP32);
    OpCase clip;
    clip.op = "Clip";
    clip.opset = 13;
    clip.inputs = {ints(t, {4, 50}, seed(), lo, hi), ints(t, {}, seed(), u ? 10 : -20, u ? 11 : -19),
                   ints(t, {1}, seed(), 30, 31)};
    expect_gpu_matches_cpu(clip, Precision::FP32);
    expect_gpu_matches_cpu(binary("PRelu", ints(t, {4, 50}, seed(), lo, hi), ints(t, {50}, seed(), -3, 3), 16),
                           Precision::FP32);
    // The precision flag must not touch integer data.
    expect_gpu_matches_cpu(binary("Add", ints(t, {9, 9}, seed(), lo, hi), ints(t, {9}, seed(), lo, hi)),
                           Precision::FP16);
  }
  // Wrapping arithmetic at the int32/int64 limits, INT_MIN / -1.
  Tensor big(DType::Int32, {4});
  int32_t* b = big.data<int32_t>();
  b[0] = INT32_MAX;
  b[1] = INT32_MIN;
  b[2] = INT32_MIN;
  b[3] = -7;
  Tensor small(DType::Int32, {4});
  int32_t* s = small.data<int32_t>();
  s[0] = 1;
  s[1] = -1;
  s[2] = -1;
  s[3] = 2;
  for (const char* op : {"Add", "Sub", "Mul", "Div"}) expect_gpu_matches_cpu(binary(op, big, small), Precision::FP32);
  expect_gpu_matches_cpu(unary("Abs", big), Precision::FP32);
  expect_gpu_matches_cpu(unary("Neg", big), Precision::FP32);
  // Integer Pow: int base with int and float exponents, float base with int exponent.
  for (DType bt : {DType::Int32, DType::Int64}) {
    expect_gpu_matches_cpu(binary("Pow", ints(bt, {5, 20}, seed(), -5, 5), ints(DType::Int64, {20}, seed(), -2, 6), 15),
                           Precision::FP32);
    // Whole-number float exponents: the results are exact integers, so truncating them cannot
    // depend on the last bit of pow().
    expect_gpu_matches_cpu(
        binary("Pow", ints(bt, {5, 20}, seed(), 0, 5), quantized(DType::Float32, {20}, seed(), 0, 3, 1), 15),
        Precision::FP32);
  }
  expect_gpu_matches_cpu(binary("Pow", random_tensor(DType::Float64, {5, 20}, seed(), 0.1, 3),
                                ints(DType::Int32, {20}, seed(), -3, 4), 15),
                         Precision::FP32);
  // Integer Erf and Shrink.
  expect_gpu_matches_cpu(unary("Erf", ints(DType::Int32, {50}, seed(), -3, 3)), Precision::FP32);
  expect_gpu_matches_cpu(
      unary("Shrink", ints(DType::Int32, {50}, seed(), -5, 5), {attr("lambd", 1.5f), attr("bias", 1.0f)}),
      Precision::FP32);
}

TEST(GpuElementwise, BoolAndBitOps) {
  FUSEC_REQUIRE_GPU();
  Seeds seed{600};
  for (const char* op : {"And", "Or", "Xor", "Equal"}) {
    expect_gpu_matches_cpu(
        binary(op, random_tensor(DType::Bool, {5, 37}, seed()), random_tensor(DType::Bool, {37}, seed())),
        Precision::FP32);
    expect_gpu_matches_cpu(
        binary(op, random_tensor(DType::Bool, {4099}, seed()), random_tensor(DType::Bool, {4099}, seed())),
        Precision::FP32);
  }
  expect_gpu_matches_cpu(unary("Not", random_tensor(DType::Bool, {3, 1001}, seed())), Precision::FP32);
  OpCase legacy_and =
      binary("And", random_tensor(DType::Bool, {3, 4, 5}, seed()), random_tensor(DType::Bool, {4}, seed()), 6);
  legacy_and.attrs = {attr("broadcast", int64_t{1}), attr("axis", int64_t{1})};
  expect_gpu_matches_cpu(legacy_and, Precision::FP32);
  for (const char* dir : {"LEFT", "RIGHT"}) {
    OpCase c =
        binary("BitShift", ints(DType::UInt8, {4, 33}, seed(), 0, 255), ints(DType::UInt8, {33}, seed(), 0, 10), 11);
    c.attrs = {attr("direction", std::string(dir))};
    expect_gpu_matches_cpu(c, Precision::FP32);
    for (DType t : {DType::Int8, DType::Int16, DType::Int32, DType::Int64}) {  // opset 28: signed, arithmetic
      OpCase sc = binary("BitShift", ints(t, {4, 33}, seed(), -100, 100), ints(t, {33}, seed(), -2, 70), 28);
      sc.attrs = {attr("direction", std::string(dir))};
      expect_gpu_matches_cpu(sc, Precision::FP32);
    }
  }
  for (DType t : {DType::UInt8, DType::Int8, DType::Int16, DType::Int32, DType::Int64}) {  // opset 18
    const double lo = t == DType::UInt8 ? 0 : -100;
    for (const char* op : {"BitwiseAnd", "BitwiseOr", "BitwiseXor"})
      expect_gpu_matches_cpu(binary(op, ints(t, {4, 33}, seed(), lo, 100), ints(t, {33}, seed(), lo, 100), 18),
                             Precision::FP32);
    expect_gpu_matches_cpu(unary("BitwiseNot", ints(t, {5, 31}, seed(), lo, 100), {}, 18), Precision::FP32);
  }
  for (DType t : {DType::Int64, DType::Int8, DType::Bool, DType::Float64, DType::Float16}) {
    OpCase where;
    where.op = "Where";
    where.opset = 16;
    where.inputs = {random_tensor(DType::Bool, {6, 1}, seed()), random_tensor(t, {6, 35}, seed(), -50, 50),
                    random_tensor(t, {35}, seed(), -50, 50)};
    expect_gpu_matches_cpu(where, Precision::FP32);
    expect_gpu_matches_cpu(where, Precision::FP16);
  }
}

TEST(GpuElementwise, CastBetweenTypes) {
  FUSEC_REQUIRE_GPU();
  const DType all[] = {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64, DType::Int8,
                       DType::UInt8,   DType::Int16,   DType::Int32,    DType::Int64,   DType::Bool};
  Seeds seed{700};
  for (DType s : all)
    for (DType d : all) {
      SCOPED_TRACE(std::string(dtype_name(s)) + " -> " + dtype_name(d));
      // Quantized to 1/8 within ±120 (exact in float16) so that half storage cannot move a value
      // across an integer; negative values check truncation toward zero, uint8 the clamping.
      Tensor x = is_float(s) ? quantized(s, {3, 67}, seed(), -120, 120, 0.125)
                             : ints(s, {3, 67}, seed(), s == DType::UInt8 || s == DType::Bool ? 0 : -120, 120);
      OpCase c = unary("Cast", x, {attr("to", int64_t{static_cast<int32_t>(d)})}, 19);
      expect_gpu_matches_cpu(c, Precision::FP32);
      if (s == DType::Float32 || d == DType::Float32) expect_gpu_matches_cpu(c, Precision::FP16);
    }
  // NaN and infinities to integers (0 and clamping) and to bool.
  for (DType d : {DType::Int32, DType::Int64, DType::UInt8, DType::Bool, DType::Float16, DType::BFloat16})
    expect_gpu_matches_cpu(
        unary("Cast", with_specials({2, 40}, seed()), {attr("to", int64_t{static_cast<int32_t>(d)})}, 13),
        Precision::FP32);
  // float64 -> half rounds once (through round-to-odd), on values between two halves.
  expect_gpu_matches_cpu(unary("Cast", random_tensor(DType::Float64, {1000}, seed(), -70000, 70000),
                               {attr("to", int64_t{static_cast<int32_t>(DType::Float16)})}, 13),
                         Precision::FP32);
  OpCase like;
  like.op = "CastLike";
  like.opset = 19;
  like.inputs = {quantized(DType::Float32, {5, 9}, seed(), -20, 20, 0.25), ints(DType::Int32, {2}, seed(), 0, 5)};
  expect_gpu_matches_cpu(like, Precision::FP32);
  expect_gpu_matches_cpu(like, Precision::BF16);
}

TEST(GpuElementwise, NativeHalfAndDoubleModels) {
  FUSEC_REQUIRE_GPU();
  Seeds seed{800};
  for (DType t : {DType::Float16, DType::BFloat16, DType::Float64}) {
    SCOPED_TRACE(dtype_name(t));
    const double tol = t == DType::Float64 ? 1e-12 : 1e-2;
    expect_gpu_matches_cpu(binary("Add", random_tensor(t, {7, 129}, seed()), random_tensor(t, {129}, seed())),
                           Precision::FP32, tol);
    for (const char* op : {"Exp", "Sigmoid", "Tanh", "Sqrt"})
      expect_gpu_matches_cpu(unary(op, random_tensor(t, {1001}, seed(), 0, 2)), Precision::FP32, tol);
    expect_gpu_matches_cpu(unary("Gelu", random_tensor(t, {1001}, seed(), -4, 4), {}, 20), Precision::FP32, tol);
    expect_gpu_matches_cpu(unary("Cast", random_tensor(t, {99}, seed(), -9, 9), {attr("to", int64_t{1})}),
                           Precision::FP32, tol);
  }
}

namespace {

const char* kPrograms[] = {
    // bias + exact GELU, unfused form (docs/fused_elementwise.md's example)
    "r0 = add i0 i1; r1 = mul r0 0.707106769; r2 = erf r1; r3 = add r2 1; r4 = mul r0 0.5; r5 = mul r4 r3",
    "r0 = add i0 i1; r1 = relu r0",
    "r0 = mul i0 i1; r1 = add r0 i2; r2 = sigmoid r1; r3 = mul r1 r2",  // scale, shift, SiLU
    "r0 = sub i0 i1; r1 = div r0 i2; r2 = clip r1 -0.5 0.5",
    "r0 = gelu i0; r1 = gelu_tanh i1; r2 = sub r0 r1",
    "r0 = leaky_relu i0 0.1; r1 = hard_sigmoid r0 0.2 0.5; r2 = hard_swish i1; r3 = mul r1 r2",
    "r0 = abs i0; r1 = add r0 0.5; r2 = log r1; r3 = exp r2; r4 = sqrt r3; r5 = reciprocal r4; r6 = neg r5",
    "r0 = abs i0; r1 = pow r0 1.5; r2 = max r1 i1; r3 = min r2 0.75; r4 = softplus r3",
    "r0 = mul i0 4; r1 = floor r0; r2 = ceil r0; r3 = add r1 r2; r4 = tanh r3",
    "r0 = add i0 i1; r1 = add r0 i2; r2 = add r1 i3; r3 = div r2 4",
    "r0 = mul i0 i0; r1 = mul r0 i0; r2 = mul r1 0.044715; r3 = add i0 r2; r4 = mul r3 0.797884583; "
    "r5 = tanh r4; r6 = add r5 1; r7 = mul i0 0.5; r8 = mul r7 r6",
    "r0 = sub i0 i1; r1 = mul r0 r0; r2 = add r1 1e-05; r3 = sqrt r2; r4 = reciprocal r3; r5 = mul r0 r4",
};

int inputs_of(const std::string& program) {
  int n = 0;
  for (int i = 0; i < 8; ++i)
    if (program.find("i" + std::to_string(i)) != std::string::npos) n = i + 1;
  return n;
}

}  // namespace

TEST(GpuElementwise, FusedElementwisePrograms) {
  FUSEC_REQUIRE_GPU();
  const std::vector<std::vector<std::vector<int64_t>>> shape_sets = {
      {{8, 768}, {768}, {8, 1}, {}},
      {{2, 3, 5, 7}, {3, 1, 7}, {1}, {2, 3, 5, 7}},
      {{4097}, {4097}, {4097}, {4097}},
      {{7}, {1}, {7}, {1}},
  };
  Seeds seed{900};
  for (const char* prog : kPrograms) {
    const int n = inputs_of(prog);
    for (const auto& shapes : shape_sets)
      for (Precision p : kFloatPrecisions) {
        SCOPED_TRACE(std::string(prog) + " " + ::testing::PrintToString(shapes[0]) + " " + precision_name(p));
        OpCase c;
        c.op = "FusedElementwise";
        c.domain = "ai.fusec";
        c.attrs = {attr("program", std::string(prog))};
        for (int i = 0; i < n; ++i) {
          // The third input divides in program 4: keep it away from zero.
          const bool divisor = i == 2 && std::string(prog).find("div r0 i2") != std::string::npos;
          // Multiples of 1/64 are exact in fp16/bf16, so floor/ceil see the reference's values.
          c.inputs.push_back(
              quantized(DType::Float32, shapes[static_cast<size_t>(i)], seed(), divisor ? 0.5 : -2, 2, 1.0 / 64));
        }
        if (n > 1) c.constant = {1};  // a weight input, as the fusion pass leaves biases
        expect_gpu_matches_cpu(c, p);
      }
  }
}

TEST(GpuElementwise, FactoryRefusesAndNamesKernels) {
  FUSEC_REQUIRE_GPU();
  cuda::Context ctx(0);
  auto plan = [&](const std::string& op, const std::string& domain, std::vector<NamedAttribute> attrs,
                  std::vector<cuda::PlanValue> ins, cuda::PlanValue out, std::string* why) {
    Node n;
    n.name = "n";
    n.op_type = op;
    n.domain = domain;
    n.attrs = std::move(attrs);
    const int64_t opset = domain.empty() ? 17 : 1;
    const OpSchema* schema = OpRegistry::global().find(domain, op, opset);
    EXPECT_NE(schema, nullptr);
    cuda::PlanContext pc(n, *schema, opset, Precision::FP32, ctx, std::move(ins), {std::move(out)});
    const cuda::OpFactory* f = cuda::CudaOpRegistry::global().find(domain, op);
    EXPECT_NE(f, nullptr);
    return (*f)(pc, why);
  };
  auto pv = [](DType t, std::vector<int64_t> d, const Tensor* c = nullptr) {
    cuda::PlanValue v;
    v.present = true;
    v.dtype = v.onnx_dtype = t;
    v.dims = std::move(d);
    v.constant = c;
    return v;
  };
  std::string why;
  // A constant zero integer divisor: the CPU reference reports the error.
  Tensor zero(DType::Int32, {3});
  auto op =
      plan("Div", "", {}, {pv(DType::Int32, {2, 3}), pv(DType::Int32, {3}, &zero)}, pv(DType::Int32, {2, 3}), &why);
  EXPECT_EQ(op, nullptr);
  EXPECT_NE(why.find("zero"), std::string::npos) << why;
  op = plan("Celu", "", {attr("alpha", 0.0f)}, {pv(DType::Float32, {4})}, pv(DType::Float32, {4}), &why);
  EXPECT_EQ(op, nullptr);
  op = plan("FusedElementwise", "ai.fusec",
            {attr("program", std::string("r0 = add i0 i1; r1 = mul r0 2; r2 = relu r1"))},
            {pv(DType::Float32, {4, 8}), pv(DType::Float32, {8})}, pv(DType::Float32, {4, 8}), &why);
  ASSERT_NE(op, nullptr) << why;
  EXPECT_EQ(op->kernel_name(), "nvrtc elementwise (3 ops)");
  op = plan("Add", "", {}, {pv(DType::Float32, {4, 8}), pv(DType::Float32, {8})}, pv(DType::Float32, {4, 8}), &why);
  ASSERT_NE(op, nullptr) << why;
  EXPECT_EQ(op->kernel_name(), "nvrtc elementwise (Add)");
}

TEST(GpuElementwise, NvrtcDiskCache) {
  FUSEC_REQUIRE_GPU();
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("fusec_nvrtc_test_" + std::to_string(getpid()) + "_" +
                                   std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
  const char* old = env_switch("FUSEC_NVRTC_CACHE_DIR");
  const std::string saved = old ? old : "";
  setenv("FUSEC_NVRTC_CACHE_DIR", dir.c_str(), 1);
  ASSERT_EQ(cuda::nvrtc_disk_cache_dir(), dir.string());
  cuda::Context ctx(0);
  // A source no earlier test can have produced.
  const std::string src =
      "extern \"C\" __global__ void fx_probe(float* p) { p[threadIdx.x] = " + std::to_string(getpid()) + ".0f + " +
      std::to_string(dir.string().size()) + ".0f; }\n";
  cuda::NvrtcSource from;
  auto m1 = cuda::load_nvrtc_module(src, {"fx_probe"}, ctx.sm(), " (test)", &from);
  EXPECT_EQ(from, cuda::NvrtcSource::Compiled);
  auto m2 = cuda::load_nvrtc_module(src, {"fx_probe"}, ctx.sm(), " (test)", &from);
  EXPECT_EQ(from, cuda::NvrtcSource::Memory);
  EXPECT_EQ(m1.get(), m2.get());
  // As a new process would: nothing in memory, the CUBIN comes from disk.
  cuda::clear_nvrtc_memory_cache();
  auto m3 = cuda::load_nvrtc_module(src, {"fx_probe"}, ctx.sm(), " (test)", &from);
  EXPECT_EQ(from, cuda::NvrtcSource::Disk);
  ASSERT_NE(m3->kernel(0), nullptr);
  // A truncated entry is ignored and rebuilt.
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    ++files;
    fs::resize_file(e.path(), fs::file_size(e.path()) / 2);
  }
  EXPECT_EQ(files, 1u);  // no temporary file left behind
  cuda::clear_nvrtc_memory_cache();
  cuda::load_nvrtc_module(src, {"fx_probe"}, ctx.sm(), " (test)", &from);
  EXPECT_EQ(from, cuda::NvrtcSource::Compiled);
  cuda::clear_nvrtc_memory_cache();
  cuda::load_nvrtc_module(src, {"fx_probe"}, ctx.sm(), " (test)", &from);
  EXPECT_EQ(from, cuda::NvrtcSource::Disk);
  // A kernel from the disk cache computes the right thing end to end.
  cuda::clear_nvrtc_memory_cache();
  OpCase c;
  c.op = "FusedElementwise";
  c.domain = "ai.fusec";
  c.attrs = {attr("program", std::string("r0 = mul i0 i1; r1 = gelu r0"))};
  c.inputs = {random_tensor(DType::Float32, {3, 77}, 1), random_tensor(DType::Float32, {77}, 2)};
  expect_gpu_matches_cpu(c, Precision::FP16);
  cuda::clear_nvrtc_memory_cache();
  expect_gpu_matches_cpu(c, Precision::FP16);
  // A compile error names the node and carries NVRTC's log.
  try {
    cuda::load_nvrtc_module("this is not CUDA", {"k"}, ctx.sm(), " (node 'bad', op Test)");
    ADD_FAILURE() << "expected a compile error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Internal);
    EXPECT_NE(std::string(e.what()).find("node 'bad'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("error"), std::string::npos) << e.what();
  }
  // An unwritable folder only turns the disk cache off.
  setenv("FUSEC_NVRTC_CACHE_DIR", "/proc/fusec_cannot_write_here", 1);
  EXPECT_EQ(cuda::nvrtc_disk_cache_dir(), "");
  cuda::clear_nvrtc_memory_cache();
  cuda::load_nvrtc_module(src, {"fx_probe"}, ctx.sm(), " (test)", &from);
  EXPECT_EQ(from, cuda::NvrtcSource::Compiled);
  if (saved.empty())
    unsetenv("FUSEC_NVRTC_CACHE_DIR");
  else
    setenv("FUSEC_NVRTC_CACHE_DIR", saved.c_str(), 1);
  std::error_code ec;
  fs::remove_all(dir, ec);
}

// Not a check: prints the effective bandwidth (bytes read + written per second) of a few
// bandwidth-bound kernels, to compare with the device copy rate (~3 TB/s on an H100).
TEST(GpuElementwise, BandwidthReport) {
  FUSEC_REQUIRE_GPU();
  cuda::Context ctx(0);
  struct Shape {
    const char* what;
    std::string op, domain, program;
    DType t;
    std::vector<int64_t> a, b;  // b empty: unary
  };
  const Shape shapes[] = {
      {"fp16 Add 64M", "Add", "", "", DType::Float16, {1 << 26}, {1 << 26}},
      {"fp32 Relu 64M", "Relu", "", "", DType::Float32, {1 << 26}, {}},
      {"fp16 bias+GELU [16384,4096]+[4096]",
       "FusedElementwise",
       "ai.fusec",
       "r0 = add i0 i1; r1 = gelu r0",
       DType::Float16,
       {16384, 4096},
       {4096}},
      {"bf16 Mul [4096,16,1024]*[4096,1,1024]", "Mul", "", "", DType::BFloat16, {4096, 16, 1024}, {4096, 1, 1024}},
      {"fp32 Mul [8192,1,4096]*[1,4,4096]", "Mul", "", "", DType::Float32, {8192, 1, 4096}, {1, 4, 4096}},
  };
  for (const auto& s : shapes) {
    Node n;
    n.name = "bench";
    n.op_type = s.op;
    n.domain = s.domain;
    if (!s.program.empty()) n.attrs = {attr("program", s.program)};
    const int64_t opset = s.domain.empty() ? 17 : 1;
    const OpSchema* schema = OpRegistry::global().find(s.domain, s.op, opset);
    ASSERT_NE(schema, nullptr);
    std::vector<cuda::PlanValue> ins;
    std::vector<std::vector<int64_t>> in_dims = {s.a};
    if (!s.b.empty()) in_dims.push_back(s.b);
    std::vector<int64_t> out_dims = s.a;
    if (!s.b.empty() && s.b.size() == s.a.size())
      for (size_t i = 0; i < s.a.size(); ++i) out_dims[i] = std::max(s.a[i], s.b[i]);
    for (const auto& d : in_dims) {
      cuda::PlanValue v;
      v.present = true;
      v.dtype = v.onnx_dtype = s.t;
      v.dims = d;
      ins.push_back(v);
    }
    cuda::PlanValue o;
    o.present = true;
    o.dtype = o.onnx_dtype = s.t;
    o.dims = out_dims;
    cuda::PlanContext pc(n, *schema, opset, Precision::FP32, ctx, ins, {o});
    std::string why;
    auto op = (*cuda::CudaOpRegistry::global().find(s.domain, s.op))(pc, &why);
    ASSERT_NE(op, nullptr) << why;
    std::vector<cuda::DTensor> din, dout(1);
    std::vector<cuda::DeviceBuffer> bufs;
    size_t bytes = 0;
    for (const auto& d : in_dims) {
      cuda::DTensor t{nullptr, s.t, d};
      bufs.emplace_back(t.nbytes(), "bench input");
      t.data = bufs.back().get();
      cudaMemset(t.data, 0x3c, t.nbytes());  // 1.0-ish halves, finite floats: never time on zeros
      bytes += t.nbytes();
      din.push_back(t);
    }
    dout[0] = cuda::DTensor{nullptr, s.t, out_dims};
    bufs.emplace_back(dout[0].nbytes(), "bench output");
    dout[0].data = bufs.back().get();
    bytes += dout[0].nbytes();
    cuda::LaunchArgs la{din, dout, ctx, ctx.stream(), nullptr};
    for (int i = 0; i < 5; ++i) op->launch(la);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    std::vector<float> ms;
    for (int i = 0; i < 20; ++i) {
      cudaEventRecord(e0, ctx.stream());
      op->launch(la);
      cudaEventRecord(e1, ctx.stream());
      cudaEventSynchronize(e1);
      float t = 0;
      cudaEventElapsedTime(&t, e0, e1);
      ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    const double med = ms[ms.size() / 2];
    std::printf("[bandwidth] %-45s %8.3f ms  %7.0f GB/s  (%s)\n", s.what, med, bytes / (med * 1e-3) / 1e9,
                op->kernel_name().c_str());
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
  }
}

// The fused epilogue's activation names: every Act prints a name that parses back to it (kernel
// names print them, FusedConv/FusedMatMul attributes are parsed), no name and "" are none, an
// unknown name is refused, and the parameters the attribute leaves out take the CPU reference's
// defaults. Host code only: it runs without a GPU.
TEST(CudaEpilogue, ActivationNamesParseAndPrintBack) {
  using cuda::Act;
  for (int i = 1; i <= static_cast<int>(Act::GeluTanh); ++i) {
    const Act a = static_cast<Act>(i);
    cuda::ActParams p;
    ASSERT_TRUE(cuda::parse_activation(cuda::activation_name(a), {}, &p)) << cuda::activation_name(a);
    EXPECT_EQ(p.act, a) << cuda::activation_name(a);
  }
  cuda::ActParams p{Act::Relu, 7, 7};
  ASSERT_TRUE(cuda::parse_activation("", {}, &p));
  EXPECT_EQ(p.act, Act::None);
  EXPECT_STREQ(cuda::activation_name(Act::None), "none");
  EXPECT_FALSE(cuda::parse_activation("none", {}, &p));
  EXPECT_FALSE(cuda::parse_activation("gelu", {}, &p));  // names are case-sensitive, as in the IR
  ASSERT_TRUE(cuda::parse_activation("LeakyRelu", {}, &p));
  EXPECT_FLOAT_EQ(p.p0, 0.01f);
  ASSERT_TRUE(cuda::parse_activation("Clip", {-2.0f}, &p));
  EXPECT_FLOAT_EQ(p.p0, -2.0f);
  EXPECT_TRUE(std::isinf(p.p1) && p.p1 > 0);
  ASSERT_TRUE(cuda::parse_activation("HardSigmoid", {}, &p));
  EXPECT_FLOAT_EQ(p.p0, 0.2f);
  EXPECT_FLOAT_EQ(p.p1, 0.5f);
  ASSERT_TRUE(cuda::parse_activation("HardSigmoid", {0.1f, 0.6f}, &p));
  EXPECT_FLOAT_EQ(p.p0, 0.1f);
  EXPECT_FLOAT_EQ(p.p1, 0.6f);
}
