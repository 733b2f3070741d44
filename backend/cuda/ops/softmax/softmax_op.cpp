// CUDA entry points of Softmax, LogSoftmax and Hardmax (kernels in softmax.cu). Before opset 13
// the input is coerced to 2-D at `axis` (rows of everything from `axis` on); from 13 the op runs
// along the single dim `axis`, which may be strided.
#include <memory>
#include <string>

#include "backend/axis_layout.h"
#include "backend/cuda/core/cuda_op.h"
#include "backend/cuda/ops/softmax/softmax.cuh"

namespace fusec::cuda {

namespace {

class SoftmaxOp : public CudaOp {
 public:
  explicit SoftmaxOp(SoftmaxArgs a) : a_(a) {}
  void launch(const LaunchArgs& la) override {
    SoftmaxArgs a = a_;
    a.x = la.inputs[0].data;
    a.y = la.outputs[0].data;
    a.workspace = la.workspace;
    require_launched(launch_softmax(a, la.stream), "softmax");
  }
  size_t workspace_bytes() const override { return softmax_workspace_bytes(a_); }
  std::string kernel_name() const override {
    static const char* names[] = {"softmax", "logsoftmax", "hardmax"};
    return std::string(names[static_cast<int>(a_.kind)]) + " (" + softmax_variant(a_) + ", " + dtype_name(a_.dtype) +
           ")";
  }

 private:
  SoftmaxArgs a_;
};

OpFactory softmax_factory(SoftmaxKind kind) {
  return [kind](const PlanContext& c, std::string* why) -> std::unique_ptr<CudaOp> {
    const DType t = c.in_dtype(0);
    const auto& d = c.in_dims(0);
    if (d.empty()) {
      if (why) *why = "softmax needs an input of rank >= 1";
      return nullptr;
    }
    const int64_t rank = static_cast<int64_t>(d.size());
    const int64_t axis = normalize_axis(c.attr_int("axis"), rank, c);
    SoftmaxArgs a;
    a.dtype = t;
    a.kind = kind;
    const AxisView v = softmax_view(d, axis, c.opset());  // as the CPU kernel (softmax.cpp)
    a.outer = v.outer;
    a.n = v.n;
    a.inner = v.inner;
    a.multiprocessors = c.ctx().multiprocessors();
    if (!softmax_supported(a)) {
      if (why)
        *why = std::string("no CUDA kernel for this softmax (") + dtype_name(t) +
               (kind == SoftmaxKind::Hard ? ", or Hardmax rows over 16384 values)" : ")");
      return nullptr;
    }
    softmax_plan(a);
    return std::make_unique<SoftmaxOp>(a);
  };
}

}  // namespace

void register_softmax_ops(CudaOpRegistry& r) {
  r.add("Softmax", softmax_factory(SoftmaxKind::Soft));
  r.add("LogSoftmax", softmax_factory(SoftmaxKind::Log));
  r.add("Hardmax", softmax_factory(SoftmaxKind::Hard));
}

}  // namespace fusec::cuda
