// Entry points for the pools: MaxPool (with its optional Indices output), AveragePool, LpPool
// and GlobalAveragePool / GlobalMaxPool (reductions over the spatial dims, in either layout) /
// GlobalLpPool; the window pools also channels-last (pool_nhwc.cu). The window geometry comes from the same
// window_geometry() the schema and the CPU kernels use, so pads, auto_pad and ceil_mode agree
// exactly.
#include <string>
#include <utility>

#include "backend/cuda/core/cuda_op.h"
#include "backend/cuda/ops/pool/pool.cuh"
#include "backend/cuda/ops/reduce/reduce_op.h"
#include "ir/ops/conv_geometry.h"

namespace fusec::cuda {

namespace {

std::unique_ptr<CudaOp> refuse(std::string* why, const std::string& msg) {
  if (why) *why = msg;
  return nullptr;
}

bool pool_dtype(DType t, bool bytes_ok) {
  return t == DType::Float32 || t == DType::Float16 || t == DType::BFloat16 || t == DType::Float64 ||
         (bytes_ok && (t == DType::Int8 || t == DType::UInt8));
}

class PoolOp : public CudaOp {
 public:
  PoolOp(PoolPlan p, std::string name) : p_(p), name_(std::move(name)) {}
  void launch(const LaunchArgs& a) override {
    int64_t* idx = a.outputs.size() > 1 && a.outputs[1].defined() ? a.outputs[1].as<int64_t>() : nullptr;
    require_launched(launch_pool(p_, a.inputs[0].data, a.outputs[0].data, idx, a.stream), "pool");
  }
  std::string kernel_name() const override { return name_; }

 private:
  PoolPlan p_;
  std::string name_;
};

std::unique_ptr<CudaOp> make_window_pool(const PlanContext& c, std::string* why, PoolKind kind,
                                         bool channels_last = false) {
  if (!c.has_input(0) || !c.has_output(0)) return refuse(why, "missing input or output");
  const DType t = c.in_dtype(0);
  if (t != c.out_dtype(0)) return refuse(why, "input and output storage types differ");
  if (!pool_dtype(t, kind == PoolKind::Max)) return refuse(why, std::string("pooling of ") + dtype_name(t));
  const std::vector<int64_t>& x = c.in_dims(0);
  const std::vector<int64_t> kernel = c.attr_ints("kernel_shape");
  const size_t nd = kernel.size();
  if (nd == 0 || x.size() != nd + 2) return refuse(why, "kernel_shape does not match the rank of X");
  if (nd > 3) return refuse(why, "pools over more than 3 spatial dims run on the CPU");
  const std::vector<int64_t> in(x.begin() + 2, x.end());
  const bool ceil_mode = c.schema().find_attr("ceil_mode") && c.attr_int("ceil_mode") != 0;
  WindowGeometry g;
  try {
    g = window_geometry(c, in, kernel, ceil_mode);
  } catch (const std::exception& e) {
    return refuse(why, e.what());
  }
  std::vector<int64_t> want{x[0], x[1]};
  want.insert(want.end(), g.out.begin(), g.out.end());
  if (c.out_dims(0) != want) return refuse(why, "output dims disagree with the window geometry");
  PoolPlan p;
  p.kind = kind;
  p.dtype = t;
  p.nd = static_cast<int>(nd);
  p.planes = x[0] * x[1];
  for (size_t i = 0; i < nd; ++i) {
    const size_t q = 3 - nd + i;  // right-aligned in the 3-D geometry, as the CPU's Geo3
    p.in[q] = g.in[i];
    p.k[q] = g.kernel[i];
    p.s[q] = g.stride[i];
    p.d[q] = g.dilation[i];
    p.pb[q] = g.pad_begin[i];
    p.pe[q] = g.pad_end[i];
    p.out[q] = g.out[i];
  }
  if (channels_last) {
    p.channels_last = true;
    p.channels = x[1];
    if (c.has_output(1)) return refuse(why, "channels-last MaxPool has no Indices output");
    if (!pool_nhwc_covers(p)) return refuse(why, "channels-last pooling is 2-D or 3-D, in float types, 32-bit indexed");
  }
  std::string name;
  if (kind == PoolKind::Max) {
    name = "MaxPool " + std::to_string(nd) + "-D";
    if (c.has_output(1)) {
      if (c.out_dtype(1) != DType::Int64 || c.out_dims(1) != want) return refuse(why, "unexpected Indices output");
      p.col_major = c.schema().find_attr("storage_order") && c.attr_int("storage_order") != 0;
      name += " with indices";
    }
  } else if (kind == PoolKind::Average) {
    p.include_pad = c.schema().find_attr("count_include_pad") && c.attr_int("count_include_pad") != 0;
    name = "AveragePool " + std::to_string(nd) + "-D";
  } else {
    const int64_t pw = c.attr_int("p");
    if (pw <= 0 || pw > 1 << 20) return refuse(why, "p must be positive");
    p.p = static_cast<int>(pw);
    name = "LpPool " + std::to_string(nd) + "-D";
  }
  if (channels_last) return std::make_unique<PoolOp>(p, name + " NHWC: thread per pixel and 16 bytes of channels");
  if (kind == PoolKind::Max && !c.has_output(1) && max_pool2d_covers(p))
    return std::make_unique<PoolOp>(p, name + ": " + std::to_string(p.k[1]) + "x" + std::to_string(p.k[1]) +
                                           " stride " + std::to_string(p.s[1]) + " kernel, 2 output rows per thread");
  return std::make_unique<PoolOp>(p, name + ": thread per output");
}

class GlobalPoolOp : public CudaOp {
 public:
  GlobalPoolOp(PoolKind kind, DType t, int64_t planes, int64_t size, int p)
      : kind_(kind), t_(t), planes_(planes), size_(size), p_(p) {}
  void launch(const LaunchArgs& a) override {
    require_launched(launch_global_pool(kind_, t_, planes_, size_, p_, a.inputs[0].data, a.outputs[0].data, a.stream),
                     "global pool");
  }
  std::string kernel_name() const override {
    static const char* names[] = {"GlobalMaxPool", "GlobalAveragePool", "GlobalLpPool"};
    return std::string(names[static_cast<int>(kind_)]) + (size_ > 2048 ? ": block per plane" : ": warp per plane");
  }

 private:
  PoolKind kind_;
  DType t_;
  int64_t planes_, size_;
  int p_;
};

std::unique_ptr<CudaOp> make_global_pool(const PlanContext& c, std::string* why, PoolKind kind) {
  if (!c.has_input(0) || !c.has_output(0)) return refuse(why, "missing input or output");
  const DType t = c.in_dtype(0);
  if (t != c.out_dtype(0)) return refuse(why, "input and output storage types differ");
  if (!pool_dtype(t, false)) return refuse(why, std::string("pooling of ") + dtype_name(t));
  const std::vector<int64_t>& x = c.in_dims(0);
  if (x.size() < 2) return refuse(why, "X must have rank >= 2");
  std::vector<int64_t> want(x.size(), 1);
  want[0] = x[0];
  want[1] = x[1];
  if (c.out_dims(0) != want) return refuse(why, "unexpected output dims");
  if (kind != PoolKind::Lp) {
    // Mean and max over the spatial dims are a reduction: the same kernels as ReduceMean/ReduceMax
    // over H and W (the dynamo exporter's form of the same op), in the input's layout. NCHW: a warp
    // or a block per (n, c) plane with 16-byte loads; NHWC: threads on consecutive channels.
    std::vector<bool> spatial(x.size(), true);
    spatial[0] = spatial[1] = false;
    return plan_reduce(c, kind == PoolKind::Max ? ReduceKind::Max : ReduceKind::Mean, spatial,
                       kind == PoolKind::Max ? "GlobalMaxPool: " : "GlobalAveragePool: ", why);
  }
  const int64_t planes = x[0] * x[1];
  int64_t numel = 1;
  for (int64_t d : x) numel *= d;
  const int64_t size = planes ? numel / planes : 0;
  const int64_t pw = c.attr_int("p");
  if (pw <= 0 || pw > 1 << 20) return refuse(why, "p must be positive");
  return std::make_unique<GlobalPoolOp>(kind, t, planes, size, static_cast<int>(pw));
}

}  // namespace

void register_pool_ops(CudaOpRegistry& r) {
  r.add("MaxPool", [](const PlanContext& c, std::string* why) { return make_window_pool(c, why, PoolKind::Max); });
  r.add("AveragePool",
        [](const PlanContext& c, std::string* why) { return make_window_pool(c, why, PoolKind::Average); });
  r.add("LpPool", [](const PlanContext& c, std::string* why) { return make_window_pool(c, why, PoolKind::Lp); });
  // Window pools inside channels-last conv regions (a ResNet's stem pool, DenseNet's transitions)
  // pool there, rather than through two layout changes.
  for (const auto& [name, kind] : {std::pair{"MaxPool", PoolKind::Max}, std::pair{"AveragePool", PoolKind::Average},
                                   std::pair{"LpPool", PoolKind::Lp}}) {
    const PoolKind k = kind;
    r.add_channels_last(name,
                        [k](const PlanContext& c, std::string* why) { return make_window_pool(c, why, k, true); });
  }
  // Global pools run in either layout, following their input's: their [N,C,1,1] output is the
  // same memory in both, so they never ask for a layout change of the activation they read.
  for (const PoolKind kind : {PoolKind::Average, PoolKind::Max}) {
    const char* name = kind == PoolKind::Max ? "GlobalMaxPool" : "GlobalAveragePool";
    OpFactory f = [kind](const PlanContext& c, std::string* why) { return make_global_pool(c, why, kind); };
    r.add(name, f);
    r.add_channels_last(name, f, "", ChannelsLast::FollowInput);
  }
  r.add("GlobalLpPool", [](const PlanContext& c, std::string* why) { return make_global_pool(c, why, PoolKind::Lp); });
}

}  // namespace fusec::cuda
