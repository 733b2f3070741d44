// NonZero and Unique on the CPU reference: outputs whose dims come from the data. Expected values
// are numpy's (np.nonzero, np.unique with return_index/inverse/counts) for the same inputs.
#include <limits>

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
