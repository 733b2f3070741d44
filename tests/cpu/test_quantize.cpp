// Linear quantization on the CPU reference. Values marked "reference" are the ONNX reference
// implementation's (onnx.reference, onnx 1.23) for the same inputs; the integer products are also
// checked against MatMul and Conv on float copies of the shifted operands, which are exact in
// float32 at these sizes.
#include <cmath>
#include <limits>

#include "backend/cpu/kernels/common.h"
#include "ir/half.h"
#include "test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

Tensor typed(DType t, const std::vector<int64_t>& v, std::vector<int64_t> dims) {
  Tensor out(t, dims);
  cpu::convert_tensor(int64s(v, std::move(dims)), out);
  return out;
}
Tensor u8(const std::vector<int64_t>& v, std::vector<int64_t> dims = {}) { return typed(DType::UInt8, v, dims); }
Tensor i8(const std::vector<int64_t>& v, std::vector<int64_t> dims = {}) { return typed(DType::Int8, v, dims); }
Tensor i32(const std::vector<int64_t>& v, std::vector<int64_t> dims = {}) { return typed(DType::Int32, v, dims); }
Tensor scalar(float v) { return floats({v}, {}); }

/// A graph of one `op` node over inputs `ins` (graph inputs i0, i1, ...), returning output 0..n-1.
std::vector<Tensor> run_op(const std::string& op, const std::vector<Tensor>& ins, std::vector<NamedAttribute> attrs,
                           int64_t opset, size_t outputs = 1) {
  GraphBuilder b(opset);
  std::vector<Value*> vs;
  for (size_t i = 0; i < ins.size(); ++i)
    vs.push_back(b.input("i" + std::to_string(i), ins[i].dtype(), shape_of(ins[i].dims())));
  for (Value* o : b.node_n(op, vs, outputs, std::move(attrs), "q")) b.output(o);
  auto g = b.build();
  return run_cpu(*g, ins);
}
Tensor run1(const std::string& op, const std::vector<Tensor>& ins, std::vector<NamedAttribute> attrs = {},
            int64_t opset = 21) {
  return run_op(op, ins, std::move(attrs), opset)[0];
}

std::string error_of(const std::string& op, const std::vector<Tensor>& ins, std::vector<NamedAttribute> attrs = {},
                     int64_t opset = 21) {
  try {
    run1(op, ins, std::move(attrs), opset);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

/// Seeded integers in [lo, hi] as `t`.
Tensor random_ints(DType t, std::vector<int64_t> dims, int64_t lo, int64_t hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> u(lo, hi);
  std::vector<int64_t> v(static_cast<size_t>(checked_numel(dims)));
  for (auto& e : v) e = u(rng);
  return typed(t, v, std::move(dims));
}

/// float32 copy of t - zp[k], k the index along dim `axis` when zp has more than one value.
Tensor shifted_floats(const Tensor& t, const Tensor& zp, size_t axis) {
  Tensor out(DType::Float32, t.dims());
  int64_t inner = 1;
  for (size_t i = axis + 1; i < t.rank(); ++i) inner *= t.dim(i);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const int64_t k = zp.numel() == 1 ? 0 : (i / inner) % t.dim(axis);
    out.data<float>()[i] = static_cast<float>(t.as_int64(i) - zp.as_int64(k));
  }
  return out;
}

Tensor as_int32(const Tensor& f) {
  std::vector<int64_t> v(static_cast<size_t>(f.numel()));
  for (int64_t i = 0; i < f.numel(); ++i) v[i] = static_cast<int64_t>(f.as_double(i));
  return i32(v, f.dims());
}

}  // namespace

TEST(CpuQuantize, QuantizeRoundsHalfToEvenAndSaturates) {
  const Tensor x = floats({0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 300, -300, 3.49f}, {8});
  // reference
  expect_close(run1("QuantizeLinear", {x, scalar(1), u8({10})}), u8({10, 12, 12, 10, 8, 255, 0, 13}, {8}));
  Tensor x2 = x.clone();
  for (int64_t i = 0; i < 8; ++i) x2.data<float>()[i] *= 2;
  expect_close(run1("QuantizeLinear", {x2, scalar(2), i8({-3})}), i8({-3, -1, -1, -3, -5, 127, -128, 0}, {8}));
  // No zero point: uint8 with zero point 0, before and after opset 13's axis.
  expect_close(run1("QuantizeLinear", {x, scalar(1)}, {}, 10), u8({0, 2, 2, 0, 0, 255, 0, 3}, {8}));
}

TEST(CpuQuantize, NanQuantizesToTheZeroPoint) {
  const Tensor x = floats({std::numeric_limits<float>::quiet_NaN(), 1}, {2});
  expect_close(run1("QuantizeLinear", {x, scalar(1), i8({-7})}), i8({-7, -6}, {2}));
}

TEST(CpuQuantize, PerAxisAndBlockedScales) {
  std::vector<float> v(24);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.7f * static_cast<float>(i) - 5;
  const Tensor x = floats(v, {2, 3, 4});
  const Tensor want = i8({-10, -9, -7, -6, 8, 8, 9, 10, -10, -9, -9, -9, 7, 8, 10, 11, 16, 17, 18, 18, -6, -5, -5, -4},
                         {2, 3, 4});  // reference
  const Tensor s = floats({0.5f, 1, 2}, {3});
  const Tensor zp = i8({0, 10, -10}, {3});
  expect_close(run1("QuantizeLinear", {x, s, zp}, {attr("axis", int64_t{1})}), want);
  expect_close(run1("QuantizeLinear", {x, s, zp}, {attr("axis", int64_t{-2})}), want);

  // Blocks of 2 along axis 1 of a [2, 3] x: the second block is one element long. reference
  const Tensor xb = floats({1, 5, -2, 0.5f, 3, 7}, {2, 3});
  const Tensor sb = floats({0.5f, 2, 1, 0.25f}, {2, 2});
  const Tensor zb = u8({1, 2, 3, 4}, {2, 2});
  expect_close(run1("QuantizeLinear", {xb, sb, zb}, {attr("axis", int64_t{1}), attr("block_size", int64_t{2})}),
               u8({3, 11, 1, 3, 6, 32}, {2, 3}));
  // Dequantizing undoes it where nothing saturated or rounded.
  const Tensor back = run1("DequantizeLinear", {u8({3, 11, 1, 3, 6, 32}, {2, 3}), sb, zb},
                           {attr("axis", int64_t{1}), attr("block_size", int64_t{2})});
  expect_close(back, floats({1, 5, -2, 0, 3, 7}, {2, 3}));
}

TEST(CpuQuantize, DequantizeTypes) {
  // int8 per axis 0.
  expect_close(run1("DequantizeLinear", {i8({-128, 0, 127, 5}, {2, 2}), floats({0.5f, 0.25f}, {2}), i8({0, 5}, {2})},
                    {attr("axis", int64_t{0})}),
               floats({-64, 0, 30.5f, 0}, {2, 2}));
  // int32 (a bias) with no zero point.
  expect_close(run1("DequantizeLinear", {i32({-70000, 3}, {2}), scalar(0.5f)}), floats({-35000, 1.5f}, {2}));
  // From opset 19 the output takes the scale's type.
  Tensor s16(DType::Float16, {});
  s16.data<uint16_t>()[0] = float_to_half(0.5f);
  const Tensor y = run1("DequantizeLinear", {u8({7, 9}, {2}), s16, u8({1})}, {}, 19);
  ASSERT_EQ(y.dtype(), DType::Float16);
  EXPECT_EQ(y.as_double(0), 3.0);
  EXPECT_EQ(y.as_double(1), 4.0);
}

TEST(CpuQuantize, DynamicQuantizeLinear) {
  // reference: min -3, max 7; the zero point 76.5 rounds to even.
  auto out = run_op("DynamicQuantizeLinear", {floats({1, 2.5f, -3, 0.1f, 7}, {5})}, {}, 11, 3);
  expect_close(out[0], u8({102, 140, 0, 79, 254}, {5}));
  EXPECT_FLOAT_EQ(out[1].data<float>()[0], 10.0f / 255.0f);
  EXPECT_EQ(out[2].data<uint8_t>()[0], 76);
  // All positive: the range still starts at 0. reference
  out = run_op("DynamicQuantizeLinear", {floats({1, 2.5f, 3, 0.1f, 7}, {5})}, {}, 11, 3);
  expect_close(out[0], u8({36, 91, 109, 4, 255}, {5}));
  EXPECT_EQ(out[2].data<uint8_t>()[0], 0);
  // All zero: scale 0 and zero point 0, not a division by zero.
  out = run_op("DynamicQuantizeLinear", {floats({0, 0, 0}, {3})}, {}, 11, 3);
  expect_close(out[0], u8({0, 0, 0}, {3}));
  EXPECT_EQ(out[1].data<float>()[0], 0.0f);
  EXPECT_EQ(out[2].data<uint8_t>()[0], 0);
}

TEST(CpuQuantize, MatMulIntegerMatchesFloatMatMulOfShiftedOperands) {
  // Batched and broadcast: A [2, 3, 5, 7] uint8 with one zero point per row, B [3, 7, 4] int8 with
  // one per column.
  const Tensor a = random_ints(DType::UInt8, {2, 3, 5, 7}, 0, 255, 1);
  const Tensor b = random_ints(DType::Int8, {3, 7, 4}, -128, 127, 2);
  const Tensor azp = u8({0, 255, 3, 128, 17}, {5});
  const Tensor bzp = i8({-128, 0, 127, 9}, {4});
  const Tensor got = run1("MatMulInteger", {a, b, azp, bzp}, {}, 10);
  const Tensor want = as_int32(run1("MatMul", {shifted_floats(a, azp, 2), shifted_floats(b, bzp, 2)}, {}, 13));
  expect_close(got, want, 0, 0);
  // Without zero points, and with 1-D operands.
  const Tensor v = random_ints(DType::Int8, {7}, -128, 127, 3);
  const Tensor m = random_ints(DType::Int8, {7, 4}, -128, 127, 4);
  expect_close(run1("MatMulInteger", {v, m}, {}, 10),
               as_int32(run1("MatMul", {shifted_floats(v, i8({0}), 0), shifted_floats(m, i8({0}), 1)}, {}, 13)), 0, 0);
}

TEST(CpuQuantize, QLinearMatMul) {
  const Tensor a = u8({3, 200, 17, 250, 0, 9}, {2, 3});
  const Tensor b = i8({1, -2, 127, -128, 5, 60}, {3, 2});
  // reference: per-tensor a, per-column b.
  expect_close(run1("QLinearMatMul", {a, scalar(0.02f), u8({2}), b, floats({0.01f, 0.03f}, {2}), i8({1, -1}, {2}),
                                      scalar(0.1f), i8({5})}),
               i8({55, -128, 5, 8}, {2, 2}));
  // Per-row a: row r's scale and zero point apply to row r alone.
  const Tensor per_row = run1("QLinearMatMul", {a, floats({0.02f, 0.04f}, {2}), u8({2, 9}, {2}), b, scalar(0.01f),
                                                i8({1}), scalar(0.1f), u8({128})});
  const Tensor row0 = run1("QLinearMatMul", {u8({3, 200, 17}, {1, 3}), scalar(0.02f), u8({2}), b, scalar(0.01f),
                                             i8({1}), scalar(0.1f), u8({128})});
  const Tensor row1 = run1("QLinearMatMul", {u8({250, 0, 9}, {1, 3}), scalar(0.04f), u8({9}), b, scalar(0.01f), i8({1}),
                                             scalar(0.1f), u8({128})});
  expect_close(per_row, u8({row0.as_int64(0), row0.as_int64(1), row1.as_int64(0), row1.as_int64(1)}, {2, 2}));
}

TEST(CpuQuantize, ConvIntegerMatchesFloatConvOfShiftedOperands) {
  const Tensor x = random_ints(DType::UInt8, {2, 4, 7, 6}, 0, 255, 5);
  const Tensor w = random_ints(DType::Int8, {6, 2, 3, 2}, -128, 127, 6);
  const Tensor xzp = u8({131});
  const Tensor wzp = i8({0, -3, 7, 127, -128, 1}, {6});
  const std::vector<NamedAttribute> attrs{attr("group", int64_t{2}), attr("pads", std::vector<int64_t>{1, 0, 2, 1}),
                                          attr("strides", std::vector<int64_t>{2, 1}),
                                          attr("dilations", std::vector<int64_t>{1, 2})};
  const Tensor got = run1("ConvInteger", {x, w, xzp, wzp}, attrs, 10);
  const Tensor want = as_int32(run1("Conv", {shifted_floats(x, xzp, 0), shifted_floats(w, wzp, 0)}, attrs, 11));
  expect_close(got, want, 0, 0);
  // 1-D and 3-D, with auto_pad and no zero points.
  const Tensor x1 = random_ints(DType::Int8, {1, 3, 9}, -128, 127, 7),
               w1 = random_ints(DType::Int8, {2, 3, 4}, -9, 9, 8);
  const std::vector<NamedAttribute> same{attr("auto_pad", std::string("SAME_UPPER"))};
  expect_close(run1("ConvInteger", {x1, w1}, same, 10),
               as_int32(run1("Conv", {shifted_floats(x1, i8({0}), 0), shifted_floats(w1, i8({0}), 0)}, same, 11)), 0,
               0);
  const Tensor x3 = random_ints(DType::UInt8, {1, 2, 3, 4, 5}, 0, 255, 9);
  const Tensor w3 = random_ints(DType::UInt8, {3, 2, 2, 3, 2}, 0, 255, 10);
  expect_close(run1("ConvInteger", {x3, w3, u8({10}), u8({200})}, {}, 10),
               as_int32(run1("Conv", {shifted_floats(x3, u8({10}), 0), shifted_floats(w3, u8({200}), 0)}, {}, 11)), 0,
               0);
}

TEST(CpuQuantize, QLinearConvWithBiasAndPerChannelScales) {
  std::vector<int64_t> xv(64), wv(36);
  for (int64_t i = 0; i < 64; ++i) xv[i] = (i * 37) % 256;
  for (int64_t i = 0; i < 36; ++i) wv[i] = (i * 53) % 256 - 128;
  const Tensor y = run1(
      "QLinearConv",
      {u8(xv, {2, 2, 4, 4}), scalar(0.05f), u8({100}), i8(wv, {4, 1, 3, 3}), floats({0.01f, 0.02f, 0.005f, 0.03f}, {4}),
       i8({0, 1, -2, 3}, {4}), scalar(0.4f), u8({128}), i32({100, -2000, 0, 77}, {4})},
      {attr("group", int64_t{2}), attr("pads", std::vector<int64_t>{1, 0, 1, 2}),
       attr("strides", std::vector<int64_t>{2, 1})},
      10);
  // reference
  expect_close(y, u8({122, 107, 120, 137, 88,  87,  132, 150, 89,  86,  105, 148, 56,  117, 215, 115,
                      146, 128, 124, 125, 130, 123, 122, 126, 233, 129, 96,  97,  138, 89,  66,  96,
                      126, 162, 121, 120, 170, 131, 103, 108, 182, 117, 97,  108, 105, 67,  78,  112,
                      119, 127, 130, 139, 127, 135, 157, 127, 42,  91,  109, 174, 59,  94,  251, 106},
                     {2, 4, 2, 4}));
}

TEST(CpuQuantize, BadParametersNameTheNode) {
  const Tensor x = floats({1, 2, 3, 4, 5, 6}, {2, 3});
  std::string e = error_of("QuantizeLinear", {x, floats({1, 2}, {2}), u8({0, 0}, {2})}, {attr("axis", int64_t{1})});
  EXPECT_NE(e.find("neither per tensor nor one value per index of axis 1 (3)"), std::string::npos) << e;
  EXPECT_NE(e.find("'q'"), std::string::npos) << e;
  e = error_of("QuantizeLinear", {x, floats({1, 2, 3}, {3}), u8({0, 0}, {2})}, {attr("axis", int64_t{1})});
  EXPECT_NE(e.find("differ"), std::string::npos) << e;
  e = error_of("QuantizeLinear", {x, floats({1, 2}, {2}), u8({0, 0}, {2})}, {attr("axis", int64_t{5})});
  EXPECT_NE(e.find("axis 5 is out of range"), std::string::npos) << e;
  e = error_of("QuantizeLinear", {x, floats({1, 2, 3}, {3, 1})},
               {attr("axis", int64_t{1}), attr("block_size", int64_t{2})});
  EXPECT_NE(e.find("must have dims 2x2, got 3x1"), std::string::npos) << e;
  e = error_of("DequantizeLinear", {i32({1, 2}, {2}), scalar(1), i32({3})});
  EXPECT_NE(e.find("zero point of 0"), std::string::npos) << e;
  e = error_of("DequantizeLinear", {u8({1, 2}, {2}), scalar(1), i8({3})});
  EXPECT_NE(e.find("zero point is int8 but x is uint8"), std::string::npos) << e;
  e = error_of("MatMulInteger", {u8({1, 2, 3, 4}, {2, 2}), u8({1, 2, 3, 4}, {2, 2}), u8({1, 2, 3}, {3})}, {}, 10);
  EXPECT_NE(e.find("A's zero point must be a scalar or one value per row of A (2)"), std::string::npos) << e;
  e = error_of("ConvInteger", {u8({1, 2, 3, 4}, {1, 1, 2, 2}), u8({1}, {1, 1, 1, 1}), u8({1, 2}, {2})}, {}, 10);
  EXPECT_NE(e.find("x's zero point must be a scalar"), std::string::npos) << e;
  // A quantized type fusec does not hold is declined, not computed wrong.
  e = error_of("QuantizeLinear", {x, scalar(1), i32({0})});
  EXPECT_NE(e.find("int32"), std::string::npos) << e;
}
