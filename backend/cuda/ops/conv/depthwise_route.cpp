// The depthwise route of the conv op (depthwise_route.h): which convs it takes, its weights, its
// candidates and their launch.
#include "backend/cuda/ops/conv/depthwise_route.h"

#include <cstdlib>
#include <string>

#include "backend/cuda/core/check.h"
#include "backend/cuda/core/constant_upload.h"
#include "backend/cuda/ops/conv/depthwise_mma.cuh"
#include "ir/switches.h"

namespace fusec::cuda {

bool ConvDepthwiseRoute::plan(const DepthwiseShape& s, DType dtype, const ConvEpilogue& ep, const Tensor& weights,
                              cudaStream_t stream, std::string* why) {
  if (const char* no = depthwise_refusal(s, dtype)) {
    *why = no;
    return false;
  }
  s_ = s;
  dt_ = dtype;
  bias_ = ep.has_bias;
  residual_ = ep.has_z;
  act_ = ep.act;
  // [K][1][R][S] read as [1][K][R][S] and uploaded "KRSC": [1][R][S][K], a window tap's weights
  // for neighbouring channels side by side, as the kernels load them.
  const int64_t k = s.channels_out();
  const Tensor as_krsc = weights.reshaped({1, k, s.kh, s.kw});
  w_ = DeviceBuffer(static_cast<size_t>(weights.numel()) * sizeof(float), "a depthwise conv's [R][S][K] weights");
  ConstantUploader up(stream);
  up.upload(as_krsc, w_.get(), DType::Float32, /*krsc=*/true);
  up.finish();
  if (const std::vector<uint32_t> band = depthwise_mma_band(s, dtype, weights); !band.empty()) {
    band_ = DeviceBuffer(band.size() * sizeof(uint32_t), "a depthwise conv's band fragments");
    FUSEC_CUDA_CHECK(cudaMemcpy(band_.get(), band.data(), band.size() * sizeof(uint32_t), cudaMemcpyHostToDevice));
  }
  return true;
}

int ConvDepthwiseRoute::config(int i) const { return depthwise_config_applies(s_, dt_, i) ? i : 0; }

bool ConvDepthwiseRoute::worth_timing(int i) const {
  if (i > 0) return depthwise_config_applies(s_, dt_, i);
  for (int j = 1; j < candidates(); ++j)
    if (depthwise_config_applies(s_, dt_, j)) return false;
  return true;
}

std::string ConvDepthwiseRoute::identity(int i) const { return depthwise_config_name(config(i)); }

int ConvDepthwiseRoute::default_candidate() const {
  for (int i = 1; i < candidates(); ++i)
    if (depthwise_config_applies(s_, dt_, i)) return i;
  return 0;
}

bool ConvDepthwiseRoute::run(int i, const void* x, const void* w, const void* b, const void* z, void* y, void* ws,
                             cudaStream_t stream) const {
  if (i < 0 || i >= candidates()) return false;
  DepthwiseArgs a;
  a.s = s_;
  a.dtype = dt_;
  a.x = x;
  a.w = static_cast<const float*>(w_.get());
  a.band = band_.get();
  a.bias = bias_ ? b : nullptr;
  a.z = residual_ ? z : nullptr;
  a.y = y;
  a.act = act_;
  return launch_depthwise(a, config(i), stream);
}

std::string ConvDepthwiseRoute::kernel_name(int i) const {
  const char* t = dt_ == DType::Float16 ? "fp16" : dt_ == DType::BFloat16 ? "bf16" : "fp32";
  return std::string("fusec depthwise conv ") + t + " NHWC " + std::to_string(s_.kh) + "x" + std::to_string(s_.kw) +
         (s_.m > 1 ? " x" + std::to_string(s_.m) : "") + " [" + identity(i) + "]" +
         (bias_ || residual_ || act_.act != Act::None ? " + fused epilogue" : "");
}

std::unique_ptr<ConvDepthwiseRoute> plan_conv_depthwise_route(const PlanContext& c, const WindowGeometry& g, int group,
                                                              const ConvEpilogue& ep, bool nhwc) {
  const char* e = env_switch("FUSEC_CONV_DEPTHWISE");
  if (e && std::string(e) == "0") return nullptr;
  const auto& xd = c.in_dims(0);
  const auto& wd = c.in_dims(1);
  const auto& od = c.out_dims(0);
  const Tensor* weights = c.constant(1);
  if (!nhwc || xd.size() != 4 || wd.size() != 4 || od.size() != 4 || !weights || group < 1 || group != xd[1] ||
      wd[1] != 1 || wd[0] % group != 0 || od[1] != wd[0] || g.rank() != 2)
    return nullptr;
  DepthwiseShape s;
  s.batch = xd[0], s.c = xd[1], s.h = xd[2], s.w = xd[3];
  s.m = wd[0] / group;
  s.oh = od[2], s.ow = od[3];
  s.kh = wd[2], s.kw = wd[3];
  s.stride_h = g.stride[0], s.stride_w = g.stride[1];
  s.dil_h = g.dilation[0], s.dil_w = g.dilation[1];
  s.pad_top = g.pad_begin[0], s.pad_left = g.pad_begin[1];
  s.multiprocessors = c.ctx().multiprocessors();
  auto route = std::make_unique<ConvDepthwiseRoute>();
  std::string why;
  if (route->plan(s, ep.dt, ep, *weights, c.ctx().stream(), &why)) return route;
  return nullptr;
}

int conv_depthwise_forced() {
  const char* e = env_switch("FUSEC_CONV_DEPTHWISE");
  if (!e || !*e || std::string(e) == "0" || std::string(e).find_first_not_of("0123456789") != std::string::npos)
    return -1;
  return std::atoi(e) - 1;
}

}  // namespace fusec::cuda
