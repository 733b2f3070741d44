// The CUDA backend's entry points, and the executable's public methods: the order of one run
// (upload, launch, download) and when a plan is built, captured or replayed, on one screen. What
// each part does is in the file of its concern (executable.h lists them).
#include "backend/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/core/build_trace.h"
#include "backend/cuda/core/check.h"
#include "backend/cuda/executor/executable.h"
#include "backend/device_memory.h"
#include "ir/error.h"
#include "ir/shape_inference.h"

namespace fusec::cuda::executor {

Impl::Impl(const Graph& g, const CudaOptions& opts)
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
    for (Value* v : graph_->inputs)
      probe.push_back(Tensor::view(v->type.dtype, static_dims(*v->type.shape), nullptr, nullptr));
    try {
      build_plan(probe, std::vector<bool>(probe.size(), false), false);
      key_ = signature(probe, by_value_);
    } catch (const Error& e) {
      // Data-dependent shapes: planned on the first run, with the inputs' values.
      if (e.cause() != ErrorCause::ShapeNeedsValues) throw;
      plan_.reset();
    }
  }
}

Impl::~Impl() {
  release_graph();
  if (error_host_) cudaFreeHost(error_host_);
  for (cudaEvent_t e : timing_events_)
    if (e) cudaEventDestroy(e);
}

std::vector<Tensor> Impl::run(const std::vector<Tensor>& inputs) {
  upload_inputs(inputs);
  launch();
  return download_outputs();
}

void Impl::upload_inputs(const std::vector<Tensor>& inputs) {
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
      FUSEC_CUDA_CHECK(
          cudaMemcpyAsync(addr(s), inputs[i].raw(), inputs[i].nbytes(), cudaMemcpyHostToDevice, ctx_.stream()));
  }
  FUSEC_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream()));
}

void Impl::launch() {
  launch_gpu_part();
  if (tail_) run_host_tail();
}

void Impl::launch_gpu_part() {
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

void Impl::synchronize() {
  ctx_.make_current();
  FUSEC_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream()));
}

double Impl::timed_launch_ms() {
  ctx_.make_current();
  for (cudaEvent_t& e : timing_events_)
    if (!e) FUSEC_CUDA_CHECK(cudaEventCreate(&e));
  FUSEC_CUDA_CHECK(cudaEventRecord(timing_events_[0], ctx_.stream()));
  launch();
  FUSEC_CUDA_CHECK(cudaEventRecord(timing_events_[1], ctx_.stream()));
  FUSEC_CUDA_CHECK(cudaEventSynchronize(timing_events_[1]));
  float ms = 0;
  FUSEC_CUDA_CHECK(cudaEventElapsedTime(&ms, timing_events_[0], timing_events_[1]));
  return static_cast<double>(ms);
}

void Impl::launch_uncaptured() {
  if (!plan_) internal_error("launch before the inputs were uploaded");
  ctx_.make_current();
  run_steps();
  if (tail_) run_host_tail();
}

std::vector<Tensor> Impl::download_outputs() {
  ctx_.make_current();
  std::vector<Tensor> outs;
  for (size_t i = 0; i < graph_->outputs.size(); ++i) {
    if (output_slots_[i] < 0) {  // computed by the host tail
      const size_t k = static_cast<size_t>(tail_->output_of[i]);
      if (k >= tail_->outputs.size()) internal_error("outputs downloaded before the host tail ran");
      outs.push_back(tail_->outputs[k].clone());
      continue;
    }
    const Slot& s = slots_[output_slots_[i]];
    Tensor t(s.onnx_dtype, s.dims);
    if (t.nbytes())
      FUSEC_CUDA_CHECK(
          cudaMemcpyAsync(t.raw(), addr(output_slots_[i]), t.nbytes(), cudaMemcpyDeviceToHost, ctx_.stream()));
    outs.push_back(std::move(t));
  }
  enqueue_error_fetch();
  FUSEC_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream()));
  raise_device_error();
  return outs;
}

}  // namespace fusec::cuda::executor

namespace fusec::cuda {

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
  if (cudaGetDeviceProperties(&p, opts_.device) == cudaSuccess)
    lim.device = "cuda:" + std::to_string(opts_.device) + " " + p.name;
  lim.cap = opts_.max_device_memory;
  check_device_memory(need, lim, "the model");
}

std::unique_ptr<CudaExecutable> CudaBackend::compile_cuda(const Graph& g) {
  auto bad = unsupported(g);
  if (!bad.empty()) fusec::unsupported(describe_unsupported(bad));
  if (g.outputs.empty()) bad_input("the graph has no outputs; there is nothing to run");
  return std::make_unique<executor::Impl>(g, opts_);
}

}  // namespace fusec::cuda