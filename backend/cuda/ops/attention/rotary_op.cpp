// CUDA entry point of ai.fusec Rotary (kernel in rotary.cu). The factory checks the head view
// and turns each table's broadcast over the view's rows into strides; a table whose rows are not
// contiguous runs on the CPU reference, which the planner reports with the reason.
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/core/cuda_op.h"
#include "backend/cuda/ops/attention/rotary.cuh"

namespace fusec::cuda {

namespace {

class RotaryOp : public CudaOp {
 public:
  explicit RotaryOp(RotaryArgs a) : a_(a) {}
  void launch(const LaunchArgs& l) override {
    RotaryArgs a = a_;
    a.x = l.inputs[0].data;
    a.cos = l.inputs[1].data;
    a.sin = l.inputs[2].data;
    if (a.norm) {
      a.norm_scale = l.inputs[3].data;
      a.norm_bias = l.inputs.size() > 4 ? l.inputs[4].data : nullptr;
    }
    a.y = l.outputs[0].data;
    require_launched(launch_rotary(a, l.stream), "rotary");
  }
  std::string kernel_name() const override {
    std::string what =
        std::to_string(a_.rot) + (a_.rot < a_.head ? " of " + std::to_string(a_.head) : "") + " per head";
    if (a_.interleaved) what += ", interleaved";
    if (a_.norm)
      what = std::string(a_.norm == 1 ? "RMS" : "LayerNorm") +
             (a_.norm_groups ? "-normalized runs of heads, " : "-normalized heads, ") + what;
    return "rotary (" + what + ", " + dtype_name(a_.dtype) + ")";
  }

 private:
  RotaryArgs a_;
};

std::unique_ptr<CudaOp> refuse(std::string* why, std::string reason) {
  if (why) *why = std::move(reason);
  return nullptr;
}

std::unique_ptr<CudaOp> make_rotary(const PlanContext& c, std::string* why) {
  const DType t = c.in_dtype(0);
  if (t != DType::Float32 && t != DType::Float16 && t != DType::BFloat16)
    return refuse(why, std::string("no CUDA rotary for ") + dtype_name(t));
  if (c.in_dtype(1) != t || c.in_dtype(2) != t) return refuse(why, "cos/sin are stored in another type than X");
  std::vector<int64_t> view = c.in_dims(0);
  if (view.empty()) return refuse(why, "X must have rank >= 1");
  const int64_t hs = c.attr_int("head_size");
  if (hs > 0) {
    if (view.back() % hs != 0) return refuse(why, "X's last dim is not a multiple of head_size");
    view.back() /= hs;
    view.push_back(hs);
  }
  RotaryArgs a;
  a.dtype = t;
  a.head = view.back();
  a.rot = c.attr_int("rotary_dim");
  a.interleaved = c.attr_int("interleaved") != 0;
  if (a.rot == 0) a.rot = a.head;
  if (a.head % 2 != 0 || a.rot % 2 != 0 || a.rot < 0 || a.rot > a.head)
    return refuse(why, "the rotated size is odd or wider than the head");
  const int64_t rotated = c.attr_int("rotated");
  if (rotated > 0 && (hs <= 0 || rotated % hs != 0)) return refuse(why, "rotated is not a multiple of head_size");
  if (hs > 0) {
    a.heads_per_row = view[view.size() - 2];
    a.rotated_heads = rotated > 0 ? rotated / hs : a.heads_per_row;
  }
  a.norm = static_cast<int>(c.attr_int("norm"));
  if (a.norm) {
    // One row of the head's values, or one per rotated head (merge_qkv's packed Q and K).
    if (!c.has_input(3)) return refuse(why, "the norm has no scale");
    for (size_t i : {size_t(3), size_t(4)}) {
      if (!c.has_input(i)) continue;
      const std::vector<int64_t>& nd = c.in_dims(i);
      if (c.in_dtype(i) != t) return refuse(why, "the norm's scale or bias is stored in another type than X");
      const bool rows = nd.size() == 2 && hs > 0 && nd[0] == a.rotated_heads;
      if (!(nd == std::vector<int64_t>{a.head} || (rows && nd[1] == a.head)))
        return refuse(why, "the norm's scale or bias is not one row per head or per rotated head");
      a.norm_rows = a.norm_rows || rows;
    }
    if (c.has_input(4) && c.in_dims(3).size() != c.in_dims(4).size())
      return refuse(why, "the norm's scale and bias have different row counts");
    a.norm_epsilon = c.attr_float("epsilon");
    const std::vector<int64_t> runs = c.attr_ints("norm_groups");
    if (runs.size() > static_cast<size_t>(kRotaryMaxNormGroups))
      return refuse(why, "the norm spans more than " + std::to_string(kRotaryMaxNormGroups) + " runs of heads a row");
    int64_t first = 0;
    for (int64_t n : runs) {
      a.norm_group_first[a.norm_groups] = static_cast<int32_t>(first);
      a.norm_group_heads[a.norm_groups++] = static_cast<int32_t>(n);
      first += n;
    }
    if (!runs.empty() && first != a.rotated_heads)
      return refuse(why, "norm_groups do not add up to the rotated heads of a row");
  }
  int64_t numel = 1;
  for (int64_t d : c.in_dims(0)) numel *= d;
  // The kernel indexes in 32 bits (a model's activations never reach 2^31 values).
  if (numel >= (int64_t{1} << 31) - 1) return refuse(why, "X holds 2^31 values or more");
  a.heads = a.head ? numel / a.head : 0;
  // Dims of size 1 index nothing: dropped, so that a [B, S, H] view of rank 3 stays within the
  // kernel's rank for any X.
  const int lead = static_cast<int>(view.size()) - 1;
  for (size_t i : {size_t(1), size_t(2)}) {
    const std::vector<int64_t>& td = c.in_dims(i);
    if (td.empty() || td.back() != a.rot || td.size() > view.size())
      return refuse(why, "a table does not hold the head's rotated values along its last axis");
  }
  int64_t cs = 1, ss = 1;
  std::vector<int64_t> dims, cst, sst;
  for (int d = lead - 1; d >= 0; --d) {
    auto table_dim = [&](size_t i) {
      const std::vector<int64_t>& td = c.in_dims(i);
      const int k = d - (lead - (static_cast<int>(td.size()) - 1));
      return k >= 0 ? td[static_cast<size_t>(k)] : int64_t{1};
    };
    const int64_t cd = table_dim(1), sd = table_dim(2);
    if (view[d] != 1) {
      dims.insert(dims.begin(), view[d]);
      cst.insert(cst.begin(), cd == 1 ? 0 : cs);
      sst.insert(sst.begin(), sd == 1 ? 0 : ss);
    }
    cs *= cd;
    ss *= sd;
  }
  if (dims.size() > static_cast<size_t>(kRotaryMaxRank)) return refuse(why, "X's head view has too many dims");
  a.rank = static_cast<int>(dims.size());
  for (size_t d = 0; d < dims.size(); ++d) a.dims[d] = dims[d], a.cos_stride[d] = cst[d], a.sin_stride[d] = sst[d];
  return std::make_unique<RotaryOp>(a);
}

}  // namespace

void register_rotary_ops(CudaOpRegistry& r) { r.add("Rotary", make_rotary, "ai.fusec"); }

}  // namespace fusec::cuda
