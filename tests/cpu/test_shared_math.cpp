// The host side of what both backends share: backend/formulas.h (whose text the NVRTC kernels
// also compile; tests/gpu/test_elementwise_codegen.cpp compiles them), backend/axis_layout.h,
// backend/dispatch_bytes.h and ir/ops/resize_taps.h. Each test pins down a rule that tells two variants apart or that a
// caller relies on.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "backend/axis_layout.h"
#include "backend/dispatch_bytes.h"
#include "backend/formulas.h"
#include "ir/half.h"
#include "ir/ops/resize_taps.h"

using namespace fusec;
namespace fm = fusec::formulas;

namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();

double exact_gelu(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }

TEST(Formulas, ActivationsKeepNaN) {
  EXPECT_TRUE(std::isnan(fm::relu(kNaN)));
  EXPECT_EQ(fm::relu(-2.0f), 0.0f);
  EXPECT_EQ(fm::relu(int8_t{-3}), int8_t{0});  // Relu also takes integers
  EXPECT_TRUE(std::isnan(fm::leaky_relu(kNaN, 0.1f)));
  EXPECT_TRUE(std::isnan(fm::hard_sigmoid(kNaN, 0.2f, 0.5f)));
  EXPECT_TRUE(std::isnan(fm::hard_swish(kNaN)));
}

TEST(Formulas, ClampKeepsNaN) {
  EXPECT_TRUE(std::isnan(fm::clamp(kNaN, 0.0f, 1.0f)));
  EXPECT_EQ(fm::clamp(5.0f, 2.0f, 1.0f), 1.0f);  // lo > hi: every value becomes hi
  EXPECT_TRUE(std::isnan(fm::max_nan(1.0f, kNaN)));
  EXPECT_TRUE(std::isnan(fm::min_nan(kNaN, 1.0f)));
}

TEST(Formulas, SigmoidNeverOverflowsTheDirectFormGoesToZero) {
  EXPECT_EQ(fm::sigmoid(-1000.0f), 0.0f);
  EXPECT_EQ(fm::sigmoid(1000.0f), 1.0f);
  EXPECT_GT(fm::sigmoid(-100.0f), 0.0f);         // e^-100 / (1 + e^-100), a denormal-free float
  EXPECT_EQ(fm::sigmoid_direct(-100.0f), 0.0f);  // 1 / (1 + inf)
}

TEST(Formulas, TheGeluVariantsAgreeToTheirStatedAccuracy) {
  for (double x = -12; x <= 12; x += 1.0 / 64) {
    const float f = static_cast<float>(x);
    const double ref = exact_gelu(f);
    const double tol = 1e-6 * std::max(1.0, std::fabs(ref));
    EXPECT_NEAR(fm::gelu_erf_via_f64(f), ref, tol) << x;
    EXPECT_NEAR(fm::gelu_erf_via_f64(static_cast<double>(f)), ref, 1e-15 * std::max(1.0, std::fabs(ref))) << x;
    EXPECT_NEAR(fm::gelu_erf_f32(f), ref, 1e-5 * std::max(1.0, std::fabs(ref))) << x;
    EXPECT_NEAR(fm::gelu_erfc_f32(f), ref, tol) << x;
    EXPECT_NEAR(fm::gelu_erfc_fit_f32(f), ref, 1e-7 * std::max(1.0, std::fabs(x))) << x;
    EXPECT_NEAR(fm::gelu_logistic_fit_fast_f32(f), ref, 2e-7 * std::max(1.0, std::fabs(x))) << x;  // host: exact steps
    EXPECT_NEAR(fm::gelu_tanh_f32(f), fm::gelu_tanh_via_f64(f), 1e-5 * std::max(1.0, std::fabs(ref))) << x;
  }
}

// The logistic fit past its fitted range, at every fp16 input, and at the infinities, where it
// gives what 0.5·x·(1 + erf(x/√2)) gives.
TEST(Formulas, TheLogisticGeluFitHoldsOnEveryHalfInputAndAtTheEdges) {
  for (double x = -40; x <= 40; x += 1.0 / 16) {
    const float f = static_cast<float>(x);
    EXPECT_NEAR(fm::gelu_logistic_fit_fast_f32(f), exact_gelu(f), 2e-7 * std::max(1.0, std::fabs(x))) << x;
  }
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const float f = half_to_float(static_cast<uint16_t>(bits));
    if (!std::isfinite(f)) continue;
    ASSERT_NEAR(fm::gelu_logistic_fit_fast_f32(f), exact_gelu(f), 2e-7 * std::max(1.0, std::fabs(double(f)))) << f;
  }
  EXPECT_EQ(fm::gelu_logistic_fit_fast_f32(INFINITY), INFINITY);
  EXPECT_TRUE(std::isnan(fm::gelu_logistic_fit_fast_f32(-INFINITY)));
  EXPECT_TRUE(std::isnan(fm::gelu_erf_f32(-INFINITY)));
  EXPECT_TRUE(std::isnan(fm::gelu_logistic_fit_fast_f32(NAN)));
  EXPECT_EQ(fm::gelu_logistic_fit_fast_f32(0.0f), 0.0f);
}

TEST(Formulas, GeluTanhRoundsSqrt2OverPiToTheNearestFloatUnlessTheCallerPassesItsOwn) {
  // The default is the float nearest √(2/π); fused.cpp's std::sqrt(2.0f / (float)M_PI) is one
  // unit below, and passing it changes results (so the CPU's fused ops pass theirs).
  const float nearest = static_cast<float>(std::sqrt(2.0 / M_PI));
  const float fused = std::sqrt(2.0f / static_cast<float>(M_PI));
  EXPECT_EQ(std::bit_cast<uint32_t>(nearest), 0x3f4c422au);
  EXPECT_EQ(std::bit_cast<uint32_t>(fused), 0x3f4c4229u);
  EXPECT_EQ(fm::gelu_tanh_f32(1.5f), fm::gelu_tanh_f32(1.5f, nearest));
  int differ = 0;
  for (float x = -4; x <= 4; x += 0.01f) differ += fm::gelu_tanh_f32(x) != fm::gelu_tanh_f32(x, fused);
  EXPECT_GT(differ, 0);
}

TEST(Formulas, ShrinkComparesAndShiftsInDouble) {
  EXPECT_EQ(fm::shrink(1.0f, 0.25, 0.5), 0.75f);
  EXPECT_EQ(fm::shrink(-1.0f, 0.25, 0.5), -0.75f);
  EXPECT_EQ(fm::shrink(0.5f, 0.25, 0.5), 0.0f);  // |x| <= lambd
  EXPECT_EQ(fm::shrink(int32_t{7}, 2.0, 3.0), int32_t{5});
}

TEST(AxisLayout, SoftmaxCoercesTo2DBeforeOpset13) {
  const std::vector<int64_t> d = {2, 3, 4, 5};
  const AxisView v13 = softmax_view(d, 1, 13), v11 = softmax_view(d, 1, 11);
  EXPECT_EQ(v13.outer, 2);
  EXPECT_EQ(v13.n, 3);
  EXPECT_EQ(v13.inner, 20);
  EXPECT_EQ(v11.outer, 2);
  EXPECT_EQ(v11.n, 60);
  EXPECT_EQ(v11.inner, 1);
  const AxisView a = axis_view(d, 2);
  EXPECT_EQ(a.outer, 6);
  EXPECT_EQ(a.n, 4);
  EXPECT_EQ(a.inner, 5);
}

TEST(AxisLayout, MergeDropsSizeOneDimsAndJoinsNeighboursOfOneKind) {
  // [2, 1, 3, 4, 5] over axes {0, 2}: the 1 goes, 2 and 3 are both reduced -> [6 reduced, 20 kept].
  const MergedAxes m = merge_reduce_axes({2, 1, 3, 4, 5}, {true, false, true, false, false});
  EXPECT_EQ(m.dims, (std::vector<int64_t>{6, 20}));
  EXPECT_EQ(m.reduced, (std::vector<bool>{true, false}));
  const MergedAxes alt = merge_reduce_axes({2, 3, 4}, {true, false, true});
  EXPECT_EQ(alt.dims, (std::vector<int64_t>{2, 3, 4}));
  EXPECT_TRUE(merge_reduce_axes({1, 1}, {true, false}).dims.empty());
}

TEST(DispatchBytes, GivesTheUnsignedTypeOfEachSizeAndRefusesOthers) {
  for (size_t bytes : {1, 2, 4, 8}) {
    size_t got = 0;
    EXPECT_TRUE(dispatch_bytes(bytes, [&](auto u) {
      static_assert(std::is_unsigned_v<decltype(u)>);
      got = sizeof(u);
    }));
    EXPECT_EQ(got, bytes);
  }
  bool called = false;
  EXPECT_FALSE(dispatch_bytes(3, [&](auto) { called = true; }));
  EXPECT_FALSE(dispatch_bytes(16, [&](auto) { called = true; }));
  EXPECT_FALSE(called);
}

resize::ResizeConfig linear_config(const std::string& ctm, int64_t out, double scale) {
  resize::ResizeConfig c;
  c.mode = "linear";
  c.ctm = ctm;
  c.p.out_dims = {out};
  c.p.scales = {scale};
  c.p.roi_start = {0.0};
  c.p.roi_end = {1.0};
  return c;
}

TEST(ResizeTaps, LinearUpsampleBlendsNeighbours) {
  // half_pixel, 2 -> 4: x_ori = -0.25, 0.25, 0.75, 1.25.
  const resize::ResizeTaps t = resize::make_taps(linear_config("half_pixel", 4, 2.0), 0, 2);
  ASSERT_EQ(t.n, 2);
  EXPECT_FALSE(t.identity);
  EXPECT_EQ(t.idx, (std::vector<int64_t>{0, 0, 0, 1, 0, 1, 1, 1}));  // clamped at the edges
  EXPECT_EQ(t.w, (std::vector<double>{0.25, 0.75, 0.75, 0.25, 0.25, 0.75, 0.75, 0.25}));
  EXPECT_TRUE(resize::make_taps(linear_config("half_pixel", 3, 1.0), 0, 3).identity);
}

TEST(ResizeTaps, ANonFiniteCoordinateGetsTheExtrapolationValue) {
  // A NaN roi makes every tf_crop_and_resize coordinate NaN: no comparison calls it outside, but
  // it reads nothing (the CPU reference's rule, now the CUDA planner's too).
  resize::ResizeConfig c = linear_config("tf_crop_and_resize", 3, 1.5);
  c.p.roi_start = {std::nan("")};
  const resize::ResizeTaps t = resize::make_taps(c, 0, 2);
  EXPECT_EQ(t.outside, (std::vector<uint8_t>{1, 1, 1}));
}

TEST(ResizeTaps, NearestMapsAnEmptyAxisToTheExtrapolationValue) {
  resize::ResizeConfig c = linear_config("tf_crop_and_resize", 2, 1.0);
  c.mode = "nearest";
  EXPECT_EQ(resize::nearest_map(c, 0, 0), (std::vector<int64_t>{-1, -1}));
}

}  // namespace
