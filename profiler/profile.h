// What a profile collects (device activity attributed to the plan's steps) and what fusec makes of
// it: per-node and per-kernel medians, the cost model's FLOPs and bytes, achieved throughput and the
// roofline verdict against measured peaks, whole-run figures per execution mode.
//
// Collection is backend-specific (profiler/cpu_profiler.cpp: host timers around each step;
// profiler/cuda/: CUPTI activity records); everything from `Collected` on is shared, so the CPU and
// the GPU write the same report schema (docs/schemas/profile.schema.json, fusec.profile/1).
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "backend/precision.h"
#include "ir/graph.h"
#include "ir/op_schema.h"
#include "profiler/stats.h"

namespace fusec::profiler {

/// The ceilings achieved figures are divided by: measured on the device, never datasheet values.
struct Peaks {
  std::string device;                         // what they were measured on
  double bandwidth_bytes_per_s = 0;           // a large copy: bytes read + bytes written per second
  std::map<std::string, double> flops_per_s;  // GEMM peaks by precision: "fp32", "tf32", "fp16", "bf16"
  std::string measured_at;                    // ISO 8601, UTC
  std::string source;                         // "measured" (this run) or "cache"
  std::string cache_path;                     // where they are kept ("" when not cached)
  std::string method;                         // how they were measured, in words
};

/// Step: a whole step on the GPU timed by CUDA events (the profile without CUPTI).
enum class RecordKind { Kernel, Memcpy, Memset, Host, Step };
const char* record_kind_name(RecordKind k);

/// One execution of one thing: a kernel, copy or memset on the GPU, or one step's run on the host.
struct Record {
  RecordKind kind = RecordKind::Kernel;
  std::string name;
  int mode = 0;        // index into Collected::modes
  int iteration = -1;  // -1: outside the profiled iterations (dropped by the analysis)
  int step = -1;       // -1: attributed to no step
  uint64_t start_ns = 0, end_ns = 0;
  uint32_t stream = 0;
  int32_t grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};
  int registers = 0, static_smem = 0, dynamic_smem = 0;
  double occupancy = -1;  // theoretical, 0..1; -1 unknown
  uint64_t bytes = 0;     // copies and memsets
  std::string copy_kind;  // "DtoD", "HtoD", ...
  double ms() const { return static_cast<double>(end_ns - start_ns) * 1e-6; }
};

/// One step of the plan (StepInfo, kept).
struct StepDesc {
  std::string label, kind;
  const Node* node = nullptr;  // in Collected::graph
};

/// The host-side range of one step while it was launched (the trace's host track).
struct HostRange {
  int mode = 0, iteration = 0, step = 0;
  uint64_t start_ns = 0, end_ns = 0;
};

/// How the iterations of one mode were run, and their wall times.
struct ModeRun {
  std::string name;             // "cuda_graph", "stream" (separate launches) or "cpu"
  std::vector<double> wall_ms;  // per iteration
};

struct Collected {
  std::string device_kind;       // "cuda" or "cpu"
  const Graph* graph = nullptr;  // the executed graph the steps' nodes belong to
  std::vector<StepDesc> steps;
  std::vector<ModeRun> modes;  // modes[0] is the primary one: the figures per node and kernel
  std::vector<Record> records;
  std::vector<HostRange> host_ranges;
  size_t dropped_records = 0;  // CUPTI buffers lost (reported, never silently)
  std::string attribution;     // how device records were tied to steps
};

/// One node's (or added step's) figures over the primary mode's iterations.
struct NodeProfile {
  int step = 0;
  std::string name, op_type, kind;  // kind: StepInfo::kind
  std::vector<std::string> fused_from;
  std::optional<Cost> cost;        // at the stored types (fp16 bytes at --precision fp16)
  std::vector<double> samples_ms;  // per iteration: the sum of its records
  double median_ms = 0;
  int records_per_iteration = 0;  // kernels (and copies) it launches per run
  double flops_per_s = 0, bytes_per_s = 0, intensity = 0;
  std::string bound;  // "memory", "compute" or "" (no cost, or no time)
  std::string peak;   // which peak the verdict uses: "bandwidth", "fp16", "fp32", ...
  double pct_of_peak = 0;
  double roofline_ms = 0;  // the time at the relevant peak: max(bytes / BW, FLOPs / peak)
};

/// One kernel position in the run (the n-th launch of a step), over the primary mode's iterations.
struct KernelProfile {
  std::string name;
  RecordKind kind = RecordKind::Kernel;
  int step = -1, ordinal = 0;  // ordinal: its position among the step's records in one run
  std::vector<double> samples_ms;
  double median_ms = 0;
  int32_t grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};
  int registers = 0, static_smem = 0, dynamic_smem = 0;
  double occupancy = -1;
  uint64_t bytes = 0;
};

/// Whole-run figures of one mode.
struct ModeSummary {
  std::string name;
  LatencyStats wall;
  double device_ms = 0;   // median per iteration: the summed durations of its records
  double busy_ms = 0;     // median: the union of its records' intervals
  double span_ms = 0;     // median: first record start to last record end
  double idle_share = 0;  // (span - busy) / span: gaps between kernels (launch overhead)
  int launches = 0;       // kernels per iteration
  int copies = 0;         // copies and memsets per iteration
  int unattributed = 0;   // records per iteration not tied to a step
};

struct OpTypeProfile {
  std::string op_type;
  int nodes = 0;
  double ms = 0, share = 0, flops = 0, bytes = 0;
};

struct Analysis {
  std::vector<NodeProfile> nodes;      // by step
  std::vector<KernelProfile> kernels;  // in launch order
  std::vector<ModeSummary> modes;
  std::vector<OpTypeProfile> op_types;  // by time, descending
  double node_ms = 0;                   // the nodes' medians, summed
  Cost total_cost;
  int iterations = 0;
};

/// GEMM-like ops run on tensor cores (their compute peak is the precision's GEMM peak); the rest
/// are measured against the fp32 (CUDA-core) peak.
bool tensor_core_op(const std::string& op_type);

/// `float32_storage`: what float32 tensors are stored as where the run happened (the cost's bytes).
Analysis analyze(const Collected& c, const Peaks& peaks, Precision precision, DType float32_storage);

}  // namespace fusec::profiler
