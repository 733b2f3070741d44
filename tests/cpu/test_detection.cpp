// NonMaxSuppression and RoiAlign on the CPU reference. Expected values are the ONNX reference
// implementation's (onnx.reference, onnx 1.23) for the same inputs.
#include <algorithm>
#include <limits>

#include "test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

Tensor run_node(const std::string& op, const std::vector<Tensor>& ins, std::vector<NamedAttribute> attrs,
                int64_t opset) {
  GraphBuilder b(opset);
  std::vector<Value*> vs;
  for (size_t i = 0; i < ins.size(); ++i)
    vs.push_back(b.input("i" + std::to_string(i), ins[i].dtype(), shape_of(ins[i].dims())));
  b.output(b.node(op, vs, std::move(attrs), "det"));
  auto g = b.build();
  return run_cpu(*g, ins)[0];
}

std::string error_of(const std::string& op, const std::vector<Tensor>& ins, std::vector<NamedAttribute> attrs,
                     int64_t opset) {
  try {
    run_node(op, ins, std::move(attrs), opset);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

/// X [2, 2, 5, 6] = (0.37 i mod 3) - 1, computed in float32 as the reference's inputs were.
Tensor feature_map() {
  std::vector<float> v(120);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::fmod(static_cast<float>(i) * 0.37f, 3.0f) - 1;
  return floats(v, {2, 2, 5, 6});
}
// The second roi reaches outside X; the third is smaller than a pixel.
Tensor rois() { return floats({0.5f, 1, 4, 3.5f, -2, -1, 9, 8, 1, 0, 1.2f, 0.3f}, {3, 4}); }
Tensor batch_indices() { return int64s({1, 0, 1}, {3}); }

}  // namespace

TEST(CpuDetection, NonMaxSuppressionPerClassWithThresholds) {
  const Tensor boxes = floats(
      {0, 0, 1, 1, 0, 0.1f, 1, 1.1f, 0, -0.1f, 1, 0.9f, 0, 10, 1, 11, 0, 10.1f, 1, 11.1f, 0, 100, 1, 101}, {1, 6, 4});
  const Tensor scores = floats({0.9f, 0.75f, 0.6f, 0.95f, 0.5f, 0.3f, 0.1f, 0.2f, 0.95f, 0.3f, 0.3f, 0.31f}, {1, 2, 6});
  const Tensor got = run_node("NonMaxSuppression",
                              {boxes, scores, int64s({3}, {1}), floats({0.5f}, {1}), floats({0.25f}, {1})}, {}, 11);
  // Class 1's tie at 0.3 goes to the lower index, and the cap of 3 stops before the other.
  expect_close(got, int64s({0, 0, 3, 0, 0, 0, 0, 0, 5, 0, 1, 2, 0, 1, 5, 0, 1, 3}, {6, 3}), 0, 0);
  // Without max_output_boxes_per_class nothing is selected.
  expect_close(run_node("NonMaxSuppression", {boxes, scores}, {}, 11), int64s({}, {0, 3}), 0, 0);
}

// The selection tests a new box only against kept boxes near it along x (ir/ops/detection.cpp,
// KeptBoxes). Against the rule itself, every kept box tested, on thousands of boxes: clusters a
// detector's batched NMS would offset apart, boxes wider than the grid's cells, zero-area and
// inverted boxes, NaN and infinite coordinates, a negative IoU threshold and a cap on the count.
TEST(CpuDetection, NonMaxSuppressionMatchesTestingEveryKeptBox) {
  struct Box {
    float x0, x1, y0, y1;
  };
  // ONNX's rule, written out: IoU above the threshold suppresses; no overlap or no area never does.
  auto overlaps_too_much = [](const Box& p, const Box& q, float thr) {
    const float ix = std::min(p.x1, q.x1) - std::max(p.x0, q.x0), iy = std::min(p.y1, q.y1) - std::max(p.y0, q.y0);
    if (!(ix > 0) || !(iy > 0)) return false;
    const float ap = (p.x1 - p.x0) * (p.y1 - p.y0), aq = (q.x1 - q.x0) * (q.y1 - q.y0), inter = ix * iy;
    const float uni = ap + aq - inter;
    if (!(ap > 0) || !(aq > 0) || !(uni > 0)) return false;
    return inter / uni > thr;
  };
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  // Seeds 1-3 have boxes small against the clusters' spacing; seed 4's are large, like SSD's
  // anchors, so that the grid's cells are as wide as the median box rather than one per four.
  for (unsigned seed : {1u, 2u, 3u, 4u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const float size = seed == 4 ? 60.0f : 4.0f;
    constexpr int64_t N = 3000, C = 2;
    uint64_t state = seed * 0x9e3779b97f4a7c15ull;
    auto uniform = [&] {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      return static_cast<float>(state >> 40) / static_cast<float>(1 << 24);
    };
    std::vector<float> coords;  // [y1, x1, y2, x2], corners in either order
    for (int64_t i = 0; i < N; ++i) {
      const float cluster = 50.0f * static_cast<float>(i % 40);  // 40 groups apart along x and y
      float x = cluster + 10 * uniform(), y = cluster + 10 * uniform(), w = 0.5f + size * uniform(),
            h = 0.5f + size * uniform();
      if (i % 97 == 0) w = 900;          // spans many cells: tested against everything
      if (i % 89 == 0) w = 0;            // no area
      if (i % 83 == 0) std::swap(x, y);  // another cluster's place
      std::vector<float> b = {y, x, y + h, x + w};
      if (i % 101 == 0) std::swap(b[1], b[3]);  // x corners inverted
      if (i % 211 == 0) b[1] = nan;
      if (i % 223 == 0) b[3] = inf;
      if (i % 227 == 0) b[1] = -inf;
      coords.insert(coords.end(), b.begin(), b.end());
    }
    std::vector<float> sc(static_cast<size_t>(C * N));
    for (float& v : sc) v = uniform();
    const Tensor boxes = floats(coords, {1, N, 4}), scores = floats(sc, {1, C, N});
    for (float thr : {0.5f, 0.05f, -0.1f}) {
      for (int64_t cap : {int64_t{100000}, int64_t{250}}) {
        SCOPED_TRACE("iou " + std::to_string(thr) + ", cap " + std::to_string(cap));
        std::vector<int64_t> want;
        for (int64_t c = 0; c < C; ++c) {
          std::vector<int64_t> order;
          for (int64_t i = 0; i < N; ++i)
            if (sc[static_cast<size_t>(c * N + i)] > 0.2f) order.push_back(i);
          std::stable_sort(order.begin(), order.end(), [&](int64_t p, int64_t q) {
            return sc[static_cast<size_t>(c * N + p)] > sc[static_cast<size_t>(c * N + q)];
          });
          std::vector<Box> kept;
          for (int64_t i : order) {
            if (static_cast<int64_t>(kept.size()) >= cap) break;
            const float* b = &coords[static_cast<size_t>(4 * i)];
            const Box e{std::min(b[1], b[3]), std::max(b[1], b[3]), std::min(b[0], b[2]), std::max(b[0], b[2])};
            bool suppressed = false;
            for (const Box& k : kept) suppressed = suppressed || overlaps_too_much(e, k, thr);
            if (suppressed) continue;
            kept.push_back(e);
            want.insert(want.end(), {0, c, i});
          }
        }
        const Tensor got = run_node(
            "NonMaxSuppression", {boxes, scores, int64s({cap}, {1}), floats({thr}, {1}), floats({0.2f}, {1})}, {}, 11);
        ASSERT_GT(want.size(), 300u);
        expect_close(got, int64s(want, {static_cast<int64_t>(want.size() / 3), 3}), 0, 0);
      }
    }
  }
}

TEST(CpuDetection, NonMaxSuppressionCenterBoxes) {
  const Tensor boxes = floats({0.5f, 0.5f, 1, 1, 0.5f, 0.6f, 1, 1, 0.5f, 0.4f, 1, 1, 0.5f, 10.5f, 1, 1}, {1, 4, 4});
  const Tensor scores = floats({0.9f, 0.95f, 0.8f, 0.1f}, {1, 1, 4});
  expect_close(run_node("NonMaxSuppression", {boxes, scores, int64s({5}, {1}), floats({0.5f}, {1})},
                        {attr("center_point_box", int64_t{1})}, 11),
               int64s({0, 0, 1, 0, 0, 3}, {2, 3}), 0, 0);
}

TEST(CpuDetection, RoiAlignAverageHalfPixel) {
  const Tensor got =
      run_node("RoiAlign", {feature_map(), rois(), batch_indices()},
               {attr("output_height", int64_t{2}), attr("output_width", int64_t{3}), attr("spatial_scale", 0.5f)}, 16);
  expect_close(got,
               floats({-0.02833281f, 0.18750025f,  0.40333343f,  -0.51583320f, -0.29999942f, -0.08416605f,
                       0.00916639f,  0.22500059f,  0.24552210f,  1.39666712f,  1.61249995f,  1.24239612f,
                       -0.13f,       0.20250005f,  0.06833335f,  0.13624999f,  0.62302095f,  0.98364592f,
                       0.42000008f,  1.30250037f,  0.35583344f,  0.31125000f,  -0.03479129f, 0.41177109f,
                       0.20616741f,  0.21850072f,  0.23083401f,  0.20616741f,  0.21850072f,  0.23083401f,
                       -0.69383407f, -0.68150061f, -0.66916722f, -0.69383407f, -0.68150061f, -0.66916722f},
                      {3, 2, 2, 3}),
               1e-5, 1e-6);
}

TEST(CpuDetection, RoiAlignMaxAndOutputHalfPixel) {
  const Tensor mx = run_node("RoiAlign", {feature_map(), rois(), batch_indices()},
                             {attr("output_height", int64_t{2}), attr("output_width", int64_t{2}),
                              attr("mode", std::string("max")), attr("sampling_ratio", int64_t{2})},
                             16);
  expect_close(
      mx,
      floats({0.40359360f, 0.40371147f, 0.86484343f, 1.26972735f, 1.05574179f, 0.75879002f, 0.71543008f, 1.62597859f,
              0.64531267f, 1.05000007f, 0,           0.27375019f, 1.15000010f, 0.55781275f, 1.07500076f, 0,
              0.32774985f, 0.38474983f, 0.32774985f, 0.38474983f, 0,           0,           0,           0},
             {3, 2, 2, 2}),
      1e-5, 1e-6);
  const Tensor ohp = run_node("RoiAlign", {feature_map(), rois(), batch_indices()},
                              {attr("output_height", int64_t{2}), attr("output_width", int64_t{2}),
                               attr("coordinate_transformation_mode", std::string("output_half_pixel"))},
                              16);
  expect_close(ohp,
               floats({-0.50015575f, 0.08875034f, 0.83050787f, 0.87742245f,  1.08421910f, 0.53640753f,
                       0.56625098f,  1.02918053f, 0.25356948f, 0.29140559f,  0.13073608f, 0.12112233f,
                       0.46544462f,  0.17140554f, 0.26177785f, -0.05887772f, 0.46750009f, 0.65250027f,
                       0.07750046f,  0.26250017f, 0.13000131f, -0.05999875f, 0.86500049f, -0.07499862f},
                      {3, 2, 2, 2}),
               1e-5, 1e-6);
  // Opset 10 has only output_half_pixel's sampling.
  expect_close(run_node("RoiAlign", {feature_map(), rois(), batch_indices()},
                        {attr("output_height", int64_t{2}), attr("output_width", int64_t{2})}, 10),
               ohp);
}

TEST(CpuDetection, BadBoxesNameTheNode) {
  const float inf = std::numeric_limits<float>::infinity();
  std::string e = error_of("RoiAlign", {feature_map(), rois(), int64s({1, 2, 0}, {3})}, {}, 16);
  EXPECT_NE(e.find("batch_indices[1] = 2 is not a batch of X (2)"), std::string::npos) << e;
  EXPECT_NE(e.find("'det'"), std::string::npos) << e;
  e = error_of("RoiAlign", {feature_map(), floats({0, 0, inf, 1}, {1, 4}), int64s({0}, {1})}, {}, 16);
  EXPECT_NE(e.find("not finite"), std::string::npos) << e;
  e = error_of("RoiAlign", {feature_map(), floats({0, 0, 3e9f, 3e9f}, {1, 4}), int64s({0}, {1})}, {}, 16);
  EXPECT_NE(e.find("far larger than X"), std::string::npos) << e;
  // A box of no width but absurd height: a zero-by-huge sample grid is still refused.
  e = error_of("RoiAlign", {feature_map(), floats({1, 0, 1, 3e9f}, {1, 4}), int64s({0}, {1})}, {}, 16);
  EXPECT_NE(e.find("far larger than X"), std::string::npos) << e;
  e = error_of("NonMaxSuppression", {floats({0, 0, 1, 1}, {1, 1, 4}), floats({1, 1}, {1, 1, 2})}, {}, 11);
  EXPECT_NE(e.find("scores must be [batches, classes, boxes]"), std::string::npos) << e;
}

TEST(CpuDetection, AnInvertedRoiSamplesNothing) {
  // half_pixel keeps a box whose end is before its start: no samples, so every bin reads 0.
  const Tensor got = run_node("RoiAlign", {feature_map(), floats({3, 3, 1, 1}, {1, 4}), int64s({0}, {1})},
                              {attr("output_height", int64_t{2}), attr("output_width", int64_t{2})}, 16);
  expect_close(got, floats(std::vector<float>(8, 0.0f), {1, 2, 2, 2}));
}
