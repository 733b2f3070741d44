#include "profiler/stats.h"

#include <algorithm>
#include <cmath>

namespace fusec {

static double percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  double pos = p / 100.0 * static_cast<double>(sorted.size() - 1);
  size_t lo = static_cast<size_t>(std::floor(pos));
  size_t hi = std::min(lo + 1, sorted.size() - 1);
  double frac = pos - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

LatencyStats compute_latency_stats(std::vector<double> s) {
  LatencyStats st;
  st.samples = static_cast<int>(s.size());
  if (s.empty()) return st;
  std::sort(s.begin(), s.end());
  double sum = 0;
  for (double x : s) sum += x;
  st.mean_ms = sum / static_cast<double>(s.size());
  double var = 0;
  for (double x : s) var += (x - st.mean_ms) * (x - st.mean_ms);
  st.stddev_ms = s.size() > 1 ? std::sqrt(var / static_cast<double>(s.size() - 1)) : 0;
  st.cv = st.mean_ms > 0 ? st.stddev_ms / st.mean_ms : 0;
  st.min_ms = s.front();
  st.max_ms = s.back();
  st.median_ms = percentile(s, 50);
  st.p90_ms = percentile(s, 90);
  st.p95_ms = percentile(s, 95);
  st.p99_ms = percentile(s, 99);
  return st;
}

}  // namespace fusec
