// The channels-last 1x1 conv's own route (conv_pointwise_route.h): which convs it takes, its
// candidates and their launch.
#include "backend/cuda/ops/conv/conv_pointwise_route.h"

#include <cstdint>
#include <optional>
#include <string>

#include "backend/cuda/core/check.h"
#include "backend/cuda/core/context.h"
#include "backend/cuda/core/tuning_cache.h"
#include "backend/cuda/ops/conv/conv_gemm.h"
#include "backend/cuda/ops/conv/conv_op.h"
#include "ir/switches.h"

namespace fusec::cuda {

ConvPointwiseRoute::ConvPointwiseRoute(const HgemmArgs* hgemm, const PointwiseRowsArgs* rows,
                                       const PointwiseNarrowArgs* narrow, bool bias, bool residual)
    : bias_(bias), residual_(residual) {
  // Few rows first: FUSEC_CONV_GEMM=force takes candidate 0, and where the few-rows kernel applies
  // it is the one meant for the shape.
  if (rows) {
    rows_ = *rows;
    kinds_.push_back(kRows);
  }
  if (narrow) {
    narrow_ = *narrow;
    for (int c = 0; c < kPointwiseNarrowConfigs; ++c) kinds_.push_back(kNarrow - c);
  }
  if (hgemm) {
    hgemm_ = *hgemm;
    for (int i = 0; i < hgemm_config_count(); ++i) kinds_.push_back(i);
  }
}

std::string ConvPointwiseRoute::identity(int i) const {
  const int k = kinds_.at(i);
  if (is_narrow(k)) return "narrow " + std::to_string(pointwise_narrow_block_rows(kNarrow - k)) + "x64";
  return k == kRows ? std::string("rows warp/channel") : std::string("hgemm ") + hgemm_config_name(k);
}

DType ConvPointwiseRoute::dtype(int kind) const {
  if (kind == kRows) return rows_.dtype;
  if (is_narrow(kind)) return narrow_.dtype;
  return hgemm_.bf16 ? DType::BFloat16 : DType::Float16;
}

bool ConvPointwiseRoute::run(int i, const void* x, const void* w, const void* b, const void* z, void* y, void* ws,
                             cudaStream_t stream) const {
  if (i < 0 || i >= candidates()) return false;
  if (kinds_[i] == kRows) {
    PointwiseRowsArgs a = rows_;
    a.x = x, a.w = w, a.bias = bias_ ? b : nullptr, a.z = residual_ ? z : nullptr, a.y = y;
    return launch_pointwise_rows(a, stream);
  }
  if (is_narrow(kinds_[i])) {
    PointwiseNarrowArgs a = narrow_;
    a.x = x, a.w = w, a.bias = bias_ ? b : nullptr, a.z = residual_ ? z : nullptr, a.y = y;
    return launch_pointwise_narrow(a, kNarrow - kinds_[i], stream);
  }
  HgemmArgs a = hgemm_;
  a.A = x, a.B = w, a.bias = bias_ ? b : nullptr, a.residual = residual_ ? z : nullptr, a.C = y;
  return launch_hgemm(a, kinds_[i], stream);
}

std::string ConvPointwiseRoute::kernel_name(int i) const {
  const int k = kinds_.at(i);
  const DType dt = dtype(k);
  const ActParams act = k == kRows ? rows_.act : is_narrow(k) ? narrow_.act : hgemm_.act;
  const char* t = dt == DType::Float16 ? "fp16" : dt == DType::BFloat16 ? "bf16" : "fp32";
  const char* what = k == kRows     ? "fusec few-rows 1x1 conv "
                     : is_narrow(k) ? "fusec narrow-channel 1x1 conv "
                                    : "fusec wgmma GEMM 1x1 conv ";
  return std::string(what) + t + " NHWC [" + identity(i) + "]" +
         (act.act != Act::None ? std::string(" + ") + activation_name(act.act) : "") + (bias_ ? " + bias" : "") +
         (residual_ ? " + residual" : "");
}

bool pointwise_narrow_applies(const std::vector<int64_t>& w, int64_t group, const std::vector<int64_t>& strides,
                              const std::vector<int64_t>& pads, DType dt) {
  if (dt != DType::Float16 && dt != DType::BFloat16 && dt != DType::Float32) return false;
  if (w.size() != 4 || group != 1 || w[2] != 1 || w[3] != 1) return false;
  for (int64_t s : strides)
    if (s != 1) return false;
  for (int64_t p : pads)
    if (p != 0) return false;
  const int64_t v = 16 / static_cast<int64_t>(dtype_size(dt));
  return (w[0] % v != 0 || w[1] % v != 0) && w[0] <= kPointwiseNarrowMaxChannels && w[1] <= kPointwiseNarrowMaxChannels;
}

bool pointwise_route_planned() {
  if (const char* off = env_switch("FUSEC_CONV_GEMM"); off && std::string(off) == "0") return false;
  return conv_gemm_forced() || (ConvOp::conv_tuning_on(true) && TuningCache::global().enabled());
}

std::unique_ptr<ConvRoute> plan_conv_pointwise_route(const PlanContext& c, const WindowGeometry& g, int group,
                                                     const ConvEpilogue& ep) {
  if (const char* off = env_switch("FUSEC_CONV_GEMM"); off && std::string(off) == "0") return nullptr;
  if (ep.dt != DType::Float16 && ep.dt != DType::BFloat16 && ep.dt != DType::Float32) return nullptr;
  const auto& xd = c.in_dims(0);
  const auto& wd = c.in_dims(1);
  const auto& od = c.out_dims(0);
  if (xd.size() != 4 || wd.size() != 4 || od.size() != 4 || group != 1 || g.rank() != 2 || wd[2] != 1 ||
      wd[3] != 1 || wd[1] != xd[1] || od[1] != wd[0])
    return nullptr;
  for (int i = 0; i < 2; ++i)
    if (g.stride[i] != 1 || g.pad_begin[i] != 0 || g.pad_end[i] != 0 || od[2 + i] != xd[2 + i]) return nullptr;
  const int64_t m = xd[0] * xd[2] * xd[3], k = xd[1], n = od[1];
  if (m < 1 || m > INT32_MAX || k > INT32_MAX / 2 || n > INT32_MAX / 2) return nullptr;

  std::optional<PointwiseNarrowArgs> narrow;
  if (pointwise_narrow_applies(wd, group, {1, 1}, {0, 0}, ep.dt)) {
    PointwiseNarrowArgs a;
    a.dtype = ep.dt, a.rows = m, a.cin = k, a.cout = n, a.act = ep.act;
    narrow = a;
  }
  // ReLU and no activation go into cuDNN's fused call, one kernel: no pass for the other kernels
  // to save.
  if (ep.act.act == Act::None || ep.act.act == Act::Relu) {
    if (!narrow) return nullptr;
    return std::make_unique<ConvPointwiseRoute>(nullptr, nullptr, &*narrow, ep.has_bias, ep.has_z);
  }

  std::optional<PointwiseRowsArgs> rows;
  if (m <= kPointwiseRowsMax) {
    PointwiseRowsArgs r;
    r.dtype = ep.dt, r.rows = m, r.cin = k, r.cout = n, r.act = ep.act;
    rows = r;
  }
  std::optional<HgemmArgs> hgemm;
  const char* e = env_switch("FUSEC_HGEMM");
  if (!(e && std::string(e) == "0") && (ep.dt == DType::Float16 || ep.dt == DType::BFloat16) &&
      hgemm_available(c.ctx().device())) {
    HgemmArgs a;
    a.M = static_cast<int>(m), a.N = static_cast<int>(n), a.K = static_cast<int>(k);
    a.lda = k;
    a.ldb = k;  // W [Cout][Cin]: B stored [N,K]
    a.trans_b = true;
    a.ldr = n, a.ldc = n;
    a.act = ep.act;
    a.bf16 = ep.dt == DType::BFloat16;
    // hgemm_applies' layout checks (multiples of 8, aligned pointers) on stand-in pointers: the
    // executor's buffers are 256-byte aligned.
    HgemmArgs probe = a;
    alignas(16) static const uint8_t stand_in[16] = {};
    probe.A = probe.B = stand_in;
    probe.C = const_cast<uint8_t*>(stand_in);
    probe.bias = ep.has_bias ? stand_in : nullptr;
    probe.residual = ep.has_z ? stand_in : nullptr;
    if (hgemm_applies(probe)) hgemm = a;
  }
  if (!rows && !hgemm && !narrow) return nullptr;
  return std::make_unique<ConvPointwiseRoute>(hgemm ? &*hgemm : nullptr, rows ? &*rows : nullptr,
                                              narrow ? &*narrow : nullptr, ep.has_bias, ep.has_z);
}

}  // namespace fusec::cuda
