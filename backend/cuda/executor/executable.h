// The CUDA executor. Planning happens once per input signature (dims, plus the values of small
// integer inputs when a shape depends on them):
//   1. bind the actual input dims and infer every shape (the plan is fully static);
//   2. fold nodes whose inputs are all constant on the CPU, at plan time (Constant, Shape, ...);
//   3. ask each op family's factory for a CudaOp; a node nobody takes runs on the CPU reference
//      with copies (and `placement()` says so);
//   4. place every intermediate in one arena (shared memory planner), views aliasing their input;
//   5. upload the weights once, converted to the run precision.
// A run is then a fixed list of launches on one stream with fixed addresses, so after the first
// run it is captured into a CUDA graph and replayed.
//
// Two things are never silent. Before step 3 (and again, exactly, before step 4 allocates) the
// plan's device memory is compared with the GPU's free memory and --max-device-memory
// (backend/device_memory.h): a model that cannot fit fails in seconds, before any kernel is tuned.
// And bad data a kernel finds (an index out of range, an integer division by zero) lands in a
// device error record (device_error.h) read back once per run, in download_outputs(), and becomes
// the CPU reference's error.
//
// One class, its member functions spread over one file per concern, so that each part reads on
// its own (a change to the run path should not mean scrolling through the planner):
//   cuda_backend.cpp  CudaBackend; what a caller sees: construction, upload, launch, download
//   plan.cpp          the plan for one input signature: shapes, folding, a kernel or the CPU
//   layout.cpp        channels-last regions and the relayout steps between them
//   memory.cpp        slot placement (arena, weights, inputs), the exact memory check, uploads
//   run.cpp           stepping through the plan, the CPU fallback, the device error record
//   host_tail.cpp     the nodes after a data-dependent shape, on the CPU reference after the GPU part
//   graphs.cpp        capture into a CUDA graph
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/cuda/core/context.h"
#include "backend/cuda/core/device_error.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/executor/plan.h"
#include "backend/device_memory.h"
#include "backend/host_tail.h"

namespace fusec::cuda::executor {

class Impl : public CudaExecutable {
 public:
  Impl(const Graph& g, const CudaOptions& opts);
  ~Impl() override;

  std::string backend_name() const override { return "cuda"; }
  Precision precision() const override { return opts_.precision; }
  Stream stream() const override { return ctx_.stream(); }
  Context& context() override { return ctx_; }
  const std::vector<NodePlacement>& placement() const override { return placement_; }
  std::string graph_status() const override { return graph_status_; }
  void set_step_observer(StepObserver* observer) override { observer_ = observer; }
  const Graph* executed_graph() const override { return plan_.get(); }

  MemoryStats memory() const override {
    MemoryStats m;
    m.peak_activation_bytes = dev_.arena_bytes;
    m.weight_bytes = dev_.weight_bytes;
    m.planned = plan_ != nullptr;
    return m;
  }
  DeviceMemoryStats device_memory() const override {
    DeviceMemoryStats d = dev_;
    d.workspace_bytes = workspace_.size();
    return d;
  }

  std::vector<Tensor> run(const std::vector<Tensor>& inputs) override;
  void upload_inputs(const std::vector<Tensor>& inputs) override;
  void launch() override;
  void synchronize() override;
  double timed_launch_ms() override;
  void launch_uncaptured() override;
  std::vector<Tensor> download_outputs() override;

 private:
  // plan.cpp
  void ensure_plan(const std::vector<Tensor>& inputs);
  void reset_plan();
  void build_plan(const std::vector<Tensor>& inputs, const std::vector<bool>& by_value, bool allow_tail);
  std::string placement_reason(const std::string& node) const;
  int typed_slot(int s, DType dtype, const std::string& name);

  // layout.cpp
  static bool layout_free(const Slot& s);
  bool nhwc_dtype(DType t) const;
  static bool layout_agnostic(const Node& n);
  static bool activation_input(const Node& n, size_t i);
  // Most of the bytes of n's activation inputs that are not layout-free are stored channels-last
  // (layout_rule.h's majority_channels_last).
  bool activations_mostly_nhwc(const Node& n, const std::unordered_map<const Value*, int>& slot_of) const;
  // Every consumer of v can take it channels-last; a Concat counts only with concat_counts.
  bool consumers_take_nhwc(const Value& v, const Graph& g, bool concat_counts = true) const;
  // A conv whose channels-last run cuDNN pads: channels per group not a multiple of 16 bytes.
  static bool conv_pads_channels(const Node& n, const Slot& x);
  int layout_slot(Value* v, bool nhwc, std::unordered_map<const Value*, int>& slot_of);

  // memory.cpp
  void place_memory();
  DeviceMemoryLimit device_limit() const;
  void upload_constants();
  void* addr(int s) const;
  void resolve_tensors();

  // host_tail.cpp
  void plan_host_tail(const Graph& g, const TailSplit& split, const std::unordered_map<const Value*, int>& slot_of,
                      const std::function<int(Value*)>& host_slot);
  void run_host_tail();

  // cuda_backend.cpp: launch() is this, then the host tail
  void launch_gpu_part();

  // run.cpp
  void enqueue_error_fetch();
  void raise_device_error();
  void run_steps();
  void run_steps_traced();
  void run_step(Step& st, int index, Stream stream);
  void run_on_cpu(Step& st);

  // graphs.cpp
  void capture();
  void release_graph();

  CudaOptions opts_;
  std::shared_ptr<Context> ctx_holder_;
  Context& ctx_;
  std::unique_ptr<Graph> graph_;  // as compiled (symbolic dims possible)
  std::unique_ptr<Graph> plan_;   // specialized to the current input signature
  std::string key_;
  std::vector<bool> by_value_;
  std::vector<Slot> slots_;
  std::vector<Step> steps_;
  std::vector<std::unique_ptr<Tensor>> folded_;
  std::vector<int> input_slots_, output_slots_;
  std::map<std::pair<const Value*, bool>, int> relayouts_;  // (value, nhwc) -> slot
  std::map<std::pair<int, DType>, int> retyped_;            // (slot, storage type) -> slot
  bool channels_last_ = true;
  bool channels_last_3d_ = false;  // rank-5 regions too (unless FUSEC_CHANNELS_LAST_3D=0)
  /// Whether this plan stores activations of `rank` channels-last: 4, and 5 with the switch.
  bool channels_last_at(size_t rank) const { return rank == 4 || (rank == 5 && channels_last_3d_); }
  std::vector<NodePlacement> placement_;
  std::unique_ptr<HostTail> tail_;                 // null where every shape is known at plan time
  DeviceBuffer arena_, weights_, io_, workspace_;  // workspace: this plan's, never shared
  DeviceBuffer error_record_;                      // one DeviceErrorRecord, at one address for the executable's life
  DeviceErrorRecord* error_host_ = nullptr;        // pinned: where each run's record is copied
  size_t workspace_bytes_ = 0;
  DeviceMemoryStats dev_;
  cudaGraphExec_t graph_exec_ = nullptr;
  bool capture_allowed_ = true;
  std::string graph_status_ = "on";
  int launches_ = 0;
  StepObserver* observer_ = nullptr;
  cudaEvent_t timing_events_[2] = {nullptr, nullptr};  // timed_launch_ms, made on first use
};

}  // namespace fusec::cuda::executor
