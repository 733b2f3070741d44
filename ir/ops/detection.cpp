// Detection post-processing: NonMaxSuppression (opset 10, 11) and RoiAlign (10, 16).
#include "ir/ops/detection.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "ir/ops/all_ops.h"

namespace fusec {

namespace detection {

namespace {

/// A box as its x and y extents, whichever corners or center form it came in.
struct Extent {
  float x0, x1, y0, y1;
  float area() const { return (x1 - x0) * (y1 - y0); }
};

Extent extent(const Tensor& boxes, int64_t at, bool center) {
  const float a = static_cast<float>(boxes.as_double(at)), b = static_cast<float>(boxes.as_double(at + 1));
  const float c = static_cast<float>(boxes.as_double(at + 2)), d = static_cast<float>(boxes.as_double(at + 3));
  if (center) return {a - c / 2, a + c / 2, b - d / 2, b + d / 2};  // [x_center, y_center, width, height]
  // [y1, x1, y2, x2], either corner first.
  return {std::min(b, d), std::max(b, d), std::min(a, c), std::max(a, c)};
}

/// Whether two boxes overlap by more than `threshold` IoU. Boxes that do not overlap, or that have
/// no area, never suppress each other.
bool suppresses(const Extent& p, const Extent& q, float threshold) {
  const float ix = std::min(p.x1, q.x1) - std::max(p.x0, q.x0);
  const float iy = std::min(p.y1, q.y1) - std::max(p.y0, q.y0);
  if (!(ix > 0) || !(iy > 0)) return false;
  const float inter = ix * iy, ap = p.area(), aq = q.area(), uni = ap + aq - inter;
  if (!(ap > 0) || !(aq > 0) || !(uni > 0)) return false;
  return inter / uni > threshold;
}

/// The boxes kept so far for one batch and class, found by where they lie along x: two boxes that
/// do not overlap never suppress each other (`suppresses`), so a new box needs testing only against
/// kept boxes that share a cell of a uniform grid over x with it. A detector's batched NMS offsets
/// each class's boxes apart, and tens of thousands of kept boxes are then each tested against a few
/// instead of all (SSDlite's 27,000 candidates: the test of every pair took most of its CPU run).
/// The answer is the same as testing every kept box: boxes that are not finite, or span many cells,
/// are tested against every candidate instead of indexed.
class KeptBoxes {
 public:
  /// A grid over the x extents of `boxes` (the candidates, in the order they will be offered).
  KeptBoxes(const std::vector<Extent>& ext, const std::vector<int64_t>& candidates) {
    float lo = INFINITY, hi = -INFINITY;
    std::vector<float> widths;
    widths.reserve(candidates.size());
    for (int64_t i : candidates) {
      const Extent& e = ext[static_cast<size_t>(i)];
      if (std::isfinite(e.x0) && std::isfinite(e.x1)) {
        lo = std::min(lo, e.x0), hi = std::max(hi, e.x1);
        widths.push_back(e.x1 - e.x0);
      }
    }
    // At most a cell per four candidates, and no narrower than the median box, so that most boxes
    // span a cell or two: SSD's anchors are large, and with narrower cells most of them spanned
    // more than kMaxSpan and were tested against every candidate (SSDlite's NMS: 7.2 ms, now 4.5).
    size_t cells = std::clamp<size_t>(candidates.size() / 4, 1, 4096);
    if (!widths.empty() && hi > lo && std::isfinite(hi - lo)) {
      auto mid = widths.begin() + static_cast<std::ptrdiff_t>(widths.size() / 2);
      std::nth_element(widths.begin(), mid, widths.end());
      if (*mid > 0) cells = std::min(cells, static_cast<size_t>(std::max(1.0f, std::ceil((hi - lo) / *mid))));
    }
    cells_.resize(cells);
    lo_ = std::isfinite(lo) ? lo : 0.0f;
    scale_ = hi > lo && std::isfinite(hi - lo) ? static_cast<float>(cells_.size()) / (hi - lo) : 0.0f;
  }

  /// Whether a kept box suppresses `e`.
  bool suppressed(const std::vector<Extent>& ext, const Extent& e, float iou) const {
    for (size_t k : wide_)
      if (suppresses(e, ext[k], iou)) return true;
    int a = 0, b = 0;
    if (!span(e, &a, &b)) {  // itself wide or not finite: every kept box
      for (const auto& cell : cells_)
        for (size_t k : cell)
          if (suppresses(e, ext[k], iou)) return true;
      return false;
    }
    for (int c = a; c <= b; ++c)
      for (size_t k : cells_[static_cast<size_t>(c)])
        if (suppresses(e, ext[k], iou)) return true;
    return false;
  }

  void keep(const std::vector<Extent>& ext, size_t i) {
    int a = 0, b = 0;
    if (!span(ext[i], &a, &b)) {
      wide_.push_back(i);
      return;
    }
    for (int c = a; c <= b; ++c) cells_[static_cast<size_t>(c)].push_back(i);
  }

 private:
  static constexpr int kMaxSpan = 16;  // cells a box may cover and still be indexed

  // The cells [*a, *b] that e's x extent covers (a monotone map, clamped to the grid, so two
  // extents that overlap share a cell); false for an extent to test against everything.
  bool span(const Extent& e, int* a, int* b) const {
    if (!std::isfinite(e.x0) || !std::isfinite(e.x1)) return false;
    const int last = static_cast<int>(cells_.size()) - 1;
    auto cell = [&](float x) {
      const float f = std::floor((x - lo_) * scale_);
      return f <= 0 ? 0 : f >= static_cast<float>(last) ? last : static_cast<int>(f);
    };
    *a = cell(e.x0);
    *b = cell(e.x1);
    return *b - *a < kMaxSpan;
  }

  std::vector<std::vector<size_t>> cells_;
  std::vector<size_t> wide_;
  float lo_ = 0, scale_ = 0;
};

/// A scalar operand's one value (a [1] or [] tensor).
double scalar_of(const NodeAttrs& where, const Tensor& t, const char* what) {
  if (t.numel() != 1) where.fail(std::string(what) + " must hold one value, got " + dims_str(t.dims()));
  return t.as_double(0);
}

}  // namespace

std::vector<std::array<int64_t, 3>> non_max_suppression(const NodeAttrs& where, const Tensor& boxes,
                                                        const Tensor& scores, const Tensor* max_output,
                                                        const Tensor* iou_threshold, const Tensor* score_threshold) {
  if (boxes.rank() != 3 || boxes.dim(2) != 4)
    where.fail("boxes must be [batches, boxes, 4], got " + dims_str(boxes.dims()));
  if (scores.rank() != 3 || scores.dim(0) != boxes.dim(0) || scores.dim(2) != boxes.dim(1))
    where.fail("scores must be [batches, classes, boxes] = [" + std::to_string(boxes.dim(0)) + ", C, " +
               std::to_string(boxes.dim(1)) + "], got " + dims_str(scores.dims()));
  const int64_t center = where.attr_int("center_point_box");
  if (center != 0 && center != 1) where.fail("center_point_box must be 0 or 1, got " + std::to_string(center));
  int64_t keep = 0;
  if (max_output && max_output->numel() > 0) {
    if (max_output->numel() != 1) where.fail("max_output_boxes_per_class must hold one value");
    keep = std::max<int64_t>(max_output->as_int64(0), 0);
  }
  const float iou = iou_threshold && iou_threshold->numel() > 0
                        ? static_cast<float>(scalar_of(where, *iou_threshold, "iou_threshold"))
                        : 0;
  const bool filter = score_threshold && score_threshold->numel() > 0;
  const float min_score = filter ? static_cast<float>(scalar_of(where, *score_threshold, "score_threshold")) : 0;
  const int64_t B = boxes.dim(0), N = boxes.dim(1), C = scores.dim(1);
  std::vector<std::array<int64_t, 3>> out;
  if (keep == 0) return out;
  std::vector<Extent> ext(static_cast<size_t>(N));
  std::vector<float> score(static_cast<size_t>(N));  // one class's, read once (as_double switches per call)
  std::vector<int64_t> order;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < N; ++i) ext[static_cast<size_t>(i)] = extent(boxes, (b * N + i) * 4, center == 1);
    for (int64_t c = 0; c < C; ++c) {
      const int64_t row = (b * C + c) * N;
      order.clear();
      for (int64_t i = 0; i < N; ++i) {
        score[static_cast<size_t>(i)] = static_cast<float>(scores.as_double(row + i));
        if (!filter || score[static_cast<size_t>(i)] > min_score) order.push_back(i);
      }
      std::stable_sort(order.begin(), order.end(), [&](int64_t p, int64_t q) {
        return score[static_cast<size_t>(p)] > score[static_cast<size_t>(q)];
      });
      KeptBoxes kept(ext, order);
      int64_t kept_count = 0;
      for (int64_t i : order) {
        if (kept_count >= keep) break;
        if (kept.suppressed(ext, ext[static_cast<size_t>(i)], iou)) continue;
        kept.keep(ext, static_cast<size_t>(i));
        ++kept_count;
        out.push_back({b, c, i});
      }
    }
  }
  return out;
}

}  // namespace detection

namespace {

void infer_nms(InferContext& c) {
  c.require_float(0);
  c.require_float(1);
  if (c.has_input(2)) c.require_dtype(2, {DType::Int64});
  for (size_t i : {3, 4})
    if (c.has_input(i)) c.require_float(i);
  Dim count;
  const Tensor* boxes = c.input_value(0);
  const Tensor* scores = c.input_value(1);
  bool known = boxes && scores;
  for (size_t i : {2, 3, 4}) known = known && (!c.has_input(i) || c.input_value(i));
  if (known)
    count = Dim(static_cast<int64_t>(detection::non_max_suppression(c, *boxes, *scores,
                                                                    c.has_input(2) ? c.input_value(2) : nullptr,
                                                                    c.has_input(3) ? c.input_value(3) : nullptr,
                                                                    c.has_input(4) ? c.input_value(4) : nullptr)
                                         .size()));
  c.set_output(0, DType::Int64, Shape{count, Dim(3)});
}

// X [N, C, H, W], rois [R, 4], batch_indices [R] -> [R, C, output_height, output_width].
void infer_roi_align(InferContext& c) {
  c.require_dtype(0, {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16});
  if (c.input_dtype(1) != c.input_dtype(0)) c.fail("rois and X have different types");
  c.require_dtype(2, {DType::Int64});
  const std::string mode = c.attr_string("mode");
  if (mode != "avg" && mode != "max") c.fail("mode must be avg or max, got '" + mode + "'");
  if (c.opset() >= 16) {
    const std::string ct = c.attr_string("coordinate_transformation_mode");
    if (ct != "half_pixel" && ct != "output_half_pixel")
      c.fail("coordinate_transformation_mode must be half_pixel or output_half_pixel, got '" + ct + "'");
  }
  const int64_t oh = c.attr_int("output_height"), ow = c.attr_int("output_width");
  if (oh < 1 || ow < 1) c.fail("output_height and output_width must be >= 1");
  if (c.attr_int("sampling_ratio") < 0) c.fail("sampling_ratio must be >= 0");
  const auto& xs = c.input_shape(0);
  const auto& rs = c.input_shape(1);
  const auto& bs = c.input_shape(2);
  if (xs && xs->size() != 4) c.fail("X must be 4-D, got " + shape_str(*xs));
  if (rs && (rs->size() != 2 || ((*rs)[1].is_static() && (*rs)[1].value != 4)))
    c.fail("rois must be [num_rois, 4], got " + shape_str(*rs));
  if (bs && bs->size() != 1) c.fail("batch_indices must be 1-D, got " + shape_str(*bs));
  Dim rois = rs ? (*rs)[0] : bs ? (*bs)[0] : Dim();
  if (rs && bs && (*rs)[0].is_static() && (*bs)[0].is_static() && (*rs)[0].value != (*bs)[0].value)
    c.fail("rois has " + std::to_string((*rs)[0].value) + " rows but batch_indices " + std::to_string((*bs)[0].value));
  c.set_output(0, c.input_dtype(0), Shape{rois, xs ? (*xs)[1] : Dim(), Dim(oh), Dim(ow)});
}

/// Per output element: a bilinear sample (four reads, eight flops) per point of its bin's grid.
Cost cost_roi_align(const CostContext& c) {
  double grid = 1;
  const int64_t ratio = c.node.attr_int("sampling_ratio", 0);
  if (ratio > 0) grid = static_cast<double>(ratio * ratio);
  return {8 * grid * c.out_numel(0), c.all_in_bytes(), c.all_out_bytes()};
}

/// IoU tests, at most one per pair of boxes per class.
Cost cost_nms(const CostContext& c) {
  const double n = c.in_dims[0].size() == 3 ? static_cast<double>(c.in_dims[0][1]) : 0;
  const double classes = c.in_dims[1].size() == 3 ? static_cast<double>(c.in_dims[1][0] * c.in_dims[1][1]) : 0;
  return {classes * n * n * 10, c.all_in_bytes(), c.all_out_bytes()};
}

}  // namespace

void register_detection_schemas(OpRegistry& r) {
  r.add("NonMaxSuppression")
      .since(10)
      .io(2, 5)
      .attr("center_point_box", AttrKind::Int, AttrValue{int64_t{0}})
      .set_infer(infer_nms)
      .set_cost(cost_nms);
  auto roi_align = [&](int64_t lo, int64_t hi) -> OpSchema& {
    return r.add("RoiAlign")
        .since(lo, hi)
        .io(3, 3)
        .attr("mode", AttrKind::String, AttrValue{std::string("avg")})
        .attr("output_height", AttrKind::Int, AttrValue{int64_t{1}})
        .attr("output_width", AttrKind::Int, AttrValue{int64_t{1}})
        .attr("sampling_ratio", AttrKind::Int, AttrValue{int64_t{0}})
        .attr("spatial_scale", AttrKind::Float, AttrValue{1.0f})
        .set_infer(infer_roi_align)
        .set_cost(cost_roi_align);
  };
  roi_align(10, 15);
  // Opset 16 adds half_pixel (now the default); opset 10's sampling is output_half_pixel.
  roi_align(16, 1000).attr("coordinate_transformation_mode", AttrKind::String, AttrValue{std::string("half_pixel")});
}

}  // namespace fusec
