// --counters on the host side: what one kernel's hardware counters are (profiler/cuda/counters.cpp
// reads them through CUPTI, in the GPU plugin), and how they are joined to the profiled kernels.
#pragma once
#include <string>
#include <vector>

#include "profiler/profile.h"
#include "profiler/report.h"

namespace fusec::profiler {

struct KernelCounters {
  std::string kernel;              // function name from the launch, demangled; empty if unknown
  double dram_read_bytes = 0;      // dram__bytes_read.sum
  double dram_write_bytes = 0;     // dram__bytes_write.sum
  double duration_ns = 0;          // gpu__time_duration.sum, measured in a replay pass
  double sm_throughput_pct = 0;    // sm__throughput.avg.pct_of_peak_sustained_elapsed
  double dram_throughput_pct = 0;  // gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed
  double tensor_pipe_pct = 0;      // sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active
};

/// The counters of one uncaptured launch, matched by launch order to the kernels of the first
/// stream-mode iteration of `c` (analyzed as `an`). When the counts differ the rows are listed
/// without attribution, and `error` says so.
CountersSection attribute_counters(const Collected& c, const Analysis& an, const std::vector<std::string>& metrics,
                                   const std::vector<KernelCounters>& kc);

}  // namespace fusec::profiler
