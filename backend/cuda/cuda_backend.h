// The CUDA backend: plans a graph onto one GPU (a kernel per node, or the CPU reference with
// explicit copies where no CUDA kernel fits), places every intermediate in one arena sized by the
// shared memory planner, and runs the plan on one stream, replayed as a CUDA graph after the
// first run.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/core/context.h"
#include "backend/precision.h"

namespace fusec::cuda {

struct CudaOptions {
  int device = 0;
  Precision precision = Precision::FP32;
  bool cuda_graph = true;  // capture after the first run and replay (--cuda-graph off disables)
  bool strict = false;     // a node without a CUDA kernel is an error instead of a CPU fallback
  bool channels_last = true;  // NHWC conv regions at fp16/bf16/tf32 (FUSEC_CHANNELS_LAST=0 disables)
  /// The most device memory one compiled model may hold (--max-device-memory); 0: the GPU's free
  /// memory is the only limit. Checked before planning and before allocating (device_memory.h).
  size_t max_device_memory = 0;
  /// Reuse this context (device, stream, library handles) instead of creating one per model:
  /// tests and the conformance runner compile thousands of small models.
  std::shared_ptr<Context> context;
};

/// Where one node runs and why.
struct NodePlacement {
  std::string node, op_type;
  bool on_gpu = true;
  bool folded = false;  // computed once at plan time (every input constant, or only dims read)
  std::string kernel;  // what runs it ("cuBLASLt GEMM", "NVRTC elementwise", "view", ...)
  std::string reason;  // for CPU nodes: why no CUDA kernel took it
};

struct DeviceMemoryStats {
  size_t arena_bytes = 0;      // activations (memory planner)
  size_t weight_bytes = 0;     // initializers in run precision
  size_t workspace_bytes = 0;  // shared library/kernel scratch
  size_t io_bytes = 0;         // graph input and output buffers
};

class CudaExecutable : public Executable {
 public:
  ~CudaExecutable() override = default;
  /// Host inputs in, host outputs out (ONNX dtypes; precision casts happen on the device).
  std::vector<Tensor> run(const std::vector<Tensor>& inputs) override = 0;

  // Device-resident path for bench/profile: upload once, launch many times, fetch once.
  virtual void upload_inputs(const std::vector<Tensor>& inputs) = 0;
  /// Enqueues one whole run on stream() (a CUDA-graph replay once captured). Does not wait.
  virtual void launch() = 0;
  /// Enqueues one whole run as separate launches, neither replaying nor capturing a CUDA graph
  /// (the profiler's stream mode). Does not wait.
  virtual void launch_uncaptured() = 0;
  virtual std::vector<Tensor> download_outputs() = 0;
  virtual Stream stream() const = 0;
  virtual Context& context() = 0;

  /// Per node, in execution order (valid after the first upload/run for models whose shapes are
  /// only known from the inputs).
  virtual const std::vector<NodePlacement>& placement() const = 0;
  /// "on", "off (--cuda-graph off)" or "off: <why capture failed>".
  virtual std::string graph_status() const = 0;
  virtual DeviceMemoryStats device_memory() const = 0;
  virtual Precision precision() const = 0;
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
