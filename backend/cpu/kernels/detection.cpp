// CPU kernels for NonMaxSuppression and RoiAlign. NonMaxSuppression copies out the selection in
// ir/ops/detection.h and makes its output itself (Writes::Itself), so the selection runs once per
// run, not once more to size the output. RoiAlign samples as the ONNX reference and ONNX Runtime
// do: each output bin averages (or takes the max of) a grid of bilinear samples; a sample more than
// one pixel outside X reads 0.
#include <algorithm>
#include <cmath>

#include "backend/cpu/kernels/common.h"
#include "ir/ops/detection.h"

namespace fusec::cpu {

namespace {

void nms_kernel(KernelContext& ctx) {
  auto opt = [&](size_t i) { return ctx.has_input(i) ? &ctx.input(i) : nullptr; };
  const auto rows = detection::non_max_suppression(ctx, ctx.input(0), ctx.input(1), opt(2), opt(3), opt(4));
  Tensor& y = ctx.output(0) = Tensor(DType::Int64, {static_cast<int64_t>(rows.size()), 3});
  int64_t* py = y.data<int64_t>();
  for (size_t r = 0; r < rows.size(); ++r) std::copy(rows[r].begin(), rows[r].end(), py + 3 * r);
}

/// One bilinear sample of an H x W plane: four offsets and their weights (all zero outside).
struct Sample {
  int64_t at[4] = {0, 0, 0, 0};
  double w[4] = {0, 0, 0, 0};
};

Sample sample_at(double y, double x, int64_t h, int64_t w) {
  Sample s;
  if (!(y >= -1.0 && y <= static_cast<double>(h) && x >= -1.0 && x <= static_cast<double>(w))) return s;
  y = std::max(y, 0.0);
  x = std::max(x, 0.0);
  int64_t y0 = static_cast<int64_t>(y), x0 = static_cast<int64_t>(x), y1, x1;
  if (y0 >= h - 1) {
    y0 = y1 = h - 1;
    y = static_cast<double>(y0);
  } else {
    y1 = y0 + 1;
  }
  if (x0 >= w - 1) {
    x0 = x1 = w - 1;
    x = static_cast<double>(x0);
  } else {
    x1 = x0 + 1;
  }
  const double ly = y - static_cast<double>(y0), lx = x - static_cast<double>(x0);
  s.at[0] = y0 * w + x0, s.at[1] = y0 * w + x1, s.at[2] = y1 * w + x0, s.at[3] = y1 * w + x1;
  s.w[0] = (1 - ly) * (1 - lx), s.w[1] = (1 - ly) * lx, s.w[2] = ly * (1 - lx), s.w[3] = ly * lx;
  return s;
}

template <typename T>
void roi_align(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& rois = ctx.input(1);
  const Tensor& batch = ctx.input(2);
  Tensor& y = ctx.output(0);
  if (x.rank() != 4) ctx.fail("X must be 4-D, got " + dims_str(x.dims()));
  if (rois.rank() != 2 || rois.dim(1) != 4) ctx.fail("rois must be [num_rois, 4], got " + dims_str(rois.dims()));
  const int64_t R = rois.dim(0), N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  const int64_t oh = ctx.attr_int("output_height"), ow = ctx.attr_int("output_width");
  if (batch.rank() != 1 || batch.dim(0) != R)
    ctx.fail("batch_indices must be [" + std::to_string(R) + "], got " + dims_str(batch.dims()));
  const std::vector<int64_t> want{R, C, oh, ow};
  if (y.dims() != want) ctx.fail("output has shape " + dims_str(y.dims()) + ", expected " + dims_str(want));
  if (y.numel() == 0) return;
  if (H == 0 || W == 0) ctx.fail("X " + dims_str(x.dims()) + " has an empty plane: nothing to sample");
  const bool half_pixel = ctx.opset() >= 16 && ctx.attr_string("coordinate_transformation_mode") == "half_pixel";
  const bool max_mode = ctx.attr_string("mode") == "max";
  const double scale = ctx.attr_float("spatial_scale"), offset = half_pixel ? 0.5 : 0.0;
  const int64_t ratio = ctx.attr_int("sampling_ratio");
  const T* px = x.data<T>();
  const T* pr = rois.data<T>();
  T* py = y.data<T>();
  for (int64_t r = 0; r < R; ++r) {
    const int64_t n = batch.as_int64(r);
    if (n < 0 || n >= N)
      ctx.fail("batch_indices[" + std::to_string(r) + "] = " + std::to_string(n) + " is not a batch of X (" +
               std::to_string(N) + ")");
    double box[4];
    for (int k = 0; k < 4; ++k) {
      box[k] = static_cast<double>(pr[r * 4 + k]) * scale - offset;
      if (!std::isfinite(box[k])) ctx.fail("roi " + std::to_string(r) + " has a coordinate that is not finite");
    }
    double rw = box[2] - box[0], rh = box[3] - box[1];
    if (!half_pixel) rw = std::max(rw, 1.0), rh = std::max(rh, 1.0);
    const double bin_h = rh / static_cast<double>(oh), bin_w = rw / static_cast<double>(ow);
    // Samples per bin and axis: sampling_ratio, or enough for one per pixel the bin spans.
    const double gh = ratio > 0 ? static_cast<double>(ratio) : std::ceil(bin_h);
    const double gw = ratio > 0 ? static_cast<double>(ratio) : std::ceil(bin_w);
    // A bounded sample table: a box vastly larger than X (a corrupt roi) is an error, not a hang.
    constexpr double kMaxSamples = 1 << 22;
    if (gh > kMaxSamples || gw > kMaxSamples ||
        std::max(gh, 0.0) * std::max(gw, 0.0) * static_cast<double>(oh) * static_cast<double>(ow) > kMaxSamples)
      ctx.fail("roi " + std::to_string(r) + " would take more than " +
               std::to_string(static_cast<int64_t>(kMaxSamples)) + " bilinear samples; its box is far larger than X");
    // An empty or inverted box (possible with half_pixel) samples nothing: its bins read 0.
    const int64_t grid_h = gh > 0 ? static_cast<int64_t>(gh) : 0;
    const int64_t grid_w = gw > 0 ? static_cast<int64_t>(gw) : 0;
    const double count = static_cast<double>(std::max<int64_t>(grid_h * grid_w, 1));
    // The bins' samples, shared by every channel.
    std::vector<Sample> samples(static_cast<size_t>(oh * ow * grid_h * grid_w));
    size_t k = 0;
    for (int64_t ph = 0; ph < oh; ++ph)
      for (int64_t pw = 0; pw < ow; ++pw)
        for (int64_t iy = 0; iy < grid_h; ++iy) {
          const double sy = box[1] + static_cast<double>(ph) * bin_h +
                            (static_cast<double>(iy) + 0.5) * bin_h / static_cast<double>(grid_h);
          for (int64_t ix = 0; ix < grid_w; ++ix) {
            const double sx = box[0] + static_cast<double>(pw) * bin_w +
                              (static_cast<double>(ix) + 0.5) * bin_w / static_cast<double>(grid_w);
            samples[k++] = sample_at(sy, sx, H, W);
          }
        }
    const int64_t per_bin = grid_h * grid_w;
    parallel_for(C, 1, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        const T* plane = px + (n * C + c) * H * W;
        T* out = py + ((r * C + c) * oh) * ow;
        for (int64_t b = 0; b < oh * ow; ++b) {
          double acc = 0;
          for (int64_t s = 0; s < per_bin; ++s) {
            const Sample& p = samples[static_cast<size_t>(b * per_bin + s)];
            if (max_mode) {
              // ONNX Runtime's max: the largest weighted corner, not the max of interpolated values.
              double v = p.w[0] * static_cast<double>(plane[p.at[0]]);
              for (int q = 1; q < 4; ++q) v = std::max(v, p.w[q] * static_cast<double>(plane[p.at[q]]));
              acc = s == 0 ? v : std::max(acc, v);
            } else {
              for (int q = 0; q < 4; ++q) acc += p.w[q] * static_cast<double>(plane[p.at[q]]);
            }
          }
          out[b] = static_cast<T>(max_mode ? acc : acc / count);
        }
      }
    });
  }
}

void roi_align_kernel(KernelContext& ctx) {
  if (has_half_io(ctx)) return via_float32(ctx, roi_align_kernel);
  dispatch_float(ctx.input(0).dtype(), ctx, [&](auto tag) { roi_align<decltype(tag)>(ctx); });
}

}  // namespace

void register_detection_kernels(KernelRegistry& r) {
  r.add("NonMaxSuppression", nms_kernel, "", Writes::Itself);
  r.add("RoiAlign", roi_align_kernel, "", Writes::Every);
}

}  // namespace fusec::cpu
