// GridSample on the GPU (backend/cuda/ops/movement/grid_sample.cu) against the CPU reference: every
// mode, padding and alignment on 2-D inputs of odd sizes, with grid points inside, on and past the
// borders; 3-D inputs; RAFT's shape (one channel, a small window per pixel); fp32, fp16 and bf16;
// NaN and infinite grid entries. AffineGrid (the same file's kernel) in 2-D and 3-D.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "gpu_test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

/// A grid whose points lie within 0.3 of an input element's center, past the borders too: nearest
/// sampling then picks the same element from a grid rounded to fp16 as from the fp32 one.
Tensor centered_grid(const std::vector<int64_t>& dims, const std::vector<int64_t>& in_sizes, bool align,
                     uint64_t seed) {
  Tensor g = random_tensor(DType::Float32, dims, seed, -0.3, 0.3);
  Tensor pick = random_tensor(DType::Float32, dims, seed + 1, 0, 1);
  float* gd = g.data<float>();
  const float* pd = pick.data<float>();
  const int64_t axes = dims.back();
  for (int64_t i = 0; i < g.numel(); ++i) {
    // grid's last dim lists x (the innermost axis) first.
    const auto n = static_cast<double>(in_sizes[static_cast<size_t>(axes - 1 - i % axes)]);
    const double pos = std::floor(pd[i] * (n + 2)) - 1 + gd[i];  // an element -1 .. n, plus the offset
    gd[i] = static_cast<float>(align ? pos * 2 / (n - 1) - 1 : (2 * pos + 1) / n - 1);
  }
  return g;
}

OpCase grid_case(const std::vector<int64_t>& x, const std::vector<int64_t>& out_spatial, const std::string& mode,
                 const std::string& pad, bool align, uint64_t seed) {
  const int64_t axes = static_cast<int64_t>(x.size()) - 2;
  std::vector<int64_t> gd = {x[0]};
  gd.insert(gd.end(), out_spatial.begin(), out_spatial.end());
  gd.push_back(axes);
  OpCase c;
  c.op = "GridSample";
  c.opset = 20;
  const std::vector<int64_t> in_sizes(x.begin() + 2, x.end());
  c.inputs = {random_tensor(DType::Float32, x, seed), mode == "nearest"
                                                          ? centered_grid(gd, in_sizes, align, seed + 1)
                                                          : random_tensor(DType::Float32, gd, seed + 1, -1.3, 1.3)};
  c.attrs = {attr("mode", mode), attr("padding_mode", pad), attr("align_corners", int64_t{align})};
  return c;
}

/// The bound for a mode at a precision. At fp16 and bf16 the grid is stored in the half type too,
/// so a linear or cubic sample moves with the rounded coordinate: by up to 0.003 of an element at
/// fp16 and 0.02 at bf16 (8 bits of mantissa) for these sizes, times the interpolant's slope (up to
/// 2 for linear on data in [-1, 1], more for cubic's overshoot: 0.088 of the output's scale was
/// seen at bf16 on the H200). A wrong tap is off by the data's whole range.
double bound(const std::string& mode, Precision p) {
  if (mode == "nearest" || p == Precision::FP32) return default_tolerance(p);
  if (p == Precision::BF16) return mode == "cubic" ? 0.15 : 8e-2;
  return 2e-2;
}

}  // namespace

TEST(GpuGridSample, EveryModePaddingAndAlignmentMatchesTheReference) {
  FUSEC_REQUIRE_GPU();
  uint64_t seed = 10;
  for (const char* mode : {"nearest", "linear", "cubic"})
    for (const char* pad : {"zeros", "border", "reflection"})
      for (bool align : {false, true})
        for (Precision p : {Precision::FP32, Precision::FP16, Precision::BF16}) {
          SCOPED_TRACE(std::string(mode) + " " + pad + (align ? " aligned" : "") + " at " + precision_name(p));
          // Odd sizes; an output larger than the input in one axis, smaller in the other.
          expect_gpu_matches_cpu(grid_case({2, 3, 7, 11}, {9, 5}, mode, pad, align, seed += 3), p, bound(mode, p), true,
                                 "GridSample 2-D");
        }
}

TEST(GpuGridSample, VolumesAndRaftsLookupMatchTheReference) {
  FUSEC_REQUIRE_GPU();
  uint64_t seed = 200;
  for (const char* mode : {"nearest", "linear", "cubic"})
    for (const char* pad : {"zeros", "reflection"})
      for (Precision p : {Precision::FP32, Precision::FP16}) {
        SCOPED_TRACE(std::string("3-D ") + mode + " " + pad + " at " + precision_name(p));
        expect_gpu_matches_cpu(grid_case({2, 2, 5, 6, 7}, {3, 4, 5}, mode, pad, false, seed += 3), p, bound(mode, p),
                               true, "GridSample 3-D");
      }
  // RAFT's correlation lookup: one channel per pixel's volume, a 9 x 9 window of points.
  for (Precision p : {Precision::FP32, Precision::FP16}) {
    SCOPED_TRACE(std::string("RAFT lookup at ") + precision_name(p));
    expect_gpu_matches_cpu(grid_case({257, 1, 16, 16}, {9, 9}, "linear", "zeros", true, seed += 3), p,
                           bound("linear", p), true, "GridSample 2-D linear");
  }
}

TEST(GpuGridSample, NonFiniteGridEntriesGiveTheReferencesAnswer) {
  FUSEC_REQUIRE_GPU();
  // A NaN coordinate reads zeros under zeros padding and gives NaN under border and reflection; an
  // infinite one reads zeros, clamps to the border, or gives NaN under reflection.
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  uint64_t seed = 300;
  for (const char* mode : {"nearest", "linear", "cubic"})
    for (const char* pad : {"zeros", "border", "reflection"}) {
      SCOPED_TRACE(std::string(mode) + " " + pad);
      OpCase c = grid_case({1, 2, 4, 5}, {2, 3}, mode, pad, false, seed += 3);
      float* g = c.inputs[1].data<float>();
      g[0] = nan, g[3] = inf, g[6] = -inf, g[9] = nan;
      expect_gpu_matches_cpu(c, Precision::FP32, -1, true, "GridSample");
    }
}

// AffineGrid: 2-D and 3-D, both alignments, odd sizes, an axis of one element (which align_corners
// puts at -1), batch 3, every precision.
TEST(GpuAffineGrid, TwoAndThreeDimensionsMatchTheReference) {
  FUSEC_REQUIRE_GPU();
  auto affine = [](std::vector<int64_t> size, uint64_t seed, bool align) {
    OpCase c;
    c.op = "AffineGrid";
    c.opset = 20;
    const int64_t r = static_cast<int64_t>(size.size()) - 2;
    c.inputs = {random_tensor(DType::Float32, {size[0], r, r + 1}, seed, -1.5, 1.5),
                Tensor::from_int64(size, {int64_t(size.size())})};
    c.constant = {1};
    c.attrs = {attr("align_corners", int64_t{align})};
    return c;
  };
  uint64_t seed = 400;
  for (bool align : {false, true})
    for (const std::vector<int64_t>& size :
         {std::vector<int64_t>{3, 2, 7, 11}, {1, 1, 1, 5}, {2, 3, 5, 4, 6}, {1, 1, 3, 1, 2}}) {
      const OpCase c = affine(size, seed += 3, align);
      for (Precision p : {Precision::FP32, Precision::FP16, Precision::BF16}) {
        SCOPED_TRACE(std::to_string(size.size() - 2) + "-D" + (align ? " aligned" : "") + " at " + precision_name(p));
        expect_gpu_matches_cpu(c, p, -1, true, "AffineGrid");
      }
    }
}
