// Where an engine build's time goes, under FUSEC_BUILD_TRACE=1 (or =live, which also prints each
// entry as it comes, for a build that never ends): each node's plan (its op factory:
// library queries, weight copies, trial calls), the buffers and weight upload, and each step of
// the first run, timed on the host with the device synchronized. Printed to stderr once the first
// run ends. Costs nothing when off; when on, the first run is slower by one sync per step.
#pragma once
#include <chrono>
#include <string>

namespace fusec::cuda {

class BuildTrace {
 public:
  static bool on();
  /// `phase` groups the line ("plan", "memory", "first run", or an op's own part such as
  /// "conv fused trial"); `what` names the node or step; `kind` is its op type.
  static void add(const std::string& phase, const std::string& kind, const std::string& what, double ms);
  /// Prints the per-phase and per-op-type totals and the slowest entries, then forgets them.
  static void report();
};

/// Host milliseconds since t0.
inline double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace fusec::cuda
