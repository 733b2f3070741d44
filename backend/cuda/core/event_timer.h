// Two CUDA events around what a callable enqueues on a stream: how the tuners time a round, the
// profiler an iteration and the peak probes a call.
#pragma once
#include <cuda_runtime_api.h>

#include "backend/cuda/core/check.h"

namespace fusec::cuda {

class EventTimer {
 public:
  EventTimer() {
    FUSEC_CUDA_CHECK(cudaEventCreate(&start_));
    FUSEC_CUDA_CHECK(cudaEventCreate(&stop_));
  }
  ~EventTimer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;

  /// Milliseconds between the events recorded before and after f() on stream s; waits for them.
  template <typename F>
  float time_ms(cudaStream_t s, F&& f) {
    FUSEC_CUDA_CHECK(cudaEventRecord(start_, s));
    f();
    FUSEC_CUDA_CHECK(cudaEventRecord(stop_, s));
    FUSEC_CUDA_CHECK(cudaEventSynchronize(stop_));
    float ms = 0;
    FUSEC_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    return ms;
  }
  /// The event recorded before the last timed call (the profiler's clock origin).
  cudaEvent_t start() const { return start_; }

 private:
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

}  // namespace fusec::cuda
