// The run path: each step in plan order on the one stream, the CPU fallback with its copies, and
// the device error record that turns bad data a kernel found into the CPU reference's error. This
// is the code a CUDA graph captures, so it works only at the addresses memory.cpp fixed; a CPU
// step, which must synchronize, turns capture off (build_plan()).
#include <cuda_runtime_api.h>

#include <chrono>
#include <string>
#include <vector>

#include "backend/cpu/kernel.h"
#include "backend/cpu/kernels/common.h"
#include "backend/cuda/core/build_trace.h"
#include "backend/cuda/core/check.h"
#include "backend/cuda/core/convert.h"
#include "backend/cuda/executor/executable.h"
#include "backend/cuda/ops/movement/movement.cuh"
#include "ir/error.h"

namespace fusec::cuda::executor {

namespace {

/// Host-side dtype conversion (storage <-> model types) for constants and the CPU fallback.
Tensor convert_host(const Tensor& t, DType to) {
  Tensor out(to, t.dims());
  cpu::convert_tensor(t, out);
  return out;
}

const char* step_kind_name(Step::Kind k) {
  switch (k) {
    case Step::Kind::Gpu:
      return "kernel";
    case Step::Kind::Cpu:
      return "cpu";
    case Step::Kind::Convert:
      return "convert";
    case Step::Kind::Copy:
      return "copy";
    case Step::Kind::Relayout:
      return "relayout";
  }
  return "";
}

}  // namespace

/// Enqueues the copy of the error record into pinned memory and its reset for the next run.
void Impl::enqueue_error_fetch() {
  FUSEC_CUDA_CHECK(cudaMemcpyAsync(error_host_, error_record_.get(), sizeof(DeviceErrorRecord), cudaMemcpyDeviceToHost,
                                   ctx_.stream()));
  FUSEC_CUDA_CHECK(cudaMemsetAsync(error_record_.get(), 0, sizeof(DeviceErrorRecord), ctx_.stream()));
}

/// After the stream has caught up with enqueue_error_fetch(): the CPU reference's error for
/// bad data a kernel found, naming its node.
void Impl::raise_device_error() {
  const DeviceErrorRecord r = *error_host_;
  *error_host_ = {};
  if (r.code == kNoDeviceError) return;
  std::string where;
  if (r.step >= 0 && static_cast<size_t>(r.step) < steps_.size() && steps_[r.step].node)
    where = steps_[r.step].node->ref();
  if (where.empty()) bad_input(device_error_text(r));
  bad_input_at(device_error_text(r), where);
}

void Impl::run_steps() {
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
void Impl::run_steps_traced() {
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

void Impl::run_step(Step& st, int index, Stream stream) {
  switch (st.kind) {
    case Step::Kind::Gpu: {
      if (st.op->is_view() && st.outs[0].data == st.ins[0].data) break;
      LaunchArgs a{st.ins, st.outs,          ctx_,
                   stream, workspace_.get(), {static_cast<DeviceErrorRecord*>(error_record_.get()), index}};
      try {
        st.op->launch(a);
      } catch (const Error& e) {
        rethrow_at_node(e, st.node->ref());
      }
      break;
    }
    case Step::Kind::Copy:
      if (st.outs[0].nbytes())
        FUSEC_CUDA_CHECK(
            cudaMemcpyAsync(st.outs[0].data, st.ins[0].data, st.outs[0].nbytes(), cudaMemcpyDeviceToDevice, stream));
      break;
    case Step::Kind::Convert:
      if (!launch_convert_float(st.ins[0].data, st.ins[0].dtype, st.outs[0].data, st.outs[0].dtype, st.outs[0].numel(),
                                stream))
        internal_error(std::string("no device conversion from ") + dtype_name(st.ins[0].dtype) + " to " +
                       dtype_name(st.outs[0].dtype));
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
void Impl::run_on_cpu(Step& st) {
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
    if (sl.host_constant) {
      ins[i] = sl.host_constant;
      continue;
    }
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
      internal_error("CPU fallback produced " + dims_str(outs[i].dims()) + " where the plan has " + dims_str(sl.dims) +
                     st.node->ref());
    Tensor t = sl.dtype == outs[i].dtype() ? std::move(outs[i]) : convert_host(outs[i], sl.dtype);
    if (t.nbytes()) FUSEC_CUDA_CHECK(cudaMemcpy(st.outs[i].data, t.raw(), t.nbytes(), cudaMemcpyHostToDevice));
  }
}

}  // namespace fusec::cuda::executor
