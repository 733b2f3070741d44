// Elementwise ops on the GPU through NVRTC: every standard elementwise op and activation, and
// ai.fusec FusedElementwise. At plan time the factory turns the node into CUDA C
// (elementwise_codegen.h), compiles or fetches it (nvrtc_module.h) and precomputes the launch;
// launch() only fills in the tensor addresses and enqueues one kernel.
#include <cstdint>

#include "backend/cuda/core/cuda_op.h"
#include "backend/cuda/ops/elementwise/elementwise_codegen.h"
#include "backend/cuda/core/nvrtc_module.h"
#include "ir/error.h"

namespace fusec::cuda {

namespace {

constexpr unsigned kThreads = 256;  // the generated kernels' __launch_bounds__

unsigned blocks_for(int64_t items, int sms) {
  // Grid-stride loops: enough blocks to fill every SM a couple of times over, no more.
  const int64_t cap = static_cast<int64_t>(sms > 0 ? sms : 132) * 16;
  int64_t b = (items + kThreads - 1) / kThreads;
  if (b < 1) b = 1;
  return static_cast<unsigned>(b > cap ? cap : b);
}

class NvrtcElementwiseOp final : public CudaOp {
 public:
  NvrtcElementwiseOp(const PlanContext& c, const EwFunction& f, const EwLaunchPlan& plan, const EwSource& src,
                     std::shared_ptr<const NvrtcModule> module)
      : module_(std::move(module)),
        inputs_(f.inputs),
        numel_(plan.numel),
        vec_(plan.vec),
        params_(plan.params),
        params_scalar_(plan.params_scalar),
        reports_errors_(f.reports_errors) {
    fast_ = module_->kernel(0);
    slow_ = module_->kernel(1);
    const int sms = c.ctx().multiprocessors();
    grid_fast_ = blocks_for(numel_ / vec_ + (plan.linear ? 1 : 0), sms);
    grid_slow_ = blocks_for(numel_, sms);
    const size_t nargs = f.inputs.size();
    ptrs_.assign(nargs + 1, nullptr);
    // Pointers the fast kernel reads or writes as whole vectors must be aligned to them.
    align_.assign(nargs + 1, 0);
    if (vec_ > 1) {
      for (size_t k = 0; k < nargs; ++k) {
        bool vector_access = plan.kinds[k] == EwArgKind::Full;
        if (plan.kinds[k] == EwArgKind::Mapped) {
          size_t slot = 0;
          for (size_t j = 0; j < k; ++j) slot += plan.kinds[j] == EwArgKind::Mapped;
          const size_t R = static_cast<size_t>(plan.rank);
          vector_access = plan.params_scalar[3 * R + slot * R + R - 1] == 1;
        }
        if (vector_access) align_[k] = static_cast<size_t>(vec_) * dtype_size(f.dtypes[k]);
      }
      align_[nargs] = static_cast<size_t>(vec_) * dtype_size(c.out_dtype(0));
    }
    auto build_args = [&](std::vector<void*>& args, std::vector<int64_t>& params) {
      args.push_back(&numel_);
      for (auto& p : ptrs_) args.push_back(&p);
      if (!plan.linear) args.push_back(params.data());
      if (reports_errors_) args.push_back(&site_);
    };
    build_args(args_fast_, params_);
    build_args(args_slow_, params_scalar_);
    if (f.label == "FusedElementwise")
      name_ = "nvrtc elementwise (" + std::to_string(f.num_ops) + (f.num_ops == 1 ? " op)" : " ops)");
    else
      name_ = "nvrtc elementwise (" + f.label + ")";
    what_ = "elementwise kernel" + node_ref(c.node().name, c.node().op_type);
    (void)src;
  }

  void launch(const LaunchArgs& a) override {
    if (numel_ == 0) return;
    const size_t nargs = inputs_.size();
    for (size_t k = 0; k < nargs; ++k) ptrs_[k] = a.inputs[inputs_[k]].data;
    ptrs_[nargs] = a.outputs[0].data;
    site_ = a.error;
    bool aligned = true;
    for (size_t k = 0; k <= nargs; ++k)
      if (align_[k] && reinterpret_cast<uintptr_t>(ptrs_[k]) % align_[k] != 0) aligned = false;
    if (aligned)
      launch_nvrtc_kernel(fast_, grid_fast_, kThreads, args_fast_.data(), a.stream, what_.c_str());
    else
      launch_nvrtc_kernel(slow_, grid_slow_, kThreads, args_slow_.data(), a.stream, what_.c_str());
  }

  std::string kernel_name() const override { return name_; }

 private:
  std::shared_ptr<const NvrtcModule> module_;
  std::vector<size_t> inputs_;  // node input of each kernel argument
  int64_t numel_;
  int vec_;
  std::vector<int64_t> params_, params_scalar_;
  bool reports_errors_ = false;
  DeviceErrorSite site_;  // integer Div/Mod by a run-time divisor: where a zero is reported
  const void* fast_ = nullptr;
  const void* slow_ = nullptr;
  unsigned grid_fast_ = 1, grid_slow_ = 1;
  std::vector<void*> ptrs_;  // argument addresses, filled in by launch() (no allocation there)
  std::vector<size_t> align_;
  std::vector<void*> args_fast_, args_slow_;  // cudaLaunchKernel parameter pointers
  std::string name_, what_;
};

/// An elementwise node with an empty output.
class EmptyOp final : public CudaOp {
 public:
  void launch(const LaunchArgs&) override {}
  std::string kernel_name() const override { return "nvrtc elementwise (empty)"; }
};

std::unique_ptr<CudaOp> make_elementwise(const PlanContext& c, std::string* why) {
  if (!c.has_output(0)) {
    if (why) *why = "output 0 is left out";
    return nullptr;
  }
  std::vector<EwValue> ins(c.num_inputs());
  for (size_t i = 0; i < c.num_inputs(); ++i) {
    if (!c.has_input(i)) continue;
    const PlanValue& v = c.input(i);
    ins[i] = EwValue{true, v.dtype, v.onnx_dtype, v.dims, v.constant};
  }
  const PlanValue& o = c.output(0);
  const EwValue out{true, o.dtype, o.onnx_dtype, o.dims, nullptr};
  auto f = describe_elementwise(c, c.opset(), ins, out, why);
  if (!f) return nullptr;
  auto plan = plan_elementwise_launch(*f, out.dtype, out.dims, why);
  if (!plan) return nullptr;
  if (plan->numel == 0) return std::make_unique<EmptyOp>();  // nothing to compute, nothing to compile
  const EwSource src = generate_elementwise_source(*f, *plan, out.dtype);
  auto module = load_nvrtc_module(src.code, src.kernels, c.ctx().sm(), node_ref(c.node().name, c.node().op_type));
  return std::make_unique<NvrtcElementwiseOp>(c, *f, *plan, src, std::move(module));
}

}  // namespace

void register_elementwise_ops(CudaOpRegistry& r) {
  static const char* kOps[] = {
      "Add",
      "Sub",
      "Mul",
      "Div",
      "Mod",
      "Pow",
      "Max",
      "Min",
      "Sum",
      "Mean",
      "Abs",
      "Neg",
      "Sign",
      "Reciprocal",
      "Sqrt",
      "Exp",
      "Log",
      "Floor",
      "Ceil",
      "Round",
      "Erf",
      "Sin",
      "Cos",
      "Tan",
      "Asin",
      "Acos",
      "Atan",
      "Sinh",
      "Cosh",
      "Asinh",
      "Acosh",
      "Atanh",
      "IsNaN",
      "IsInf",
      "Equal",
      "Less",
      "Greater",
      "LessOrEqual",
      "GreaterOrEqual",
      "And",
      "Or",
      "Xor",
      "Not",
      "BitShift",
      "BitwiseAnd",
      "BitwiseOr",
      "BitwiseXor",
      "BitwiseNot",
      "Where",
      "Cast",
      "CastLike",
      "Clip",
      "Relu",
      "LeakyRelu",
      "PRelu",
      "Sigmoid",
      "HardSigmoid",
      "HardSwish",
      "Swish",
      "Tanh",
      "Elu",
      "Selu",
      "Celu",
      "Softplus",
      "Softsign",
      "ThresholdedRelu",
      "Shrink",
      "Mish",
      "Gelu",
  };
  for (const char* op : kOps) r.add(op, make_elementwise);
  r.add("Gelu", make_elementwise, "ai.fusec");
  r.add("FusedElementwise", make_elementwise, "ai.fusec");
}

}  // namespace fusec::cuda
