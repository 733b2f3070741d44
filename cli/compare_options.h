// Options shared by `fusec compare` and `fusec check`: the thresholds of the regression gate.
#pragma once
#include <CLI/CLI.hpp>

#include <optional>
#include <string>

#include "profiler/compare.h"

namespace fusec::cli {

/// --threshold 5% --alpha 0.01 --memory-threshold 1% --count-threshold 0% --error-threshold 100%;
/// unset flags keep the defaults given to resolve() (the project file's, for check).
struct ThresholdOptions {
  std::optional<std::string> timing, memory, count, error, share;
  std::optional<double> alpha;
  void add_to(CLI::App& app);
  compare::Thresholds resolve(compare::Thresholds defaults = {}) const;
};

/// "2 regressions in NEW against BASE: optimized latency, optimized nodes": the one error line.
std::string regression_summary(const compare::Comparison& c);

}  // namespace fusec::cli
