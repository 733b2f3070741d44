// A small persistent thread pool: Conv/GEMM and large elementwise loops split their range over
// all cores. One pool per process; nested parallel_for calls run serially.
#pragma once
#include <cstdint>
#include <functional>

namespace fusec::cpu {

/// Number of worker threads (hardware concurrency, or FUSEC_NUM_THREADS).
int num_threads();
/// Calls fn(begin, end) on disjoint chunks covering [0, n), in parallel when n >= min_chunk * 2.
void parallel_for(int64_t n, int64_t min_chunk, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace fusec::cpu
