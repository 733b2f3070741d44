// The plan's data: slots (where each value lives on the device, in which type and layout) and
// steps (what runs, in order). build_plan() writes it; layout, memory placement, running and
// capture only read or annotate it, so it is the one thing every file of the executor shares.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/core/cuda_op.h"
#include "backend/cuda/ops/movement/movement.cuh"
#include "ir/graph.h"
#include "ir/tensor.h"

namespace fusec::cuda::executor {

struct Slot {
  DType dtype = DType::Undefined;  // storage dtype on the device
  DType onnx_dtype = DType::Undefined;
  std::vector<int64_t> dims;
  enum class Place { Arena, Weights, Input, Alias } place = Place::Arena;
  size_t offset = 0;  // within its buffer
  int alias_of = -1;  // Place::Alias: the slot whose memory this one views
  int first = -1, last = -1;
  bool pinned = false;                    // lives for the whole run (graph output)
  const Tensor* host_constant = nullptr;  // constant slots: the host value (ONNX dtype)
  bool nhwc = false;                      // 4-D or 5-D activation stored channels-last
  bool unread = false;                    // Place::Weights read by no step on the device: not uploaded
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

/// The nodes from the first value whose shape depends on data the plan does not have (NonZero's
/// output, NonMaxSuppression's, a data-dependent If's), and every node that reads one of their
/// outputs: compiled for the CPU reference and run on the host after the GPU part
/// (host_tail.cpp). The GPU part ends in the pinned, model-typed slots the tail reads.
struct HostTail {
  std::unique_ptr<Graph> graph;             // the tail nodes, its inputs the values they read from the GPU part
  std::unique_ptr<Executable> exe;          // the CPU reference's, compiled from graph
  std::vector<int> in_slots;                // per tail input: the device slot it is read from, or -1
  std::vector<const Tensor*> in_constants;  // per tail input with no slot: the host constant
  std::vector<int> output_of;               // per graph output: its index among the tail's outputs, or -1
  std::vector<Tensor> outputs;              // the last run's
  std::string label;                        // what the profiler calls the step
};

/// The key a plan is kept under: each input's type and dims, and its bytes where the plan is
/// specialized on its value.
std::string signature(const std::vector<Tensor>& inputs, const std::vector<bool>& by_value);

}  // namespace fusec::cuda::executor
