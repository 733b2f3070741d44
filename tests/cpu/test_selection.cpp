// NonZero and Unique on the CPU reference: outputs whose dims come from the data. Expected values
// are numpy's (np.nonzero, np.unique with return_index/inverse/counts) for the same inputs.
#include <cmath>
#include <limits>
#include <random>

#include "ir/half.h"
#include "test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

std::vector<Tensor> run_node(const std::string& op, const Tensor& x, std::vector<NamedAttribute> attrs,
                             size_t outputs) {
  GraphBuilder b(17);
  Value* xv = b.input("x", x.dtype(), shape_of(x.dims()));
  for (Value* o : b.node_n(op, {xv}, outputs, std::move(attrs), "sel")) b.output(o);
  auto g = b.build();
  return run_cpu(*g, {x});
}

void expect_ints(const Tensor& t, const std::vector<int64_t>& v, const std::vector<int64_t>& dims) {
  expect_close(t, int64s(v, dims), 0, 0);
}

}  // namespace

TEST(CpuSelection, NonZeroListsCoordinatesInCOrder) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // NaN is not zero; -0.0 is.
  const auto y = run_node("NonZero", floats({1, 0, -0.0f, nan, 2, 0}, {2, 3}), {}, 1);
  expect_ints(y[0], {0, 1, 1, 0, 0, 1}, {2, 3});
  // Nothing selected: [rank, 0].
  expect_ints(run_node("NonZero", int64s({0, 0, 0, 0}, {2, 1, 2}), {}, 1)[0], {}, {3, 0});
}

TEST(CpuSelection, NonZeroOverManyPiecesMatchesOneScan) {
  // [3, 301, 257] (232,071 elements: the kernel scans pieces of 65,536 on several threads), dense,
  // sparse, empty and with a piece of nothing between full ones: coordinates in C order, each
  // piece's first one unravelled from its offset.
  const std::vector<int64_t> dims = {3, 301, 257};
  const int64_t n = 3 * 301 * 257;
  std::mt19937 rng(5);
  for (int density : {100, 50, 1, 0, -1}) {
    SCOPED_TRACE("density " + std::to_string(density));
    std::vector<float> x(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const bool on = density >= 0 ? static_cast<int>(rng() % 100) < density : i < 60000 || i >= 140000;
      x[static_cast<size_t>(i)] = on ? 1.0f + static_cast<float>(rng() % 5) : (i % 2 ? -0.0f : 0.0f);
    }
    std::vector<int64_t> want[3];
    for (int64_t i = 0; i < n; ++i)
      if (x[static_cast<size_t>(i)] != 0) {
        want[0].push_back(i / (301 * 257));
        want[1].push_back(i / 257 % 301);
        want[2].push_back(i % 257);
      }
    std::vector<int64_t> flat = want[0];
    flat.insert(flat.end(), want[1].begin(), want[1].end());
    flat.insert(flat.end(), want[2].begin(), want[2].end());
    expect_ints(run_node("NonZero", floats(x, dims), {}, 1)[0], flat, {3, static_cast<int64_t>(want[0].size())});
  }
}

TEST(CpuSelection, NonZeroOfEveryTypeMatchesTheElementwiseRule) {
  // [3, 4, 5], about a third nonzero, with runs that carry across both inner dims and long gaps;
  // floats also hold -0.0 (zero), NaN and tiny subnormal-like values (not zero). The expected
  // coordinates come from reading each element as a number, as numpy does.
  const std::vector<int64_t> dims{3, 4, 5};
  std::mt19937 rng(7);
  std::vector<double> v(60, 0.0);
  for (size_t i = 0; i < v.size(); ++i)
    if (rng() % 3 == 0) v[i] = static_cast<double>(rng() % 7) + 1;
  for (size_t i = 18; i < 27; ++i) v[i] = 2;  // a run over a row boundary
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (DType t : {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64, DType::Int8, DType::UInt8,
                  DType::Int16, DType::Int32, DType::Int64, DType::Bool}) {
    SCOPED_TRACE(dtype_name(t));
    std::vector<double> w = v;
    if (is_float(t)) {
      w[1] = -0.0;
      w[2] = nan;
      w[59] = -1e-30;  // a float32 denormal; fp16 and bf16 round it to -0
    }
    Tensor x(t, dims);
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double d = w[static_cast<size_t>(i)];
      switch (t) {
        case DType::Float32:
          x.data<float>()[i] = static_cast<float>(d);
          break;
        case DType::Float16:
          x.data<uint16_t>()[i] = float_to_half(static_cast<float>(d));
          break;
        case DType::BFloat16:
          x.data<uint16_t>()[i] = float_to_bf16(static_cast<float>(d));
          break;
        case DType::Float64:
          x.data<double>()[i] = d;
          break;
        case DType::Int8:
          x.data<int8_t>()[i] = static_cast<int8_t>(-d);
          break;
        case DType::UInt8:
          x.data<uint8_t>()[i] = static_cast<uint8_t>(d);
          break;
        case DType::Int16:
          x.data<int16_t>()[i] = static_cast<int16_t>(d * 1000);
          break;
        case DType::Int32:
          x.data<int32_t>()[i] = static_cast<int32_t>(-d * 1e6);
          break;
        case DType::Int64:
          x.data<int64_t>()[i] = static_cast<int64_t>(d) << 40;
          break;
        default:
          x.data<uint8_t>()[i] = d != 0;
          break;
      }
    }
    std::vector<int64_t> want[3];
    for (int64_t i = 0; i < x.numel(); ++i) {
      const bool nonzero = is_float(t) ? x.as_double(i) != 0 : x.as_int64(i) != 0;
      if (!nonzero) continue;
      want[0].push_back(i / 20);
      want[1].push_back(i / 5 % 4);
      want[2].push_back(i % 5);
    }
    std::vector<int64_t> flat;
    for (const auto& row : want) flat.insert(flat.end(), row.begin(), row.end());
    expect_ints(run_node("NonZero", x, {}, 1)[0], flat, {3, static_cast<int64_t>(want[0].size())});
  }
  // A scalar: [0, 1] when it is not zero, [0, 0] when it is.
  EXPECT_EQ(dims_str(run_node("NonZero", floats({3}, {}), {}, 1)[0].dims()), dims_str({0, 1}));
  EXPECT_EQ(dims_str(run_node("NonZero", floats({-0.0f}, {}), {}, 1)[0].dims()), dims_str({0, 0}));
}

TEST(CpuSelection, UniqueSortedAlongAnAxis) {
  const auto u = run_node("Unique", floats({1, 0, 0, 1, 0, 0, 2, 3, 4}, {3, 3}), {attr("axis", int64_t{0})}, 4);
  expect_close(u[0], floats({1, 0, 0, 2, 3, 4}, {2, 3}));
  expect_ints(u[1], {0, 2}, {2});
  expect_ints(u[2], {0, 0, 1}, {3});
  expect_ints(u[3], {2, 1}, {2});
  // The same along axis -1 of the transpose: columns are the slices.
  const auto t = run_node("Unique", floats({1, 1, 2, 0, 0, 3, 0, 0, 4}, {3, 3}), {attr("axis", int64_t{-1})}, 4);
  expect_close(t[0], floats({1, 2, 0, 3, 0, 4}, {3, 2}));
  expect_ints(t[2], {0, 0, 1}, {3});
}

TEST(CpuSelection, UniqueFlattenedSortedAndInOrderOfAppearance) {
  const Tensor x = int64s({2, 1, 1, 3, 4, 3}, {2, 3});
  auto u = run_node("Unique", x, {}, 4);
  expect_ints(u[0], {1, 2, 3, 4}, {4});
  expect_ints(u[1], {1, 0, 3, 4}, {4});
  expect_ints(u[2], {1, 0, 0, 2, 3, 2}, {6});
  expect_ints(u[3], {2, 1, 2, 1}, {4});
  u = run_node("Unique", x, {attr("sorted", int64_t{0})}, 4);
  expect_ints(u[0], {2, 1, 3, 4}, {4});
  expect_ints(u[1], {0, 1, 3, 4}, {4});
  expect_ints(u[2], {0, 1, 1, 2, 3, 2}, {6});
  expect_ints(u[3], {1, 2, 2, 1}, {4});
  // Only Y asked for.
  expect_ints(run_node("Unique", x, {}, 1)[0], {1, 2, 3, 4}, {4});
}

TEST(CpuSelection, AFeedingSubgraphSeesTheDataDependentDims) {
  // NonZero -> Transpose -> GatherND: x[x > 0] as an exporter writes it.
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {2, 3});
  Value* mask = b.node("Greater", {x, b.initializer("zero", floats({0}, {}))});
  Value* nz = b.node("NonZero", {mask});
  Value* idx = b.node("Transpose", {nz}, {attr("perm", std::vector<int64_t>{1, 0})});
  b.output(b.node("GatherND", {x, idx}));
  auto g = b.build();
  expect_close(run_cpu(*g, {floats({-1, 5, 0, 2, -3, 7}, {2, 3})})[0], floats({5, 2, 7}, {3}));
}
