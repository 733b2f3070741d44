// How the tuners (conv_tune.cpp, gemm_op.cpp) time a candidate as the model's CUDA graph runs it:
// its timed repetitions are captured once into a graph and replayed behind a hold kernel
// (gpu_hold.cuh), so the events measure the GPU alone. Launched one by one, a library call's host
// time can exceed its GPU time (cuDNN's fused conv, cuBLASLt's small GEMMs), and the candidate
// then times slower than it runs in the model. A candidate whose calls cannot be captured is
// timed on the stream behind the hold instead.
#pragma once
#include <cuda_runtime_api.h>

namespace fusec::cuda {

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
  /// kept, as when the capture itself fails.
  template <typename Calls>
  void capture(cudaStream_t stream, Calls&& calls) {
    if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
      cudaGetLastError();
      return;
    }
    const bool called = calls();
    cudaGraph_t graph = nullptr;
    const bool ok = cudaStreamEndCapture(stream, &graph) == cudaSuccess && graph && called &&
                    cudaGraphInstantiate(&exec_, graph, 0) == cudaSuccess;
    if (graph) cudaGraphDestroy(graph);
    if (!ok) {
      if (exec_) cudaGraphExecDestroy(exec_);
      exec_ = nullptr;
    }
    cudaGetLastError();  // a call refused inside the capture leaves its error behind
  }
  /// Launches the graph; false when there is none (the caller runs the calls on the stream).
  bool replay(cudaStream_t stream) const { return exec_ && cudaGraphLaunch(exec_, stream) == cudaSuccess; }

 private:
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace fusec::cuda
