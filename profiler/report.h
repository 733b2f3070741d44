// The profile's outputs: the JSON report (fusec.profile/1, docs/schemas/profile.schema.json), the
// Chrome trace (ui.perfetto.dev, chrome://tracing) and the terminal summary.
#pragma once
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "profiler/profile.h"

namespace fusec::profiler {

struct ReportMeta {
  std::string model, variant;  // variant: "as_given" or "optimized"
  std::string device_kind, device_name;
  int device_index = 0, sm = 0, multiprocessors = 0, threads = 0;
  size_t device_memory_bytes = 0;
  Precision precision = Precision::FP32;
  int64_t batch = 1;
  int warmup = 0;
  std::string cuda_graph;                    // the executable's graph status ("on", "off (...)"); "" on the CPU
  std::map<std::string, std::string> build;  // versions: fusec, CUDA runtime, CUPTI, compiler
  std::string created;                       // ISO 8601, UTC
};

/// Hardware counters of the kernels of one stream-mode run (--counters), matched to
/// Analysis::kernels by launch order.
struct CounterRow {
  int kernel = -1;  // index into Analysis::kernels
  std::string name;
  double dram_read_bytes = 0, dram_write_bytes = 0, duration_ns = 0;
  double sm_throughput_pct = 0, dram_throughput_pct = 0, tensor_pipe_pct = 0;
};
struct CountersSection {
  std::vector<std::string> metrics;
  std::vector<CounterRow> rows;
  std::string error;  // why there are none (not permitted, unsupported): the timing profile still stands
};

/// What the fusion pipeline changed, from a profile of the model as given and one of the
/// optimized model in the same process (--compare-unfused).
struct FusionRow {
  std::string node, op_type;           // the optimized node ("" for the removed group)
  std::vector<std::string> originals;  // the as-given nodes it replaced
  int kernels_before = 0, kernels_after = 0;
  double bytes_before = 0, bytes_after = 0, ms_before = 0, ms_after = 0;
};
struct UnfusedComparison {
  int nodes_before = 0, nodes_after = 0, kernels_before = 0, kernels_after = 0;
  double bytes_before = 0, bytes_after = 0, ms_before = 0, ms_after = 0, wall_before = 0, wall_after = 0;
  std::vector<FusionRow> fusions;  // by time saved, descending
  FusionRow removed;               // as-given nodes no optimized node came from (folded, dead)
};
UnfusedComparison compare_unfused(const Analysis& given, const Analysis& optimized);

nlohmann::ordered_json report_json(const ReportMeta& meta, const Peaks& peaks, const Collected& c, const Analysis& a,
                                   const CountersSection* counters, const UnfusedComparison* unfused);

/// Chrome trace event format: per mode, one track per stream with a slice per kernel/copy, a track
/// of node ranges (first to last record of a node) and the host's launch ranges.
std::string chrome_trace(const ReportMeta& meta, const Collected& c, const Analysis& a);

void print_summary(std::FILE* out, const ReportMeta& meta, const Peaks& peaks, const Collected& c, const Analysis& a,
                   const CountersSection* counters, const UnfusedComparison* unfused, int top);

}  // namespace fusec::profiler
