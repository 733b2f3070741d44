// The host tail: a model whose shapes depend on its data past some node (a detector's
// NonMaxSuppression, NonZero, a data-dependent If) cannot be planned whole, since the arena needs
// every size before the first launch. Only the shapes after that point are unknown, so the plan
// stops there: the GPU runs every node whose shapes are known (captured as a CUDA graph as usual),
// and the CPU reference runs the rest on the host, on the values the GPU part leaves in pinned,
// model-typed slots, shapes found as it goes. A backbone stays on the GPU, and the NMS and what
// follows it run where their sizes are known. `placement()` names each tail node and why.
#include <cuda_runtime_api.h>

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/core/check.h"
#include "backend/cuda/executor/executable.h"
#include "ir/error.h"

namespace fusec::cuda::executor {

void Impl::plan_host_tail(const Graph& g, const std::vector<bool>& in_tail, const std::string& why,
                          const std::unordered_map<const Value*, int>& slot_of,
                          const std::function<int(Value*)>& host_slot) {
  auto tail = std::make_unique<HostTail>();
  auto tg = std::make_unique<Graph>();
  tg->name = g.name + " (host tail)";
  tg->meta = g.meta;
  tg->opsets = g.opsets;
  std::unordered_map<const Value*, Value*> mapped;
  // A value the tail reads but does not compute: an initializer stays one; anything else (a graph
  // input, a value the GPU part computes or folded at plan time) becomes an input of the tail.
  auto tail_input = [&](Value* v) -> Value* {
    if (auto it = mapped.find(v); it != mapped.end()) return it->second;
    Value* c = tg->add_named_value(v->name);
    c->type = v->type;
    mapped[v] = c;
    if (v->is_initializer()) {
      c->initializer = v->initializer;
      return c;
    }
    c->is_graph_input = true;
    tg->inputs.push_back(c);
    // A graph input is read from the buffer it was uploaded to, a folded value from the host,
    // both exact; a value the GPU part computes from a pinned slot of the model's type.
    int s = -1;
    for (size_t i = 0; i < g.inputs.size(); ++i)
      if (g.inputs[i] == v) s = input_slots_[i];
    const Tensor* constant = s < 0 ? slots_[slot_of.at(v)].host_constant : nullptr;
    if (s < 0 && !constant) s = host_slot(v);
    tail->in_slots.push_back(s);
    tail->in_constants.push_back(constant);
    return c;
  };
  size_t nodes = 0;
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    if (!in_tail[i]) continue;
    const Node& n = *g.nodes()[i];
    std::vector<Value*> ins, outs;
    for (Value* v : n.inputs) ins.push_back(v ? tail_input(v) : nullptr);
    for (Value* v : n.outputs) {
      if (!v) {
        outs.push_back(nullptr);
        continue;
      }
      Value* c = tg->add_named_value(v->name);
      c->type.dtype = v->type.dtype;  // the shapes are the CPU reference's to find, run by run
      mapped[v] = c;
      outs.push_back(c);
    }
    Node* c = tg->add_node(n.op_type, ins, outs, n.name, n.domain);
    c->attrs = n.attrs;
    c->doc_string = n.doc_string;
    c->fused_from = n.fused_from;
    ++nodes;
  }
  tail->output_of.assign(g.outputs.size(), -1);
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    Value* v = g.outputs[i];
    auto it = mapped.find(v);
    if (output_slots_[i] >= 0 || it == mapped.end()) continue;
    it->second->is_graph_output = true;
    tail->output_of[i] = static_cast<int>(tg->outputs.size());
    tg->outputs.push_back(it->second);
  }
  tail->exe = cpu::CpuBackend().compile(*tg);
  tail->graph = std::move(tg);
  tail->label =
      "host tail: " + std::to_string(nodes) + " node" + (nodes == 1 ? "" : "s") + " on the CPU reference (" + why + ")";
  tail_ = std::move(tail);
}

void Impl::run_host_tail() {
  HostTail& t = *tail_;
  const StepInfo info{steps_.size(), nullptr, "cpu", t.label};
  if (observer_) observer_->step_begin(info);
  Stream stream = ctx_.stream();
  std::vector<Tensor> ins;
  ins.reserve(t.in_slots.size());
  for (size_t i = 0; i < t.in_slots.size(); ++i) {
    if (const Tensor* c = t.in_constants[i]) {
      ins.push_back(Tensor::view(c->dtype(), c->dims(), const_cast<void*>(c->raw()), nullptr));
      continue;
    }
    const Slot& s = slots_[t.in_slots[i]];
    Tensor host(s.onnx_dtype, s.dims);
    if (host.nbytes())
      FUSEC_CUDA_CHECK(cudaMemcpyAsync(host.raw(), addr(t.in_slots[i]), host.nbytes(), cudaMemcpyDeviceToHost, stream));
    ins.push_back(std::move(host));
  }
  // Bad data a kernel of the GPU part found is the error to report, before the tail reads what
  // it left (the CPU reference would have stopped there).
  enqueue_error_fetch();
  FUSEC_CUDA_CHECK(cudaStreamSynchronize(stream));
  raise_device_error();
  t.outputs = t.exe->run(ins);
  if (observer_) observer_->step_end(info);
}

}  // namespace fusec::cuda::executor
