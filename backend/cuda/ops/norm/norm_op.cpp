// CUDA entry points of the normalization family: LayerNormalization (ai.onnx 17 and ai.fusec),
// SkipLayerNorm, LayerNormGelu, SimplifiedLayerNorm and RMSNormalization, SkipSimplifiedLayerNorm,
// InstanceNormalization and GroupNormalization (all on the row kernel of norm.cu),
// BatchNormalization in inference mode and LpNormalization (lp_norm.cu). Factories validate shapes
// and attributes at plan time and refuse (CPU fallback) what the kernels do not cover.
#include <memory>
#include <string>
#include <vector>

#include "backend/axis_layout.h"
#include "backend/cuda/core/cuda_op.h"
#include "backend/cuda/ops/norm/lp_norm.cuh"
#include "backend/cuda/ops/norm/norm.cuh"

namespace fusec::cuda {

namespace {

bool half_or_float(DType t) { return t == DType::Float32 || t == DType::Float16 || t == DType::BFloat16; }

int64_t product(const std::vector<int64_t>& d, size_t from, size_t to) {
  int64_t n = 1;
  for (size_t i = from; i < to; ++i) n *= d[i];
  return n;
}

int64_t numel(const std::vector<int64_t>& d) { return product(d, 0, d.size()); }

std::unique_ptr<CudaOp> refuse(std::string* why, const std::string& reason) {
  if (why) *why = reason;
  return nullptr;
}

/// Which inputs/outputs of the node feed which field of RowNormArgs.
struct RowNormSlots {
  int x = 0, skip = -1, gamma = 1, beta = -1, y = 0, sum = -1, mean = -1, inv = -1;
};

class RowNormOp : public CudaOp {
 public:
  RowNormOp(RowNormArgs a, RowNormSlots s, std::string name) : a_(a), s_(s), name_(std::move(name)) {}

  void launch(const LaunchArgs& la) override {
    RowNormArgs a = a_;
    auto in = [&](int i) -> const void* {
      return i >= 0 && i < static_cast<int>(la.inputs.size()) && la.inputs[i].defined() ? la.inputs[i].data : nullptr;
    };
    auto out = [&](int i) -> void* {
      return i >= 0 && i < static_cast<int>(la.outputs.size()) && la.outputs[i].defined() ? la.outputs[i].data
                                                                                          : nullptr;
    };
    a.x = in(s_.x);
    a.skip = in(s_.skip);
    a.gamma = in(s_.gamma);
    a.beta = in(s_.beta);
    a.y = out(s_.y);
    a.sum_out = out(s_.sum);
    a.mean_out = out(s_.mean);
    a.inv_std_out = out(s_.inv);
    require_launched(launch_row_norm(a, la.stream), "row normalization");
  }
  std::string kernel_name() const override {
    return name_ + " (" + row_norm_variant(a_) + ", " + dtype_name(a_.dtype) + ")";
  }

 private:
  RowNormArgs a_;
  RowNormSlots s_;
  std::string name_;
};

/// Common checks of the LayerNorm-like ops: X's storage type, axis, row split, and the per-column
/// parameter inputs (which must hold exactly the normalized dims' worth of values: broadcasting
/// Scale/B smaller than that falls back to the CPU).
bool setup_rows(const PlanContext& c, size_t x_in, const std::vector<size_t>& param_ins, RowNormArgs& a,
                std::string* why) {
  const DType t = c.in_dtype(x_in);
  if (!half_or_float(t)) {
    if (why) *why = std::string("no CUDA row normalization for ") + dtype_name(t);
    return false;
  }
  const auto& d = c.in_dims(x_in);
  if (d.empty()) {
    if (why) *why = "X must have rank >= 1";
    return false;
  }
  const int64_t axis = normalize_axis(c.attr_int("axis"), static_cast<int64_t>(d.size()), c);
  a.dtype = t;
  a.n = product(d, static_cast<size_t>(axis), d.size());
  a.rows = a.n == 0 ? 0 : product(d, 0, static_cast<size_t>(axis));
  for (size_t i : param_ins) {
    if (!c.has_input(i)) continue;
    if (c.in_dtype(i) != t) {
      if (why) *why = "Scale/B stored as " + std::string(dtype_name(c.in_dtype(i))) + " with X as " + dtype_name(t);
      return false;
    }
    if (numel(c.in_dims(i)) != a.n) {
      if (why) *why = "Scale/B broadcast within the normalized dims is not handled on CUDA";
      return false;
    }
  }
  a.eps = c.attr_float("epsilon");
  a.multiprocessors = c.ctx().multiprocessors();
  return true;
}

std::unique_ptr<CudaOp> make_layernorm(const PlanContext& c, std::string* why) {
  RowNormArgs a;
  if (!setup_rows(c, 0, {1, 2}, a, why)) return nullptr;
  RowNormSlots s;
  s.beta = 2;
  for (size_t o : {size_t(1), size_t(2)}) {
    if (!c.has_output(o)) continue;
    const DType st = c.out_dtype(o);
    if (!half_or_float(st) && st != DType::Float64)
      return refuse(why, "Mean/InvStdDev of type " + std::string(dtype_name(st)));
    a.stat_dtype = st;
    if (a.n == 0 && numel(c.out_dims(o)) > 0) return refuse(why, "empty normalized dims with Mean/InvStdDev outputs");
  }
  if (c.has_output(1)) s.mean = 1;
  if (c.has_output(2)) s.inv = 2;
  return std::make_unique<RowNormOp>(a, s, "layernorm");
}

std::unique_ptr<CudaOp> make_layernorm_gelu(const PlanContext& c, std::string* why) {
  RowNormArgs a;
  if (!setup_rows(c, 0, {1, 2}, a, why)) return nullptr;
  const std::string approx = c.attr_string("approximate");
  if (approx == "none")
    a.act = NormAct::GeluErf;
  else if (approx == "tanh")
    a.act = NormAct::GeluTanh;
  else
    return refuse(why, "approximate must be 'none' or 'tanh'");
  RowNormSlots s;
  s.beta = 2;
  return std::make_unique<RowNormOp>(a, s, "layernorm+gelu");
}

/// SkipLayerNorm (X, skip, scale, B) and, with `rms`, SkipSimplifiedLayerNorm (X, skip, scale).
std::unique_ptr<CudaOp> make_skip_norm(const PlanContext& c, std::string* why, bool rms) {
  RowNormArgs a;
  if (!setup_rows(c, 0, {2, 3}, a, why)) return nullptr;
  a.rms = rms;
  if (c.out_dims(0) != c.in_dims(0)) return refuse(why, "skip broadcasts X to a larger shape");
  if (c.in_dtype(1) != a.dtype) return refuse(why, "X and skip are stored in different types");
  // skip must be a suffix of X's dims (leading 1s aside) holding whole rows: the same shape, a
  // [S, H] table or an [H] bias vector; row r then adds skip row r % skip_rows.
  std::vector<int64_t> sk = c.in_dims(1);
  while (!sk.empty() && sk.front() == 1) sk.erase(sk.begin());
  const auto& xd = c.in_dims(0);
  bool suffix = sk.size() <= xd.size();
  for (size_t k = 0; suffix && k < sk.size(); ++k) suffix = sk[sk.size() - 1 - k] == xd[xd.size() - 1 - k];
  const int64_t sn = numel(sk);
  if (a.n > 0 && a.rows > 0) {
    if (!suffix || sn % a.n != 0 || sn == 0) return refuse(why, "skip broadcast other than whole rows of X");
    a.skip_rows = sn / a.n;
  }
  RowNormSlots s;
  s.skip = 1;
  s.gamma = 2;
  s.beta = 3;
  if (c.has_output(1)) s.sum = 1;
  return std::make_unique<RowNormOp>(a, s, rms ? "skip+rmsnorm" : "skip+layernorm");
}

std::unique_ptr<CudaOp> make_skip_layernorm(const PlanContext& c, std::string* why) {
  return make_skip_norm(c, why, false);
}
std::unique_ptr<CudaOp> make_skip_rmsnorm(const PlanContext& c, std::string* why) {
  return make_skip_norm(c, why, true);
}

std::unique_ptr<CudaOp> make_rmsnorm(const PlanContext& c, std::string* why) {
  RowNormArgs a;
  if (!setup_rows(c, 0, {1}, a, why)) return nullptr;
  a.rms = true;
  return std::make_unique<RowNormOp>(a, RowNormSlots{}, "rmsnorm");
}

std::unique_ptr<CudaOp> make_instancenorm(const PlanContext& c, std::string* why) {
  const DType t = c.in_dtype(0);
  if (!half_or_float(t)) return refuse(why, std::string("no CUDA InstanceNormalization for ") + dtype_name(t));
  const auto& d = c.in_dims(0);
  if (d.size() < 2) return refuse(why, "input must have shape [N, C, ...]");
  const int64_t C = d[1];
  for (size_t i : {size_t(1), size_t(2)}) {
    if (c.in_dtype(i) != t) return refuse(why, "scale/B stored in a different type than the input");
    if (numel(c.in_dims(i)) != C) return refuse(why, "scale and B must have C entries");
  }
  RowNormArgs a;
  a.dtype = t;
  a.n = product(d, 2, d.size());
  a.rows = a.n == 0 ? 0 : d[0] * C;
  a.affine_channels = C;
  a.eps = c.attr_float("epsilon");
  a.multiprocessors = c.ctx().multiprocessors();
  RowNormSlots s;
  s.beta = 2;
  return std::make_unique<RowNormOp>(a, s, "instancenorm");
}

// GroupNormalization: each instance's group is one contiguous row of C / G channels; scale and
// bias per group (opset 18: one value a row) or per channel (21: a value every S elements).
std::unique_ptr<CudaOp> make_groupnorm(const PlanContext& c, std::string* why) {
  const DType t = c.in_dtype(0);
  if (!half_or_float(t)) return refuse(why, std::string("no CUDA GroupNormalization for ") + dtype_name(t));
  const auto& d = c.in_dims(0);
  if (d.size() < 2) return refuse(why, "input must have shape [N, C, ...]");
  const int64_t C = d[1], G = c.attr_int("num_groups");
  if (G <= 0 || C % G != 0) return refuse(why, "num_groups does not divide the channels");
  const bool per_channel = c.opset() >= 21;
  for (size_t i : {size_t(1), size_t(2)}) {
    if (c.in_dtype(i) != t) return refuse(why, "scale/bias stored in a different type than the input");
    if (numel(c.in_dims(i)) != (per_channel ? C : G)) return refuse(why, "scale and bias of the wrong size");
  }
  const int64_t S = product(d, 2, d.size());
  RowNormArgs a;
  a.dtype = t;
  a.n = C / G * S;
  a.rows = a.n == 0 ? 0 : d[0] * G;
  a.affine_channels = per_channel ? C : G;
  a.affine_span = per_channel ? S : 0;
  a.eps = c.attr_float("epsilon");
  a.multiprocessors = c.ctx().multiprocessors();
  RowNormSlots s;
  s.beta = 2;
  return std::make_unique<RowNormOp>(a, s, "groupnorm");
}

class BatchNormOp : public CudaOp {
 public:
  BatchNormOp(DType t, int64_t N, int64_t C, int64_t S, float eps, bool channels_last)
      : t_(t), N_(N), C_(C), S_(S), eps_(eps), channels_last_(channels_last) {}
  void launch(const LaunchArgs& a) override {
    require_launched(
        launch_batchnorm_inference(t_, a.inputs[0].data, a.inputs[1].data, a.inputs[2].data, a.inputs[3].data,
                                   a.inputs[4].data, a.outputs[0].data, N_, C_, S_, eps_, channels_last_, a.stream),
        "BatchNormalization");
  }
  std::string kernel_name() const override {
    return std::string("batchnorm inference (") + dtype_name(t_) + (channels_last_ ? ", channels-last)" : ")");
  }

 private:
  DType t_;
  int64_t N_, C_, S_;
  float eps_;
  bool channels_last_;
};

std::unique_ptr<CudaOp> make_batchnorm_in(const PlanContext& c, std::string* why, bool channels_last) {
  const DType t = c.in_dtype(0);
  if (!half_or_float(t)) return refuse(why, std::string("no CUDA BatchNormalization for ") + dtype_name(t));
  if (c.schema().find_attr("training_mode") && c.attr_int("training_mode") != 0)
    return refuse(why, "training mode runs on the CPU reference");
  for (size_t o = 1; o < c.num_outputs(); ++o)
    if (c.has_output(o)) return refuse(why, "statistics outputs (training mode) run on the CPU reference");
  const auto& d = c.in_dims(0);
  if (d.size() < 2) return refuse(why, "X must have shape [N, C, ...]");
  const int64_t C = d[1];
  for (size_t i = 1; i < 5; ++i) {
    if (c.in_dtype(i) != t) return refuse(why, "scale/B/mean/var stored in a different type than X");
    if (numel(c.in_dims(i)) != C) return refuse(why, "per-activation (spatial=0) parameters");
  }
  if (channels_last && !channels_last_rank(d.size()))
    return refuse(why, "channels-last BatchNormalization is 4-D or 5-D only");
  return std::make_unique<BatchNormOp>(t, d[0], C, product(d, 2, d.size()), c.attr_float("epsilon"), channels_last);
}

std::unique_ptr<CudaOp> make_batchnorm(const PlanContext& c, std::string* why) {
  return make_batchnorm_in(c, why, false);
}

// A channels-last activation's BatchNormalization (DenseNet's pre-activation after each concat)
// normalizes it where it is, rather than through two layout changes.
std::unique_ptr<CudaOp> make_batchnorm_channels_last(const PlanContext& c, std::string* why) {
  return make_batchnorm_in(c, why, true);
}

class LpNormOp final : public CudaOp {
 public:
  LpNormOp(DType t, AxisView v, bool l1) : t_(t), v_(v), l1_(l1) {}
  void launch(const LaunchArgs& a) override {
    require_launched(launch_lp_norm(a.inputs[0].data, a.outputs[0].data, t_, v_.outer, v_.n, v_.inner, l1_, a.stream),
                     "LpNormalization");
  }
  std::string kernel_name() const override {
    return std::string("LpNormalization L") + (l1_ ? "1" : "2") +
           (v_.inner == 1 ? ": warp per slice" : ": thread per lane");
  }

 private:
  DType t_;
  AxisView v_;
  bool l1_;
};

std::unique_ptr<CudaOp> make_lpnorm(const PlanContext& c, std::string* why) {
  const DType t = c.in_dtype(0);
  if (!half_or_float(t) && t != DType::Float64)
    return refuse(why, std::string("no CUDA LpNormalization for ") + dtype_name(t));
  const int64_t p = c.attr_int("p");
  if (p != 1 && p != 2) return refuse(why, "p must be 1 or 2");
  const auto& d = c.in_dims(0);
  int64_t axis = 0;
  try {
    axis = normalize_axis(c.attr_int("axis"), static_cast<int64_t>(d.size()), c);
  } catch (const std::exception& e) {
    return refuse(why, e.what());  // the CPU reference reports it
  }
  return std::make_unique<LpNormOp>(t, axis_view(d, axis), p == 1);
}

}  // namespace

void register_normalization_ops(CudaOpRegistry& r) {
  r.add("LayerNormalization", make_layernorm);
  r.add("LayerNormalization", make_layernorm, "ai.fusec");
  r.add("LayerNormGelu", make_layernorm_gelu, "ai.fusec");
  r.add("SkipLayerNorm", make_skip_layernorm, "ai.fusec");
  r.add("SimplifiedLayerNorm", make_rmsnorm, "ai.fusec");
  r.add("SkipSimplifiedLayerNorm", make_skip_rmsnorm, "ai.fusec");
  r.add("RMSNormalization", make_rmsnorm);
  r.add("InstanceNormalization", make_instancenorm);
  r.add("GroupNormalization", make_groupnorm);
  r.add("BatchNormalization", make_batchnorm);
  r.add("LpNormalization", make_lpnorm);
  r.add_channels_last("BatchNormalization", make_batchnorm_channels_last, "", ChannelsLast::FollowInput);
}

}  // namespace fusec::cuda
