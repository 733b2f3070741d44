// The host tail on CUDA (which nodes, and the CPU-side graph: backend/host_tail.h). The GPU part
// runs every node whose shapes are known, captured as a CUDA graph as usual, and leaves what the
// tail reads in pinned slots of the model's types; each run then copies those to the host, reports
// bad data a kernel found, and runs the tail on the CPU reference. A detector's backbone stays on
// the GPU, and its NMS and what follows run where their sizes are known.
#include <cuda_runtime_api.h>

#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/core/check.h"
#include "backend/cuda/executor/executable.h"
#include "ir/error.h"

namespace fusec::cuda::executor {

void Impl::plan_host_tail(const Graph& g, const TailSplit& split, const std::unordered_map<const Value*, int>& slot_of,
                          const std::function<int(Value*)>& host_slot) {
  auto tail = std::make_unique<HostTail>();
  TailGraph tg = make_tail_graph(g, split.in_tail);
  for (Value* v : tg.reads) {
    // A graph input is read from the buffer it was uploaded to, a folded value from the host,
    // both exact; a value the GPU part computes from a pinned slot of the model's type.
    int s = -1;
    for (size_t i = 0; i < g.inputs.size(); ++i)
      if (g.inputs[i] == v) s = input_slots_[i];
    const Tensor* constant = s < 0 ? slots_[slot_of.at(v)].host_constant : nullptr;
    if (s < 0 && !constant) s = host_slot(v);
    tail->in_slots.push_back(s);
    tail->in_constants.push_back(constant);
  }
  tail->output_of = std::move(tg.output_of);
  tail->exe = cpu::CpuBackend().compile(*tg.graph);
  const size_t nodes = tg.graph->nodes().size();
  tail->graph = std::move(tg.graph);
  tail->label = "host tail: " + std::to_string(nodes) + " node" + (nodes == 1 ? "" : "s") + " on the CPU reference (" +
                split.why + ")";
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
