// GridSample (opset 16: 4-D, bilinear/nearest/bicubic; 20 and 22: any rank, linear/nearest/cubic).
//
// X [N, C, d1..dr] sampled at grid [N, o1..or, r] gives Y [N, C, o1..or]: the output's spatial
// dims are the grid's, whatever X's are.
#include "ir/op_schema.h"
#include "ir/ops/all_ops.h"
#include "ir/ops/grid_sample.h"

namespace fusec {

namespace {

void infer_grid_sample(InferContext& c) {
  grid_sample::check_attrs(c, c.opset());
  c.require_dtype(0, {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16});
  c.require_float(1);
  const auto& xs = c.input_shape(0);
  const auto& gs = c.input_shape(1);
  if (!gs) {
    c.set_output(0, c.input_dtype(0), std::nullopt);
    return;
  }
  const size_t rank = gs->size();
  if (rank < 3) c.fail("grid must have rank 3 or more, got " + std::to_string(rank));
  if (c.opset() < 20 && rank != 4)
    c.fail("GridSample before opset 20 takes 4-D inputs, got a rank-" + std::to_string(rank) + " grid");
  if (xs && xs->size() != rank)
    c.fail("X has rank " + std::to_string(xs->size()) + " but the grid has rank " + std::to_string(rank));
  const Dim& last = (*gs)[rank - 1];
  if (last.is_static() && last.value != static_cast<int64_t>(rank - 2))
    c.fail("grid's last dim must be " + std::to_string(rank - 2) + " (one coordinate per spatial axis), got " +
           std::to_string(last.value));
  Shape out(rank);
  out[0] = (*gs)[0];
  out[1] = Dim();
  if (xs) {
    const Dim &xn = (*xs)[0], &gn = (*gs)[0];
    if (xn.is_static() && gn.is_static() && xn.value != gn.value)
      c.fail("X's batch is " + std::to_string(xn.value) + " but the grid's is " + std::to_string(gn.value));
    if (xn.is_static()) out[0] = xn;
    out[1] = (*xs)[1];
  }
  for (size_t i = 2; i < rank; ++i) out[i] = (*gs)[i - 1];
  c.set_output(0, c.input_dtype(0), out);
}

/// Per output element and channel: taps^r reads, a multiply-add each.
Cost cost_grid_sample(const CostContext& c) {
  Cost cost{0, c.all_in_bytes(), c.all_out_bytes()};
  if (c.in_dims.empty() || c.in_dims[0].size() < 3) return cost;
  const std::string mode = c.node.attr_string("mode", "linear");
  const double taps_per_axis = mode == "nearest" ? 1 : (mode == "cubic" || mode == "bicubic") ? 4 : 2;
  double taps = 1;
  for (size_t i = 2; i < c.in_dims[0].size(); ++i) taps *= taps_per_axis;
  cost.flops = 2 * taps * c.out_numel(0);
  return cost;
}

}  // namespace

void register_grid_sample_schemas(OpRegistry& r) {
  auto common = [](OpSchema& s, const char* mode) -> OpSchema& {
    return s.io(2, 2)
        .attr("align_corners", AttrKind::Int, AttrValue{int64_t{0}})
        .attr("mode", AttrKind::String, AttrValue{std::string(mode)})
        .attr("padding_mode", AttrKind::String, AttrValue{std::string("zeros")})
        .set_infer(infer_grid_sample)
        .set_cost(cost_grid_sample);
  };
  common(r.add("GridSample").since(16, 19), "bilinear");
  common(r.add("GridSample").since(20), "linear");
}

}  // namespace fusec
