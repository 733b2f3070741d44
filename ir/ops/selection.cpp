// NonZero (opset 9, 13) and Unique (opset 11): data-dependent output dims (see selection.h).
#include "ir/ops/selection.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>

#include "ir/op_schema.h"
#include "ir/ops/all_ops.h"

namespace fusec {

namespace selection {

int64_t count_nonzero(const Tensor& x) {
  int64_t n = 0;
  for_each_nonzero(x, 0, x.numel(), [&](int64_t) { ++n; });
  return n;
}

std::vector<int64_t> nonzero_offsets(const Tensor& x) {
  std::vector<int64_t> out;
  for_each_nonzero(x, 0, x.numel(), [&](int64_t i) { out.push_back(i); });
  return out;
}

Unique unique(const Tensor& x, std::optional<int64_t> axis, bool sorted) {
  Unique u;
  if (axis) {
    for (int64_t i = 0; i < *axis; ++i) u.outer *= x.dim(static_cast<size_t>(i));
    u.d = x.dim(static_cast<size_t>(*axis));
    for (size_t i = static_cast<size_t>(*axis) + 1; i < x.rank(); ++i) u.inner *= x.dim(i);
  } else {
    u.d = x.numel();
  }
  const bool floats = is_float(x.dtype());
  // -1, 0 or 1 as slice a sorts before, with, or after slice b (numpy's order: NaN last).
  auto compare = [&](int64_t a, int64_t b) {
    for (int64_t o = 0; o < u.outer; ++o)
      for (int64_t i = 0; i < u.inner; ++i) {
        const int64_t ia = (o * u.d + a) * u.inner + i, ib = (o * u.d + b) * u.inner + i;
        if (floats) {
          const double va = x.as_double(ia), vb = x.as_double(ib);
          if (va < vb || (!std::isnan(va) && std::isnan(vb))) return -1;
          if (vb < va || (std::isnan(va) && !std::isnan(vb))) return 1;
        } else {
          const int64_t va = x.as_int64(ia), vb = x.as_int64(ib);
          if (va != vb) return va < vb ? -1 : 1;
        }
      }
    return 0;
  };
  std::vector<int64_t> order(static_cast<size_t>(u.d));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return compare(a, b) < 0; });
  // Groups of equal slices in sorted order; a group's first member is its first appearance.
  std::vector<int64_t> group_of(order.size());
  std::vector<int64_t> group_first;
  for (size_t k = 0; k < order.size(); ++k) {
    if (k == 0 || compare(order[k - 1], order[k]) != 0) group_first.push_back(order[k]);
    group_of[static_cast<size_t>(order[k])] = static_cast<int64_t>(group_first.size()) - 1;
  }
  // The groups' output order: as sorted, or by first appearance.
  std::vector<int64_t> rank(group_first.size());
  std::iota(rank.begin(), rank.end(), 0);
  if (!sorted) {
    std::vector<int64_t> by_first(group_first.size());
    std::iota(by_first.begin(), by_first.end(), 0);
    std::sort(by_first.begin(), by_first.end(), [&](int64_t a, int64_t b) { return group_first[a] < group_first[b]; });
    for (size_t k = 0; k < by_first.size(); ++k) rank[static_cast<size_t>(by_first[k])] = static_cast<int64_t>(k);
  }
  u.first.assign(group_first.size(), 0);
  u.counts.assign(group_first.size(), 0);
  for (size_t g = 0; g < group_first.size(); ++g) u.first[static_cast<size_t>(rank[g])] = group_first[g];
  u.inverse.resize(order.size());
  for (size_t k = 0; k < order.size(); ++k) {
    const int64_t r = rank[static_cast<size_t>(group_of[k])];
    u.inverse[k] = r;
    ++u.counts[static_cast<size_t>(r)];
  }
  return u;
}

}  // namespace selection

namespace {

void infer_nonzero(InferContext& c) {
  const auto& s = c.input_shape(0);
  Dim count;
  if (const Tensor* x = c.input_value(0)) count = Dim(selection::count_nonzero(*x));
  if (!s) {
    c.set_output(0, DType::Int64, Shape{Dim(), count});
    return;
  }
  c.set_output(0, DType::Int64, Shape{Dim(static_cast<int64_t>(s->size())), count});
}

void infer_unique(InferContext& c) {
  const DType t = c.input_dtype(0);
  if (t == DType::Float16 || t == DType::BFloat16) c.unsupported(std::string("Unique of ") + dtype_name(t));
  const auto& s = c.input_shape(0);
  std::optional<int64_t> axis;
  if (c.has_attr("axis")) axis = normalize_axis(c.attr_int("axis"), static_cast<int64_t>(c.input_rank(0)), c);
  Dim count, slices;
  if (axis && s)
    slices = (*s)[static_cast<size_t>(*axis)];
  else if (s && is_static(*s))
    slices = Dim(checked_numel(static_dims(*s)));
  if (const Tensor* x = c.input_value(0)) {
    const selection::Unique u = selection::unique(*x, axis, c.attr_int("sorted") != 0);
    count = Dim(static_cast<int64_t>(u.first.size()));
    slices = Dim(u.d);
  }
  std::optional<Shape> y = Shape{count};
  if (axis) {
    y = s;
    if (y) (*y)[static_cast<size_t>(*axis)] = count;
  }
  c.set_output(0, t, y);
  for (size_t i = 1; i < c.num_outputs(); ++i) c.set_output(i, DType::Int64, Shape{i == 2 ? slices : count});
}

}  // namespace

void register_selection_schemas(OpRegistry& r) {
  r.add("NonZero").since(9).io(1, 1).set_infer(infer_nonzero).set_cost(cost_data_movement);
  r.add("Unique")
      .since(11)
      .io(1, 1, 1, 4)
      .attr("axis", AttrKind::Int)
      .attr("sorted", AttrKind::Int, AttrValue{int64_t{1}})
      .set_infer(infer_unique)
      .set_cost(cost_data_movement);
}

}  // namespace fusec
