// Building the plan for one input signature. Every decision about what runs where (folded at plan
// time, a CUDA kernel, the CPU reference) is made here and nowhere else, so a question about the
// plan has one place to look; the layout of each node it asks of layout.cpp, and it hands the
// finished step list to memory.cpp for placement.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "backend/cpu/kernel.h"
#include "backend/cuda/core/build_trace.h"
#include "backend/cuda/core/cuda_op.h"
#include "backend/cuda/executor/executable.h"
#include "backend/cuda/executor/layout_rule.h"
#include "backend/cuda/ops/elementwise/elementwise_codegen.h"
#include "backend/cuda/ops/movement/view_op.h"
#include "backend/device_memory.h"
#include "backend/float32_island.h"
#include "backend/host_tail.h"
#include "ir/error.h"
#include "ir/switches.h"
#include "ir/shape_inference.h"

namespace fusec::cuda::executor {

namespace {

constexpr int64_t kMaxSpecializedElements = 1024;
constexpr int64_t kMaxSpecializedFloats = 16;

// Ops whose output depends only on input dims: folded at plan time even when the input is not
// a constant.
bool dims_only_op(const Node& n) { return n.domain.empty() && (n.op_type == "Shape" || n.op_type == "Size"); }

bool random_op(const Node& n) {
  return n.op_type.rfind("Random", 0) == 0 || n.op_type == "Multinomial" || n.op_type == "Bernoulli";
}

}  // namespace

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

void Impl::ensure_plan(const std::vector<Tensor>& inputs) {
  std::vector<bool> by_value(inputs.size(), false);
  if (plan_ && signature(inputs, by_value_) == key_) return;
  try {
    build_plan(inputs, by_value, false);
  } catch (const Error& e) {
    if (e.cause() != ErrorCause::ShapeNeedsValues) throw;
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
    try {
      build_plan(inputs, by_value, false);
    } catch (const Error& e2) {
      // Still a shape that depends on data (NonZero, NonMaxSuppression, a data-dependent If):
      // the GPU runs what comes before it and the CPU reference the rest (host_tail.cpp), unless
      // --strict asked for no node on the CPU.
      if (e2.cause() != ErrorCause::ShapeNeedsValues || opts_.strict) throw;
      build_plan(inputs, by_value, true);
    }
  }
  key_ = signature(inputs, by_value_);
}

void Impl::reset_plan() {
  release_graph();
  steps_.clear();
  slots_.clear();
  placement_.clear();
  folded_.clear();
  relayouts_.clear();
  retyped_.clear();
  input_slots_.clear();
  output_slots_.clear();
  tail_.reset();
  arena_ = DeviceBuffer();
  weights_ = DeviceBuffer();
  io_ = DeviceBuffer();
  workspace_ = DeviceBuffer();
  workspace_bytes_ = 0;
  dev_ = {};
  launches_ = 0;
  plan_.reset();
}

void Impl::build_plan(const std::vector<Tensor>& inputs, const std::vector<bool>& by_value, bool allow_tail) {
  reset_plan();
  channels_last_ = opts_.channels_last;
  if (const char* env = env_switch("FUSEC_CHANNELS_LAST"); env && std::string(env) == "0") channels_last_ = false;
  // Rank-5 regions (video models' 3-D convs) too, unless turned off for an A/B.
  channels_last_3d_ = channels_last_;
  if (const char* env = env_switch("FUSEC_CHANNELS_LAST_3D"); env && std::string(env) == "0") channels_last_3d_ = false;
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
    if (!used || (v->producer && allow_tail)) continue;
    if (v->type.dtype == DType::Undefined || !v->type.shape || !is_static(*v->type.shape)) {
      std::string where = v->producer ? v->producer->ref() : "";
      throw Error(ErrorKind::BadInput,
                  "the shape of '" + v->name + "' depends on data the CUDA backend does not have at plan time" + where,
                  ErrorCause::ShapeNeedsValues);
    }
  }
  // A position's sum that a fusion put in a conv's or matmul's epilogue comes back out as an Add
  // the float32 island can hold (float32_island.h); none in most models.
  split_position_sums(g, opts_.precision);
  // The nodes from the first data-dependent shape on (backend/host_tail.h); none in most models.
  const TailSplit split = find_host_tail(g);
  // Before any kernel is planned or tuned (conv tuning allocates and times candidates): a plan
  // that cannot fit fails now, from the shapes alone.
  check_device_memory(estimate_device_memory(g, opts_.precision), device_limit(), "the model");
  // Values whose absolute precision a consumer needs stay float32 under fp16/bf16, with the cheap
  // nodes computing them (float32_island.h); empty in most models.
  const Float32Island island = float32_island(g, opts_.precision);
  auto storage = [&](const Value* v) { return island.storage(opts_.precision, *v); };

  std::unordered_map<const Value*, int> slot_of;
  auto new_slot = [&](const Value* v) {
    Slot s;
    s.onnx_dtype = v->type.dtype;
    s.dtype = storage(v);
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
    if (v->is_initializer()) {
      input_slots_.push_back(-1);
      continue;
    }
    int io = new_slot(v);
    slots_[io].dtype = v->type.dtype;
    slots_[io].place = Slot::Place::Input;
    input_slots_.push_back(io);
    if (slots_[io].dtype != storage(v)) {
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
    if (split.has(&n)) {
      placement_.push_back({n.name, n.op_type, false, false, kHostTailKernel, split.why, "", false});
      continue;
    }
    int64_t opset = g.opset(n.domain);
    const OpSchema* schema = OpRegistry::global().find(n.domain, n.op_type, opset);
    if (!schema) bad_input_at("no schema for this op at opset " + std::to_string(opset), n.ref());

    // Plan-time folding: every input constant (or only dims matter) -> evaluate on the CPU now.
    bool all_const = !random_op(n);
    for (Value* v : n.inputs)
      if (v && !(slot_of.count(v) && slots_[slot_of[v]].host_constant)) all_const = false;
    if (all_const || dims_only_op(n)) {
      std::vector<Tensor> ins_storage;
      ins_storage.reserve(n.inputs.size());  // pointers into it are taken below
      std::vector<const Tensor*> ins;
      for (Value* v : n.inputs) {
        if (!v) {
          ins.push_back(nullptr);
          continue;
        }
        const Slot& s = slots_[slot_of.at(v)];
        if (s.host_constant) {
          ins.push_back(s.host_constant);
          continue;
        }
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
      placement_.push_back({n.name, n.op_type, false, true, "folded at plan time", "its inputs are constant", ""});
      continue;
    }

    // A Transpose between N,C,H,W and N,H,W,C dims (or their 5-D forms) over channels-last memory is a view.
    if (channels_last_ && n.op_type == "Transpose" && n.domain.empty() && n.input(0) && n.outputs.size() == 1 &&
        n.outputs[0]) {
      const int in = slot_of.at(n.input(0));
      const Slot& x = slots_[in];
      const TransposeView tv = channels_last_at(x.dims.size()) && x.dtype == storage(n.outputs[0])
                                   ? transpose_view(n.attr_ints("perm"), x.nhwc, nhwc_dtype(x.dtype))
                                   : TransposeView::None;
      if (tv != TransposeView::None) {
        Step st;
        st.kind = Step::Kind::Gpu;
        st.node = &n;
        st.label = n.name;
        st.opset = opset;
        st.op = make_view_op();
        st.in_slots = {in};
        const int s = new_slot(n.outputs[0]);
        slots_[s].nhwc = tv == TransposeView::ToChannelsLast;
        slot_of[n.outputs[0]] = s;
        st.out_slots = {s};
        placement_.push_back({n.name, n.op_type, true, false, "view of channels-last memory", "", ""});
        steps_.push_back(std::move(st));
        continue;
      }
    }

    // Layout (layout_rule.h): channels-last for conv regions (a channels-last factory exists,
    // every consumer can take NHWC); layout-agnostic elementwise nodes, reductions and nodes
    // whose outputs are layout-free ([N,C,1,1]) follow their input.
    const OpFactory* cl = channels_last_ ? factories.find_channels_last(n.domain, n.op_type) : nullptr;
    LayoutFacts facts;
    bool elementwise = false;  // an elementwise op that follows its input (planned over N,H,W,C dims)
    if (n.input(0)) {
      const Slot& x = slots_[slot_of.at(n.input(0))];
      facts.in_dims = x.dims;
      facts.in_nhwc = x.nhwc;
      facts.nhwc_dtype = nhwc_dtype(x.dtype) && channels_last_at(x.dims.size());
    }
    if (cl && n.input(0) && n.outputs.size() >= 1 && n.outputs[0]) {
      facts.kind = factories.channels_last_kind(n.domain, n.op_type);
      for (Value* v : n.outputs)
        if (v) facts.out_dims.push_back(static_dims(*v->type.shape));
      // A conv that cuDNN would pad channels-last (ShuffleNet's 58- and 116-channel branches: ten
      // kernels a call) goes channels-last only for a consumer that needs it, not for a Concat,
      // which runs in either layout.
      facts.consumers_take_nhwc =
          consumers_take_nhwc(*n.outputs[0], g, !(n.input(0) && conv_pads_channels(n, slots_[slot_of.at(n.input(0))])));
      if (facts.kind == ChannelsLast::FollowInput && n.inputs.size() > 1 && activation_input(n, 1))
        facts.in_nhwc = activations_mostly_nhwc(n, slot_of);
    } else if (layout_agnostic(n) && n.input(0)) {
      facts.kind = ChannelsLast::FollowInput;
      cl = nullptr;
      elementwise = true;
      // It follows its activation: the first input of the output's dims (x in s * x).
      const auto out = static_dims(*n.outputs[0]->type.shape);
      for (Value* v : n.inputs)
        if (v && slots_[slot_of.at(v)].dims == out) {
          facts.in_nhwc = slots_[slot_of.at(v)].nhwc;
          break;
        }
    }

    const bool want_nhwc = plan_channels_last(facts);
    // An island node runs at strict float32; any other node computes in the run's type, reading
    // the inputs an island value is kept for (reads_absolute_value) as they are stored.
    const bool in_island = island.nodes.count(&n) > 0;
    const Precision node_precision = in_island ? Precision::FP32 : opts_.precision;
    auto input_dtype = [&](size_t i, const Slot& sl) {
      if (sl.onnx_dtype != DType::Float32 || reads_absolute_value(n, i)) return sl.dtype;
      // A generated elementwise kernel widens each float input as it loads it, so it reads an
      // activation as stored, in or out of the island (no conversion pass); island constants are
      // uploaded in float32; other nodes read their inputs converted to their own type.
      if (!sl.host_constant && ew_widens_float_inputs(n.domain, n.op_type)) return sl.dtype;
      return in_island ? DType::Float32 : storage_dtype(opts_.precision, DType::Float32);
    };
    // An elementwise op planned channels-last indexes every value in memory order, at its output's rank.
    const size_t ew_rank = elementwise ? n.outputs[0]->type.shape->size() : 0;
    auto plan_values = [&](bool nhwc, std::vector<PlanValue>* pin, std::vector<PlanValue>* pout) {
      pin->clear();
      pout->clear();
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        PlanValue pv;
        if (Value* v = n.inputs[i]) {
          const Slot& sl = slots_[slot_of.at(v)];
          const DType dt = input_dtype(i, sl);
          pv = {true, sl.dims, dt, sl.onnx_dtype, sl.host_constant, nhwc && activation_input(n, i)};
          if (nhwc && elementwise) pv.dims = nhwc_order(pv.dims, ew_rank);
        }
        pin->push_back(pv);
      }
      for (Value* v : n.outputs) {
        PlanValue pv;
        if (v) pv = {true, static_dims(*v->type.shape), storage(v), v->type.dtype, nullptr, nhwc};
        if (v && nhwc && elementwise) pv.dims = nhwc_order(pv.dims, ew_rank);
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
      PlanContext pc(n, *schema, opset, node_precision, ctx_, pin, pout);
      const OpFactory* f = cl ? cl : factories.find(n.domain, n.op_type);
      if (f) st.op = (*f)(pc, &why);
      nhwc = st.op != nullptr;
    }
    if (!st.op) {
      plan_values(false, &pin, &pout);
      const OpFactory* f = factories.find(n.domain, n.op_type);
      if (f) {
        PlanContext pc(n, *schema, opset, node_precision, ctx_, pin, pout);
        st.op = (*f)(pc, &why);
      } else {
        why = "no CUDA kernel for " + std::string(n.domain.empty() ? "" : n.domain + ".") + n.op_type;
      }
    }
    BuildTrace::add("plan", n.op_type, n.name, ms_since(plan_t0));
    // Inputs in the layout and type the op was planned for (inserting a relayout or a conversion
    // before it if needed).
    for (size_t i = 0; i < n.inputs.size(); ++i)
      st.in_slots.push_back(
          n.inputs[i] ? typed_slot(layout_slot(n.inputs[i], pin[i].nhwc, slot_of), pin[i].dtype, n.inputs[i]->name)
                      : -1);
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
      placement_.push_back(
          {n.name, n.op_type, true, false, st.op->kernel_name(), "", st.op->device_decision(), in_island});
    } else {
      st.kind = Step::Kind::Cpu;
      placement_.push_back({n.name, n.op_type, false, false, "cpu reference", why, "", in_island});
    }
    steps_.push_back(std::move(st));
  }

  if (opts_.strict) {
    std::vector<UnsupportedNode> cpu_nodes;
    for (const Step& st : steps_)
      if (st.kind == Step::Kind::Cpu)
        cpu_nodes.push_back({st.node->name, st.node->op_type, st.node->domain, placement_reason(st.node->name)});
    if (!cpu_nodes.empty())
      bad_input("--strict: these nodes have no CUDA kernel and would run on the CPU: " +
                describe_unsupported(cpu_nodes));
  }

  // Graph outputs: an ONNX-typed slot the host copies from, pinned for the whole run. The host
  // tail reads its inputs from the same kind of slot.
  std::unordered_map<const Value*, int> host_slots;
  auto host_slot = [&](Value* v) {
    if (auto it = host_slots.find(v); it != host_slots.end()) return it->second;
    int s = layout_slot(v, false, slot_of);
    // By value: new_slot() below may grow slots_ (a reference here read freed memory, found by
    // ASan on the GPU suite).
    const DType src_dtype = slots_[s].dtype;
    bool produced_here = slots_[s].place == Slot::Place::Arena && src_dtype == slots_[s].onnx_dtype;
    bool already_output = std::find(output_slots_.begin(), output_slots_.end(), s) != output_slots_.end();
    if (produced_here && !already_output) {
      slots_[s].pinned = true;
      return host_slots[v] = s;
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
    return host_slots[v] = out;
  };
  for (Value* v : g.outputs) {
    if (v->producer && split.has(v->producer)) {
      output_slots_.push_back(-1);  // the host tail's
      continue;
    }
    output_slots_.push_back(host_slot(v));  // a value listed twice shares its slot
  }
  if (split.any()) plan_host_tail(g, split, slot_of, host_slot);

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

// Slot s in another storage type: a constant uploaded a second time in it, anything else converted
// by a step before its first reader (once per slot and type).
int Impl::typed_slot(int s, DType dtype, const std::string& name) {
  if (slots_[s].dtype == dtype) return s;
  const auto key = std::make_pair(s, dtype);
  if (auto it = retyped_.find(key); it != retyped_.end()) return it->second;
  Slot copy = slots_[s];
  copy.dtype = dtype;
  copy.pinned = false;
  copy.unread = false;
  copy.first = copy.last = -1;
  copy.offset = 0;
  copy.alias_of = -1;
  if (!copy.host_constant) copy.place = Slot::Place::Arena;
  slots_.push_back(copy);
  const int t = static_cast<int>(slots_.size()) - 1;
  if (!copy.host_constant) {
    Step st;
    st.kind = Step::Kind::Convert;
    st.label = "convert '" + name + "' to " + dtype_name(dtype);
    st.in_slots = {s};
    st.out_slots = {t};
    steps_.push_back(std::move(st));
  }
  retyped_[key] = t;
  return t;
}

std::string Impl::placement_reason(const std::string& node) const {
  for (const auto& p : placement_)
    if (p.node == node) return p.reason;
  return "";
}

}  // namespace fusec::cuda::executor
