// Reductions: Reduce{Sum,Mean,Max,Min,Prod,L1,L2,LogSum,LogSumExp,SumSquare}, ArgMax, ArgMin.
//
// The axes to reduce come from the `axes` attribute up to opset 12 (ReduceSum) / 17 (the others)
// and from an optional int64 input afterwards. Absent or empty axes reduce every axis, unless
// `noop_with_empty_axes` (input form only) asks for the input unchanged.
#include <set>

#include "ir/op_schema.h"
#include "ir/ops/all_ops.h"

namespace fusec {

namespace {

/// The node's reduce axes as written (not normalized), or nullopt while the axes input's value is
/// unknown (import time).
std::optional<std::vector<int64_t>> written_axes(const InferContext& c, bool axes_input) {
  if (!axes_input) return c.has_attr("axes") ? c.attr_ints("axes") : std::vector<int64_t>{};
  if (!c.has_input(1)) return std::vector<int64_t>{};
  c.require_dtype(1, {DType::Int64, DType::Int32});
  const auto& s = c.input_shape(1);
  if (s && s->size() > 1) c.fail("axes must be a 1-D tensor");
  const Tensor* t = c.input_value(1);
  if (!t) return std::nullopt;
  return t->to_int64_vector();
}

void infer_reduce(InferContext& c, bool axes_input, bool allow_bool) {
  const DType t = c.input_dtype(0);
  if (t == DType::Bool && !allow_bool) c.fail("this reduction does not accept bool inputs");
  const bool keepdims = c.attr_int("keepdims") != 0;
  const bool noop = axes_input && c.attr_int("noop_with_empty_axes") != 0;
  const auto& in = c.input_shape(0);
  auto axes = written_axes(c, axes_input);
  if (!in) {
    c.set_output(0, t, std::nullopt);
    return;
  }
  const int64_t rank = static_cast<int64_t>(in->size());
  if (!axes) {  // axes unknown until run time
    if (keepdims)
      c.set_output(0, t, Shape(in->size(), Dim()));
    else
      c.set_output(0, t, std::nullopt);
    return;
  }
  if (axes->empty() && noop) {
    c.propagate(0);
    return;
  }
  std::vector<bool> reduce(in->size(), axes->empty());
  std::set<int64_t> seen;
  for (int64_t a : *axes) {
    int64_t n = normalize_axis(a, rank, c);
    if (!seen.insert(n).second) c.fail("axis " + std::to_string(a) + " is repeated");
    reduce[static_cast<size_t>(n)] = true;
  }
  Shape out;
  for (size_t i = 0; i < in->size(); ++i) {
    if (!reduce[i])
      out.push_back((*in)[i]);
    else if (keepdims)
      out.push_back(Dim(1));
  }
  c.set_output(0, t, out);
}

void infer_arg(InferContext& c) {
  const DType t = c.input_dtype(0);
  if (t == DType::Bool) c.fail("ArgMax/ArgMin do not accept bool inputs");
  const bool keepdims = c.attr_int("keepdims") != 0;
  const auto& in = c.input_shape(0);
  if (!in) {
    c.set_output(0, DType::Int64, std::nullopt);
    return;
  }
  const int64_t rank = static_cast<int64_t>(in->size());
  if (rank == 0) c.fail("ArgMax/ArgMin need an input of rank >= 1");
  const int64_t axis = normalize_axis(c.attr_int("axis"), rank, c);
  Shape out;
  for (int64_t i = 0; i < rank; ++i) {
    if (i != axis)
      out.push_back((*in)[static_cast<size_t>(i)]);
    else if (keepdims)
      out.push_back(Dim(1));
  }
  c.set_output(0, DType::Int64, out);
}

// Cost: one op per input element (the fold), plus the elementwise pre-map where there is one
// (abs, square, exp) and the finishing step per output (divide, sqrt, log), which is noise.
Cost cost_reduce(const CostContext& c, double ops_per_element) {
  return {c.in_numel(0) * ops_per_element + c.out_numel(0), c.all_in_bytes(), c.all_out_bytes()};
}

}  // namespace

void register_reduce_schemas(OpRegistry& r) {
  struct ReduceOp {
    const char* name;
    int axes_input_since;    // first opset with the axes input
    double ops_per_element;  // fold + pre-map
    std::vector<int> versions;
  };
  // Versions are the opsets where the spec's entry changed (types only after 11, except the axes
  // input); each entry serves its range up to the next one.
  const ReduceOp ops[] = {
      {"ReduceSum", 13, 1, {1, 11, 13}},
      {"ReduceMean", 18, 1, {1, 11, 13, 18}},
      {"ReduceMax", 18, 1, {1, 11, 12, 13, 18, 20}},
      {"ReduceMin", 18, 1, {1, 11, 12, 13, 18, 20}},
      {"ReduceProd", 18, 1, {1, 11, 13, 18}},
      {"ReduceL1", 18, 2, {1, 11, 13, 18}},  // abs + add
      {"ReduceL2", 18, 2, {1, 11, 13, 18}},  // multiply-add
      {"ReduceLogSum", 18, 1, {1, 11, 13, 18}},
      {"ReduceLogSumExp", 18, 3, {1, 11, 13, 18}},  // max pass, exp, add
      {"ReduceSumSquare", 18, 2, {1, 11, 13, 18}},  // multiply-add
  };
  for (const auto& op : ops) {
    for (size_t i = 0; i < op.versions.size(); ++i) {
      const int lo = op.versions[i];
      const int hi = i + 1 < op.versions.size() ? op.versions[i + 1] - 1 : 1000;
      const bool axes_input = lo >= op.axes_input_since;
      const double per = op.ops_per_element;
      // ReduceMax/ReduceMin accept bool from opset 20 (max = any, min = all).
      const bool allow_bool = lo >= 20;
      auto& s = r.add(op.name).since(lo, hi).attr("keepdims", AttrKind::Int, AttrValue{int64_t{1}});
      if (axes_input)
        s.io(1, 2).attr("noop_with_empty_axes", AttrKind::Int, AttrValue{int64_t{0}});
      else
        s.io(1, 1).attr("axes", AttrKind::Ints);
      s.set_infer([axes_input, allow_bool](InferContext& c) {
         infer_reduce(c, axes_input, allow_bool);
       }).set_cost([per](const CostContext& c) { return cost_reduce(c, per); });
    }
  }
  for (const char* op : {"ArgMax", "ArgMin"}) {
    r.add(op)
        .since(1, 11)
        .io(1, 1)
        .attr("axis", AttrKind::Int, AttrValue{int64_t{0}})
        .attr("keepdims", AttrKind::Int, AttrValue{int64_t{1}})
        .set_infer(infer_arg)
        .set_cost([](const CostContext& c) { return cost_reduce(c, 1); });
    r.add(op)
        .since(12)
        .io(1, 1)
        .attr("axis", AttrKind::Int, AttrValue{int64_t{0}})
        .attr("keepdims", AttrKind::Int, AttrValue{int64_t{1}})
        .attr("select_last_index", AttrKind::Int, AttrValue{int64_t{0}})
        .set_infer(infer_arg)
        .set_cost([](const CostContext& c) { return cost_reduce(c, 1); });
  }
}

}  // namespace fusec
