// Is "new" really slower than "base"? The statistics behind `fusec compare`, after Go's benchstat:
// a Mann–Whitney U test on the per-iteration samples (no assumption of normality: timings are
// skewed and have outliers), a distribution-free confidence interval for each median, and the
// median ratio as the size of the effect. A timing counts as changed only when the test is
// significant (p < alpha) AND the effect is above the threshold; otherwise it prints "~".
#pragma once
#include <cstddef>
#include <vector>

namespace fusec {

struct MannWhitney {
  double u = 0;        // U of the first sample: pairs (x, y) with x > y, ties counting 1/2
  double p_value = 1;  // two-sided
  bool exact = false;  // exact permutation distribution (no ties, small samples) or normal approximation
};

/// Two-sided Mann–Whitney U (Wilcoxon rank-sum) test of x against y.
/// Exact null distribution when there are no ties and n_x * n_y <= 400 (20 vs 20); otherwise the normal
/// approximation with the tie-corrected variance and a continuity correction (as R's wilcox.test
/// and SciPy's mannwhitneyu(method="asymptotic")). Empty input or all values equal: p = 1.
MannWhitney mann_whitney_u(const std::vector<double>& x, const std::vector<double>& y);

/// The smallest two-sided p-value the test can give for these sample sizes (no ties): with
/// 3 vs 3 samples it is 0.1, so no alpha below that can ever be met; compare says so.
double mann_whitney_min_p(std::size_t nx, std::size_t ny);

struct MedianInterval {
  double median = 0, lo = 0, hi = 0;
  double confidence = 0;  // achieved coverage (>= the requested one when n allows, else lower)
};

/// Median and a distribution-free confidence interval for it from order statistics (binomial
/// with p = 1/2), the interval benchstat prints as "± x%". With fewer than 6 samples the
/// interval is [min, max] and `confidence` says what coverage that has.
MedianInterval median_interval(std::vector<double> samples, double confidence = 0.95);

enum class Verdict { Same, Better, Worse };

struct TimingComparison {
  MedianInterval base, next;
  MannWhitney test;
  double ratio = 1;  // median(new) / median(base)
  Verdict verdict = Verdict::Same;
};

/// The rule: Worse when p < alpha and median(new) > median(base) * (1 + threshold); Better when
/// p < alpha and median(new) < median(base) / (1 + threshold); Same otherwise. Lower is better
/// (timings). `threshold` is a fraction (0.05 for 5%).
TimingComparison compare_timings(const std::vector<double>& base, const std::vector<double>& next, double alpha,
                                 double threshold);

}  // namespace fusec
