// The GPU backend as the rest of fusec sees it: an interface with no CUDA type in it, implemented
// by libfusec_cuda.so (backend/cuda/plugin.cpp) and loaded on first use. fusec itself links no
// CUDA library, so `fusec --version`, `inspect` and CPU runs start without loading cuDNN, cuBLASLt,
// NVRTC and CUPTI (about 250 MiB), and work on a machine that has none of them.
//
// The plugin resolves fusec's own symbols (the IR, the CPU reference it falls back on, errors)
// from the executable, which exports them; it carries only the CUDA backend and its profiler.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/precision.h"
#include "profiler/collect.h"
#include "profiler/counters.h"
#include "profiler/profile.h"

namespace fusec {

struct GpuOptions {
  int device = 0;
  Precision precision = Precision::FP32;
  bool cuda_graph = true;        // capture after the first run and replay
  bool strict = false;           // a node without a GPU kernel is an error instead of a CPU fallback
  size_t max_device_memory = 0;  // 0: the GPU's free memory is the limit
};

struct GpuDevice {
  std::string name;
  int sm_major = 0, sm_minor = 0;
  int multiprocessors = 0;
  size_t memory_bytes = 0;
};

/// NodePlacement::kernel of a node in the host tail: run on the CPU reference after the GPU part,
/// because its shapes, or its inputs', depend on data the plan does not have.
inline constexpr const char* kHostTailKernel = "cpu reference (host tail)";

/// Where one node of a GPU plan runs.
struct NodePlacement {
  std::string node, op_type;
  bool on_gpu = true;
  bool folded = false;  // computed once at plan time (every input constant, or only dims read)
  std::string kernel;   // what runs it ("cuBLASLt GEMM", "NVRTC elementwise", "view", ...)
  std::string reason;   // for CPU nodes: why no GPU kernel took it
  std::string device_decision;  // the parts kept over a slower one-kernel candidate (CudaOp::device_decision)
  bool float32 = false;         // kept in float32 at fp16/bf16/tf32 (backend/float32_island.h)
};

struct DeviceMemoryStats {
  size_t arena_bytes = 0;      // activations (memory planner)
  size_t weight_bytes = 0;     // initializers in run precision
  size_t workspace_bytes = 0;  // shared library/kernel scratch
  size_t io_bytes = 0;         // graph input and output buffers
};

/// A model compiled for the GPU: what bench and profile drive beyond Executable::run.
class GpuExecutable : public Executable {
 public:
  ~GpuExecutable() override;

  /// Copies `inputs` to the device buffers; launch() then runs on them with no host copy.
  virtual void upload_inputs(const std::vector<Tensor>& inputs) = 0;
  /// Enqueues one run (a CUDA-graph replay once captured).
  virtual void launch() = 0;
  /// Enqueues one run as separate launches, never a graph (what the counters' replay must see).
  virtual void launch_uncaptured() = 0;
  virtual std::vector<Tensor> download_outputs() = 0;
  /// Waits for everything enqueued.
  virtual void synchronize() = 0;
  /// Milliseconds of one launch() between two device events, waited for.
  virtual double timed_launch_ms() = 0;

  virtual const std::vector<NodePlacement>& placement() const = 0;
  virtual std::string graph_status() const = 0;
  virtual DeviceMemoryStats device_memory() const = 0;
  virtual Precision precision() const = 0;
};

struct GpuRunSettings : profiler::RunSettings {
  bool graph = true;   // profile CUDA-graph replay (when the executable can capture) as the primary mode
  bool stream = true;  // profile separate launches too
};

class GpuPlugin {
 public:
  virtual ~GpuPlugin();

  /// False, with the reason, when there is no usable GPU (no driver, no device, ...).
  virtual bool gpu_available(std::string* why) = 0;
  virtual std::vector<GpuDevice> devices() = 0;
  virtual std::unique_ptr<Backend> make_backend(const GpuOptions& o) = 0;
  /// Bytes of device memory in use on the current device (0 when unknown).
  virtual size_t device_used_bytes() = 0;

  /// The profiler's GPU side: each mode's iterations with events around each, CUPTI's records.
  /// `exe` must not have been launched yet. BadInput when CUPTI cannot be used.
  virtual profiler::Collected profile(GpuExecutable& exe, const std::vector<Tensor>& inputs,
                                      const GpuRunSettings& s) = 0;
  /// The peaks' cache key of GPU `device`, and a measurement of them.
  virtual std::string peaks_key(int device) = 0;
  virtual profiler::Peaks measure_peaks(int device) = 0;
  /// CUPTI's, the CUDA runtime's and the driver's versions, for a report's build section.
  virtual std::vector<std::pair<std::string, std::string>> versions() = 0;
  /// Hardware counters of every kernel of one uncaptured launch of `exe`.
  virtual std::vector<profiler::KernelCounters> collect_counters(GpuExecutable& exe, int device) = 0;
  virtual const std::vector<std::string>& counter_metric_names() = 0;
};

/// The CUDA backend, loaded from libfusec_cuda.so on first use ($FUSEC_CUDA_PLUGIN, else beside
/// the executable, else ../lib/). Null, with why, when this fusec was built without it or it
/// cannot be loaded (the CUDA libraries it needs are missing).
GpuPlugin* gpu_plugin(std::string* why = nullptr);

/// Whether this fusec was built with the CUDA backend (whether or not it can be loaded here).
bool gpu_backend_built();

/// The ops the CUDA backend has a kernel family for, as (domain, op_type) with "" for ai.onnx;
/// known without loading the plugin (inspect lists the nodes that would run on the CPU). The GPU
/// suite checks this table against the CUDA backend's registry.
const std::vector<std::pair<std::string, std::string>>& gpu_kernel_families();
bool gpu_has_kernel_family(const std::string& domain, const std::string& op_type);

}  // namespace fusec
