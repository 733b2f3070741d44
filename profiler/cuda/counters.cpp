// Hardware counters per kernel through CUPTI's Range Profiler (cupti_range_profiler.h, target side)
// and Profiler Host API (cupti_profiler_host.h: config image, metric evaluation). CUDA 13 deprecates
// the older cupti_profiler_target.h session API and drops the NVPW metrics-context calls it needed,
// so this is the one path that works there; both APIs live in libcupti, which loads
// libnvperf_host/target itself at run time.
//
//   setup   cuptiProfilerInitialize -> DeviceSupported -> chip name + counter availability
//           -> host object: metrics -> config image           (what to count, how many passes)
//   target  RangeProfilerEnable(ctx) -> counter data image -> SetConfig(AutoRange, KernelReplay)
//   run     Start -> work() -> sync -> Stop -> DecodeData     (CUPTI replays each kernel per pass)
//   read    GetCounterDataInfo -> EvaluateToGpuValues per range (one range = one kernel launch)
//
// Auto ranges carry no kernel names (CUPTI numbers them), so a callback on the driver's launch
// calls records the names in launch order, and ranges take them by position.
#include "profiler/cuda/counters.h"

#include <cuda_runtime_api.h>
#include <cupti_callbacks.h>
#include <cupti_driver_cbid.h>
#include <cupti_profiler_host.h>
#include <cupti_profiler_target.h>
#include <cupti_range_profiler.h>
#include <cupti_result.h>
#include <cupti_target.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <mutex>

#include "backend/cuda/core/check.h"

namespace fusec::profiler {

namespace {

// One table ties each metric to its field; names chosen for Hopper (sm_90).
// sm__pipe_tensor_cycles_active counts cycles of every tensor-pipe op: the warpgroup HGMMA/QGMMA
// that cuBLASLt and cuDNN issue on sm_90 as well as HMMA/IMMA/DMMA (..._op_hmma_... would leave
// out int8 and fp64); .pct_of_peak_sustained_active is relative to the cycles the SMs were
// active, as ncu's pipe utilization, so idle SMs do not dilute it.
// gpu__dram_throughput is the DRAM share of the memory subsystem's peak, as ncu's Speed Of Light.
struct Metric {
  const char* name;
  double KernelCounters::*field;
};
const Metric kMetrics[] = {
    {"dram__bytes_read.sum", &KernelCounters::dram_read_bytes},
    {"dram__bytes_write.sum", &KernelCounters::dram_write_bytes},
    {"gpu__time_duration.sum", &KernelCounters::duration_ns},
    {"sm__throughput.avg.pct_of_peak_sustained_elapsed", &KernelCounters::sm_throughput_pct},
    {"gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", &KernelCounters::dram_throughput_pct},
    {"sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active", &KernelCounters::tensor_pipe_pct},
};

// ir/error.h is gaining ErrorKind::Environment (exit code for "this machine cannot do it"); until
// it has it, such errors are BadInput, as backend/cuda/core/check.cpp reports a missing GPU.
template <typename K = ErrorKind>
constexpr K environment_kind() {
  if constexpr (requires { K::Environment; })
    return K::Environment;
  else
    return K::BadInput;
}

std::string result_name(CUptiResult r) {
  const char* s = nullptr;
  if (cuptiGetResultString(r, &s) != CUPTI_SUCCESS || !s) return "CUPTI error " + std::to_string(static_cast<int>(r));
  return s;
}

void check(CUptiResult r, const char* call) {
  if (r != CUPTI_SUCCESS) throw detail::counter_error(call, r);
}
#define FUSEC_CUPTI(fn, params) check(fn(params), #fn)

// Every CUPTI parameter struct starts with its size (CUPTI's version check) and must be zero beyond.
template <typename P>
P zeroed_params(size_t struct_size) {
  P p{};
  p.structSize = struct_size;
  return p;
}
#define FUSEC_CUPTI_PARAMS(Type) zeroed_params<Type>(Type##_STRUCT_SIZE)

// Runs its callable at scope exit: CUPTI's objects have C interfaces and must be torn down in
// reverse order even when `work` throws.
template <typename F>
struct Defer {
  F f;
  ~Defer() { f(); }
};
template <typename F>
Defer(F) -> Defer<F>;

[[noreturn]] void no_gpu(const std::string& what) {
  cudaGetLastError();
  throw Error(environment_kind(), "no usable GPU for hardware counters: " + what);
}

// Driver API through cudart's entry-point lookup: fusec never links libcuda (CI has no driver).
template <typename Fn>
Fn driver_fn(const char* name) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found{};
  cudaError_t err = cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &found);
  if (err != cudaSuccess || found != cudaDriverEntryPointSuccess || !p)
    no_gpu(std::string("the CUDA driver does not provide ") + name + " (" + cudaGetErrorString(err) + ")");
  return reinterpret_cast<Fn>(p);
}

// Kernel names in launch order, from the driver's launch calls (cudart's and cuBLAS's launches end
// there too). Written from whichever thread launches, hence the lock.
struct Launches {
  std::mutex mu;
  std::vector<std::string> names;
};

void CUPTIAPI on_launch(void* user, CUpti_CallbackDomain domain, CUpti_CallbackId, const void* data) {
  const auto* cb = static_cast<const CUpti_CallbackData*>(data);
  if (domain != CUPTI_CB_DOMAIN_DRIVER_API || cb->callbackSite != CUPTI_API_ENTER) return;
  auto* l = static_cast<Launches*>(user);
  try {
    std::lock_guard lock(l->mu);
    l->names.emplace_back(cb->symbolName ? cb->symbolName : "");
  } catch (...) {  // never throw into the driver; a lost name only blanks the names (names_for_ranges)
  }
}

const CUpti_CallbackId kLaunchCallbacks[] = {
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz,
};

// Says which metric the chip lacks, when ConfigAddMetrics refused the set as a whole.
[[noreturn]] void throw_missing_metrics(CUpti_Profiler_Host_Object* host, const std::string& chip) {
  std::string missing;
  for (const Metric& m : kMetrics) {
    auto p = FUSEC_CUPTI_PARAMS(CUpti_Profiler_Host_GetMetricProperties_Params);
    p.pHostObject = host;
    p.pMetricName = m.name;
    if (cuptiProfilerHostGetMetricProperties(&p) != CUPTI_SUCCESS)
      missing += (missing.empty() ? "" : ", ") + std::string(m.name);
  }
  throw Error(environment_kind(), "GPU chip " + chip + " does not have the counters fusec reads (" +
                                      (missing.empty() ? std::string("one of them") : missing) +
                                      "; cuptiProfilerHostConfigAddMetrics returned CUPTI_ERROR_INVALID_METRIC_NAME)");
}

std::string support_problems(const CUpti_Profiler_DeviceSupported_Params& s) {
  std::string why;
  auto add = [&](CUpti_Profiler_Support_Level level, const char* what) {
    if (level == CUPTI_PROFILER_CONFIGURATION_UNSUPPORTED || level == CUPTI_PROFILER_CONFIGURATION_DISABLED)
      why += (why.empty() ? "" : ", ") + std::string(what);
  };
  add(s.architecture, "its architecture (counters need sm_70 or newer)");
  add(s.sli, "SLI");
  add(s.vGpu, "a vGPU without profiling enabled by its host");
  add(s.confidentialCompute, "confidential computing");
  add(s.cmp, "a crypto-mining (CMP) board");
  add(s.wsl, "WSL");
  return why.empty() ? "an unsupported configuration" : why;
}

}  // namespace

namespace detail {

Error counter_error(const std::string& call, int cupti_result) {
  auto r = static_cast<CUptiResult>(cupti_result);
  std::string what = "(" + call + " returned " + result_name(r) + ")";
  switch (r) {
    case CUPTI_ERROR_INSUFFICIENT_PRIVILEGES:
      return Error(environment_kind(),
                   "GPU performance counters are restricted to administrators on this machine " + what +
                       ": an administrator must allow them for all users (NVIDIA driver option "
                       "NVreg_RestrictProfilingToAdminUsers=0, see https://developer.nvidia.com/ERR_NVGPUCTRPERM), "
                       "or fusec must run as root");
    // Codes that mean fusec built the call wrongly: a bug here, not something the machine lacks.
    case CUPTI_ERROR_INVALID_PARAMETER:
    case CUPTI_ERROR_INVALID_OPERATION:
    case CUPTI_ERROR_PARAMETER_SIZE_NOT_SUFFICIENT:
    case CUPTI_ERROR_INVALID_HANDLE:
      return Error(ErrorKind::Internal, "hardware counter collection failed " + what);
    case CUPTI_ERROR_HARDWARE_BUSY:
      return Error(environment_kind(),
                   "the GPU's counters are in use by another profiler (Nsight Compute, "
                   "another fusec) " +
                       what);
    default:
      return Error(environment_kind(), "hardware counters are not available here " + what);
  }
}

std::vector<std::string> names_for_ranges(const std::vector<std::string>& launched, size_t num_ranges) {
  std::vector<std::string> names(num_ranges);
  // More launches than ranges is the max_kernels cut (CUPTI keeps the first ranges); fewer means a
  // range with no launch we saw, after which every position would be off by one.
  if (launched.size() < num_ranges) return names;
  for (size_t i = 0; i < num_ranges; ++i) names[i] = demangle(launched[i].c_str());
  return names;
}

std::string demangle(const char* name) {
  if (!name) return "";
  // Only function names: __cxa_demangle also reads type codes, so an extern "C" kernel `f` would
  // come back as "float".
  if (std::strncmp(name, "_Z", 2) != 0) return name;
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string out = (status == 0 && d) ? d : name;
  std::free(d);
  return out;
}

}  // namespace detail

const std::vector<std::string>& counter_metric_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const Metric& m : kMetrics) v.push_back(m.name);
    return v;
  }();
  return names;
}

std::vector<KernelCounters> collect_counters(const std::function<void()>& work, const CounterOptions& opts) {
  // One range-profiling session per context and one CUPTI subscriber per process: callers queue
  // here rather than fail half-way through CUPTI's setup.
  static std::mutex one_at_a_time;
  std::lock_guard serial(one_at_a_time);

  // ---- the device and its context ----
  int count = 0;
  if (cudaError_t err = cudaGetDeviceCount(&count); err != cudaSuccess) no_gpu(cudaGetErrorString(err));
  if (opts.device < 0 || opts.device >= count)
    no_gpu("device " + std::to_string(opts.device) + " does not exist (" + std::to_string(count) + " GPU(s))");
  int previous = opts.device;
  cudaGetDevice(&previous);
  Defer restore_device{[previous] { cudaSetDevice(previous); }};
  // cudaSetDevice makes the primary context current (CUDA 12+): that is the context fusec's
  // backend launches into, and the one the range profiler attaches to.
  if (cudaError_t err = cudaSetDevice(opts.device); err != cudaSuccess)
    no_gpu(std::string("cudaSetDevice: ") + cudaGetErrorString(err));
  CUcontext ctx = nullptr;
  CUdevice device = 0;
  if (driver_fn<decltype(&cuCtxGetCurrent)>("cuCtxGetCurrent")(&ctx) != CUDA_SUCCESS || !ctx)
    no_gpu("no current CUDA context after cudaSetDevice");
  if (driver_fn<decltype(&cuDeviceGet)>("cuDeviceGet")(&device, opts.device) != CUDA_SUCCESS)
    no_gpu("cuDeviceGet failed for device " + std::to_string(opts.device));

  // ---- setup: can this device be profiled, and how ----
  auto init = FUSEC_CUPTI_PARAMS(CUpti_Profiler_Initialize_Params);
  FUSEC_CUPTI(cuptiProfilerInitialize, &init);
  Defer deinit{[] {
    auto p = FUSEC_CUPTI_PARAMS(CUpti_Profiler_DeInitialize_Params);
    cuptiProfilerDeInitialize(&p);
  }};

  auto support = FUSEC_CUPTI_PARAMS(CUpti_Profiler_DeviceSupported_Params);
  support.cuDevice = device;
  support.api = CUPTI_PROFILER_RANGE_PROFILING;
  FUSEC_CUPTI(cuptiProfilerDeviceSupported, &support);
  if (support.isSupported != CUPTI_PROFILER_CONFIGURATION_SUPPORTED)
    throw Error(environment_kind(), "GPU " + std::to_string(opts.device) +
                                        " cannot be profiled with hardware counters (cuptiProfilerDeviceSupported: " +
                                        support_problems(support) + ")");

  auto chip = FUSEC_CUPTI_PARAMS(CUpti_Device_GetChipName_Params);
  chip.deviceIndex = static_cast<size_t>(opts.device);
  FUSEC_CUPTI(cuptiDeviceGetChipName, &chip);
  const std::string chip_name = chip.pChipName ? chip.pChipName : "";

  // Typically where ERR_NVGPUCTRPERM shows up: the first call that touches the counters.
  auto avail = FUSEC_CUPTI_PARAMS(CUpti_Profiler_GetCounterAvailability_Params);
  avail.ctx = ctx;
  FUSEC_CUPTI(cuptiProfilerGetCounterAvailability, &avail);
  std::vector<uint8_t> avail_image(avail.counterAvailabilityImageSize);
  avail.pCounterAvailabilityImage = avail_image.data();
  FUSEC_CUPTI(cuptiProfilerGetCounterAvailability, &avail);

  auto host_init = FUSEC_CUPTI_PARAMS(CUpti_Profiler_Host_Initialize_Params);
  host_init.profilerType = CUPTI_PROFILER_TYPE_RANGE_PROFILER;
  host_init.pChipName = chip_name.c_str();
  host_init.pCounterAvailabilityImage = avail_image.data();
  FUSEC_CUPTI(cuptiProfilerHostInitialize, &host_init);
  CUpti_Profiler_Host_Object* host = host_init.pHostObject;
  Defer host_deinit{[host] {
    auto p = FUSEC_CUPTI_PARAMS(CUpti_Profiler_Host_Deinitialize_Params);
    p.pHostObject = host;
    cuptiProfilerHostDeinitialize(&p);
  }};

  std::vector<const char*> metric_names;
  for (const Metric& m : kMetrics) metric_names.push_back(m.name);
  auto add = FUSEC_CUPTI_PARAMS(CUpti_Profiler_Host_ConfigAddMetrics_Params);
  add.pHostObject = host;
  add.ppMetricNames = metric_names.data();
  add.numMetrics = metric_names.size();
  if (CUptiResult r = cuptiProfilerHostConfigAddMetrics(&add); r == CUPTI_ERROR_INVALID_METRIC_NAME)
    throw_missing_metrics(host, chip_name);
  else
    check(r, "cuptiProfilerHostConfigAddMetrics");
  auto config_size = FUSEC_CUPTI_PARAMS(CUpti_Profiler_Host_GetConfigImageSize_Params);
  config_size.pHostObject = host;
  FUSEC_CUPTI(cuptiProfilerHostGetConfigImageSize, &config_size);
  std::vector<uint8_t> config(config_size.configImageSize);
  auto config_image = FUSEC_CUPTI_PARAMS(CUpti_Profiler_Host_GetConfigImage_Params);
  config_image.pHostObject = host;
  config_image.configImageSize = config.size();
  config_image.pConfigImage = config.data();
  FUSEC_CUPTI(cuptiProfilerHostGetConfigImage, &config_image);

  // ---- kernel names: subscribe before the profiling session, as CUPTI asks of its clients ----
  Launches launches;
  CUpti_SubscriberHandle subscriber = nullptr;
  Defer unsubscribe{[&subscriber] {
    if (subscriber) cuptiUnsubscribe(subscriber);
  }};
  auto sub = FUSEC_CUPTI_PARAMS(CUpti_SubscriberParams);
  sub.subscriberName = "fusec counters";
  if (CUptiResult r = cuptiSubscribe_v2(&subscriber, on_launch, &launches, &sub); r == CUPTI_SUCCESS) {
    for (CUpti_CallbackId id : kLaunchCallbacks)
      check(cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API, id), "cuptiEnableCallback");
  } else if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
    subscriber = nullptr;  // another CUPTI client (fusec's tracer, a tool) holds it: counters, no names
  } else {
    check(r, "cuptiSubscribe_v2");
  }

  // ---- target: attach to the context and say how to collect ----
  auto enable = FUSEC_CUPTI_PARAMS(CUpti_RangeProfiler_Enable_Params);
  enable.ctx = ctx;
  FUSEC_CUPTI(cuptiRangeProfilerEnable, &enable);
  CUpti_RangeProfiler_Object* profiler = enable.pRangeProfilerObject;
  Defer disable{[profiler] {
    auto p = FUSEC_CUPTI_PARAMS(CUpti_RangeProfiler_Disable_Params);
    p.pRangeProfilerObject = profiler;
    cuptiRangeProfilerDisable(&p);
  }};

  const size_t max_ranges = std::clamp<size_t>(opts.max_kernels, 1, std::numeric_limits<uint32_t>::max());
  auto data_size = FUSEC_CUPTI_PARAMS(CUpti_RangeProfiler_GetCounterDataSize_Params);
  data_size.pRangeProfilerObject = profiler;
  data_size.pMetricNames = metric_names.data();
  data_size.numMetrics = metric_names.size();
  data_size.maxNumOfRanges = max_ranges;
  data_size.maxNumRangeTreeNodes = static_cast<uint32_t>(max_ranges);
  FUSEC_CUPTI(cuptiRangeProfilerGetCounterDataSize, &data_size);
  std::vector<uint8_t> data(data_size.counterDataSize);
  auto data_init = FUSEC_CUPTI_PARAMS(CUpti_RangeProfiler_CounterDataImage_Initialize_Params);
  data_init.pRangeProfilerObject = profiler;
  data_init.counterDataSize = data.size();
  data_init.pCounterData = data.data();
  FUSEC_CUPTI(cuptiRangeProfilerCounterDataImageInitialize, &data_init);

  // Auto range + kernel replay: every launch is its own range, and CUPTI runs all the passes the
  // metrics need inside that launch, so `work` runs once and one Start/Stop covers every pass.
  auto set = FUSEC_CUPTI_PARAMS(CUpti_RangeProfiler_SetConfig_Params);
  set.pRangeProfilerObject = profiler;
  set.configSize = config.size();
  set.pConfig = config.data();
  set.counterDataImageSize = data.size();
  set.pCounterDataImage = data.data();
  set.range = CUPTI_AutoRange;
  set.replayMode = CUPTI_KernelReplay;
  set.maxRangesPerPass = max_ranges;
  set.numNestingLevels = 1;
  set.minNestingLevel = 1;
  set.passIndex = 0;
  set.targetNestingLevel = 1;
  FUSEC_CUPTI(cuptiRangeProfilerSetConfig, &set);

  // ---- run ----
  FUSEC_CUDA_CHECK(cudaDeviceSynchronize());  // earlier work must not land inside a range
  bool started = false;
  Defer stop_on_throw{[&] {
    if (!started) return;
    auto p = FUSEC_CUPTI_PARAMS(CUpti_RangeProfiler_Stop_Params);
    p.pRangeProfilerObject = profiler;
    cuptiRangeProfilerStop(&p);
  }};
  auto start = FUSEC_CUPTI_PARAMS(CUpti_RangeProfiler_Start_Params);
  start.pRangeProfilerObject = profiler;
  FUSEC_CUPTI(cuptiRangeProfilerStart, &start);
  started = true;
  {
    // Only launches from here on are ranges. Dropping names after Start (not before) means a
    // stray launch from another thread in between can only blank the names, never shift them.
    std::lock_guard lock(launches.mu);
    launches.names.clear();
  }
  work();
  FUSEC_CUDA_CHECK(cudaDeviceSynchronize());
  auto stop = FUSEC_CUPTI_PARAMS(CUpti_RangeProfiler_Stop_Params);
  stop.pRangeProfilerObject = profiler;
  started = false;
  // No pass loop (isAllPassSubmitted): kernel replay has run every pass inside each launch.
  FUSEC_CUPTI(cuptiRangeProfilerStop, &stop);

  auto decode = FUSEC_CUPTI_PARAMS(CUpti_RangeProfiler_DecodeData_Params);
  decode.pRangeProfilerObject = profiler;
  FUSEC_CUPTI(cuptiRangeProfilerDecodeData, &decode);

  std::vector<std::string> launched;
  {
    std::lock_guard lock(launches.mu);
    launched = launches.names;
  }

  // ---- read: one range per launch, in launch order ----
  auto info = FUSEC_CUPTI_PARAMS(CUpti_RangeProfiler_GetCounterDataInfo_Params);
  info.pCounterDataImage = data.data();
  info.counterDataImageSize = data.size();
  FUSEC_CUPTI(cuptiRangeProfilerGetCounterDataInfo, &info);
  const std::vector<std::string> names = subscriber ? detail::names_for_ranges(launched, info.numTotalRanges)
                                                    : std::vector<std::string>(info.numTotalRanges);

  std::vector<KernelCounters> out;
  out.reserve(info.numTotalRanges);
  std::vector<double> values(metric_names.size());
  for (size_t i = 0; i < info.numTotalRanges; ++i) {
    auto eval = FUSEC_CUPTI_PARAMS(CUpti_Profiler_Host_EvaluateToGpuValues_Params);
    eval.pHostObject = host;
    eval.pCounterDataImage = data.data();
    eval.counterDataImageSize = data.size();
    eval.rangeIndex = i;
    eval.ppMetricNames = metric_names.data();
    eval.numMetrics = metric_names.size();
    eval.pMetricValues = values.data();
    FUSEC_CUPTI(cuptiProfilerHostEvaluateToGpuValues, &eval);
    KernelCounters k;
    k.kernel = names[i];
    for (size_t m = 0; m < std::size(kMetrics); ++m) k.*kMetrics[m].field = values[m];
    out.push_back(std::move(k));
  }
  return out;
}

}  // namespace fusec::profiler
