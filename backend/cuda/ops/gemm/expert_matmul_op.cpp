// CUDA entry point of ai.fusec ExpertMatMul (kernels in expert_matmul.cu): the plan reads the
// geometry off the node; the indices are device data read at run time.
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/core/cuda_op.h"
#include "backend/cuda/ops/gemm/expert_matmul.cuh"
#include "ir/switches.h"

namespace fusec::cuda {

namespace {

using Dims = std::vector<int64_t>;

class ExpertMatMulOp : public CudaOp {
 public:
  explicit ExpertMatMulOp(ExpertMatMulPlan p) : p_(p) {}
  void launch(const LaunchArgs& a) override {
    const void* b = a.inputs.size() > 3 && a.inputs[3].defined() ? a.inputs[3].data : nullptr;
    require_launched(launch_expert_matmul(p_, a.inputs[0].data, a.inputs[1].data, a.inputs[2].data, b,
                                          a.outputs[0].data, a.stream, a.error, a.workspace),
                     "ExpertMatMul");
  }
  size_t workspace_bytes() const override { return expert_matmul_workspace_bytes(p_); }
  std::string kernel_name() const override {
    const char* how = grouped_on_tensor_cores(p_) ? "grouped by expert, tensor cores"
                      : expert_matmul_grouped(p_) ? "grouped by expert, FMA tiles"
                      : p_.trans                  ? "a warp an output, along W's rows"
                                                  : "a thread a column";
    return std::string("ExpertMatMul: ") + how + ", " + dtype_name(p_.dtype);
  }

 private:
  ExpertMatMulPlan p_;
};

std::unique_ptr<CudaOp> refuse(std::string* why, std::string reason) {
  if (why) *why = std::move(reason);
  return nullptr;
}

std::unique_ptr<CudaOp> make_expert_matmul(const PlanContext& c, std::string* why) {
  const DType t = c.in_dtype(0);
  if (t != DType::Float32 && t != DType::Float16 && t != DType::BFloat16)
    return refuse(why, std::string("no CUDA ExpertMatMul for ") + dtype_name(t));
  if (c.in_dtype(1) != t || (c.has_input(3) && c.in_dtype(3) != t) || !c.has_output(0) || c.out_dtype(0) != t)
    return refuse(why, "W, B or Y stored in another type than X");
  const DType it = c.in_dtype(2);
  if (it != DType::Int64 && it != DType::Int32) return refuse(why, std::string("indices of type ") + dtype_name(it));
  const auto& x = c.in_dims(0);
  const auto& w = c.in_dims(1);
  const auto& idx = c.in_dims(2);
  if (x.size() != 2 || w.size() != 3 || idx.size() != 1) return refuse(why, "X, W or the indices of another rank");
  ExpertMatMulPlan p;
  p.dtype = t;
  p.index_type = it;
  p.trans = c.attr_int("trans_w") != 0;
  p.repeat = c.attr_int("repeat");
  p.experts = w[0];
  p.k = x[1];
  p.m = w[p.trans ? 1 : 2];
  p.rows = idx[0];
  const char* grouped = env_switch("FUSEC_EXPERT_GROUPED");
  p.per_row = grouped && std::string(grouped) == "0";
  int64_t read = 0;
  if (w[p.trans ? 2 : 1] != p.k || p.repeat < 1 || __builtin_mul_overflow(x[0], p.repeat, &read) || read != p.rows ||
      c.out_dims(0) != Dims{p.rows, p.m})
    return refuse(why, "X, W, the indices and Y do not fit together");
  if (c.has_input(3) && c.in_dims(3) != Dims{p.experts, p.m}) return refuse(why, "B is not [E, M]");
  return std::make_unique<ExpertMatMulOp>(p);
}

}  // namespace

void register_expert_matmul_ops(CudaOpRegistry& r) { r.add("ExpertMatMul", make_expert_matmul, "ai.fusec"); }

}  // namespace fusec::cuda
