// MaxPool, AveragePool, LpPool and the global pools on CUDA against the CPU reference: every
// auto_pad form, ceil_mode, dilations, 1-D/2-D/3-D windows, MaxPool's Indices output and NaN
// propagation. Max is exact at fp32 (a selection); averages differ only by float32 vs float64
// accumulation.
#include <cmath>
#include <limits>

#include "gpu_test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

using I64s = std::vector<int64_t>;

OpCase pool(const char* type, I64s x, std::vector<NamedAttribute> attrs, int64_t opset = 19, size_t outputs = 1,
            uint64_t seed = 3) {
  OpCase c;
  c.op = type;
  c.inputs = {random_tensor(DType::Float32, std::move(x), seed)};
  c.attrs = std::move(attrs);
  c.opset = opset;
  c.num_outputs = outputs;
  return c;
}

/// Max is a selection: exact at fp32 and for native half data. Averages and Lp norms: 1e-5.
void expect_pool(const OpCase& c, bool exact) {
  expect_gpu_matches_cpu(c, Precision::FP32, exact ? 0.0 : 1e-5);
  expect_gpu_matches_cpu(c, Precision::FP16, 1e-2);
  expect_gpu_matches_cpu(c, Precision::BF16, 1e-2);
  OpCase h = c;
  h.inputs[0] = random_tensor(DType::Float16, c.inputs[0].dims(), 9);
  expect_gpu_matches_cpu(h, Precision::FP32, exact ? 0.0 : 1e-2);
}

NamedAttribute ks(I64s v) { return attr("kernel_shape", std::move(v)); }
NamedAttribute st(I64s v) { return attr("strides", std::move(v)); }
NamedAttribute pads(I64s v) { return attr("pads", std::move(v)); }

}  // namespace

TEST(GpuMaxPool, ResNetStemAndAutoPad) {
  FUSEC_REQUIRE_GPU();
  expect_pool(pool("MaxPool", {2, 64, 56, 56}, {ks({3, 3}), st({2, 2}), pads({1, 1, 1, 1})}), true);
  for (const char* ap : {"SAME_UPPER", "SAME_LOWER", "VALID"}) {
    SCOPED_TRACE(ap);
    expect_pool(pool("MaxPool", {2, 3, 15, 14}, {ks({3, 2}), st({2, 3}), attr("auto_pad", std::string(ap))}), true);
    expect_pool(pool("MaxPool", {1, 2, 8, 9}, {ks({4, 4}), st({3, 2}), attr("auto_pad", std::string(ap))}), true);
  }
}

TEST(GpuMaxPool, CeilModeDilationsAndRanks) {
  FUSEC_REQUIRE_GPU();
  expect_pool(pool("MaxPool", {1, 3, 33, 33}, {ks({3, 3}), st({2, 2}), attr("ceil_mode", int64_t{1})}), true);
  expect_pool(
      pool("MaxPool", {2, 2, 17, 19},
           {ks({3, 2}), st({2, 2}), pads({1, 0, 2, 1}), attr("ceil_mode", int64_t{1}), attr("dilations", I64s{2, 3})}),
      true);
  expect_pool(pool("MaxPool", {3, 5, 1000}, {ks({7}), st({3}), pads({2, 3})}), true);                             // 1-D
  expect_pool(pool("MaxPool", {1, 2, 7, 9, 6}, {ks({2, 3, 2}), st({2, 2, 1}), pads({0, 1, 1, 1, 1, 0})}), true);  // 3-D
  expect_pool(pool("MaxPool", {2, 3, 5, 5}, {ks({5, 5})}, 7), true);  // old opset
}

TEST(GpuMaxPool, IndicesOutputBothStorageOrders) {
  FUSEC_REQUIRE_GPU();
  for (int64_t order : {0, 1}) {
    SCOPED_TRACE("storage_order " + std::to_string(order));
    OpCase c = pool("MaxPool", {2, 3, 11, 10},
                    {ks({3, 3}), st({2, 2}), pads({1, 1, 1, 1}), attr("storage_order", order)}, 12, 2);
    expect_gpu_matches_cpu(c, Precision::FP32, 0.0);
    OpCase d = pool("MaxPool", {2, 2, 5, 6, 7}, {ks({2, 2, 3}), attr("storage_order", order)}, 12, 2);
    expect_gpu_matches_cpu(d, Precision::FP32, 0.0);
  }
}

TEST(GpuMaxPool, NaNPropagatesAndInt8) {
  FUSEC_REQUIRE_GPU();
  OpCase c = pool("MaxPool", {1, 2, 6, 6}, {ks({2, 2}), st({2, 2})});
  float* x = c.inputs[0].data<float>();
  x[0] = std::numeric_limits<float>::quiet_NaN();
  x[40] = std::numeric_limits<float>::quiet_NaN();
  expect_gpu_matches_cpu(c, Precision::FP32, 0.0);
  c.num_outputs = 2;
  c.opset = 12;
  expect_gpu_matches_cpu(c, Precision::FP32, 0.0);
  for (DType t : {DType::Int8, DType::UInt8}) {
    OpCase q = pool("MaxPool", {2, 3, 9, 9}, {ks({3, 3}), st({2, 2}), pads({1, 1, 1, 1})}, 12);
    q.inputs[0] = random_tensor(t, {2, 3, 9, 9}, 5, t == DType::Int8 ? -128 : 0, t == DType::Int8 ? 128 : 256);
    expect_gpu_matches_cpu(q, Precision::FP32, 0.0);
  }
}

// 2-D MaxPool with a 2×2 or 3×3 window, stride 1 or 2, dilation 1 and no Indices runs
// max_pool2d_kernel (two vertically adjacent outputs per thread); these cases reach its edges:
// odd output heights (a group with one row), partial and all-padding windows, every storage type.
TEST(GpuMaxPool, SmallWindowShapes) {
  FUSEC_REQUIRE_GPU();
  expect_pool(pool("MaxPool", {2, 64, 112, 112}, {ks({3, 3}), st({2, 2}), pads({1, 1, 1, 1})}), true);  // ResNet stem
  for (int64_t k : {2, 3})
    for (int64_t s : {1, 2}) {
      SCOPED_TRACE("k " + std::to_string(k) + " s " + std::to_string(s));
      const int64_t p = k == 3 ? 1 : 0;
      expect_pool(pool("MaxPool", {1, 3, 7, 9}, {ks({k, k}), st({s, s}), pads({p, p, p, p})}), true);
      expect_pool(pool("MaxPool", {2, 3, 10, 11}, {ks({k, k}), st({s, s}), pads({0, 1, 2, 0})}), true);  // asymmetric
      expect_pool(pool("MaxPool", {1, 2, 8, 10}, {ks({k, k}), st({s, s}), attr("ceil_mode", int64_t{1})}), true);
      expect_pool(
          pool("MaxPool", {1, 2, 7, 9}, {ks({k, k}), st({s, s}), pads({1, 0, 1, 1}), attr("ceil_mode", int64_t{1})}),
          true);
      expect_pool(pool("MaxPool", {3, 1, 1, 1}, {ks({k, k}), st({s, s}), pads({p, p, k - 1, k - 1})}),
                  true);  // 1×1 planes
    }
  // Pads as large as the window: the first row, first and last columns of outputs see only padding (-inf).
  expect_pool(pool("MaxPool", {1, 2, 5, 6}, {ks({2, 2}), st({2, 2}), pads({2, 2, 2, 2})}), true);
  expect_pool(pool("MaxPool", {1, 2, 1, 5, 6}, {ks({1, 3, 3}), st({1, 2, 2}), pads({0, 1, 1, 0, 1, 1})}),
              true);  // 3-D, depth 1
  expect_pool(pool("MaxPool", {1, 2, 9, 9}, {ks({3, 3}), st({2, 1}), pads({1, 1, 1, 1})}),
              true);  // mixed strides: generic
  // Which kernel ran, by the op's kernel name.
  expect_gpu_matches_cpu(pool("MaxPool", {1, 4, 12, 12}, {ks({3, 3}), st({2, 2}), pads({1, 1, 1, 1})}), Precision::FP32,
                         0.0, true, "2 output rows per thread");
  expect_gpu_matches_cpu(pool("MaxPool", {1, 2, 9, 9}, {ks({3, 3}), st({2, 1}), pads({1, 1, 1, 1})}), Precision::FP32,
                         0.0, true, "thread per output");
}

TEST(GpuMaxPool, SmallWindowTypesAndNaN) {
  FUSEC_REQUIRE_GPU();
  const std::vector<NamedAttribute> stem{ks({3, 3}), st({2, 2}), pads({1, 1, 1, 1})};
  for (DType t : {DType::Float16, DType::BFloat16, DType::Float64}) {
    SCOPED_TRACE(dtype_name(t));
    OpCase c = pool("MaxPool", {2, 3, 11, 13}, stem);
    c.inputs[0] = random_tensor(t, {2, 3, 11, 13}, 7);
    expect_gpu_matches_cpu(c, Precision::FP32, 0.0);
  }
  for (DType t : {DType::Int8, DType::UInt8}) {
    SCOPED_TRACE(dtype_name(t));
    for (int64_t k : {2, 3}) {
      OpCase q = pool("MaxPool", {2, 3, 7, 9}, {ks({k, k}), st({1, 1}), pads({1, 1, 1, 1})}, 12);
      q.inputs[0] = random_tensor(t, {2, 3, 7, 9}, 5, t == DType::Int8 ? -128 : 0, t == DType::Int8 ? 128 : 256);
      expect_gpu_matches_cpu(q, Precision::FP32, 0.0);
    }
  }
  // NaN at a corner (in one window or several, by stride), inside, and on the last row and
  // column: any NaN in a window makes its output NaN, at every precision and storage type.
  const int64_t nans[] = {0, 31, 62, 63 + 40, 125};
  for (int64_t k : {2, 3})
    for (int64_t s : {1, 2}) {
      SCOPED_TRACE("k " + std::to_string(k) + " s " + std::to_string(s));
      const std::vector<NamedAttribute> attrs{ks({k, k}), st({s, s}), pads({1, 1, 1, 1})};
      OpCase c = pool("MaxPool", {1, 2, 7, 9}, attrs);
      for (int64_t i : nans) c.inputs[0].data<float>()[i] = std::numeric_limits<float>::quiet_NaN();
      expect_gpu_matches_cpu(c, Precision::FP32, 0.0);
      expect_gpu_matches_cpu(c, Precision::FP16, 1e-2);
      expect_gpu_matches_cpu(c, Precision::BF16, 1e-2);
      for (DType t : {DType::Float16, DType::BFloat16, DType::Float64}) {
        SCOPED_TRACE(dtype_name(t));
        OpCase h = c;
        h.inputs[0] = random_tensor(t, {1, 2, 7, 9}, 11);
        for (int64_t i : nans) {
          if (t == DType::Float64)
            h.inputs[0].data<double>()[i] = std::numeric_limits<double>::quiet_NaN();
          else
            h.inputs[0].data<uint16_t>()[i] = t == DType::Float16 ? 0x7e00 : 0x7fc0;  // quiet NaN bits
        }
        expect_gpu_matches_cpu(h, Precision::FP32, 0.0);
      }
    }
}

TEST(GpuAveragePool, CountIncludePadAndCeilMode) {
  FUSEC_REQUIRE_GPU();
  for (int64_t inc : {0, 1}) {
    SCOPED_TRACE("count_include_pad " + std::to_string(inc));
    const NamedAttribute cip = attr("count_include_pad", inc);
    expect_pool(pool("AveragePool", {2, 8, 14, 14}, {ks({3, 3}), st({1, 1}), pads({1, 1, 1, 1}), cip}), false);
    expect_pool(pool("AveragePool", {1, 3, 10, 11},
                     {ks({3, 3}), st({2, 2}), pads({1, 0, 1, 1}), attr("ceil_mode", int64_t{1}), cip}),
                false);
    expect_pool(pool("AveragePool", {2, 4, 33}, {ks({4}), st({3}), attr("auto_pad", std::string("SAME_LOWER")), cip}),
                false);
    expect_pool(pool("AveragePool", {1, 2, 5, 6, 7}, {ks({3, 2, 3}), pads({1, 1, 1, 1, 0, 1}), cip}), false);
  }
  expect_pool(pool("AveragePool", {1, 2, 9, 9}, {ks({3, 3}), attr("dilations", I64s{2, 2})}, 19), false);
  expect_pool(pool("AveragePool", {1, 2, 9, 9}, {ks({2, 2}), st({2, 2})}, 6), false);
}

TEST(GpuLpPool, PowersOneTwoThree) {
  FUSEC_REQUIRE_GPU();
  for (int64_t p : {1, 2, 3}) {
    SCOPED_TRACE("p " + std::to_string(p));
    expect_pool(pool("LpPool", {2, 3, 9, 10}, {ks({3, 3}), st({2, 2}), pads({1, 1, 1, 1}), attr("p", p)}, 18), false);
    expect_pool(pool("GlobalLpPool", {2, 3, 9, 10}, {attr("p", p)}, 2), false);
  }
}

TEST(GpuGlobalPool, ResNetHeadAndLargePlanes) {
  FUSEC_REQUIRE_GPU();
  for (const char* op : {"GlobalAveragePool", "GlobalMaxPool"}) {
    SCOPED_TRACE(op);
    const bool exact = std::string(op) == "GlobalMaxPool";
    expect_pool(pool(op, {16, 2048, 7, 7}, {}, 17), exact);  // ResNet-50's head: warp per plane
    expect_pool(pool(op, {2, 3, 70, 70}, {}, 17), exact);    // 4900-element planes: block per plane
    expect_pool(pool(op, {3, 5, 4097}, {}, 17), exact);
    expect_pool(pool(op, {4, 33}, {}, 17), exact);  // no spatial dims: planes of one
    expect_pool(pool(op, {1, 2, 3, 4, 5}, {}, 17), exact);
  }
  OpCase c = pool("GlobalMaxPool", {2, 3, 4, 4}, {}, 17);
  c.inputs[0].data<float>()[17] = std::numeric_limits<float>::quiet_NaN();
  expect_gpu_matches_cpu(c, Precision::FP32, 0.0);
}

// At tf32, fp16 and bf16 a window pool plans channels-last (its input comes from a conv region in a
// model; here from the graph input): one thread per pixel and 16 bytes of channels where C fills
// whole vectors (16, 24 channels), one channel per thread otherwise (5). Every geometry the NCHW
// kernel takes: asymmetric pads, ceil_mode, dilations, count_include_pad, all-padding windows.
TEST(GpuPool, ChannelsLastWindowPoolsMatchTheReference) {
  FUSEC_REQUIRE_GPU();
  const std::vector<std::vector<NamedAttribute>> geometries = {
      {ks({2, 2}), st({2, 2})},
      {ks({3, 3}), st({2, 2}), pads({1, 1, 1, 1})},
      {ks({3, 2}), st({2, 1}), pads({1, 0, 2, 1}), attr("ceil_mode", int64_t{1})},
      {ks({3, 3}), attr("dilations", I64s{2, 2}), pads({2, 2, 2, 2})},
      {ks({3, 3}), st({2, 2}), pads({2, 2, 2, 2}), attr("count_include_pad", int64_t{1})},
  };
  for (int64_t c : {16, 24, 5})
    for (const char* op : {"MaxPool", "AveragePool", "LpPool"})
      for (size_t g = 0; g < geometries.size(); ++g) {
        if (std::string(op) != "AveragePool" && g == 4) continue;  // count_include_pad is AveragePool's
        SCOPED_TRACE(std::string(op) + ", C " + std::to_string(c) + ", geometry " + std::to_string(g));
        std::vector<NamedAttribute> attrs = geometries[g];
        if (std::string(op) == "LpPool") attrs.push_back(attr("p", int64_t{2}));
        const OpCase pc = pool(op, {2, c, 11, 9}, attrs, 19, 1, 40 + g);
        for (Precision p : {Precision::TF32, Precision::FP16, Precision::BF16})
          expect_gpu_matches_cpu(pc, p, p == Precision::TF32 ? 1e-5 : 1e-2, true, "NHWC");
      }
}
