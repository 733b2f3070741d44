// GridSample on the GPU (grid_sample.cu): 4-D (NCHW) and 5-D (NCDHW) inputs, every mode and
// padding, float32, float16 and bfloat16 storage for X and the grid; and AffineGrid, which makes
// a spatial transformer's grid from its affine matrices (2-D and 3-D). GridSample ran on the CPU
// reference with copies: RAFT's correlation lookups (scripts/families.py's raft_small) made the
// model 37 ms on the H200 and kept it out of CUDA graph capture.
#include <memory>
#include <string>

#include "backend/cuda/core/cuda_op.h"
#include "backend/cuda/ops/movement/grid_sample.cuh"

namespace fusec::cuda {

namespace {

class GridSampleOp final : public CudaOp {
 public:
  explicit GridSampleOp(const GridSampleArgs& a) : a_(a) {}
  void launch(const LaunchArgs& l) override {
    require_launched(launch_grid_sample(a_, l.inputs[0].data, l.inputs[1].data, l.outputs[0].data, l.stream),
                     "GridSample");
  }
  std::string kernel_name() const override {
    static const char* modes[] = {"nearest", "linear", "cubic"};
    return std::string("GridSample ") + std::to_string(a_.axes) + "-D " + modes[static_cast<int>(a_.config.mode)];
  }

 private:
  GridSampleArgs a_;
};

bool float_storage(DType t) { return t == DType::Float32 || t == DType::Float16 || t == DType::BFloat16; }

std::unique_ptr<CudaOp> make_grid_sample(const PlanContext& c, std::string* why) {
  GridSampleArgs a;
  a.config = grid_sample::check_attrs(c, c.opset());
  const auto& xd = c.in_dims(0);
  const auto& gd = c.in_dims(1);
  const auto& yd = c.out_dims(0);
  a.x_dtype = c.in_dtype(0), a.grid_dtype = c.in_dtype(1);
  if (!float_storage(a.x_dtype) || !float_storage(a.grid_dtype))
    return *why = "GridSample: float32, float16 and bfloat16 only", nullptr;
  if (xd.size() != 4 && xd.size() != 5) return *why = "GridSample: 2 or 3 spatial axes only", nullptr;
  a.axes = static_cast<int>(xd.size()) - 2;
  // The schema's shape inference has checked grid against X; an output the CPU would refuse
  // (an empty spatial axis to sample) stays there for its error.
  if (gd.size() != xd.size() || gd.back() != a.axes || yd.size() != xd.size())
    return *why = "GridSample: X, grid and Y disagree", nullptr;
  a.batch = xd[0], a.channels = xd[1];
  a.in_plane = 1, a.out_plane = 1;
  for (int i = 0; i < a.axes; ++i) {
    a.in_size[i] = xd[2 + i];
    a.in_plane *= xd[2 + i];
    a.out_plane *= yd[2 + i];
    if (xd[2 + i] == 0) return *why = "GridSample: an empty spatial axis", nullptr;
  }
  return std::make_unique<GridSampleOp>(a);
}

class AffineGridOp final : public CudaOp {
 public:
  explicit AffineGridOp(const AffineGridArgs& a) : a_(a) {}
  void launch(const LaunchArgs& l) override {
    require_launched(launch_affine_grid(a_, l.inputs[0].data, l.outputs[0].data, l.stream), "AffineGrid");
  }
  std::string kernel_name() const override { return "AffineGrid " + std::to_string(a_.axes) + "-D"; }
  bool reads_input(size_t i) const override { return i == 0; }

 private:
  AffineGridArgs a_;
};

// The output's dims (known at plan time) give the grid; the size operand itself is not read.
std::unique_ptr<CudaOp> make_affine_grid(const PlanContext& c, std::string* why) {
  AffineGridArgs a;
  a.dtype = c.in_dtype(0);
  if (!float_storage(a.dtype) || c.out_dtype(0) != a.dtype)
    return *why = "AffineGrid: float32, float16 and bfloat16 only", nullptr;
  const auto& td = c.in_dims(0);
  const auto& yd = c.out_dims(0);
  if (yd.size() != 4 && yd.size() != 5) return *why = "AffineGrid: 2 or 3 spatial axes only", nullptr;
  a.axes = static_cast<int>(yd.size()) - 2;
  if (td.size() != 3 || td[0] != yd[0] || td[1] != a.axes || td[2] != a.axes + 1 || yd.back() != a.axes)
    return *why = "AffineGrid: theta and the grid disagree", nullptr;  // the CPU reference reports it
  a.align_corners = c.attr_int("align_corners") == 1;
  a.batch = yd[0];
  a.d = a.axes == 3 ? yd[1] : 1;
  a.h = yd[yd.size() - 3], a.w = yd[yd.size() - 2];
  return std::make_unique<AffineGridOp>(a);
}

}  // namespace

void register_grid_sample_ops(CudaOpRegistry& r) {
  r.add("GridSample", make_grid_sample);
  r.add("AffineGrid", make_affine_grid);
}

}  // namespace fusec::cuda
