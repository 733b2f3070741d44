// The CUDA backend behind fusec's GpuPlugin interface (backend/gpu_plugin.h): the one entry point
// of libfusec_cuda.so.
#include <cuda_runtime_api.h>

#include "backend/cuda/core/check.h"
#include "backend/cuda/core/context.h"
#include "backend/cuda/core/device_info.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/gpu_plugin.h"
#include "ir/error.h"
#include "profiler/cuda/counters.h"
#include "profiler/cuda/cuda_profiler.h"

namespace fusec::cuda {

namespace {

CudaExecutable& cuda_executable(GpuExecutable& exe) {
  auto* ce = dynamic_cast<CudaExecutable*>(&exe);
  if (!ce) internal_error("a GPU executable that the CUDA backend did not compile");
  return *ce;
}

class CudaPlugin final : public GpuPlugin {
 public:
  bool gpu_available(std::string* why) override { return cuda::gpu_available(why); }

  std::vector<GpuDevice> devices() override {
    std::vector<GpuDevice> out;
    for (const DeviceInfo& d : list_devices())
      out.push_back({d.name, d.sm_major, d.sm_minor, d.multiprocessors, d.total_memory});
    return out;
  }

  std::unique_ptr<Backend> make_backend(const GpuOptions& o) override {
    CudaOptions co;
    co.device = o.device;
    co.precision = o.precision;
    co.cuda_graph = o.cuda_graph;
    co.strict = o.strict;
    co.max_device_memory = o.max_device_memory;
    return std::make_unique<CudaBackend>(co);
  }

  size_t device_used_bytes() override {
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return 0;
    return total_b - free_b;
  }

  profiler::Collected profile(GpuExecutable& exe, const std::vector<Tensor>& inputs, const GpuRunSettings& s) override {
    return profiler::profile_cuda(cuda_executable(exe), inputs, s);
  }

  std::string peaks_key(int device) override { return profiler::cuda_device_key(device); }

  profiler::Peaks measure_peaks(int device) override {
    Context ctx(device);
    return profiler::measure_cuda_peaks(ctx);
  }

  std::vector<std::pair<std::string, std::string>> versions() override { return profiler::cuda_versions(); }

  std::vector<profiler::KernelCounters> collect_counters(GpuExecutable& exe, int device) override {
    CudaExecutable& ce = cuda_executable(exe);
    return profiler::collect_counters(
        [&] {
          ce.launch_uncaptured();
          ce.synchronize();
        },
        profiler::CounterOptions{device});
  }

  const std::vector<std::string>& counter_metric_names() override { return profiler::counter_metric_names(); }
};

}  // namespace

}  // namespace fusec::cuda

extern "C" __attribute__((visibility("default"))) fusec::GpuPlugin* fusec_cuda_plugin() {
  static fusec::cuda::CudaPlugin plugin;
  return &plugin;
}
