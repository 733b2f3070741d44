#include "backend/cpu/cpu_backend.h"

#include <atomic>
#include <string>
#include <unordered_map>

#include "backend/cpu/kernel.h"
#include "backend/memory_planner.h"
#include "ir/error.h"
#include "ir/memory_limit.h"
#include "ir/switches.h"

namespace fusec::cpu {
namespace {

struct Step {
  const Node* node;
  const OpSchema* schema;
  const Kernel* kernel;
  int64_t opset;
  std::vector<int> in_slots;    // -1: left out
  std::vector<int> out_slots;   // -1: left out
  std::vector<int> free_after;  // slots whose last reader is this step
  bool zero_outputs = true;     // the kernel may leave output elements unwritten (Writes::Some)
  bool sets_outputs = false;    // the kernel makes its outputs itself (Writes::Itself)
  std::shared_ptr<StepCache> cache;  // what the kernel keeps from one run to the next
};

class CpuExecutable : public Executable {
 public:
  explicit CpuExecutable(const Graph& g) : graph_(g.clone()) {
    build();
    // What kernels may keep beside the weights (packed copies): half the host memory free once the
    // arena is placed, so the copies never crowd out the activations; none with
    // FUSEC_CPU_PACKED_WEIGHTS=0.
    const char* packed = env_switch("FUSEC_CPU_PACKED_WEIGHTS");
    if (!packed || std::string(packed) != "0")
      *cache_budget_ = (host_memory().limit() - std::min(host_memory().limit(), host_memory().used())) / 2;
  }

  std::string backend_name() const override { return "cpu"; }
  MemoryStats memory() const override {
    MemoryStats m = stats_;
    for (const Step& st : steps_) m.packed_weight_bytes += st.cache->held();
    return m;
  }
  void set_step_observer(StepObserver* observer) override { observer_ = observer; }
  const Graph* executed_graph() const override { return graph_.get(); }

  std::vector<Tensor> run(const std::vector<Tensor>& inputs) override {
    const Graph& g = *graph_;
    if (inputs.size() != g.inputs.size())
      bad_input("the model has " + std::to_string(g.inputs.size()) + " inputs, got " + std::to_string(inputs.size()));
    RunState rs;
    rs.slots.resize(slot_count_);
    for (auto& [slot, t] : constants_) rs.slots[slot] = t;
    for (size_t i = 0; i < inputs.size(); ++i) {
      check_input_tensor(*g.inputs[i], inputs[i]);
      rs.slots[slot_of_.at(g.inputs[i])] = inputs[i];
    }
    for (size_t i = 0; i < steps_.size(); ++i) {
      const Step& st = steps_[i];
      if (observer_) {
        StepInfo info{i, st.node, "node", st.node->name};
        observer_->step_begin(info);
        with_node_context([&] { return st.node->ref(); }, [&] { run_step(st, rs); });
        observer_->step_end(info);
      } else {
        with_node_context([&] { return st.node->ref(); }, [&] { run_step(st, rs); });
      }
    }
    if (!stats_.planned) stats_.peak_activation_bytes = std::max(stats_.peak_activation_bytes, rs.peak);
    std::vector<Tensor> outs;
    for (Value* v : g.outputs) {
      const Tensor& t = rs.slots[slot_of_.at(v)];
      outs.push_back(arena_[slot_of_.at(v)].placed ? t.clone() : t);
    }
    return outs;
  }

 private:
  /// What one run carries from step to step (the scratch vectors are reused to avoid
  /// allocating per node).
  struct RunState {
    std::vector<Tensor> slots;
    size_t live = 0, peak = 0;  // bytes of outputs allocated outside the arena
    std::vector<const Tensor*> in_ptrs;
    std::vector<TypeInfo> in_types;
    std::vector<const TypeInfo*> in_type_ptrs;
  };

  /// Infers the step's exact output shapes from its inputs' values, places its outputs (in the
  /// planned arena, or freshly allocated when the plan does not fit), runs its kernel, and frees
  /// what it read last.
  void run_step(const Step& st, RunState& rs) {
    auto& slots = rs.slots;
    if (st.sets_outputs) return run_self_sizing_step(st, rs);
    rs.in_ptrs.assign(st.in_slots.size(), nullptr);
    rs.in_types.assign(st.in_slots.size(), TypeInfo{});
    rs.in_type_ptrs.assign(st.in_slots.size(), nullptr);
    for (size_t i = 0; i < st.in_slots.size(); ++i) {
      if (st.in_slots[i] < 0) continue;
      const Tensor& t = slots[st.in_slots[i]];
      rs.in_ptrs[i] = &t;
      rs.in_types[i] = {t.dtype(), shape_of(t.dims())};
      rs.in_type_ptrs[i] = &rs.in_types[i];
    }
    InferContext ictx(*st.node, *st.schema, st.opset, rs.in_type_ptrs, rs.in_ptrs);
    st.schema->infer(ictx);
    std::vector<Tensor*> out_ptrs(st.out_slots.size(), nullptr);
    for (size_t i = 0; i < st.out_slots.size(); ++i) {
      int s = st.out_slots[i];
      if (s < 0) continue;
      const TypeInfo& t = ictx.outputs[i];
      if (t.dtype == DType::Undefined || !t.shape || !is_static(*t.shape))
        internal_error("output " + std::to_string(i) + " has no static shape at run time" + st.node->ref());
      auto dims = static_dims(*t.shape);
      const ArenaSlot& planned = arena_[s];
      if (planned.placed && t.dtype == planned.dtype && checked_nbytes(dims, t.dtype) <= planned.bytes) {
        slots[s] =
            Tensor::view(t.dtype, dims, static_cast<char*>(arena_storage_.get()) + planned.offset, arena_storage_);
        // Arena memory holds an earlier tensor's bytes: zero it, as a fresh Tensor is, unless the
        // kernel overwrites every element anyway.
        if (st.zero_outputs) std::memset(slots[s].raw(), 0, slots[s].nbytes());
      } else {
        // Checks the size against the memory limit first; zeroed unless the kernel writes it all.
        slots[s] = st.zero_outputs ? Tensor(t.dtype, dims) : Tensor::uninitialized(t.dtype, dims);
        rs.live += slots[s].nbytes();
      }
      out_ptrs[i] = &slots[s];
    }
    rs.peak = std::max(rs.peak, rs.live);
    if (!nothing_to_compute(out_ptrs)) {
      KernelContext kctx(*st.node, *st.schema, st.opset, rs.in_ptrs, out_ptrs, st.cache.get());
      (*st.kernel)(kctx);
    }
    for (int s : st.free_after) {
      if (!arena_[s].placed) rs.live -= std::min(rs.live, slots[s].nbytes());
      slots[s] = Tensor();
    }
  }

  /// A kernel that makes its own outputs (If, Loop): no inference, no placement.
  void run_self_sizing_step(const Step& st, RunState& rs) {
    auto& slots = rs.slots;
    rs.in_ptrs.assign(st.in_slots.size(), nullptr);
    for (size_t i = 0; i < st.in_slots.size(); ++i)
      if (st.in_slots[i] >= 0) rs.in_ptrs[i] = &slots[st.in_slots[i]];
    std::vector<Tensor*> out_ptrs(st.out_slots.size(), nullptr);
    for (size_t i = 0; i < st.out_slots.size(); ++i)
      if (st.out_slots[i] >= 0) out_ptrs[i] = &(slots[st.out_slots[i]] = Tensor());
    KernelContext kctx(*st.node, *st.schema, st.opset, rs.in_ptrs, out_ptrs, st.cache.get());
    (*st.kernel)(kctx);
    for (size_t i = 0; i < out_ptrs.size(); ++i) {
      if (!out_ptrs[i]) continue;
      if (out_ptrs[i]->dtype() == DType::Undefined)
        internal_error("the kernel left output " + std::to_string(i) + " unset" + st.node->ref());
      rs.live += out_ptrs[i]->nbytes();
    }
    rs.peak = std::max(rs.peak, rs.live);
    for (int s : st.free_after) {
      if (!arena_[s].placed) rs.live -= std::min(rs.live, slots[s].nbytes());
      slots[s] = Tensor();
    }
  }

  void build() {
    Graph& g = *graph_;
    g.topo_sort();
    std::vector<const Value*> value_of;  // by slot
    auto slot = [&](Value* v) {
      auto [it, fresh] = slot_of_.emplace(v, slot_count_);
      if (fresh) {
        value_of.push_back(v);
        ++slot_count_;
      }
      return it->second;
    };
    for (Value* v : g.initializers()) {
      constants_.push_back({slot(v), *v->initializer});
      stats_.weight_bytes += v->initializer->nbytes();
    }
    for (Value* v : g.inputs) slot(v);
    // The same tensor on every run: an initializer that no graph input of the same name overrides.
    std::vector<bool> constant_slot(static_cast<size_t>(slot_count_), false);
    for (auto& [s, t] : constants_) constant_slot[s] = true;
    for (Value* v : g.inputs) constant_slot[slot(v)] = false;
    std::vector<int> first, last;  // by slot: the step that writes it, the last step that reads it
    auto grow = [&] {
      first.resize(static_cast<size_t>(slot_count_), -1);
      last.resize(static_cast<size_t>(slot_count_), -1);
    };
    int step_index = 0;
    for (const auto& np : g.nodes()) {
      const Node& n = *np;
      Step st;
      st.node = &n;
      st.opset = g.opset(n.domain);
      st.schema = OpRegistry::global().find(n.domain, n.op_type, st.opset);
      st.kernel = KernelRegistry::global().find(n.domain, n.op_type);
      if (!st.schema || !st.kernel) internal_error("compile: unsupported node slipped through" + n.ref());
      const Writes writes = KernelRegistry::global().writes(n.domain, n.op_type);
      st.zero_outputs = writes != Writes::Every;
      st.sets_outputs = writes == Writes::Itself;
      for (Value* v : n.inputs) st.in_slots.push_back(v ? slot(v) : -1);
      for (Value* v : n.outputs) st.out_slots.push_back(v ? slot(v) : -1);
      std::vector<bool> constant(st.in_slots.size());
      for (size_t i = 0; i < constant.size(); ++i)
        constant[i] = st.in_slots[i] >= 0 && st.in_slots[i] < static_cast<int>(constant_slot.size()) &&
                      constant_slot[st.in_slots[i]];
      st.cache = std::make_shared<StepCache>(std::move(constant), cache_budget_);
      grow();
      for (int s : st.in_slots)
        if (s >= 0) last[s] = step_index;
      for (int s : st.out_slots)
        if (s >= 0) {
          first[s] = step_index;
          if (last[s] < 0) last[s] = step_index;
        }
      steps_.push_back(std::move(st));
      ++step_index;
    }
    for (Value* v : g.outputs) slot(v);
    grow();
    // Graph outputs, inputs and constants live for the whole run: never freed, never in the arena.
    std::vector<bool> pinned(static_cast<size_t>(slot_count_), false);
    for (Value* v : g.outputs) pinned[slot(v)] = true;
    for (Value* v : g.inputs) pinned[slot(v)] = true;
    for (auto& [s, t] : constants_) pinned[s] = true;
    for (int s = 0; s < slot_count_; ++s)
      if (last[s] >= 0 && !pinned[s]) steps_[last[s]].free_after.push_back(s);
    // What a kernel makes itself lives outside the arena, whatever its inferred shape.
    std::vector<bool> self_made(static_cast<size_t>(slot_count_), false);
    for (const Step& st : steps_)
      if (st.sets_outputs)
        for (int s : st.out_slots)
          if (s >= 0) self_made[s] = true;

    // Static plan: when every intermediate has a static shape, place them all in one arena.
    arena_.assign(static_cast<size_t>(slot_count_), ArenaSlot{});
    std::vector<BufferRequest> reqs;
    std::vector<int> req_slot;
    for (int s = 0; s < slot_count_; ++s) {
      if (pinned[s] || self_made[s] || first[s] < 0) continue;
      const Value* v = value_of[s];
      if (!v->type.shape || !is_static(*v->type.shape) || v->type.dtype == DType::Undefined) return;
      const int64_t bytes = checked_nbytes(static_dims(*v->type.shape), v->type.dtype);
      reqs.push_back({static_cast<size_t>(bytes), first[s], last[s]});
      req_slot.push_back(s);
    }
    MemoryPlan plan = plan_memory(reqs, 64);
    check_allocation(plan.arena_bytes,
                     "the activation arena (" + std::to_string(reqs.size()) + " intermediate tensors)");
    arena_storage_ = aligned_storage(plan.arena_bytes);
    for (size_t i = 0; i < reqs.size(); ++i) {
      const int s = req_slot[i];
      arena_[s] = {true, plan.offsets[i], value_of[s]->type.dtype, static_cast<int64_t>(reqs[i].bytes)};
    }
    stats_.planned = true;
    stats_.peak_activation_bytes = plan.arena_bytes;
  }

  std::unique_ptr<Graph> graph_;
  std::vector<Step> steps_;
  std::unordered_map<const Value*, int> slot_of_;
  int slot_count_ = 0;
  std::vector<std::pair<int, Tensor>> constants_;
  /// Where a slot lives in the static plan (placed: only when every intermediate shape is static).
  struct ArenaSlot {
    bool placed = false;
    size_t offset = 0;
    DType dtype = DType::Undefined;
    int64_t bytes = 0;
  };
  std::vector<ArenaSlot> arena_;  // by slot
  std::shared_ptr<void> arena_storage_;
  MemoryStats stats_;
  StepCache::Budget cache_budget_ = std::make_shared<std::atomic<size_t>>(0);
  StepObserver* observer_ = nullptr;
};

}  // namespace

std::vector<UnsupportedNode> CpuBackend::unsupported(const Graph& g) const {
  std::vector<UnsupportedNode> out;
  for (const auto& n : g.nodes()) {
    std::string why = unsupported_reason(g, *n);
    if (why.empty() && !KernelRegistry::global().find(n->domain, n->op_type)) why = "no CPU kernel";
    if (!why.empty()) out.push_back({n->name, n->op_type, n->domain, why});
  }
  return out;
}

std::unique_ptr<Executable> CpuBackend::compile(const Graph& g) {
  auto bad = unsupported(g);
  if (!bad.empty()) fusec::unsupported(describe_unsupported(bad));
  if (g.outputs.empty()) bad_input("the graph has no outputs; there is nothing to run");
  return std::make_unique<CpuExecutable>(g);
}

}  // namespace fusec::cpu
