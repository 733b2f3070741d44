// CPU kernel for GridSample, any number of spatial axes, as the ONNX reference computes it.
//
// Each output position gets, per spatial axis, up to four taps (index and weight) after the padding
// mode has moved its coordinate; the position's taps are the product of its axes' taps, and every
// channel sums its input over them in float64. fp16/bf16 run through float32.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "backend/cpu/kernels/common.h"
#include "ir/ops/grid_sample.h"

namespace fusec::cpu {

namespace {

using grid_sample::Config;
using grid_sample::Mode;
using grid_sample::Padding;

/// One axis's taps at one output position; index -1 reads zero (zeros padding, outside the input).
struct AxisTaps {
  int count = 0;
  std::array<int64_t, 4> index{};
  std::array<double, 4> weight{};
  bool nan = false;  // no position at all (a NaN coordinate under border or reflection padding)
};

AxisTaps axis_taps(double g, int64_t size, const Config& c) {
  AxisTaps taps;
  const double lo = grid_sample::reflect_lo<double>(c.align_corners),
               hi = grid_sample::reflect_hi<double>(size, c.align_corners);
  double x = grid_sample::denormalize(g, size, c.align_corners);
  if (c.mode == Mode::Nearest) x = std::nearbyint(x);  // halfway rounds to even, as PyTorch does
  if (std::isnan(x) && c.padding != Padding::Zeros) {
    taps.nan = true;
    return taps;
  }
  if (!(x >= lo && x <= hi)) {
    if (c.padding == Padding::Border) x = std::clamp(x, 0.0, static_cast<double>(size - 1));
    if (c.padding == Padding::Reflection)
      x = std::isinf(x) ? std::numeric_limits<double>::quiet_NaN() : grid_sample::reflect(x, lo, hi);
    if (std::isnan(x) && c.padding != Padding::Zeros) {
      taps.nan = true;
      return taps;
    }
  }
  // Only zeros padding leaves x outside the input here; far outside, every tap reads zero.
  if (!(x > -4 && x < static_cast<double>(size) + 4)) return taps;
  auto fetch = [&](int64_t i) -> int64_t {
    switch (c.padding) {
      case Padding::Zeros:
        return i >= 0 && i < size ? i : -1;
      case Padding::Border:
        return std::clamp<int64_t>(i, 0, size - 1);
      case Padding::Reflection:
        return std::clamp<int64_t>(static_cast<int64_t>(grid_sample::reflect(static_cast<double>(i), lo, hi)), 0,
                                   size - 1);
    }
    return -1;
  };
  const double f = std::floor(x);
  const auto i0 = static_cast<int64_t>(f);
  const double t = x - f;
  switch (c.mode) {
    case Mode::Nearest:
      taps.count = 1;
      taps.index[0] = fetch(static_cast<int64_t>(x));
      taps.weight[0] = 1;
      break;
    case Mode::Linear:
      taps.count = 2;
      taps.index = {fetch(i0), fetch(i0 + 1)};
      taps.weight = {1 - t, t};
      break;
    case Mode::Cubic: {
      taps.count = 4;
      grid_sample::cubic_weights(t, taps.weight.data());
      for (int k = 0; k < 4; ++k) taps.index[k] = fetch(i0 - 1 + k);
      break;
    }
  }
  return taps;
}

template <typename T, typename G>
void sample(KernelContext& ctx, const Config& cfg) {
  const Tensor& x = ctx.input(0);
  const Tensor& grid = ctx.input(1);
  Tensor& y = ctx.output(0);
  const size_t r = x.rank() - 2;
  const int64_t batch = x.dim(0), channels = x.dim(1);
  std::vector<int64_t> size(r), stride(r);
  int64_t in_plane = 1;
  for (size_t i = r; i-- > 0;) {
    size[i] = x.dim(2 + i);
    stride[i] = in_plane;
    in_plane *= size[i];
  }
  int64_t out_plane = 1;
  for (size_t i = 0; i < r; ++i) out_plane *= y.dim(2 + i);
  const T* xd = x.data<T>();
  const G* gd = grid.data<G>();
  T* yd = y.data<T>();
  const int64_t positions = batch * out_plane;
  parallel_for(positions, 64, [&](int64_t p0, int64_t p1) {
    std::vector<AxisTaps> axes(r);
    std::vector<int64_t> offsets, next_offsets;
    std::vector<double> weights, next_weights;
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t n = p / out_plane, o = p % out_plane;
      // grid[n, o, :] lists the coordinates last axis first (x, then y, then z).
      const G* coords = gd + p * static_cast<int64_t>(r);
      bool nan = false;
      for (size_t i = 0; i < r; ++i) {
        axes[i] = axis_taps(static_cast<double>(coords[r - 1 - i]), size[i], cfg);
        nan = nan || axes[i].nan;
      }
      // The position's taps: every combination of its axes' taps that reads inside the input.
      offsets.assign(1, 0);
      weights.assign(1, 1.0);
      for (size_t i = 0; i < r && !nan; ++i) {
        next_offsets.clear();
        next_weights.clear();
        for (size_t k = 0; k < offsets.size(); ++k)
          for (int t = 0; t < axes[i].count; ++t) {
            if (axes[i].index[t] < 0) continue;
            next_offsets.push_back(offsets[k] + axes[i].index[t] * stride[i]);
            next_weights.push_back(weights[k] * axes[i].weight[t]);
          }
        offsets.swap(next_offsets);
        weights.swap(next_weights);
      }
      for (int64_t ch = 0; ch < channels; ++ch) {
        const T* plane = xd + (n * channels + ch) * in_plane;
        double acc = nan ? std::numeric_limits<double>::quiet_NaN() : 0.0;
        for (size_t k = 0; k < offsets.size() && !nan; ++k) acc += weights[k] * static_cast<double>(plane[offsets[k]]);
        yd[(n * channels + ch) * out_plane + o] = static_cast<T>(acc);
      }
    }
  });
}

void grid_sample_kernel(KernelContext& ctx) {
  if (has_half_io(ctx)) return via_float32(ctx, grid_sample_kernel);
  const Config cfg = grid_sample::check_attrs(ctx, ctx.opset());
  const Tensor& x = ctx.input(0);
  const Tensor& grid = ctx.input(1);
  Tensor& y = ctx.output(0);
  if (x.rank() < 3 || grid.rank() != x.rank() || grid.dim(grid.rank() - 1) != static_cast<int64_t>(x.rank() - 2))
    ctx.fail("X and grid disagree: X is " + dims_str(x.dims()) + ", grid " + dims_str(grid.dims()));
  if (y.numel() == 0) return;
  for (size_t i = 2; i < x.rank(); ++i)
    if (x.dim(i) == 0) ctx.fail("X " + dims_str(x.dims()) + " has an empty spatial axis: nothing to sample");
  auto with_grid = [&](auto xt) {
    using T = decltype(xt);
    if (grid.dtype() == DType::Float32)
      sample<T, float>(ctx, cfg);
    else if (grid.dtype() == DType::Float64)
      sample<T, double>(ctx, cfg);
    else
      ctx.unsupported(std::string("grid of type ") + dtype_name(grid.dtype()));
  };
  dispatch_float(x.dtype(), ctx, with_grid);
}

/// grid[n, (d,) h, w, :] = theta[n] · [x_w, y_h, (z_d,) 1], in double.
void affine_grid_kernel(KernelContext& ctx) {
  if (has_half_io(ctx)) return via_float32(ctx, affine_grid_kernel);
  const Tensor& theta = ctx.input(0);
  const std::vector<int64_t> size = ctx.input(1).to_int64_vector();
  const bool align = ctx.attr_int("align_corners") == 1;
  const int64_t r = static_cast<int64_t>(size.size()) - 2;  // spatial axes, 2 or 3
  if ((r != 2 && r != 3) || theta.rank() != 3 || theta.dim(1) != r || theta.dim(2) != r + 1 || theta.dim(0) != size[0])
    ctx.fail("theta " + dims_str(theta.dims()) + " does not match size " + dims_str(size));
  const int64_t N = size[0];
  const int64_t D = r == 3 ? size[2] : 1, H = size[size.size() - 2], W = size.back();
  dispatch_float(theta.dtype(), ctx, [&](auto tag) {
    using T = decltype(tag);
    const T* th = theta.data<T>();
    T* out = ctx.output(0).data<T>();
    parallel_for(N * D * H, std::max<int64_t>(1, 4096 / std::max<int64_t>(W, 1)), [&](int64_t b, int64_t e) {
      for (int64_t row = b; row < e; ++row) {
        const int64_t n = row / (D * H), d = row / H % D, h = row % H;
        const T* m = th + n * r * (r + 1);
        const double y = grid_sample::affine_base<double>(h, H, align);
        const double z = r == 3 ? grid_sample::affine_base<double>(d, D, align) : 0.0;
        T* o = out + row * W * r;
        for (int64_t w = 0; w < W; ++w) {
          const double x = grid_sample::affine_base<double>(w, W, align);
          const double base[4] = {x, y, z, 1.0};  // [x, y, 1] when r is 2
          for (int64_t k = 0; k < r; ++k) {
            double acc = static_cast<double>(m[k * (r + 1) + r]);
            for (int64_t j = 0; j < r; ++j) acc += static_cast<double>(m[k * (r + 1) + j]) * base[j];
            o[w * r + k] = static_cast<T>(acc);
          }
        }
      }
    });
  });
}

}  // namespace

void register_grid_sample_kernels(KernelRegistry& r) {
  r.add("GridSample", grid_sample_kernel, "", Writes::Every);
  r.add("AffineGrid", affine_grid_kernel, "", Writes::Every);
}

}  // namespace fusec::cpu
