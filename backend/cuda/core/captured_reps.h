// How the tuners (conv_tune.cpp, gemm_op.cpp, attention_tune.cpp) time a candidate as the model's
// CUDA graph runs it: its timed repetitions are captured once into a graph and replayed behind a
// hold kernel (gpu_hold.cuh), so the events measure the GPU alone. Launched one by one, a library
// call's host time can exceed its GPU time (cuDNN's fused conv, cuBLASLt's small GEMMs), and the
// candidate then times slower than it runs in the model. A candidate whose calls cannot be
// captured is timed on the stream behind the hold instead, and so is one whose calls launch more
// than a few kernels each. Instantiating a graph grows faster than its nodes: tuning SSDlite's
// depthwise convs at fp32 took 4.7 s at 64 channels and 30 s at 120, and at 240 a build sat in
// cudaGraphInstantiate for minutes (backtraces of the stalled build, H100, 2026-12-07). Timed on
// the stream, such a candidate pays for its launches and loses to one that makes a kernel or two.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "backend/cuda/core/build_trace.h"
#include "backend/cuda/core/event_timer.h"
#include "backend/cuda/core/gpu_hold.cuh"

namespace fusec::cuda {

/// Captures calls() on stream into a graph, running nothing; null where the capture failed or
/// calls() returned false (a call refused), else the graph (the caller destroys it) and its node
/// count in *nodes. The error a refused or invalidated capture leaves behind is cleared.
template <typename Calls>
cudaGraph_t capture_graph(cudaStream_t stream, Calls&& calls, size_t* nodes) {
  *nodes = 0;
  if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  const bool called = calls();
  cudaGraph_t graph = nullptr;
  const bool ok = cudaStreamEndCapture(stream, &graph) == cudaSuccess && graph && called &&
                  cudaGraphGetNodes(graph, nullptr, nodes) == cudaSuccess;
  if (!ok && graph) cudaGraphDestroy(graph);
  cudaGetLastError();  // a call refused inside the capture leaves its error behind
  return ok ? graph : nullptr;
}

/// A candidate's timed reps as one CUDA graph, or nothing where its calls cannot be captured.
class CapturedReps {
 public:
  CapturedReps() = default;
  CapturedReps(const CapturedReps&) = delete;
  CapturedReps& operator=(const CapturedReps&) = delete;
  CapturedReps(CapturedReps&& o) noexcept : exec_(o.exec_) { o.exec_ = nullptr; }
  CapturedReps& operator=(CapturedReps&&) = delete;
  ~CapturedReps() {
    if (exec_) cudaGraphExecDestroy(exec_);
  }

  /// Captures calls() on stream. calls() returns false where a call was refused: then nothing is
  /// kept, as when the capture itself fails or holds more than max_nodes nodes.
  template <typename Calls>
  void capture(cudaStream_t stream, size_t max_nodes, Calls&& calls) {
    size_t nodes = 0;
    cudaGraph_t graph = capture_graph(stream, calls, &nodes);
    if (!graph) return;
    if (nodes > max_nodes)
      BuildTrace::add("capture too large", std::to_string(nodes) + " nodes",
                      "more than " + std::to_string(max_nodes) + ": timed on the stream", 0);
    else if (cudaGraphInstantiate(&exec_, graph, 0) != cudaSuccess) {
      if (exec_) cudaGraphExecDestroy(exec_);
      exec_ = nullptr;
    }
    cudaGraphDestroy(graph);
    cudaGetLastError();
  }
  /// Launches the graph; false when there is none (the caller runs the calls on the stream).
  bool replay(cudaStream_t stream) const { return exec_ && cudaGraphLaunch(exec_, stream) == cudaSuccess; }

 private:
  cudaGraphExec_t exec_ = nullptr;
};

/// The kernels (graph nodes) one call() launches, counted by capturing it without running it; -1
/// where it cannot be captured or call() refused. The conv tuner asks after a candidate's first
/// call: cuDNN's grouped algorithms at float32 launch kernels per group (thousands a call in
/// SSDlite's depthwise convs), and timing such a candidate costs the build more than timing every
/// other one.
template <typename Call>
long kernels_per_call(cudaStream_t stream, Call&& call) {
  size_t nodes = 0;
  cudaGraph_t graph = capture_graph(stream, call, &nodes);
  if (!graph) return -1;
  cudaGraphDestroy(graph);
  return static_cast<long>(nodes);
}

/// How many calls a timed round makes, how many rounds, and the hold before each.
struct TimingPlan {
  int reps = 10;
  int rounds = 3;
  int hold_us = 400;
  /// One untimed call before each capture and one untimed replay before each round's hold: the
  /// conv tuner's candidates change library state when selected (algorithm, workspace), and the
  /// first call after that is not the one to time.
  bool warm_each_round = false;
  /// The most kernels (graph nodes) one call may launch and still be captured; 0: no bound.
  int max_nodes_per_call = 16;
};

/// Times candidates 0..ms.size()-1 as every tuner does: each candidate's plan.reps calls are
/// captured once, then plan.rounds rounds take the candidates in turn (so that a disturbance, a
/// clock change or another process, does not decide one candidate's time alone), each replaying
/// the calls behind a hold kernel; a candidate keeps its best round, in ms per call.
/// On entry ms[i] < 0 leaves candidate i out (it failed its warm-up); on return it is the time, or
/// -1 where a call failed in a round. select(i) runs before candidate i is captured or timed,
/// outside both; call(i) makes one call and returns false when it was refused.
template <typename Select, typename Call>
void time_candidates(cudaStream_t stream, std::vector<float>& ms, const TimingPlan& plan, Select&& select,
                     Call&& call) {
  const size_t n = ms.size();
  auto reps = [&](size_t i) {
    for (int k = 0; k < plan.reps; ++k)
      if (!call(i)) return false;
    return true;
  };
  std::vector<CapturedReps> captured(n);
  for (size_t i = 0; i < n; ++i) {
    if (ms[i] < 0) continue;
    select(i);
    if (plan.warm_each_round) call(i);
    const size_t max_nodes =
        plan.max_nodes_per_call > 0 ? static_cast<size_t>(plan.reps * plan.max_nodes_per_call) : SIZE_MAX;
    captured[i].capture(stream, max_nodes, [&] { return reps(i); });
    ms[i] = 0;  // not timed yet
  }
  EventTimer timer;
  for (int round = 0; round < plan.rounds; ++round)
    for (size_t i = 0; i < n; ++i) {
      if (ms[i] < 0) continue;
      select(i);
      if (plan.warm_each_round && !captured[i].replay(stream)) call(i);
      launch_gpu_hold(stream, plan.hold_us);
      bool ok = true;
      const float t =
          timer.time_ms(stream, [&] { ok = captured[i].replay(stream) || reps(i); }) / static_cast<float>(plan.reps);
      if (!ok)
        ms[i] = -1.0f;
      else if (ms[i] == 0 || t < ms[i])
        ms[i] = t;
    }
}

}  // namespace fusec::cuda
