// Latency statistics for bench (and later profile): the numbers users compare across runs.
#pragma once
#include <vector>

namespace fusec {

struct LatencyStats {
  int samples = 0;
  double min_ms = 0, mean_ms = 0, median_ms = 0, p90_ms = 0, p95_ms = 0, p99_ms = 0, max_ms = 0;
  double stddev_ms = 0;
  double cv = 0;  // coefficient of variation (stddev / mean)
};

/// Percentiles by linear interpolation between order statistics (numpy's default).
LatencyStats compute_latency_stats(std::vector<double> samples_ms);

/// Above this coefficient of variation bench warns that the timing is noisy.
constexpr double kHighCv = 0.10;

}  // namespace fusec
