// CUDA entry points of Reduce* and ArgMax/ArgMin (kernels in reduce.cu). The reduced axes come
// from the `axes` attribute (older opsets) or from a constant `axes` input read at plan time; a
// non-constant axes input leaves the node to the CPU reference.
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/core/cuda_op.h"
#include "backend/cuda/ops/reduce/reduce.cuh"
#include "backend/cuda/ops/reduce/reduce_op.h"

namespace fusec::cuda {

namespace {

const char* kind_name(ReduceKind k) {
  static const char* names[] = {"sum", "mean",   "max",       "min",       "prod",   "l1",
                                "l2",  "logsum", "logsumexp", "sumsquare", "argmax", "argmin"};
  return names[static_cast<int>(k)];
}

std::unique_ptr<CudaOp> refuse(std::string* why, const std::string& reason) {
  if (why) *why = reason;
  return nullptr;
}

int64_t numel(const std::vector<int64_t>& d) {
  int64_t n = 1;
  for (int64_t v : d) n *= v;
  return n;
}

class ReduceOp : public CudaOp {
 public:
  ReduceOp(ReduceArgs a, std::string label, bool nhwc) : a_(a), label_(std::move(label)), nhwc_(nhwc) {}
  void launch(const LaunchArgs& la) override {
    ReduceArgs a = a_;
    a.x = la.inputs[0].data;
    a.y = la.outputs[0].data;
    a.workspace = la.workspace;
    require_launched(launch_reduce(a, la.stream), "reduce");
  }
  size_t workspace_bytes() const override { return reduce_workspace_bytes(a_); }
  std::string kernel_name() const override {
    return label_ + "reduce " + kind_name(a_.kind) + " (" + reduce_variant(a_) + ", " + dtype_name(a_.dtype) +
           (nhwc_ ? ", NHWC" : "") + ")";
  }

 private:
  ReduceArgs a_;
  std::string label_;
  bool nhwc_;
};

}  // namespace

std::unique_ptr<CudaOp> plan_reduce(const PlanContext& c, ReduceKind kind, std::vector<bool> mask,
                                    const std::string& label, std::string* why) {
  ReduceArgs a;
  a.dtype = c.in_dtype(0);
  a.kind = kind;
  a.multiprocessors = c.ctx().multiprocessors();
  std::vector<int64_t> dims = c.in_dims(0);
  const bool nhwc = c.input(0).nhwc;
  if (nhwc) {
    // Memory order N, spatial..., C. The kept dims (size 1 aside) come out in that order; an output
    // of the input's rank is stored channels-last too, a lower-rank one row-major in the model's
    // order: they must agree.
    if (!channels_last_rank(dims.size())) return refuse(why, "channels-last input of an unexpected rank");
    const std::vector<int64_t> order = channels_last_perm(dims.size());
    std::vector<size_t> kept_model, kept_memory;
    std::vector<int64_t> mem_dims;
    std::vector<bool> mem_mask;
    for (size_t i = 0; i < dims.size(); ++i) {
      const size_t o = static_cast<size_t>(order[i]);
      if (!mask[i] && dims[i] != 1) kept_model.push_back(i);
      if (!mask[o] && dims[o] != 1) kept_memory.push_back(o);
      mem_dims.push_back(dims[o]);
      mem_mask.push_back(mask[o]);
    }
    if (c.out_dims(0).size() != dims.size() && kept_model != kept_memory)
      return refuse(why, "channels-last: the kept dims would come out in another order");
    dims = mem_dims;
    mask = mem_mask;
  }
  if (!reduce_plan(dims, mask, a)) return refuse(why, "reduction over more than 8 separate dims");
  if (numel(c.out_dims(0)) != a.outputs) return refuse(why, "output size does not match the reduction");
  return std::make_unique<ReduceOp>(a, label, nhwc);
}

namespace {

OpFactory reduce_factory(ReduceKind kind) {
  return [kind](const PlanContext& c, std::string* why) -> std::unique_ptr<CudaOp> {
    const DType t = c.in_dtype(0);
    if (!reduce_supported(kind, t))
      return refuse(why, std::string("no CUDA reduce ") + kind_name(kind) + " for " + dtype_name(t));
    if (c.out_dtype(0) != t) return refuse(why, "output stored in a different type than the input");
    const size_t rank = c.in_dims(0).size();
    std::vector<int64_t> axes;
    bool noop = false;
    if (c.schema().find_attr("axes")) {
      if (c.has_attr("axes")) axes = c.attr_ints("axes");
    } else {
      noop = c.attr_int("noop_with_empty_axes") != 0;
      if (c.has_input(1)) {
        const Tensor* k = c.constant(1);
        if (!k) return refuse(why, "axes input is not a constant");
        axes = k->to_int64_vector();
      }
    }
    std::vector<bool> mask(rank, axes.empty() && !noop);
    for (int64_t ax : axes) mask[static_cast<size_t>(normalize_axis(ax, static_cast<int64_t>(rank), c))] = true;
    return plan_reduce(c, kind, mask, "", why);
  };
}

OpFactory arg_factory(bool is_max) {
  return [is_max](const PlanContext& c, std::string* why) -> std::unique_ptr<CudaOp> {
    const ReduceKind kind = is_max ? ReduceKind::ArgMax : ReduceKind::ArgMin;
    const DType t = c.in_dtype(0);
    if (!reduce_supported(kind, t))
      return refuse(why, std::string("no CUDA ") + kind_name(kind) + " for " + dtype_name(t));
    const auto& d = c.in_dims(0);
    if (d.empty()) return refuse(why, "ArgMax/ArgMin need an input of rank >= 1");
    const int64_t axis = normalize_axis(c.attr_int("axis"), static_cast<int64_t>(d.size()), c);
    std::vector<bool> mask(d.size(), false);
    mask[static_cast<size_t>(axis)] = true;
    if (d[static_cast<size_t>(axis)] == 0 && numel(c.out_dims(0)) > 0)
      return refuse(why, "cannot take ArgMax/ArgMin over an empty axis");
    ReduceArgs a;
    a.dtype = t;
    a.kind = kind;
    a.select_last = c.schema().find_attr("select_last_index") && c.attr_int("select_last_index") != 0;
    a.multiprocessors = c.ctx().multiprocessors();
    if (!reduce_plan(d, mask, a)) return refuse(why, "reduction over more than 8 separate dims");
    if (numel(c.out_dims(0)) != a.outputs) return refuse(why, "output size does not match the reduction");
    return std::make_unique<ReduceOp>(a, "", false);
  };
}

}  // namespace

void register_reduce_ops(CudaOpRegistry& r) {
  const struct {
    const char* name;
    ReduceKind kind;
  } ops[] = {{"ReduceSum", ReduceKind::Sum},
             {"ReduceMean", ReduceKind::Mean},
             {"ReduceMax", ReduceKind::Max},
             {"ReduceMin", ReduceKind::Min},
             {"ReduceProd", ReduceKind::Prod},
             {"ReduceL1", ReduceKind::L1},
             {"ReduceL2", ReduceKind::L2},
             {"ReduceLogSum", ReduceKind::LogSum},
             {"ReduceLogSumExp", ReduceKind::LogSumExp},
             {"ReduceSumSquare", ReduceKind::SumSquare}};
  for (const auto& op : ops) {
    r.add(op.name, reduce_factory(op.kind));
    // The same factory on a channels-last input (plan_reduce permutes to the memory order): a
    // reduction never asks for a layout change of what it reads.
    r.add_channels_last(op.name, reduce_factory(op.kind), "", ChannelsLast::FollowInput);
  }
  r.add("ArgMax", arg_factory(true));
  r.add("ArgMin", arg_factory(false));
}

}  // namespace fusec::cuda
