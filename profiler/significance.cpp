#include "profiler/significance.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace fusec {

namespace {

/// Counts of U over all C(m+n, m) orderings of m x's and n y's, as doubles (exact up to 2^53,
/// relative error ~1e-16 beyond: p-values need no more). Recurrence on the largest element:
/// it is an x (beating all n y's, U += n) or a y: f(m,n,u) = f(m-1,n,u-n) + f(m,n-1,u).
std::vector<double> exact_u_counts(size_t m, size_t n) {
  if (n > m) std::swap(m, n);  // f(m,n,·) = f(n,m,·); the smaller one sizes the table
  size_t umax = m * n;
  // row[j] = f(i, j, ·) for the current i; starts at i = 0, where f(0, j, 0) = 1.
  std::vector<std::vector<double>> row(n + 1, std::vector<double>(umax + 1, 0.0));
  for (auto& r : row) r[0] = 1;
  for (size_t i = 1; i <= m; ++i) {
    std::vector<std::vector<double>> next(n + 1, std::vector<double>(umax + 1, 0.0));
    next[0][0] = 1;  // f(i, 0, 0) = 1
    for (size_t j = 1; j <= n; ++j)
      for (size_t u = 0; u <= i * j; ++u) next[j][u] = (u >= j ? row[j][u - j] : 0.0) + next[j - 1][u];
    row.swap(next);
  }
  return row[n];
}

constexpr size_t kExactLimit = 400;  // n_x * n_y up to which the exact distribution is used

double normal_two_sided(double z) { return std::erfc(std::fabs(z) / std::sqrt(2.0)); }

/// log P(B = k), B ~ Binomial(n, 1/2).
double log_binom_half(size_t n, size_t k) {
  return std::lgamma(static_cast<double>(n) + 1) - std::lgamma(static_cast<double>(k) + 1) -
         std::lgamma(static_cast<double>(n - k) + 1) - static_cast<double>(n) * std::log(2.0);
}

double median_of_sorted(const std::vector<double>& s) {
  size_t n = s.size();
  return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

}  // namespace

MannWhitney mann_whitney_u(const std::vector<double>& x, const std::vector<double>& y) {
  MannWhitney r;
  size_t m = x.size(), n = y.size();
  if (m == 0 || n == 0) return r;
  // Midranks of the pooled sample; tie groups feed the variance correction.
  struct Item {
    double v;
    bool from_x;
  };
  std::vector<Item> all;
  all.reserve(m + n);
  for (double v : x) all.push_back({v, true});
  for (double v : y) all.push_back({v, false});
  std::sort(all.begin(), all.end(), [](const Item& a, const Item& b) { return a.v < b.v; });
  double rank_sum_x = 0, tie_term = 0;
  bool ties = false;
  for (size_t i = 0; i < all.size();) {
    size_t j = i;
    while (j < all.size() && all[j].v == all[i].v) ++j;
    double t = static_cast<double>(j - i);
    double midrank = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2;
    for (size_t k = i; k < j; ++k)
      if (all[k].from_x) rank_sum_x += midrank;
    if (t > 1) {
      ties = true;
      tie_term += t * t * t - t;
    }
    i = j;
  }
  double dm = static_cast<double>(m), dn = static_cast<double>(n), N = dm + dn;
  r.u = rank_sum_x - dm * (dm + 1) / 2;
  double mu = dm * dn / 2;

  if (!ties && m * n <= kExactLimit) {
    std::vector<double> counts = exact_u_counts(m, n);
    double total = std::accumulate(counts.begin(), counts.end(), 0.0);
    auto u = static_cast<size_t>(std::llround(r.u));
    double le = 0, ge = 0;
    for (size_t k = 0; k <= u; ++k) le += counts[k];
    for (size_t k = u; k < counts.size(); ++k) ge += counts[k];
    r.p_value = std::min(1.0, 2 * std::min(le, ge) / total);
    r.exact = true;
    return r;
  }
  double var = dm * dn / 12 * ((N + 1) - tie_term / (N * (N - 1)));
  if (var <= 0) return r;  // every value equal: no evidence of any difference
  double diff = std::fabs(r.u - mu) - 0.5;
  r.p_value = diff <= 0 ? 1.0 : std::min(1.0, normal_two_sided(diff / std::sqrt(var)));
  return r;
}

double mann_whitney_min_p(size_t nx, size_t ny) {
  if (nx == 0 || ny == 0) return 1;
  // 2 / C(nx+ny, nx): only the two most extreme orderings.
  double log_c = std::lgamma(static_cast<double>(nx + ny) + 1) - std::lgamma(static_cast<double>(nx) + 1) -
                 std::lgamma(static_cast<double>(ny) + 1);
  return std::min(1.0, 2 * std::exp(-log_c));
}

MedianInterval median_interval(std::vector<double> s, double confidence) {
  MedianInterval mi;
  if (s.empty()) return mi;
  std::sort(s.begin(), s.end());
  size_t n = s.size();
  mi.median = median_of_sorted(s);
  // [x_(k), x_(n+1-k)] (1-based) covers the median with probability 1 - 2 P(B <= k-1).
  double tail = 0;  // P(B <= k-1) for the current k
  size_t k = 1;
  double coverage = 1 - 2 * std::exp(log_binom_half(n, 0));
  for (size_t cand = 2; 2 * cand <= n + 1; ++cand) {
    tail += std::exp(log_binom_half(n, cand - 2));
    double cov = 1 - 2 * (tail + std::exp(log_binom_half(n, cand - 1)));
    if (cov < confidence) break;
    k = cand;
    coverage = cov;
  }
  mi.lo = s[k - 1];
  mi.hi = s[n - k];
  mi.confidence = n == 1 ? 0 : coverage;
  return mi;
}

TimingComparison compare_timings(const std::vector<double>& base, const std::vector<double>& next, double alpha,
                                 double threshold) {
  TimingComparison c;
  c.base = median_interval(base);
  c.next = median_interval(next);
  c.test = mann_whitney_u(next, base);
  if (c.base.median > 0) c.ratio = c.next.median / c.base.median;
  if (c.test.p_value < alpha) {
    if (c.ratio > 1 + threshold)
      c.verdict = Verdict::Worse;
    else if (c.ratio * (1 + threshold) < 1)
      c.verdict = Verdict::Better;
  }
  return c;
}

}  // namespace fusec
