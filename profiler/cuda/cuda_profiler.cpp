#include "profiler/cuda/cuda_profiler.h"

#include <cuda_runtime_api.h>
#include <cupti.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "backend/cuda/core/check.h"
#include "backend/cuda/core/event_timer.h"
#include "ir/error.h"
#include "profiler/cuda/occupancy.h"
#include "ir/switches.h"

namespace fusec::profiler {

namespace {

[[noreturn]] void cupti_failed(CUptiResult r, const char* call) {
  const char* s = nullptr;
  cuptiGetResultString(r, &s);
  std::string msg = std::string("CUPTI is not usable here (") + call + ": " + (s ? s : "unknown error") + ")";
  if (r == CUPTI_ERROR_INSUFFICIENT_PRIVILEGES)
    msg += "; profiling needs permission: run as root or set NVreg_RestrictProfilingToAdminUsers=0";
  bad_input(msg);
}

#define CUPTI_CALL(expr)                              \
  do {                                                \
    CUptiResult r_ = (expr);                          \
    if (r_ != CUPTI_SUCCESS) cupti_failed(r_, #expr); \
  } while (0)

std::string demangle(const char* name) {
  if (!name) return "(unnamed)";
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  if (status != 0 || !d) return name;
  std::string s = d;
  std::free(d);
  return s;
}

const char* copy_kind_name(uint8_t k) {
  switch (k) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
      return "HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
      return "DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
      return "DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH:
      return "HtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP:
      return "PtoP";
    default:
      return "other";
  }
}

// Tags: (mode, iteration, step) packed so one 64-bit value names all three.
constexpr uint64_t kNoStep = 0xFFFFFFull;
uint64_t pack(int mode, int iteration, int step) {
  return (static_cast<uint64_t>(mode + 1) << 56) | (static_cast<uint64_t>(iteration) << 24) |
         (step < 0 ? kNoStep : static_cast<uint64_t>(step));
}
void unpack(uint64_t id, int& mode, int& iteration, int& step) {
  mode = static_cast<int>(id >> 56) - 1;
  iteration = static_cast<int>((id >> 24) & 0xFFFFFFFFull);
  uint64_t s = id & 0xFFFFFFull;
  step = s == kNoStep ? -1 : static_cast<int>(s);
}

/// A device record as CUPTI delivered it, before attribution.
struct Raw {
  Record rec;
  uint32_t correlation = 0;
  uint64_t graph_node = 0;
  uint32_t smem_config = 0;  // kernels: shared memory per SM as configured for the launch
};

/// CUPTI's state is process-wide (one set of buffer callbacks, one subscriber), so this is too.
struct Cupti {
  std::mutex mu;
  std::vector<Raw> raw;
  std::unordered_map<uint32_t, uint64_t> external;  // API correlation id -> packed (mode, iteration, step)
  uint64_t tag = 0;  // packed (mode, iteration, step) of the API calls being made now; 0: none
  std::unordered_map<uint64_t, int> node_step;  // graph node id -> step
  size_t dropped = 0;
  int current_step = -1;  // the step being launched (read by the graph-node callbacks)
  bool registered = false;
  CUpti_SubscriberHandle subscriber = nullptr;

  static Cupti& get() {
    static Cupti c;
    return c;
  }

  static void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    constexpr size_t kBytes = size_t{8} << 20;
    *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBytes));
    *size = *buffer ? kBytes : 0;
    *max_records = 0;
  }

  static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t, size_t valid) {
    Cupti& c = get();
    std::lock_guard<std::mutex> lock(c.mu);
    CUpti_Activity* a = nullptr;
    while (cuptiActivityGetNextRecord(buffer, valid, &a) == CUPTI_SUCCESS) c.take(a);
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS) c.dropped += dropped;
    std::free(buffer);
  }

  void take(const CUpti_Activity* a) {
    Raw r;
    switch (a->kind) {
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(a);
        r.rec.kind = RecordKind::Kernel;
        r.rec.name = demangle(k->name);
        r.rec.start_ns = k->start;
        r.rec.end_ns = k->end;
        r.rec.stream = k->streamId;
        r.rec.grid[0] = k->gridX, r.rec.grid[1] = k->gridY, r.rec.grid[2] = k->gridZ;
        r.rec.block[0] = k->blockX, r.rec.block[1] = k->blockY, r.rec.block[2] = k->blockZ;
        r.rec.registers = k->registersPerThread;
        r.rec.static_smem = k->staticSharedMemory;
        r.rec.dynamic_smem = k->dynamicSharedMemory;
        r.correlation = k->correlationId;
        r.graph_node = k->graphNodeId;
        r.smem_config = k->sharedMemoryExecuted;
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(a);
        r.rec.kind = RecordKind::Memcpy;
        r.rec.copy_kind = copy_kind_name(m->copyKind);
        r.rec.name = "memcpy " + r.rec.copy_kind;
        r.rec.bytes = m->bytes;
        r.rec.start_ns = m->start;
        r.rec.end_ns = m->end;
        r.rec.stream = m->streamId;
        r.correlation = m->correlationId;
        r.graph_node = m->graphNodeId;
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(a);
        r.rec.kind = RecordKind::Memset;
        r.rec.name = "memset";
        r.rec.bytes = m->bytes;
        r.rec.start_ns = m->start;
        r.rec.end_ns = m->end;
        r.rec.stream = m->streamId;
        r.correlation = m->correlationId;
        r.graph_node = m->graphNodeId;
        break;
      }
      default:
        return;
    }
    raw.push_back(std::move(r));
  }

  static void CUPTIAPI callback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data) {
    if (domain == CUPTI_CB_DOMAIN_RUNTIME_API || domain == CUPTI_CB_DOMAIN_DRIVER_API) {
      // Every API call made while a step is launched: its correlation id is the one its kernels,
      // copies and memsets will carry (a graph launch's, for the records of a replay).
      auto* cb = static_cast<const CUpti_CallbackData*>(data);
      if (cb->callbackSite != CUPTI_API_ENTER) return;
      Cupti& c = get();
      std::lock_guard<std::mutex> lock(c.mu);
      if (c.tag) c.external[cb->correlationId] = c.tag;
      return;
    }
    if (domain != CUPTI_CB_DOMAIN_RESOURCE) return;
    auto* rd = static_cast<const CUpti_ResourceData*>(data);
    auto* gd = static_cast<const CUpti_GraphData*>(rd->resourceDescriptor);
    if (!gd) return;
    Cupti& c = get();
    std::lock_guard<std::mutex> lock(c.mu);
    uint64_t id = 0;
    if (cbid == CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED) {
      if (c.current_step >= 0 && cuptiGetGraphNodeId(gd->node, &id) == CUPTI_SUCCESS) c.node_step[id] = c.current_step;
    } else if (cbid == CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED) {
      uint64_t orig = 0;
      if (cuptiGetGraphNodeId(gd->node, &id) == CUPTI_SUCCESS &&
          cuptiGetGraphNodeId(gd->originalNode, &orig) == CUPTI_SUCCESS) {
        auto it = c.node_step.find(orig);
        if (it != c.node_step.end()) c.node_step[id] = it->second;
      }
    }
  }

  void start() {
    {
      std::lock_guard<std::mutex> lock(mu);
      raw.clear();
      external.clear();
      node_step.clear();
      dropped = 0;
      current_step = -1;
      tag = 0;
    }
    if (!registered) {
      CUPTI_CALL(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
      registered = true;
    }
    if (!subscriber) {
      CUPTI_CALL(cuptiSubscribe(&subscriber, reinterpret_cast<CUpti_CallbackFunc>(callback), nullptr));
      CUPTI_CALL(cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED));
      CUPTI_CALL(cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED));
      CUPTI_CALL(cuptiEnableDomain(1, subscriber, CUPTI_CB_DOMAIN_RUNTIME_API));
      CUPTI_CALL(cuptiEnableDomain(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API));
    }
    CUPTI_CALL(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
    CUPTI_CALL(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY));
    CUPTI_CALL(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET));
  }

  void flush() { CUPTI_CALL(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED)); }

  /// Drops what was recorded so far (planning, warm-up) but keeps the graph-node map.
  void discard() {
    flush();
    std::lock_guard<std::mutex> lock(mu);
    raw.clear();
    external.clear();
  }

  void stop() {
    flush();
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMCPY);
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMSET);
    if (subscriber) {
      cuptiUnsubscribe(subscriber);
      subscriber = nullptr;
    }
  }
};

/// Tags the API calls of each launched step with (mode, iteration, step) and records the host
/// side of each step.
class CuptiSteps : public StepRecorder {
 public:
  void step_begin(const StepInfo& s) override {
    StepRecorder::step_begin(s);
    if (iteration >= 0) cuptiGetTimestamp(&host_start_);
    std::lock_guard<std::mutex> lock(Cupti::get().mu);
    Cupti::get().current_step = static_cast<int>(s.index);
    Cupti::get().tag = iteration >= 0 ? pack(mode, iteration, static_cast<int>(s.index)) : 0;
  }
  void step_end(const StepInfo& s) override {
    {
      std::lock_guard<std::mutex> lock(Cupti::get().mu);
      Cupti::get().current_step = -1;
      Cupti::get().tag = 0;
    }
    if (iteration >= 0) {
      uint64_t end = 0;
      cuptiGetTimestamp(&end);
      host.push_back({mode, iteration, static_cast<int>(s.index), host_start_, end});
    }
    StepRecorder::step_end(s);
  }
  int mode = 0, iteration = -1;
  std::vector<HostRange> host;

 private:
  uint64_t host_start_ = 0;
};

void set_tag(uint64_t tag) {
  std::lock_guard<std::mutex> lock(Cupti::get().mu);
  Cupti::get().tag = tag;
}

/// Stops CUPTI and detaches the observer however the profile ends.
struct Session {
  cuda::CudaExecutable& exe;
  bool active = true;
  ~Session() {
    exe.set_step_observer(nullptr);
    if (active) {
      try {
        Cupti::get().stop();
      } catch (const Error&) {
      }
    }
  }
};

}  // namespace

void with_observer(cuda::CudaExecutable& exe, StepObserver* obs, const std::function<void()>& work) {
  exe.set_step_observer(obs);
  struct Detach {
    cuda::CudaExecutable& e;
    ~Detach() { e.set_step_observer(nullptr); }
  } detach{exe};
  work();
}

namespace {

/// Uploads the inputs (planning first if the shapes waited for them) and warms up both modes; the
/// second launch() captures the CUDA graph while the observer is attached, so its nodes are known
/// by step. True when the graph was captured.
bool upload_and_warm_up(cuda::CudaExecutable& exe, const std::vector<Tensor>& inputs, const CudaRunSettings& s) {
  exe.upload_inputs(inputs);
  bool graph = false;
  if (s.graph) {
    exe.launch();
    exe.launch();
    graph = exe.graph_status() == "on";
  }
  for (int i = 0; i < s.warmup; ++i) {
    if (graph) exe.launch();
    exe.launch_uncaptured();
  }
  // Waits for the warm-up, and reads its outputs and the device error record: bad data a kernel
  // found (an index out of range, ...) fails the profile as it fails a run.
  exe.download_outputs();
  return graph;
}

/// Without CUPTI: CUDA events recorded on the stream around each step of separate launches give
/// each node's GPU time (no per-kernel detail); graph replay is timed as a whole.
class EventSteps : public StepRecorder {
 public:
  explicit EventSteps(cudaStream_t s) : stream_(s) {}
  ~EventSteps() override {
    for (auto& [b, e] : events_) {
      cudaEventDestroy(b);
      cudaEventDestroy(e);
    }
  }
  void step_begin(const StepInfo& s) override {
    StepRecorder::step_begin(s);
    if (iteration < 0) return;
    while (events_.size() <= s.index) {
      cudaEvent_t b = nullptr, e = nullptr;
      FUSEC_CUDA_CHECK(cudaEventCreate(&b));
      FUSEC_CUDA_CHECK(cudaEventCreate(&e));
      events_.push_back({b, e});
    }
    FUSEC_CUDA_CHECK(cudaEventRecord(events_[s.index].first, stream_));
    used_.push_back(s.index);
  }
  void step_end(const StepInfo& s) override {
    if (iteration >= 0) FUSEC_CUDA_CHECK(cudaEventRecord(events_[s.index].second, stream_));
    StepRecorder::step_end(s);
  }
  /// After the iteration's last event completed: one Step record per step, on the clock of
  /// `origin` (an event recorded before the iteration).
  void collect(cudaEvent_t origin, int mode, uint64_t base_ns, std::vector<Record>& out) {
    for (size_t i : used_) {
      float b = 0, e = 0;
      FUSEC_CUDA_CHECK(cudaEventElapsedTime(&b, origin, events_[i].first));
      FUSEC_CUDA_CHECK(cudaEventElapsedTime(&e, origin, events_[i].second));
      Record r;
      r.kind = RecordKind::Step;
      r.name = steps[i].label;
      r.mode = mode;
      r.iteration = iteration;
      r.step = static_cast<int>(i);
      r.start_ns = base_ns + static_cast<uint64_t>(std::max(0.f, b) * 1e6);
      r.end_ns = base_ns + static_cast<uint64_t>(std::max(b, e) * 1e6);
      out.push_back(std::move(r));
    }
    used_.clear();
  }
  int iteration = -1;

 private:
  cudaStream_t stream_;
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> events_;
  std::vector<size_t> used_;
};

Collected profile_with_events(cuda::CudaExecutable& exe, const std::vector<Tensor>& inputs, const CudaRunSettings& s,
                              const std::string& why) {
  cudaStream_t stream = exe.stream();
  EventSteps steps(stream);
  exe.set_step_observer(&steps);
  struct Detach {
    cuda::CudaExecutable& e;
    ~Detach() { e.set_step_observer(nullptr); }
  } detach{exe};
  {
    const bool graph = upload_and_warm_up(exe, inputs, s);
    Collected c;
    c.device_kind = "cuda";
    c.modes.push_back({"stream", {}});
    cuda::EventTimer ev;
    uint64_t base = 0;
    for (int i = 0; i < s.iterations; ++i) {
      steps.iteration = i;
      c.modes[0].wall_ms.push_back(ev.time_ms(stream, [&] { exe.launch_uncaptured(); }));
      steps.collect(ev.start(), 0, base, c.records);
      base += static_cast<uint64_t>(c.modes[0].wall_ms.back() * 1e6) + 1000;
    }
    steps.iteration = -1;
    if (graph) {
      c.modes.push_back({"cuda_graph", {}});
      for (int i = 0; i < s.iterations; ++i) c.modes[1].wall_ms.push_back(ev.time_ms(stream, [&] { exe.launch(); }));
    }
    c.graph = exe.executed_graph();
    c.steps = steps.steps;
    c.attribution = "CUDA events around each step of separate launches, no per-kernel records (" + why + ")";
    return c;
  }
}

}  // namespace

Collected profile_cuda(cuda::CudaExecutable& exe, const std::vector<Tensor>& inputs, const CudaRunSettings& s) {
  Cupti& cupti = Cupti::get();
  exe.context().make_current();
  std::string no_cupti;
  if (const char* e = env_switch("FUSEC_PROFILE_NO_CUPTI"); e && std::string(e) == "1") {
    no_cupti = "FUSEC_PROFILE_NO_CUPTI=1";
  } else {
    try {
      cupti.start();
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::BadInput) throw;
      no_cupti = e.what();
    }
  }
  if (!no_cupti.empty()) return profile_with_events(exe, inputs, s, no_cupti);
  CuptiSteps steps;
  exe.set_step_observer(&steps);
  Session session{exe};
  cudaStream_t stream = exe.stream();

  Collected c;
  c.device_kind = "cuda";
  const bool graph = upload_and_warm_up(exe, inputs, s);
  cupti.discard();

  cuda::EventTimer ev;
  if (graph) {
    const int mode = static_cast<int>(c.modes.size());
    c.modes.push_back({"cuda_graph", {}});
    for (int i = 0; i < s.iterations; ++i) {
      c.modes[mode].wall_ms.push_back(ev.time_ms(stream, [&] {
        set_tag(pack(mode, i, -1));
        exe.launch();
        set_tag(0);
      }));
    }
  }
  if (s.stream || !graph) {
    const int mode = static_cast<int>(c.modes.size());
    c.modes.push_back({"stream", {}});
    steps.mode = mode;
    for (int i = 0; i < s.iterations; ++i) {
      steps.iteration = i;
      c.modes[mode].wall_ms.push_back(ev.time_ms(stream, [&] { exe.launch_uncaptured(); }));
    }
    steps.iteration = -1;
  }
  cupti.stop();
  session.active = false;

  c.graph = exe.executed_graph();
  c.steps = steps.steps;
  c.host_ranges = std::move(steps.host);
  std::lock_guard<std::mutex> lock(cupti.mu);
  c.dropped_records = cupti.dropped;

  int device = 0;
  FUSEC_CUDA_CHECK(cudaGetDevice(&device));
  OccupancyCalculator occ(device);
  size_t by_node = 0, by_order = 0, by_id = 0;
  for (Raw& r : cupti.raw) {
    auto it = cupti.external.find(r.correlation);
    if (it == cupti.external.end()) continue;  // not from a profiled iteration
    int mode = 0, iteration = 0, step = -1;
    unpack(it->second, mode, iteration, step);
    r.rec.mode = mode;
    r.rec.iteration = iteration;
    if (step >= 0) {
      ++by_id;
    } else if (r.graph_node) {
      auto n = cupti.node_step.find(r.graph_node);
      if (n != cupti.node_step.end()) {
        step = n->second;
        ++by_node;
      }
    }
    r.rec.step = step;
    if (r.rec.kind == RecordKind::Kernel) r.rec.occupancy = occ.theoretical(r.rec, r.smem_config);
    c.records.push_back(std::move(r.rec));
  }

  // Graph-replay records whose node the callbacks did not name: a graph replays the captured
  // launches in order, so the n-th record of a replay is the n-th of a stream-mode run when the
  // names agree.
  if (graph && s.stream) {
    auto iteration_records = [&](int mode, int it) {
      std::vector<Record*> v;
      for (Record& r : c.records)
        if (r.mode == mode && r.iteration == it) v.push_back(&r);
      std::stable_sort(v.begin(), v.end(), [](Record* x, Record* y) { return x->start_ns < y->start_ns; });
      return v;
    };
    std::vector<Record*> ref = iteration_records(1, 0);
    for (int it = 0; it < s.iterations; ++it) {
      std::vector<Record*> g = iteration_records(0, it);
      bool missing = std::any_of(g.begin(), g.end(), [](Record* r) { return r->step < 0; });
      if (!missing || g.size() != ref.size()) continue;
      bool same = true;
      for (size_t i = 0; i < g.size() && same; ++i) same = g[i]->name == ref[i]->name;
      if (!same) continue;
      for (size_t i = 0; i < g.size(); ++i)
        if (g[i]->step < 0) {
          g[i]->step = ref[i]->step;
          ++by_order;
        }
    }
  }
  c.attribution = "API correlation ids of each launched step (" + std::to_string(by_id) + " records)";
  if (graph)
    c.attribution +=
        "; CUDA-graph replay by captured graph node (" + std::to_string(by_node) + " records)" +
        (by_order ? ", by launch order where the node was unknown (" + std::to_string(by_order) + ")" : "");
  return c;
}

std::string cuda_device_key(int device) {
  cudaDeviceProp p{};
  FUSEC_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  char uuid[64];
  std::snprintf(uuid, sizeof uuid, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
                static_cast<unsigned char>(p.uuid.bytes[0]), static_cast<unsigned char>(p.uuid.bytes[1]),
                static_cast<unsigned char>(p.uuid.bytes[2]), static_cast<unsigned char>(p.uuid.bytes[3]),
                static_cast<unsigned char>(p.uuid.bytes[4]), static_cast<unsigned char>(p.uuid.bytes[5]),
                static_cast<unsigned char>(p.uuid.bytes[6]), static_cast<unsigned char>(p.uuid.bytes[7]),
                static_cast<unsigned char>(p.uuid.bytes[8]), static_cast<unsigned char>(p.uuid.bytes[9]),
                static_cast<unsigned char>(p.uuid.bytes[10]), static_cast<unsigned char>(p.uuid.bytes[11]),
                static_cast<unsigned char>(p.uuid.bytes[12]), static_cast<unsigned char>(p.uuid.bytes[13]),
                static_cast<unsigned char>(p.uuid.bytes[14]), static_cast<unsigned char>(p.uuid.bytes[15]));
  return std::string("cuda: ") + p.name + " " + uuid;
}

std::vector<std::pair<std::string, std::string>> cuda_versions() {
  std::vector<std::pair<std::string, std::string>> v;
  auto ver = [](int x) { return std::to_string(x / 1000) + "." + std::to_string(x % 1000 / 10); };
  int rt = 0, drv = 0;
  if (cudaRuntimeGetVersion(&rt) == cudaSuccess) v.push_back({"cuda_runtime", ver(rt)});
  if (cudaDriverGetVersion(&drv) == cudaSuccess) v.push_back({"cuda_driver", ver(drv)});
  uint32_t cv = 0;
  if (cuptiGetVersion(&cv) == CUPTI_SUCCESS) v.push_back({"cupti_api", std::to_string(cv)});
  return v;
}

}  // namespace fusec::profiler
