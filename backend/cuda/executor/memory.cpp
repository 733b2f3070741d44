// Where every slot of a plan lives on the device. The plan's buffers are allocated here, right
// after the exact device memory check that guards them (build_plan()'s estimate is the early one),
// and each slot's address is fixed once, which is what lets a run be captured into a CUDA graph.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>
#include <vector>

#include "backend/cuda/core/check.h"
#include "backend/cuda/core/constant_upload.h"
#include "backend/cuda/executor/executable.h"
#include "backend/device_memory.h"
#include "backend/memory_planner.h"

namespace fusec::cuda::executor {

// Views alias their input when neither side is pinned or an I/O buffer; everything else in the
// arena gets a [first, last] step interval for the planner.
void Impl::place_memory() {
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
DeviceMemoryLimit Impl::device_limit() const {
  DeviceMemoryLimit lim;
  FUSEC_CUDA_CHECK(cudaMemGetInfo(&lim.free_bytes, &lim.total_bytes));
  lim.cap = opts_.max_device_memory;
  lim.device = "cuda:" + std::to_string(ctx_.device()) + " " + ctx_.device_name();
  return lim;
}

void Impl::upload_constants() {
  ConstantUploader up(ctx_.stream());
  for (size_t s = 0; s < slots_.size(); ++s) {
    const Slot& sl = slots_[s];
    if (sl.place != Slot::Place::Weights || sl.unread || !sl.nbytes()) continue;
    up.upload(*sl.host_constant, addr(static_cast<int>(s)), sl.dtype);
  }
  up.finish();
}

void* Impl::addr(int s) const {
  const Slot& sl = slots_[s];
  switch (sl.place) {
    case Slot::Place::Weights:
      return sl.unread ? nullptr : static_cast<char*>(weights_.get()) + sl.offset;
    case Slot::Place::Input:
      return static_cast<char*>(io_.get()) + sl.offset;
    case Slot::Place::Alias:
      return addr(sl.alias_of);
    case Slot::Place::Arena:
      if (sl.first < 0) return nullptr;
      return static_cast<char*>(arena_.get()) + sl.offset;
  }
  return nullptr;
}

void Impl::resolve_tensors() {
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

}  // namespace fusec::cuda::executor
