// GridSample (opset 16: 4-D, bilinear/nearest/bicubic; 20 and 22: any rank, linear/nearest/cubic),
// and AffineGrid (20), the grid a spatial transformer samples at.
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

/// theta [N, 2, 3] with size [N, C, H, W] gives grid [N, H, W, 2]; theta [N, 3, 4] with size
/// [N, C, D, H, W] gives grid [N, D, H, W, 3].
void infer_affine_grid(InferContext& c) {
  c.require_float(0);
  c.require_dtype(1, {DType::Int64});
  const int64_t align = c.attr_int("align_corners");
  if (align != 0 && align != 1) c.fail("align_corners must be 0 or 1, got " + std::to_string(align));
  const auto& ts = c.input_shape(0);
  const auto& ss = c.input_shape(1);
  if (ss && ss->size() != 1) c.fail("size must be a 1-D tensor, got shape " + shape_str(*ss));
  std::optional<int64_t> spatial;  // 2 or 3
  if (ts) {
    if (ts->size() != 3) c.fail("theta must be [N, 2, 3] or [N, 3, 4], got shape " + shape_str(*ts));
    const Dim &r = (*ts)[1], &k = (*ts)[2];
    if (r.is_static()) {
      if (r.value != 2 && r.value != 3) c.fail("theta must be [N, 2, 3] or [N, 3, 4], got shape " + shape_str(*ts));
      spatial = r.value;
      if (k.is_static() && k.value != r.value + 1)
        c.fail("theta must be [N, 2, 3] or [N, 3, 4], got shape " + shape_str(*ts));
    }
  }
  if (ss && (*ss)[0].is_static()) {
    const int64_t n = (*ss)[0].value;
    if (n != 4 && n != 5) c.fail("size must hold 4 values (N, C, H, W) or 5 (N, C, D, H, W), not " + std::to_string(n));
    if (spatial && *spatial != n - 2)
      c.fail("theta is for " + std::to_string(*spatial) + " spatial axes but size has " + std::to_string(n - 2));
    spatial = n - 2;
  }
  if (!spatial) {
    c.set_output(0, c.input_dtype(0), std::nullopt);
    return;
  }
  Shape out(static_cast<size_t>(*spatial + 2), Dim());
  if (ts) out[0] = (*ts)[0];
  if (const Tensor* size = c.input_value(1)) {
    const std::vector<int64_t> v = size->to_int64_vector();
    for (int64_t d : v)
      if (d < 0) c.fail("size has a negative dim " + std::to_string(d));
    if (ts && (*ts)[0].is_static() && (*ts)[0].value != v[0])
      c.fail("theta's batch is " + std::to_string((*ts)[0].value) + " but size's is " + std::to_string(v[0]));
    out[0] = Dim(v[0]);
    for (int64_t i = 0; i < *spatial; ++i) out[static_cast<size_t>(i + 1)] = Dim(v[static_cast<size_t>(i + 2)]);
  }
  out.back() = Dim(*spatial);
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
  // Each grid point: a [r, r + 1] matrix times [x, y, (z,) 1].
  r.add("AffineGrid")
      .since(20)
      .io(2, 2)
      .attr("align_corners", AttrKind::Int, AttrValue{int64_t{0}})
      .set_infer(infer_affine_grid)
      .set_cost([](const CostContext& c) { return cost_elementwise(c, 2.0 * 4); });
}

}  // namespace fusec
