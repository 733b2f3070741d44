// Ops that only reinterpret dims: Reshape, Flatten, Squeeze, Unsqueeze, Identity, and Dropout in
// inference. The executor points the output at the input's memory (no launch); where it cannot
// (the output is a graph output, or the input is an I/O buffer), launch() copies.
#include <cuda_runtime_api.h>

#include "backend/cuda/ops/movement/view_op.h"

#include "backend/cuda/core/check.h"
#include "backend/cuda/core/cuda_op.h"

namespace fusec::cuda {

namespace {

class ViewOp : public CudaOp {
 public:
  void launch(const LaunchArgs& a) override {
    const DTensor& in = a.inputs[0];
    const DTensor& out = a.outputs[0];
    if (out.data != in.data && out.nbytes())
      FUSEC_CUDA_CHECK(cudaMemcpyAsync(out.data, in.data, out.nbytes(), cudaMemcpyDeviceToDevice, a.stream));
  }
  bool is_view() const override { return true; }
  std::string kernel_name() const override { return "view"; }
};

std::unique_ptr<CudaOp> make_view(const PlanContext& c, std::string* why) {
  if (!c.has_input(0) || !c.has_output(0)) {
    *why = "missing input or output";
    return nullptr;
  }
  if (c.in_dtype(0) != c.out_dtype(0)) {
    *why = "input and output types differ";
    return nullptr;
  }
  return std::make_unique<ViewOp>();
}

std::unique_ptr<CudaOp> make_dropout(const PlanContext& c, std::string* why) {
  // Inference Dropout is the identity; training mode (a true training_mode input) or a requested
  // mask output goes to the reference.
  if (c.has_output(1)) {
    *why = "Dropout's mask output is computed on the CPU";
    return nullptr;
  }
  if (c.has_input(2)) {
    const Tensor* t = c.constant(2);
    if (!t || t->numel() != 1 || t->as_double(0) != 0) {
      *why = "Dropout in training mode";
      return nullptr;
    }
  }
  return make_view(c, why);
}

}  // namespace

std::unique_ptr<CudaOp> make_view_op() { return std::make_unique<ViewOp>(); }

void register_view_ops(CudaOpRegistry& r) {
  for (const char* op : {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"}) r.add(op, make_view);
  r.add("Dropout", make_dropout);
}

}  // namespace fusec::cuda
