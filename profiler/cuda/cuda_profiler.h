// The GPU half of `fusec profile`: CUPTI activity records of every kernel, copy and memset a run
// enqueues (the ones inside cuDNN and cuBLASLt included), attributed to the plan's steps, in two
// modes: CUDA-graph replay (what `run` and `bench` time) and separate launches on the stream.
//
// Attribution: while a step is launched, a CUPTI API callback notes the correlation id of every
// runtime and driver call made (cuDNN's and cuBLASLt's own launches included) under the tag
// (mode, iteration, step); each kernel, copy and memset record carries the correlation id of the
// call that launched it. A graph replay is a single API call, so its records carry the graph node
// that launched them too: the profiler watches the graph being captured (CUPTI
// resource callbacks name each node created while a step is launched) and instantiated (each node
// cloned into the executable graph keeps its original's step).
#pragma once
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/gpu_plugin.h"
#include "profiler/collect.h"
#include "profiler/profile.h"

namespace fusec::profiler {

using CudaRunSettings = GpuRunSettings;

/// `exe` must not have been launched yet (its graph is captured under the profiler). Uploads
/// `inputs`, warms up, and runs each mode's iterations with CUDA events around each.
/// BadInput (exit 2) with one sentence when CUPTI cannot be used.
Collected profile_cuda(cuda::CudaExecutable& exe, const std::vector<Tensor>& inputs, const CudaRunSettings& s);

/// Runs `work` with the step observer attached (for --counters' kernel replay, which must see the
/// same launches as a stream-mode run).
void with_observer(cuda::CudaExecutable& exe, StepObserver* obs, const std::function<void()>& work);

/// "cuda: <name> <uuid>": the GPU peaks' cache key (the same model of GPU in another machine may
/// be clocked differently, so peaks are per physical device).
std::string cuda_device_key(int device);
/// Bandwidth from a 1 GiB device-to-device copy, FLOP/s from cuBLASLt GEMMs (fp32 and tf32
/// 4096³, fp16 and bf16 8192³) on random data; each the median of timed repetitions.
Peaks measure_cuda_peaks(cuda::Context& ctx);

/// CUPTI's version and the CUDA runtime's and driver's, for the report's build section.
std::vector<std::pair<std::string, std::string>> cuda_versions();

}  // namespace fusec::profiler
