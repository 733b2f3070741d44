// The grouped route of the conv op (grouped_route.h): which convs it takes, its weights, its launch.
#include "backend/cuda/ops/conv/grouped_route.h"

#include <string>
#include <vector>

#include "backend/cuda/core/check.h"
#include "ir/half.h"
#include "ir/switches.h"

namespace fusec::cuda {

bool ConvGroupedRoute::plan(const GroupedShape& s, DType dtype, const ConvEpilogue& ep, const Tensor& weights,
                            std::string* why) {
  const char* fma_no = grouped_refusal(s, dtype);
  const char* mma_no = grouped_mma_refusal(s, dtype);
  if (fma_no && mma_no) {
    *why = fma_no;
    return false;
  }
  s_ = s;
  dt_ = dtype;
  bias_ = ep.has_bias;
  residual_ = ep.has_z;
  act_ = ep.act;
  auto weight = [&](int64_t g, int64_t k, int64_t c, int64_t r, int64_t q) {  // ONNX's [G·Kg][Cg][R][S]
    return static_cast<float>(weights.as_double((((g * s.kg + k) * s.cg + c) * s.kh + r) * s.kw + q));
  };
  if (!fma_no) {
    // [G][R][S][Cg][Kg]: a tap's weights for neighbouring output channels side by side, as a
    // thread of the FMA kernels loads them.
    std::vector<float> w(static_cast<size_t>(weights.numel()));
    for (int64_t g = 0; g < s.groups; ++g)
      for (int64_t k = 0; k < s.kg; ++k)
        for (int64_t c = 0; c < s.cg; ++c)
          for (int64_t r = 0; r < s.kh; ++r)
            for (int64_t q = 0; q < s.kw; ++q)
              w[static_cast<size_t>((((g * s.kh + r) * s.kw + q) * s.cg + c) * s.kg + k)] = weight(g, k, c, r, q);
    w_ = DeviceBuffer(w.size() * sizeof(float), "a grouped conv's [G][R][S][Cg][Kg] weights");
    FUSEC_CUDA_CHECK(cudaMemcpy(w_.get(), w.data(), w.size() * sizeof(float), cudaMemcpyHostToDevice));
  }
  if (!mma_no) {
    // [G][Kg][kp] in the storage type: an output channel's taps in (r, s, c) order, the B operand's
    // rows as ldmatrix reads them, zeros up to kp.
    const int64_t kp = grouped_mma_k_stride(s);
    std::vector<uint16_t> w(static_cast<size_t>(s.groups * s.kg * kp), 0);
    for (int64_t g = 0; g < s.groups; ++g)
      for (int64_t k = 0; k < s.kg; ++k)
        for (int64_t r = 0; r < s.kh; ++r)
          for (int64_t q = 0; q < s.kw; ++q)
            for (int64_t c = 0; c < s.cg; ++c) {
              const float v = weight(g, k, c, r, q);
              w[static_cast<size_t>((g * s.kg + k) * kp + (r * s.kw + q) * s.cg + c)] =
                  dtype == DType::Float16 ? float_to_half(v) : float_to_bf16(v);
            }
    w_mma_ = DeviceBuffer(w.size() * sizeof(uint16_t), "a grouped conv's [G][Kg][R·S·Cg] tensor-core weights");
    FUSEC_CUDA_CHECK(cudaMemcpy(w_mma_.get(), w.data(), w.size() * sizeof(uint16_t), cudaMemcpyHostToDevice));
  }
  return true;
}

bool ConvGroupedRoute::worth_timing(int i) const { return grouped_config_refusal(i, s_, dt_) == nullptr; }

bool ConvGroupedRoute::prepare(int i) { return worth_timing(i); }

void ConvGroupedRoute::keep_only(int i) {
  if (i == kGroupedMmaConfig)
    w_ = DeviceBuffer();
  else
    w_mma_ = DeviceBuffer();
}

bool ConvGroupedRoute::run(int i, const void* x, const void* w, const void* b, const void* z, void* y, void* ws,
                           cudaStream_t stream) const {
  GroupedArgs a;
  a.s = s_;
  a.dtype = dt_;
  a.x = x;
  a.w = static_cast<const float*>(w_.get());
  a.w_mma = w_mma_.get();
  a.bias = bias_ ? b : nullptr;
  a.z = residual_ ? z : nullptr;
  a.y = y;
  a.act = act_;
  return launch_grouped(a, i, stream);
}

std::string ConvGroupedRoute::kernel_name(int i) const {
  const char* t = dt_ == DType::Float16 ? "fp16" : dt_ == DType::BFloat16 ? "bf16" : "fp32";
  return std::string("fusec grouped conv ") + t + " NHWC " + std::to_string(s_.kh) + "x" + std::to_string(s_.kw) +
         ", " + std::to_string(s_.groups) + " groups of " + std::to_string(s_.cg) + " [" + identity(i) + "]" +
         (bias_ || residual_ || act_.act != Act::None ? " + fused epilogue" : "");
}

std::unique_ptr<ConvGroupedRoute> plan_conv_grouped_route(const PlanContext& c, const WindowGeometry& g, int group,
                                                          const ConvEpilogue& ep, bool nhwc) {
  const char* e = env_switch("FUSEC_CONV_GROUPED");
  if (e && std::string(e) == "0") return nullptr;
  const auto& xd = c.in_dims(0);
  const auto& wd = c.in_dims(1);
  const auto& od = c.out_dims(0);
  const Tensor* weights = c.constant(1);
  if (!nhwc || xd.size() != 4 || wd.size() != 4 || od.size() != 4 || !weights || group < 2 || group >= xd[1] ||
      xd[1] % group != 0 || wd[0] % group != 0 || wd[1] != xd[1] / group || od[1] != wd[0] || g.rank() != 2)
    return nullptr;
  GroupedShape s;
  s.batch = xd[0], s.h = xd[2], s.w = xd[3];
  s.groups = group, s.cg = xd[1] / group, s.kg = wd[0] / group;
  s.oh = od[2], s.ow = od[3];
  s.kh = wd[2], s.kw = wd[3];
  s.stride_h = g.stride[0], s.stride_w = g.stride[1];
  s.dil_h = g.dilation[0], s.dil_w = g.dilation[1];
  s.pad_top = g.pad_begin[0], s.pad_left = g.pad_begin[1];
  auto route = std::make_unique<ConvGroupedRoute>();
  std::string why;
  if (route->plan(s, ep.dt, ep, *weights, &why)) return route;
  return nullptr;
}

int conv_grouped_forced() {
  const char* e = env_switch("FUSEC_CONV_GROUPED");
  if (!e) return -1;
  const std::string v = e;
  return v == "force" ? 0 : v == "force2" ? 1 : v == "force3" ? kGroupedMmaConfig : -1;
}

}  // namespace fusec::cuda
