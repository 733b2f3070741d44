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
#include "backend/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/kernel.h"
#include "backend/cpu/kernels/common.h"
#include "backend/cuda/core/check.h"
#include "backend/cuda/core/cuda_op.h"
#include "backend/cuda/ops/movement/movement.cuh"
#include "backend/memory_planner.h"
#include "backend/cuda/core/build_trace.h"
#include "backend/cuda/core/constant_upload.h"
#include "backend/device_memory.h"
#include "ir/error.h"
#include "ir/shape_inference.h"
#include "ir/switches.h"

namespace fusec::cuda {

bool launch_convert_float(const void* src, DType src_t, void* dst, DType dst_t, int64_t n, cudaStream_t s);

namespace {

/// Host-side dtype conversion (storage <-> model types) for constants and the CPU fallback.
Tensor convert_host(const Tensor& t, DType to) {
  Tensor out(to, t.dims());
  cpu::convert_tensor(t, out);
  return out;
}

constexpr int64_t kMaxSpecializedElements = 1024;
constexpr int64_t kMaxSpecializedFloats = 16;

// Ops whose output depends only on input dims: folded at plan time even when the input is not
// a constant.
bool dims_only_op(const Node& n) {
  return n.domain.empty() && (n.op_type == "Shape" || n.op_type == "Size");
}

bool random_op(const Node& n) {
  return n.op_type.rfind("Random", 0) == 0 || n.op_type == "Multinomial" || n.op_type == "Bernoulli";
}

struct Slot {
  DType dtype = DType::Undefined;  // storage dtype on the device
  DType onnx_dtype = DType::Undefined;
  std::vector<int64_t> dims;
  enum class Place { Arena, Weights, Input, Alias } place = Place::Arena;
  size_t offset = 0;   // within its buffer
  int alias_of = -1;   // Place::Alias: the slot whose memory this one views
  int first = -1, last = -1;
  bool pinned = false;  // lives for the whole run (graph output)
  const Tensor* host_constant = nullptr;  // constant slots: the host value (ONNX dtype)
  bool nhwc = false;  // 4-D activation stored channels-last
  bool unread = false;  // Place::Weights read by no step on the device: not uploaded
  size_t nbytes() const {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return static_cast<size_t>(n) * dtype_size(dtype);
  }
};

struct Step {
  enum class Kind { Gpu, Cpu, Convert, Copy, Relayout } kind = Kind::Gpu;
  const Node* node = nullptr;
  int64_t opset = 0;
  std::unique_ptr<CudaOp> op;
  std::vector<int> in_slots, out_slots;  // -1: absent
  std::vector<DTensor> ins, outs;        // resolved at the end of planning
  StridedCopyPlan relayout;              // Kind::Relayout: NCHW <-> NHWC
  std::string label;                     // what the profiler calls it: the node's name, or what an added step does
};

const char* step_kind_name(Step::Kind k) {
  switch (k) {
    case Step::Kind::Gpu: return "kernel";
    case Step::Kind::Cpu: return "cpu";
    case Step::Kind::Convert: return "convert";
    case Step::Kind::Copy: return "copy";
    case Step::Kind::Relayout: return "relayout";
  }
  return "";
}

std::string signature(const std::vector<Tensor>& inputs, const std::vector<bool>& by_value) {
  std::string key;
  for (size_t i = 0; i < inputs.size(); ++i) {
    key += std::to_string(static_cast<int>(inputs[i].dtype())) + ":" + dims_str(inputs[i].dims());
    if (by_value[i]) {
      key += "=";
      key.append(static_cast<const char*>(inputs[i].raw()), inputs[i].nbytes());
    }
    key += ";";
  }
  return key;
}

class Impl : public CudaExecutable {
 public:
  Impl(const Graph& g, const CudaOptions& opts)
      : opts_(opts),
        ctx_holder_(opts.context ? opts.context : std::make_shared<Context>(opts.device)),
        ctx_(*ctx_holder_),
        graph_(g.clone()) {
    ctx_.make_current();
    error_record_ = DeviceBuffer(sizeof(DeviceErrorRecord), "the device error record");
    FUSEC_CUDA_CHECK(cudaMemset(error_record_.get(), 0, sizeof(DeviceErrorRecord)));
    FUSEC_CUDA_CHECK(cudaMallocHost(&error_host_, sizeof(DeviceErrorRecord)));
    *error_host_ = {};
    graph_->topo_sort();
    // Models whose shapes are all known compile now; others on the first run.
    bool all_static = true;
    for (Value* v : graph_->inputs)
      if (!v->type.shape || !is_static(*v->type.shape)) all_static = false;
    if (all_static && non_static_values(*graph_).empty()) {
      std::vector<Tensor> probe;
      for (Value* v : graph_->inputs) probe.push_back(Tensor::view(v->type.dtype, static_dims(*v->type.shape), nullptr, nullptr));
      try {
        build_plan(probe, std::vector<bool>(probe.size(), false));
        key_ = signature(probe, by_value_);
      } catch (const Error& e) {
        // Data-dependent shapes: planned on the first run, with the inputs' values.
        if (e.kind() != ErrorKind::BadInput || std::string(e.what()).find("depends on") == std::string::npos) throw;
        plan_.reset();
      }
    }
  }

  ~Impl() override {
    release_graph();
    if (error_host_) cudaFreeHost(error_host_);
  }

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

  std::vector<Tensor> run(const std::vector<Tensor>& inputs) override {
    upload_inputs(inputs);
    launch();
    return download_outputs();
  }

  void upload_inputs(const std::vector<Tensor>& inputs) override {
    ctx_.make_current();
    const Graph& g = *graph_;
    if (inputs.size() != g.inputs.size())
      bad_input("the model has " + std::to_string(g.inputs.size()) + " inputs, got " + std::to_string(inputs.size()));
    for (size_t i = 0; i < inputs.size(); ++i) check_input_tensor(*g.inputs[i], inputs[i]);
    ensure_plan(inputs);
    // A new run: what earlier launches found is theirs (bench launches many times per upload and
    // reads the record once, at download).
    FUSEC_CUDA_CHECK(cudaMemsetAsync(error_record_.get(), 0, sizeof(DeviceErrorRecord), ctx_.stream()));
    for (size_t i = 0; i < inputs.size(); ++i) {
      int s = input_slots_[i];
      if (s < 0) continue;  // specialized on its value: baked into the plan
      if (inputs[i].nbytes())
        FUSEC_CUDA_CHECK(cudaMemcpyAsync(addr(s), inputs[i].raw(), inputs[i].nbytes(), cudaMemcpyHostToDevice, ctx_.stream()));
    }
    FUSEC_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream()));
  }

  void launch() override {
    if (!plan_) internal_error("launch before the inputs were uploaded");
    ctx_.make_current();
    if (graph_exec_) {
      FUSEC_CUDA_CHECK(cudaGraphLaunch(graph_exec_, ctx_.stream()));
      return;
    }
    if (launches_ >= 1 && capture_allowed_) {
      capture();
      if (graph_exec_) {
        FUSEC_CUDA_CHECK(cudaGraphLaunch(graph_exec_, ctx_.stream()));
        return;
      }
    }
    if (launches_ == 0 && BuildTrace::on()) {
      run_steps_traced();
      BuildTrace::report();
    } else {
      run_steps();
    }
    ++launches_;
  }

  void launch_uncaptured() override {
    if (!plan_) internal_error("launch before the inputs were uploaded");
    ctx_.make_current();
    run_steps();
  }

  std::vector<Tensor> download_outputs() override {
    ctx_.make_current();
    std::vector<Tensor> outs;
    for (size_t i = 0; i < graph_->outputs.size(); ++i) {
      const Slot& s = slots_[output_slots_[i]];
      Tensor t(s.onnx_dtype, s.dims);
      if (t.nbytes())
        FUSEC_CUDA_CHECK(cudaMemcpyAsync(t.raw(), addr(output_slots_[i]), t.nbytes(), cudaMemcpyDeviceToHost, ctx_.stream()));
      outs.push_back(std::move(t));
    }
    enqueue_error_fetch();
    FUSEC_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream()));
    raise_device_error();
    return outs;
  }

 private:
  // ---------------------------------------------------------------- planning
  void ensure_plan(const std::vector<Tensor>& inputs) {
    std::vector<bool> by_value(inputs.size(), false);
    if (plan_ && signature(inputs, by_value_) == key_) return;
    try {
      build_plan(inputs, by_value);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::BadInput || std::string(e.what()).find("depends on") == std::string::npos) throw;
      // A shape depends on an input's value (a Reshape target fed as an input, ...): specialize
      // the plan on the values of the small integer inputs and plan again.
      for (size_t i = 0; i < inputs.size(); ++i) {
        DType t = inputs[i].dtype();
        int64_t n = inputs[i].numel();
        // Shape operands are integer or bool tensors (Reshape targets, Compress conditions), or a
        // few floats (Resize scales, Range bounds, OneHot depth).
        by_value[i] = ((is_integer(t) || t == DType::Bool) && n <= kMaxSpecializedElements) ||
                      (is_float(t) && n <= kMaxSpecializedFloats);
      }
      build_plan(inputs, by_value);
    }
    key_ = signature(inputs, by_value_);
  }

  void reset_plan() {
    release_graph();
    steps_.clear();
    slots_.clear();
    placement_.clear();
    folded_.clear();
    relayouts_.clear();
    input_slots_.clear();
    output_slots_.clear();
    arena_ = DeviceBuffer();
    weights_ = DeviceBuffer();
    io_ = DeviceBuffer();
    workspace_ = DeviceBuffer();
    workspace_bytes_ = 0;
    dev_ = {};
    launches_ = 0;
    plan_.reset();
  }

  void build_plan(const std::vector<Tensor>& inputs, const std::vector<bool>& by_value) {
    reset_plan();
    channels_last_ = opts_.channels_last;
    if (const char* env = env_switch("FUSEC_CHANNELS_LAST"); env && std::string(env) == "0") channels_last_ = false;
    by_value_ = by_value;
    plan_ = graph_->clone();
    Graph& g = *plan_;
    for (size_t i = 0; i < g.inputs.size(); ++i) {
      Value* v = g.inputs[i];
      v->type.shape = shape_of(inputs[i].dims());
      if (by_value[i]) v->initializer = std::make_shared<const Tensor>(inputs[i].clone());
    }
    // Shapes inferred for other input dims (or left symbolic) must not constrain this plan.
    for (Value* v : g.values())
      if (v->producer && !v->is_initializer()) v->type.shape.reset();
    infer_shapes(g, cpu::evaluate_node);
    for (Value* v : g.values()) {
      bool used = v->is_graph_output || !v->consumers.empty();
      if (!used) continue;
      if (v->type.dtype == DType::Undefined || !v->type.shape || !is_static(*v->type.shape)) {
        std::string where = v->producer ? v->producer->ref() : "";
        bad_input("the shape of '" + v->name + "' depends on data the CUDA backend does not have at plan time" + where);
      }
    }
    // Before any kernel is planned or tuned (conv tuning allocates and times candidates): a plan
    // that cannot fit fails now, from the shapes alone.
    check_device_memory(estimate_device_memory(g, opts_.precision), device_limit(), "the model");

    std::unordered_map<const Value*, int> slot_of;
    auto new_slot = [&](const Value* v) {
      Slot s;
      s.onnx_dtype = v->type.dtype;
      s.dtype = storage_dtype(opts_.precision, v->type.dtype);
      s.dims = static_dims(*v->type.shape);
      slots_.push_back(s);
      return static_cast<int>(slots_.size()) - 1;
    };

    // Constants: initializers, and values folded on the CPU below.
    auto constant_slot = [&](const Value* v, const Tensor* host) {
      int s = new_slot(v);
      slots_[s].place = Slot::Place::Weights;
      slots_[s].host_constant = host;
      slot_of[v] = s;
      return s;
    };
    for (Value* v : g.values())
      if (v->is_initializer()) constant_slot(v, v->initializer.get());

    // Graph inputs: an ONNX-typed buffer the host copies into, plus a converted internal slot
    // when the run precision stores it differently.
    std::vector<std::tuple<int, int, std::string>> input_converts;  // (io slot, internal slot, name)
    for (size_t i = 0; i < g.inputs.size(); ++i) {
      Value* v = g.inputs[i];
      if (v->is_initializer()) { input_slots_.push_back(-1); continue; }
      int io = new_slot(v);
      slots_[io].dtype = v->type.dtype;
      slots_[io].place = Slot::Place::Input;
      input_slots_.push_back(io);
      if (slots_[io].dtype != storage_dtype(opts_.precision, v->type.dtype)) {
        int internal = new_slot(v);
        input_converts.push_back({io, internal, v->name});
        slot_of[v] = internal;
      } else {
        slot_of[v] = io;
      }
    }
    for (auto& [io, internal, name] : input_converts) {
      Step st;
      st.kind = Step::Kind::Convert;
      st.label = "convert input '" + name + "'";
      st.in_slots = {io};
      st.out_slots = {internal};
      steps_.push_back(std::move(st));
    }

    // Nodes.
    const auto& factories = CudaOpRegistry::global();
    for (const auto& np : g.nodes()) {
      const Node& n = *np;
      int64_t opset = g.opset(n.domain);
      const OpSchema* schema = OpRegistry::global().find(n.domain, n.op_type, opset);
      if (!schema) bad_input("no schema for this op at opset " + std::to_string(opset) + n.ref());

      // Plan-time folding: every input constant (or only dims matter) -> evaluate on the CPU now.
      bool all_const = !random_op(n);
      for (Value* v : n.inputs)
        if (v && !(slot_of.count(v) && slots_[slot_of[v]].host_constant)) all_const = false;
      if (all_const || dims_only_op(n)) {
        std::vector<Tensor> ins_storage;
        ins_storage.reserve(n.inputs.size());  // pointers into it are taken below
        std::vector<const Tensor*> ins;
        for (Value* v : n.inputs) {
          if (!v) { ins.push_back(nullptr); continue; }
          const Slot& s = slots_[slot_of.at(v)];
          if (s.host_constant) { ins.push_back(s.host_constant); continue; }
          // Shape/Size read only the dims: a data-less view stands in for the device tensor.
          ins_storage.push_back(Tensor::view(s.onnx_dtype, s.dims, nullptr, nullptr));
          ins.push_back(&ins_storage.back());
        }
        std::vector<Tensor> outs = cpu::evaluate_node(n, opset, ins);
        for (size_t i = 0; i < n.outputs.size(); ++i) {
          if (!n.outputs[i]) continue;
          folded_.push_back(std::make_unique<Tensor>(std::move(outs[i])));
          constant_slot(n.outputs[i], folded_.back().get());
        }
        placement_.push_back({n.name, n.op_type, false, true, "folded at plan time", "its inputs are constant"});
        continue;
      }

      // Layout (layout_rule.h): channels-last for conv regions (a channels-last factory exists,
      // every consumer can take NHWC); layout-agnostic elementwise nodes, reductions and nodes
      // whose outputs are layout-free ([N,C,1,1]) follow their input.
      const OpFactory* cl = channels_last_ ? factories.find_channels_last(n.domain, n.op_type) : nullptr;
      LayoutFacts facts;
      if (n.input(0)) {
        const Slot& x = slots_[slot_of.at(n.input(0))];
        facts.in_dims = x.dims;
        facts.in_nhwc = x.nhwc;
        facts.nhwc_dtype = nhwc_dtype(x.dtype);
      }
      if (cl && n.input(0) && n.outputs.size() >= 1 && n.outputs[0]) {
        facts.kind = factories.channels_last_kind(n.domain, n.op_type);
        for (Value* v : n.outputs)
          if (v) facts.out_dims.push_back(static_dims(*v->type.shape));
        facts.consumers_take_nhwc = consumers_take_nhwc(*n.outputs[0], g);
      } else if (layout_agnostic(n) && n.input(0)) {
        facts.kind = ChannelsLast::FollowInput;
        cl = nullptr;
      }
      const bool want_nhwc = plan_channels_last(facts);
      auto plan_values = [&](bool nhwc, std::vector<PlanValue>* pin, std::vector<PlanValue>* pout) {
        pin->clear();
        pout->clear();
        for (size_t i = 0; i < n.inputs.size(); ++i) {
          PlanValue pv;
          if (Value* v = n.inputs[i]) {
            const Slot& sl = slots_[slot_of.at(v)];
            pv = {true, sl.dims, sl.dtype, sl.onnx_dtype, sl.host_constant, nhwc && activation_input(n, i)};
          }
          pin->push_back(pv);
        }
        for (Value* v : n.outputs) {
          PlanValue pv;
          if (v) pv = {true, static_dims(*v->type.shape), storage_dtype(opts_.precision, v->type.dtype), v->type.dtype, nullptr, nhwc};
          pout->push_back(pv);
        }
      };
      Step st;
      st.node = &n;
      st.label = n.name;
      st.opset = opset;
      const auto plan_t0 = std::chrono::steady_clock::now();
      std::vector<PlanValue> pin, pout;
      std::string why;
      bool nhwc = false;
      if (want_nhwc) {
        plan_values(true, &pin, &pout);
        PlanContext pc(n, *schema, opset, opts_.precision, ctx_, pin, pout);
        const OpFactory* f = cl ? cl : factories.find(n.domain, n.op_type);
        if (f) st.op = (*f)(pc, &why);
        nhwc = st.op != nullptr;
      }
      if (!st.op) {
        plan_values(false, &pin, &pout);
        const OpFactory* f = factories.find(n.domain, n.op_type);
        if (f) {
          PlanContext pc(n, *schema, opset, opts_.precision, ctx_, pin, pout);
          st.op = (*f)(pc, &why);
        } else {
          why = "no CUDA kernel for " + std::string(n.domain.empty() ? "" : n.domain + ".") + n.op_type;
        }
      }
      BuildTrace::add("plan", n.op_type, n.name, ms_since(plan_t0));
      // Inputs in the layout the op was planned for (inserting a relayout before it if needed).
      for (size_t i = 0; i < n.inputs.size(); ++i)
        st.in_slots.push_back(n.inputs[i] ? layout_slot(n.inputs[i], pin[i].nhwc, slot_of) : -1);
      for (Value* v : n.outputs) {
        int s = -1;
        if (v) {
          s = new_slot(v);
          slots_[s].nhwc = nhwc && st.op;
          slot_of[v] = s;
        }
        st.out_slots.push_back(s);
      }
      if (st.op) {
        st.kind = Step::Kind::Gpu;
        workspace_bytes_ = std::max(workspace_bytes_, st.op->workspace_bytes());
        placement_.push_back({n.name, n.op_type, true, false, st.op->kernel_name(), ""});
      } else {
        st.kind = Step::Kind::Cpu;
        placement_.push_back({n.name, n.op_type, false, false, "cpu reference", why});
      }
      steps_.push_back(std::move(st));
    }

    if (opts_.strict) {
      std::vector<UnsupportedNode> cpu_nodes;
      for (const Step& st : steps_)
        if (st.kind == Step::Kind::Cpu)
          cpu_nodes.push_back({st.node->name, st.node->op_type, st.node->domain, placement_reason(st.node->name)});
      if (!cpu_nodes.empty())
        bad_input("--strict: these nodes have no CUDA kernel and would run on the CPU: " + describe_unsupported(cpu_nodes));
    }

    // Graph outputs: an ONNX-typed slot the host copies from.
    for (Value* v : g.outputs) {
      int s = layout_slot(v, false, slot_of);
      // By value: new_slot() below may grow slots_ (a reference here read freed memory, found by
      // ASan on the GPU suite).
      const DType src_dtype = slots_[s].dtype;
      bool produced_here = slots_[s].place == Slot::Place::Arena && src_dtype == slots_[s].onnx_dtype;
      bool already_output = std::find(output_slots_.begin(), output_slots_.end(), s) != output_slots_.end();
      if (produced_here && !already_output) {
        slots_[s].pinned = true;
        output_slots_.push_back(s);
        continue;
      }
      int out = new_slot(v);
      slots_[out].dtype = v->type.dtype;
      slots_[out].pinned = true;
      Step st;
      st.kind = src_dtype == slots_[out].dtype ? Step::Kind::Copy : Step::Kind::Convert;
      st.label = std::string(st.kind == Step::Kind::Copy ? "copy" : "convert") + " output '" + v->name + "'";
      st.in_slots = {s};
      st.out_slots = {out};
      steps_.push_back(std::move(st));
      output_slots_.push_back(out);
    }

    const auto mem_t0 = std::chrono::steady_clock::now();
    place_memory();
    BuildTrace::add("memory", "arena+weights", "buffers and weight upload", ms_since(mem_t0));
    resolve_tensors();
    capture_allowed_ = opts_.cuda_graph;
    graph_status_ = opts_.cuda_graph ? "on" : "off (--cuda-graph off)";
    if (opts_.cuda_graph) {
      if (const char* env = env_switch("FUSEC_CUDA_GRAPH"); env && std::string(env) == "0") {
        capture_allowed_ = false;
        graph_status_ = "off (FUSEC_CUDA_GRAPH=0)";
      }
    }
    for (const Step& st : steps_) {
      if (st.kind == Step::Kind::Cpu && capture_allowed_) {
        capture_allowed_ = false;
        graph_status_ = "off: node '" + st.node->name + "' (" + st.node->op_type + ") runs on the CPU";
      }
    }
  }

  // ---------------------------------------------------------------- layout
  static bool layout_free(const Slot& s) { return cuda::layout_free(s.dims); }
  bool nhwc_dtype(DType t) const {
    if (t == DType::Float32 && opts_.precision == Precision::FP32) {
      // Strict fp32 stays NCHW unless asked (FUSEC_CHANNELS_LAST=all): cuDNN's NHWC fp32 kernels
      // ran ResNet-50 b16 in 7.30 ms against 5.56 ms NCHW (H100, 2026-11-23).
      const char* env = env_switch("FUSEC_CHANNELS_LAST");
      return env && std::string(env) == "all";
    }
    return t == DType::Float16 || t == DType::BFloat16 || (t == DType::Float32 && opts_.precision == Precision::TF32);
  }
  /// Elementwise nodes whose inputs all have the output's dims: memory order does not matter.
  static bool layout_agnostic(const Node& n) {
    static const std::unordered_set<std::string> ops = {
        "Relu", "Add", "Sub", "Mul", "Div", "Sigmoid", "Tanh", "Clip", "LeakyRelu", "HardSwish", "HardSigmoid",
        "Gelu", "Erf", "Sqrt", "Exp", "Neg", "Abs", "Max", "Min", "Sum", "Elu", "Selu", "Softplus", "Mish", "FusedElementwise"};
    if (!ops.count(n.op_type) || n.outputs.size() != 1 || !n.outputs[0] || !n.outputs[0]->type.shape) return false;
    const Shape& out = *n.outputs[0]->type.shape;
    if (out.size() != 4) return false;
    for (Value* v : n.inputs)
      if (v && (!v->type.shape || *v->type.shape != out)) return false;
    return true;
  }
  /// Inputs that are activations (laid out like the output); weights and bias stay as they are.
  static bool activation_input(const Node& n, size_t i) {
    if (layout_agnostic(n)) return true;
    return i == 0 || (n.op_type == "FusedConv" && i == 3);
  }
  bool consumers_take_nhwc(const Value& v, const Graph& g) const {
    (void)g;
    const auto& reg = CudaOpRegistry::global();
    if (v.type.shape && v.type.shape->size() == 4) {
      Slot probe;
      probe.dims = static_dims(*v.type.shape);
      if (layout_free(probe)) return true;
    }
    for (const Node* c : v.consumers)
      if (!reg.find_channels_last(c->domain, c->op_type) && !layout_agnostic(*c)) return false;
    return true;
  }
  /// The slot holding `v` in the wanted layout; a relayout step (appended now, so it runs before
  /// the node being planned) makes it on first use.
  int layout_slot(Value* v, bool nhwc, std::unordered_map<const Value*, int>& slot_of) {
    int s = slot_of.at(v);
    if (slots_[s].nhwc == nhwc || layout_free(slots_[s])) return s;
    auto key = std::make_pair(v, nhwc);
    if (auto it = relayouts_.find(key); it != relayouts_.end()) return it->second;
    Slot copy = slots_[s];
    copy.place = Slot::Place::Arena;
    copy.host_constant = nullptr;
    copy.nhwc = nhwc;
    copy.pinned = false;
    copy.first = copy.last = -1;
    slots_.push_back(copy);
    int t = static_cast<int>(slots_.size()) - 1;
    const auto& d = copy.dims;  // N, C, H, W
    int64_t N = d[0], C = d[1], H = d[2], W = d[3];
    std::vector<int64_t> out_dims, strides;
    if (nhwc) {  // output N,H,W,C read from NCHW
      out_dims = {N, H, W, C};
      strides = {C * H * W, W, 1, H * W};
    } else {  // output N,C,H,W read from NHWC
      out_dims = {N, C, H, W};
      strides = {H * W * C, 1, W * C, C};
    }
    Step st;
    st.kind = Step::Kind::Relayout;
    st.label = std::string(nhwc ? "to NHWC" : "to NCHW") + " '" + v->name + "'";
    st.in_slots = {s};
    st.out_slots = {t};
    bool ok = true;
    st.relayout = plan_strided_copy(out_dims, strides, 0, dtype_size(copy.dtype), N * C * H * W, &ok);
    if (!ok) internal_error("cannot plan the layout change of '" + v->name + "'");
    steps_.push_back(std::move(st));
    relayouts_[key] = t;
    return t;
  }

  std::string placement_reason(const std::string& node) const {
    for (const auto& p : placement_)
      if (p.node == node) return p.reason;
    return "";
  }

  // Views alias their input when neither side is pinned or an I/O buffer; everything else in the
  // arena gets a [first, last] step interval for the planner.
  void place_memory() {
    const int nsteps = static_cast<int>(steps_.size());
    for (int i = 0; i < nsteps; ++i) {
      Step& st = steps_[i];
      for (int s : st.out_slots)
        if (s >= 0 && slots_[s].first < 0) slots_[s].first = i;
      if (st.kind == Step::Kind::Gpu && st.op->is_view() && st.in_slots[0] >= 0 && st.out_slots[0] >= 0) {
        int in = st.in_slots[0], out = st.out_slots[0];
        int root = slots_[in].place == Slot::Place::Alias ? slots_[in].alias_of : in;
        if (slots_[root].place == Slot::Place::Arena && !slots_[out].pinned && !slots_[root].pinned &&
            slots_[root].dtype == slots_[out].dtype) {
          slots_[out].place = Slot::Place::Alias;
          slots_[out].alias_of = root;
        }
      }
    }
    auto root_of = [&](int s) { return slots_[s].place == Slot::Place::Alias ? slots_[s].alias_of : s; };
    for (int i = 0; i < nsteps; ++i) {
      for (int s : steps_[i].in_slots)
        if (s >= 0) slots_[root_of(s)].last = std::max(slots_[root_of(s)].last, i);
      for (int s : steps_[i].out_slots)
        if (s >= 0) {
          int r = root_of(s);
          slots_[r].last = std::max(slots_[r].last, i);
          if (slots_[r].first < 0) slots_[r].first = i;
        }
    }
    // Constants only the CPU reads (fallback nodes use the host value) or that an op copied for
    // itself stay on the host.
    for (Slot& sl : slots_) sl.unread = sl.place == Slot::Place::Weights;
    for (const Step& st : steps_)
      for (size_t i = 0; i < st.in_slots.size(); ++i) {
        const int s = st.in_slots[i];
        if (s < 0 || st.kind == Step::Kind::Cpu || (st.kind == Step::Kind::Gpu && !st.op->reads_input(i))) continue;
        slots_[root_of(s)].unread = false;
      }
    std::vector<BufferRequest> reqs;
    std::vector<int> req_slot;
    size_t weight_bytes = 0, io_bytes = 0;
    for (size_t s = 0; s < slots_.size(); ++s) {
      Slot& sl = slots_[s];
      if (sl.place == Slot::Place::Weights && sl.unread) continue;
      if (sl.place == Slot::Place::Weights) {
        sl.offset = weight_bytes;
        weight_bytes += (sl.nbytes() + 255) / 256 * 256;
      } else if (sl.place == Slot::Place::Input) {
        sl.offset = io_bytes;
        io_bytes += (sl.nbytes() + 255) / 256 * 256;
      } else if (sl.place == Slot::Place::Arena && sl.first >= 0) {
        int last = sl.pinned ? nsteps : std::max(sl.last, sl.first);
        reqs.push_back({sl.nbytes(), sl.first, last});
        req_slot.push_back(static_cast<int>(s));
      }
    }
    MemoryPlan mp = plan_memory(reqs, 256);
    for (size_t i = 0; i < reqs.size(); ++i) slots_[req_slot[i]].offset = mp.offsets[i];
    DeviceMemoryNeed need;
    need.activations = mp.arena_bytes;
    need.weights = weight_bytes;
    need.io = io_bytes;
    need.workspace = workspace_bytes_;
    check_device_memory(need, device_limit(), "the plan");
    arena_ = DeviceBuffer(mp.arena_bytes, "the activation arena");
    io_ = DeviceBuffer(io_bytes, "the input buffers");
    weights_ = DeviceBuffer(weight_bytes, "the weights");
    workspace_ = DeviceBuffer(workspace_bytes_, "the kernel workspace");
    dev_.arena_bytes = mp.arena_bytes;
    dev_.io_bytes = io_bytes;
    dev_.weight_bytes = weight_bytes;
    upload_constants();
  }

  /// What this plan may still allocate: the GPU's free memory, and --max-device-memory.
  DeviceMemoryLimit device_limit() const {
    DeviceMemoryLimit lim;
    FUSEC_CUDA_CHECK(cudaMemGetInfo(&lim.free_bytes, &lim.total_bytes));
    lim.cap = opts_.max_device_memory;
    lim.device = "cuda:" + std::to_string(ctx_.device()) + " " + ctx_.device_name();
    return lim;
  }

  // ---------------------------------------------------------------- device errors
  /// Enqueues the copy of the error record into pinned memory and its reset for the next run.
  void enqueue_error_fetch() {
    FUSEC_CUDA_CHECK(cudaMemcpyAsync(error_host_, error_record_.get(), sizeof(DeviceErrorRecord), cudaMemcpyDeviceToHost,
                                     ctx_.stream()));
    FUSEC_CUDA_CHECK(cudaMemsetAsync(error_record_.get(), 0, sizeof(DeviceErrorRecord), ctx_.stream()));
  }

  /// After the stream has caught up with enqueue_error_fetch(): the CPU reference's error for
  /// bad data a kernel found, naming its node.
  void raise_device_error() {
    const DeviceErrorRecord r = *error_host_;
    *error_host_ = {};
    if (r.code == kNoDeviceError) return;
    std::string where;
    if (r.step >= 0 && static_cast<size_t>(r.step) < steps_.size() && steps_[r.step].node)
      where = steps_[r.step].node->ref();
    bad_input(device_error_text(r) + where);
  }

  void upload_constants() {
    ConstantUploader up(ctx_.stream());
    for (size_t s = 0; s < slots_.size(); ++s) {
      const Slot& sl = slots_[s];
      if (sl.place != Slot::Place::Weights || sl.unread || !sl.nbytes()) continue;
      up.upload(*sl.host_constant, addr(static_cast<int>(s)), sl.dtype);
    }
    up.finish();
  }

  void* addr(int s) const {
    const Slot& sl = slots_[s];
    switch (sl.place) {
      case Slot::Place::Weights: return sl.unread ? nullptr : static_cast<char*>(weights_.get()) + sl.offset;
      case Slot::Place::Input: return static_cast<char*>(io_.get()) + sl.offset;
      case Slot::Place::Alias: return addr(sl.alias_of);
      case Slot::Place::Arena:
        if (sl.first < 0) return nullptr;
        return static_cast<char*>(arena_.get()) + sl.offset;
    }
    return nullptr;
  }

  void resolve_tensors() {
    auto dt = [&](int s) {
      DTensor d;
      if (s < 0) return d;
      d.data = addr(s);
      d.dtype = slots_[s].dtype;
      d.dims = slots_[s].dims;
      return d;
    };
    for (Step& st : steps_) {
      st.ins.clear();
      st.outs.clear();
      for (int s : st.in_slots) st.ins.push_back(dt(s));
      for (int s : st.out_slots) st.outs.push_back(dt(s));
    }
  }

  // ---------------------------------------------------------------- execution
  void run_steps() {
    Stream stream = ctx_.stream();
    for (size_t i = 0; i < steps_.size(); ++i) {
      Step& st = steps_[i];
      if (!observer_) {
        run_step(st, static_cast<int>(i), stream);
        continue;
      }
      StepInfo info{i, st.node, step_kind_name(st.kind), st.label};
      observer_->step_begin(info);
      run_step(st, static_cast<int>(i), stream);
      observer_->step_end(info);
    }
  }

  /// The first run under FUSEC_BUILD_TRACE: each step synchronized and timed (first calls load
  /// kernels and build library plans, which is where a build's time can hide).
  void run_steps_traced() {
    Stream stream = ctx_.stream();
    FUSEC_CUDA_CHECK(cudaStreamSynchronize(stream));
    for (size_t i = 0; i < steps_.size(); ++i) {
      Step& st = steps_[i];
      const auto t0 = std::chrono::steady_clock::now();
      run_step(st, static_cast<int>(i), stream);
      FUSEC_CUDA_CHECK(cudaStreamSynchronize(stream));
      BuildTrace::add("first run", st.node ? st.node->op_type : step_kind_name(st.kind), st.label, ms_since(t0));
    }
  }

  void run_step(Step& st, int index, Stream stream) {
    switch (st.kind) {
      case Step::Kind::Gpu: {
        if (st.op->is_view() && st.outs[0].data == st.ins[0].data) break;
        LaunchArgs a{st.ins, st.outs, ctx_, stream, workspace_.get(),
                     {static_cast<DeviceErrorRecord*>(error_record_.get()), index}};
        try {
          st.op->launch(a);
        } catch (const Error& e) {
          throw Error(e.kind(), std::string(e.what()) + st.node->ref());
        }
        break;
      }
      case Step::Kind::Copy:
        if (st.outs[0].nbytes())
          FUSEC_CUDA_CHECK(cudaMemcpyAsync(st.outs[0].data, st.ins[0].data, st.outs[0].nbytes(), cudaMemcpyDeviceToDevice, stream));
        break;
      case Step::Kind::Convert:
        if (!launch_convert_float(st.ins[0].data, st.ins[0].dtype, st.outs[0].data, st.outs[0].dtype, st.outs[0].numel(), stream))
          internal_error(std::string("no device conversion from ") + dtype_name(st.ins[0].dtype) + " to " + dtype_name(st.outs[0].dtype));
        break;
      case Step::Kind::Cpu:
        run_on_cpu(st);
        break;
      case Step::Kind::Relayout:
        launch_strided_copy(st.relayout, st.ins[0].data, st.outs[0].data, stream);
        break;
    }
  }

  // The fallback: copy inputs to the host (converting the storage type back to the model's),
  // run the reference kernel, copy the outputs back.
  void run_on_cpu(Step& st) {
    Stream stream = ctx_.stream();
    // The steps before this one have run: bad data one of them found is the error to report (the
    // CPU reference would have stopped there), before this node reads what it left.
    enqueue_error_fetch();
    FUSEC_CUDA_CHECK(cudaStreamSynchronize(stream));
    raise_device_error();
    std::vector<Tensor> host(st.in_slots.size());
    std::vector<const Tensor*> ins(st.in_slots.size(), nullptr);
    for (size_t i = 0; i < st.in_slots.size(); ++i) {
      int s = st.in_slots[i];
      if (s < 0) continue;
      const Slot& sl = slots_[s];
      if (sl.host_constant) { ins[i] = sl.host_constant; continue; }
      Tensor t(sl.dtype, sl.dims);
      if (t.nbytes()) FUSEC_CUDA_CHECK(cudaMemcpy(t.raw(), st.ins[i].data, t.nbytes(), cudaMemcpyDeviceToHost));
      host[i] = sl.dtype == sl.onnx_dtype ? std::move(t) : convert_host(t, sl.onnx_dtype);
      ins[i] = &host[i];
    }
    std::vector<Tensor> outs = cpu::evaluate_node(*st.node, st.opset, ins);
    for (size_t i = 0; i < st.out_slots.size(); ++i) {
      int s = st.out_slots[i];
      if (s < 0) continue;
      const Slot& sl = slots_[s];
      if (outs[i].dims() != sl.dims)
        internal_error("CPU fallback produced " + dims_str(outs[i].dims()) + " where the plan has " + dims_str(sl.dims) + st.node->ref());
      Tensor t = sl.dtype == outs[i].dtype() ? std::move(outs[i]) : convert_host(outs[i], sl.dtype);
      if (t.nbytes()) FUSEC_CUDA_CHECK(cudaMemcpy(st.outs[i].data, t.raw(), t.nbytes(), cudaMemcpyHostToDevice));
    }
  }

  void capture() {
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

  void release_graph() {
    if (graph_exec_) cudaGraphExecDestroy(graph_exec_);
    graph_exec_ = nullptr;
  }


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
  bool channels_last_ = true;
  std::vector<NodePlacement> placement_;
  DeviceBuffer arena_, weights_, io_, workspace_;  // workspace: this plan's, never shared
  DeviceBuffer error_record_;                // one DeviceErrorRecord, at one address for the executable's life
  DeviceErrorRecord* error_host_ = nullptr;  // pinned: where each run's record is copied
  size_t workspace_bytes_ = 0;
  DeviceMemoryStats dev_;
  cudaGraphExec_t graph_exec_ = nullptr;
  bool capture_allowed_ = true;
  std::string graph_status_ = "on";
  int launches_ = 0;
  StepObserver* observer_ = nullptr;
};

}  // namespace

CudaBackend::CudaBackend(CudaOptions opts) : opts_(opts) {}

std::vector<UnsupportedNode> CudaBackend::unsupported(const Graph& g) const {
  // Every node the CPU reference runs also runs here (on the GPU, or on the CPU with copies).
  return cpu::CpuBackend().unsupported(g);
}

void CudaBackend::check_memory(const Graph& g) const {
  const DeviceMemoryNeed need = estimate_device_memory(g, opts_.precision);
  std::string why;
  if (!gpu_available(&why)) bad_input("no usable GPU: " + why + " (use --device cpu)");
  FUSEC_CUDA_CHECK(cudaSetDevice(opts_.device));
  DeviceMemoryLimit lim;
  FUSEC_CUDA_CHECK(cudaMemGetInfo(&lim.free_bytes, &lim.total_bytes));
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, opts_.device) == cudaSuccess) lim.device = "cuda:" + std::to_string(opts_.device) + " " + p.name;
  lim.cap = opts_.max_device_memory;
  check_device_memory(need, lim, "the model");
}

std::unique_ptr<CudaExecutable> CudaBackend::compile_cuda(const Graph& g) {
  auto bad = unsupported(g);
  if (!bad.empty()) bad_input(describe_unsupported(bad));
  if (g.outputs.empty()) bad_input("the graph has no outputs; there is nothing to run");
  return std::make_unique<Impl>(g, opts_);
}

}  // namespace fusec::cuda
