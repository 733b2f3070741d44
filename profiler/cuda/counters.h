// Per-kernel hardware counters for `fusec profile --counters`: CUPTI's Range Profiler (CUDA 12.6+,
// cupti_range_profiler.h) with automatic ranges (one per kernel launch) and kernel replay (CUPTI
// re-runs each kernel once per counter pass, saving and restoring device memory around it). Kept
// apart from the timing collector: replay serializes and slows kernels, so counters come from their
// own run of the model, never from the timed one.
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "ir/error.h"
#include "profiler/counters.h"

namespace fusec::profiler {

struct CounterOptions {
  int device = 0;
  size_t max_kernels = 4096;  // ranges CUPTI keeps; launches past this are not measured
};

/// Runs `work` once under CUPTI's range profiler with kernel replay and automatic ranges, and
/// returns one entry per kernel `work` launched, in launch order (at most opts.max_kernels).
/// `work` must launch its kernels on the current device (made opts.device for the call, restored
/// after), without CUDA-graph replay, and must be safe to run once; it is synchronized before the
/// counters are read. Not re-entrant: concurrent calls are serialized.
/// Throws fusec::Error of kind Environment (BadInput while ir/error.h has no such kind), in one
/// sentence naming the CUPTI call and its result, when there is no usable GPU, CUPTI cannot be
/// loaded or initialized, the device cannot be profiled, or counters are not permitted for this
/// user (then it says how an administrator allows them); Internal when CUPTI rejects how fusec
/// called it. Errors from `work` itself propagate unchanged, after profiling is torn down.
/// Kernel names come from a CUPTI callback subscription; when another CUPTI client already holds
/// the (single) subscription, the counters are still collected and `kernel` is left empty.
std::vector<KernelCounters> collect_counters(const std::function<void()>& work, const CounterOptions& opts = {});

/// The metric names collect_counters asks for, in KernelCounters' field order (for the report).
const std::vector<std::string>& counter_metric_names();

namespace detail {  // pieces with no GPU in them, exposed for tests

/// The error collect_counters throws when `call` returns `cupti_result`.
Error counter_error(const std::string& call, int cupti_result);

/// Names for `num_ranges` profiled ranges from the kernels seen launching, in order. Ranges and
/// launches pair up by position as long as no range lacks a launch; otherwise every name is left
/// empty rather than risk a shifted (wrong) attribution.
std::vector<std::string> names_for_ranges(const std::vector<std::string>& launched, size_t num_ranges);

/// `_Z4axpyPfS_` -> `axpy(float*, float*)`; any other name (extern "C", not demangleable) as is.
std::string demangle(const char* name);

}  // namespace detail

}  // namespace fusec::profiler
