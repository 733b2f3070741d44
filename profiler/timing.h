// bench's measurement, as a library call: warm up, then time repeated runs of a compiled model
// under the --iterations/--duration rule. GPU: inputs stay on the device and each iteration is one
// launch of the whole plan (a CUDA-graph replay once captured) between two device events, or, with
// include_copies, host->device->host on the host clock. CPU: the host clock around each run.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/gpu_plugin.h"

namespace fusec::profiler {

/// How many iterations: exactly `iterations` when given; else until `duration` seconds (default
/// 5) have passed and at least 10 iterations ran.
struct SampleRule {
  std::optional<int> iterations;
  std::optional<double> duration;
  std::string progress_label;  // non-empty: "label: N iterations, T s" on stderr as it goes
};

/// Calls `once` (which returns that iteration's milliseconds) per the rule; the samples.
std::vector<double> sample_ms(const SampleRule& rule, const std::function<double()>& once);

struct TimingSettings {
  int warmup = 3;
  SampleRule rule;
  bool include_copies = false;  // GPU: time host->device->host runs instead of device launches
};

struct TimedRuns {
  std::vector<double> samples_ms;
  MemoryStats memory;
  bool gpu = false;
  // GPU only
  std::string graph_status;
  std::vector<std::string> cpu_nodes;  // nodes that fell back to the CPU (not folded)
  DeviceMemoryStats device_memory;
};

/// Warms up `exe` (already compiled and run once), then times it per `s`.
TimedRuns time_runs(Executable& exe, const std::vector<Tensor>& inputs, const TimingSettings& s);

}  // namespace fusec::profiler
