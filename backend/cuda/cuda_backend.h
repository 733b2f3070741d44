// The CUDA backend: plans a graph onto one GPU (a kernel per node, or the CPU reference with
// explicit copies where no CUDA kernel fits), places every intermediate in one arena sized by the
// shared memory planner, and runs the plan on one stream, replayed as a CUDA graph after the
// first run.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/gpu_plugin.h"
#include "backend/cuda/core/context.h"
#include "backend/precision.h"

namespace fusec::cuda {

struct CudaOptions {
  int device = 0;
  Precision precision = Precision::FP32;
  bool cuda_graph = true;     // capture after the first run and replay (--cuda-graph off disables)
  bool strict = false;        // a node without a CUDA kernel is an error instead of a CPU fallback
  bool channels_last = true;  // NHWC conv regions at fp16/bf16/tf32 (FUSEC_CHANNELS_LAST=0 disables)
  /// The most device memory one compiled model may hold (--max-device-memory); 0: the GPU's free
  /// memory is the only limit. Checked before planning and before allocating (device_memory.h).
  size_t max_device_memory = 0;
  /// Reuse this context (device, stream, library handles) instead of creating one per model:
  /// tests and the conformance runner compile thousands of small models.
  std::shared_ptr<Context> context;
};

/// A GpuExecutable with its CUDA stream and context, for code inside the CUDA backend (the
/// profiler's CUPTI side, tests).
class CudaExecutable : public GpuExecutable {
 public:
  ~CudaExecutable() override = default;
  virtual Stream stream() const = 0;
  virtual Context& context() = 0;
};

class CudaBackend : public Backend {
 public:
  explicit CudaBackend(CudaOptions opts = {});
  std::string name() const override { return "cuda"; }
  std::vector<UnsupportedNode> unsupported(const Graph& g) const override;
  std::unique_ptr<Executable> compile(const Graph& g) override { return compile_cuda(g); }
  /// The model's device memory (estimated from its shapes) against the GPU's free memory and
  /// max_device_memory; BadInput naming both when it does not fit.
  void check_memory(const Graph& g) const override;
  std::unique_ptr<CudaExecutable> compile_cuda(const Graph& g);
  const CudaOptions& options() const { return opts_; }

 private:
  CudaOptions opts_;
};

}  // namespace fusec::cuda
