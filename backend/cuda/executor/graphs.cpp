// CUDA graph capture. A plan's launches and addresses are fixed, so after the first run launch()
// records them once and replays them; a capture that fails turns graphs off for this plan with
// the reason in graph_status() rather than failing the run.
#include <cuda_runtime_api.h>

#include <string>

#include "backend/cuda/core/check.h"
#include "backend/cuda/executor/executable.h"
#include "ir/error.h"

namespace fusec::cuda::executor {

void Impl::capture() {
  Stream stream = ctx_.stream();
  cudaGraph_t graph = nullptr;
  FUSEC_CUDA_CHECK(cudaStreamSynchronize(stream));
  cudaError_t err = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
  std::string why;
  if (err == cudaSuccess) {
    try {
      run_steps();
    } catch (const Error& e) {
      why = e.what();
    }
    err = cudaStreamEndCapture(stream, &graph);
    if (err != cudaSuccess && why.empty()) why = cudaGetErrorString(err);
  } else {
    why = cudaGetErrorString(err);
  }
  if (why.empty() && graph) {
    err = cudaGraphInstantiate(&graph_exec_, graph, 0);
    if (err != cudaSuccess) {
      why = std::string("instantiate: ") + cudaGetErrorString(err);
      graph_exec_ = nullptr;
    }
  }
  if (graph) cudaGraphDestroy(graph);
  cudaGetLastError();
  if (!why.empty()) {
    capture_allowed_ = false;
    graph_status_ = "off: capture failed (" + why + ")";
  }
}

void Impl::release_graph() {
  if (graph_exec_) cudaGraphExecDestroy(graph_exec_);
  graph_exec_ = nullptr;
}

}  // namespace fusec::cuda::executor
