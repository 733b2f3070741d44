// The statistics behind `fusec compare`: p-values against hand-enumerated and textbook values,
// and the gate's behaviour on synthetic timings (no false alarms on identical distributions, a
// real 10% regression caught).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "profiler/significance.h"

namespace fusec {
namespace {

TEST(MannWhitney, ExactSmallSamples) {
  // Every x below every y: U = 0; two-sided p = 2 / C(6,3) and 2 / C(10,5).
  auto r = mann_whitney_u({1, 2, 3}, {4, 5, 6});
  EXPECT_TRUE(r.exact);
  EXPECT_DOUBLE_EQ(r.u, 0);
  EXPECT_NEAR(r.p_value, 0.1, 1e-12);
  r = mann_whitney_u({1, 2, 3, 4, 5}, {6, 7, 8, 9, 10});
  EXPECT_NEAR(r.p_value, 2.0 / 252, 1e-12);
  // Symmetric in direction.
  EXPECT_NEAR(mann_whitney_u({6, 7, 8, 9, 10}, {1, 2, 3, 4, 5}).p_value, 2.0 / 252, 1e-12);
  EXPECT_DOUBLE_EQ(mann_whitney_u({6, 7, 8, 9, 10}, {1, 2, 3, 4, 5}).u, 25);
  // Interleaved samples; p from enumerating all C(13,6) orderings.
  r = mann_whitney_u({1.1, 2.5, 3.2, 7.7, 0.3, 4.4}, {2.0, 5.5, 6.1, 8.3, 9.0, 3.9, 7.1});
  EXPECT_DOUBLE_EQ(r.u, 9);
  EXPECT_NEAR(r.p_value, 0.10139860139860139, 1e-12);
  EXPECT_NEAR(mann_whitney_min_p(3, 3), 0.1, 1e-12);
  EXPECT_NEAR(mann_whitney_min_p(5, 5), 2.0 / 252, 1e-12);
}

TEST(MannWhitney, NormalApproximationWithTies) {
  // R: wilcox.test(c(1,2,2,3,3,3,4,5), c(3,4,4,5,5,6,6,7,8)) -> W = 7.5, p = 0.006373.
  auto r = mann_whitney_u({1, 2, 2, 3, 3, 3, 4, 5}, {3, 4, 4, 5, 5, 6, 6, 7, 8});
  EXPECT_FALSE(r.exact);
  EXPECT_DOUBLE_EQ(r.u, 7.5);
  EXPECT_NEAR(r.p_value, 0.006373133838085877, 1e-9);
}

TEST(MannWhitney, DegenerateInputs) {
  EXPECT_DOUBLE_EQ(mann_whitney_u({}, {1, 2}).p_value, 1);
  EXPECT_DOUBLE_EQ(mann_whitney_u({2, 2, 2}, {2, 2}).p_value, 1);  // all equal
  EXPECT_DOUBLE_EQ(mann_whitney_u({1, 2, 3}, {1, 2, 3}).p_value, 1);
}

TEST(MannWhitney, ExactAgreesWithTheApproximationWhereBothApply) {
  // 20 vs 20 without ties: the exact distribution; 21 vs 20: the normal approximation. Check the
  // exact p against the approximation computed here, and the approximation against a value
  // enumerated with the exact recurrence.
  std::vector<double> x, y;
  for (int i = 0; i < 20; ++i) {
    x.push_back(i * 2.0 + 0.5);
    y.push_back(i * 2.0 + 9.0);
  }
  auto e = mann_whitney_u(x, y);
  ASSERT_TRUE(e.exact);
  double mu = 200, sd = std::sqrt(20.0 * 20 * 41 / 12);
  double approx = std::erfc((std::fabs(e.u - mu) - 0.5) / sd / std::sqrt(2.0));
  EXPECT_GT(e.p_value, 0.01);
  EXPECT_LT(e.p_value, 0.5);
  EXPECT_NEAR(e.p_value, approx, 0.05 * approx);
  x.push_back(0.25);
  auto a = mann_whitney_u(x, y);
  EXPECT_FALSE(a.exact);
  EXPECT_LT(a.p_value, e.p_value);  // one more x below every y: stronger evidence
}

TEST(MedianInterval, OrderStatistics) {
  std::vector<double> s;
  for (int i = 1; i <= 100; ++i) s.push_back(i);
  auto mi = median_interval(s);
  EXPECT_DOUBLE_EQ(mi.median, 50.5);
  // For n = 100 the 95% interval is [x_(40), x_(61)] (coverage 0.9648).
  EXPECT_DOUBLE_EQ(mi.lo, 40);
  EXPECT_DOUBLE_EQ(mi.hi, 61);
  EXPECT_NEAR(mi.confidence, 0.9648, 1e-4);
  auto small = median_interval({3, 1, 2});
  EXPECT_DOUBLE_EQ(small.median, 2);
  EXPECT_DOUBLE_EQ(small.lo, 1);
  EXPECT_DOUBLE_EQ(small.hi, 3);
  EXPECT_NEAR(small.confidence, 0.75, 1e-12);
}

/// n timings around `median` ms with multiplicative noise of `noise` (lognormal) and a few slow
/// outliers, as real timings have.
std::vector<double> timings(std::mt19937_64& rng, int n, double median, double noise) {
  std::normal_distribution<double> z(0, noise);
  std::uniform_real_distribution<double> uni(0, 1);
  std::vector<double> s;
  for (int i = 0; i < n; ++i) {
    double t = median * std::exp(z(rng));
    if (uni(rng) < 0.04) t *= 1.5;  // a preempted iteration
    s.push_back(t);
  }
  return s;
}

TEST(CompareTimings, IdenticalDistributionsRaiseNoRegression) {
  int regressions = 0, significant = 0;
  for (int trial = 0; trial < 100; ++trial) {
    std::mt19937_64 rng(1000 + trial);
    auto base = timings(rng, 50, 2.0, 0.03), next = timings(rng, 50, 2.0, 0.03);
    auto c = compare_timings(base, next, 0.01, 0.05);
    regressions += c.verdict == Verdict::Worse;
    // Without the threshold the test alone must be calibrated: p < 0.01 about 1% of the time.
    significant += compare_timings(base, next, 0.01, 0.0).verdict != Verdict::Same;
  }
  EXPECT_LE(regressions, 1);
  EXPECT_LE(significant, 4);
}

TEST(CompareTimings, TenPercentShiftIsCaught) {
  int caught = 0;
  for (int trial = 0; trial < 100; ++trial) {
    std::mt19937_64 rng(5000 + trial);
    auto base = timings(rng, 50, 2.0, 0.03), next = timings(rng, 50, 2.2, 0.03);
    auto c = compare_timings(base, next, 0.01, 0.05);
    caught += c.verdict == Verdict::Worse;
    if (c.verdict == Verdict::Worse) {
      EXPECT_NEAR(c.ratio, 1.1, 0.03);
    }
  }
  EXPECT_GE(caught, 95);
}

TEST(CompareTimings, ImprovementIsBetterAndSmallShiftsAreNoise) {
  std::mt19937_64 rng(7);
  auto base = timings(rng, 50, 2.0, 0.03), faster = timings(rng, 50, 1.6, 0.03);
  EXPECT_EQ(compare_timings(base, faster, 0.01, 0.05).verdict, Verdict::Better);
  // A significant 2% shift is below a 5% threshold: "~".
  auto slightly = timings(rng, 400, 2.04, 0.01), base400 = timings(rng, 400, 2.0, 0.01);
  auto c = compare_timings(base400, slightly, 0.01, 0.05);
  EXPECT_LT(c.test.p_value, 0.01);
  EXPECT_EQ(c.verdict, Verdict::Same);
  // 3 vs 3 samples can never reach p < 0.01, however large the shift.
  EXPECT_EQ(compare_timings({1, 1.01, 1.02}, {2, 2.01, 2.02}, 0.01, 0.05).verdict, Verdict::Same);
}

}  // namespace
}  // namespace fusec
