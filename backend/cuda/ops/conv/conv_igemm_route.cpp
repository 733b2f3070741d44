// The implicit-GEMM route of the conv op (conv_igemm_route.h): its plan, candidates, their
// workspace and launch. The Winograd candidates' own parts are in winograd_route.cpp.
#include "backend/cuda/ops/conv/conv_igemm_route.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "backend/cuda/core/check.h"
#include "backend/cuda/core/constant_upload.h"
#include "ir/switches.h"

namespace fusec::cuda {

bool ConvIgemmRoute::plan(const ConvIgemmShape& s, bool bias, bool residual, const ActParams& act,
                          const Tensor* weights, cudaStream_t stream, std::string* why) {
  switch (act.act) {
    case Act::None:
      act_ = SgemmAct::None;
      break;
    case Act::Relu:
      act_ = SgemmAct::Relu;
      break;
    case Act::Gelu:
      act_ = SgemmAct::GeluErf;
      break;
    default:
      *why = "an activation the implicit-GEMM conv does not fuse";
      return false;
  }
  if (const char* no = conv_igemm_refusal(s)) {
    *why = no;
    return false;
  }
  s_ = s;
  stream_ = stream;
  bias_ = bias;
  residual_ = residual;
  const bool one_by_one = s.r == 1 && s.s == 1 && s.pad_h == 0 && s.pad_w == 0;
  pointwise_ = one_by_one && s.stride_h == 1 && s.stride_w == 1 && s.p * s.q % 4 == 0 &&
               s.batch * s.c * s.h * s.w < (int64_t{1} << 30);
  packable_ =
      one_by_one && !pointwise_ && s.batch * s.p * s.q % 4 == 0 && s.batch * s.c * s.p * s.q < (int64_t{1} << 30);
  const char* no_tap = env_switch("FUSEC_CONV_TAP");  // =0: the (c, r, s) order everywhere (A/B runs)
  tap_major_ =
      weights && weights->dtype() == DType::Float32 && s.c % 16 == 0 && !(no_tap && std::string(no_tap) == "0");
  if (tap_major_) {
    weights_ = DeviceBuffer(static_cast<size_t>(weights->numel()) * sizeof(float),
                            "an implicit-GEMM conv's [K][R][S][C] weights");
    ConstantUploader up(stream);
    up.upload(*weights, weights_.get(), DType::Float32, /*krsc=*/true);
    up.finish();
  }
  if (weights && weights->dtype() == DType::Float32) plan_winograd(*weights);
  const std::vector<int2> taps = conv_igemm_taps(s, tap_major_);
  taps_ = DeviceBuffer(taps.size() * sizeof(int2), "an implicit-GEMM conv's tap table");
  FUSEC_CUDA_CHECK(cudaMemcpy(taps_.get(), taps.data(), taps.size() * sizeof(int2), cudaMemcpyHostToDevice));
  int flags = 0;
  for (int i = 0; i < conv_igemm_config_count(); ++i) flags = std::max(flags, conv_igemm_flags(i));
  if (flags > 0) {
    flags_ = DeviceBuffer(static_cast<size_t>(flags) * sizeof(unsigned), "an implicit-GEMM conv's stream-K flags");
    FUSEC_CUDA_CHECK(cudaMemset(flags_.get(), 0, flags_.size()));
  }
  return true;
}

// Every candidate's configuration and mode: the plain ones, then the pointwise ones packed, then
// the Winograd GEMM's configurations in each layout.
using Mode = ConvIgemmRoute::Mode;
static const std::vector<std::pair<int, Mode>>& candidate_list() {
  static const std::vector<std::pair<int, Mode>> list = [] {
    std::vector<std::pair<int, Mode>> v;
    for (int i = 0; i < conv_igemm_config_count(); ++i) v.emplace_back(i, Mode::Plain);
    for (int i = 0; i < conv_igemm_config_count(); ++i)
      if (conv_igemm_config_pointwise(i)) v.emplace_back(i, Mode::Packed);
    for (Mode m : {Mode::WinogradChannels, Mode::WinogradTiles})
      for (int i = 0; i < winograd_gemm_config_count(); ++i) v.emplace_back(i, m);
    return v;
  }();
  return list;
}

bool ConvIgemmRoute::applies(Mode mode) const {
  switch (mode) {
    case Mode::Packed:
      return packable_;
    case Mode::WinogradChannels:
      return wino_channels_ok_;
    case Mode::WinogradTiles:
      return wino_tiles_ok_;
    default:
      return true;
  }
}

bool ConvIgemmRoute::owns_weights(int i) const {
  Mode mode = Mode::Plain;
  config_of(i, &mode);
  return (winograd(mode) && applies(mode)) || tap_major_;
}

void ConvIgemmRoute::keep_only(int i) {
  Mode mode = Mode::Plain;
  config_of(i, &mode);
  if (!applies(mode)) mode = Mode::Plain;
  if (mode != Mode::WinogradChannels) wino_channels_ = DeviceBuffer();
  if (mode != Mode::WinogradTiles) wino_tiles_ = DeviceBuffer();
  weights_host_ = nullptr;
  wino_w_ = DeviceBuffer();
  if (winograd(mode)) weights_ = DeviceBuffer(), taps_ = DeviceBuffer(), flags_ = DeviceBuffer();
}

int ConvIgemmRoute::candidate_count() { return static_cast<int>(candidate_list().size()); }

int ConvIgemmRoute::config_of(int i, Mode* mode) {
  const auto& c = candidate_list().at(static_cast<size_t>(i));
  *mode = c.second;
  return c.first;
}

std::string ConvIgemmRoute::identity(int i) const {
  Mode mode = Mode::Plain;
  int cfg = config_of(i, &mode);
  if (applies(mode) && winograd(mode))
    return std::string(mode == Mode::WinogradTiles ? "winograd tile-major " : "winograd channel-major ") +
           winograd_gemm_config_name(cfg);
  if (winograd(mode)) mode = Mode::Plain, cfg = 0;
  const std::string order = tap_major_ && !conv_igemm_config_pointwise(cfg) ? "tap-major " : "";
  if (mode == Mode::Packed && packable_) return std::string("packed ") + conv_igemm_config_name(cfg);
  return order + conv_igemm_config_name(cfg);
}

bool ConvIgemmRoute::worth_timing(int i) const {
  Mode mode = Mode::Plain;
  const int cfg = config_of(i, &mode);
  if (mode != Mode::Plain) return applies(mode);
  return !conv_igemm_config_pointwise(cfg) || pointwise_;
}

// The packed copy's bytes, rounded up so that the partial sums after it stay 16-byte
// aligned.
size_t ConvIgemmRoute::pack_bytes(Mode mode) const {
  if (mode == Mode::Plain || !applies(mode)) return 0;
  return (static_cast<size_t>(s_.batch * s_.c * s_.p * s_.q) * sizeof(float) + 255) / 256 * 256;
}

size_t ConvIgemmRoute::workspace(int i) const {
  Mode mode = Mode::Plain;
  int cfg = config_of(i, &mode);
  if (winograd(mode)) {
    if (applies(mode)) return winograd_workspace(wino_);
    mode = Mode::Plain, cfg = 0;
  }
  return pack_bytes(mode) + conv_igemm_workspace(cfg);
}

bool ConvIgemmRoute::run(int i, const void* x, const void* w, const void* b, const void* z, void* y, void* ws,
                         cudaStream_t stream) const {
  if (i < 0 || i >= candidate_count()) return false;
  Mode mode = Mode::Plain;
  int cfg = config_of(i, &mode);
  if (!applies(mode)) {
    if (winograd(mode)) cfg = 0;
    mode = Mode::Plain;
  }
  if (winograd(mode)) return run_winograd(mode, cfg, x, b, z, y, ws, stream);
  auto aligned16 = [](const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 == 0; };
  ConvIgemmArgs a;
  a.M = static_cast<int>(s_.cout);
  a.N = static_cast<int>(s_.batch * s_.p * s_.q);
  a.K = static_cast<int>(s_.c * s_.r * s_.s);
  a.A = static_cast<const float*>(tap_major_ ? weights_.get() : w);
  a.tap_major = tap_major_;
  a.lda = a.K;
  a.X = static_cast<const float*>(x);
  a.taps = static_cast<const int2*>(taps_.get());
  a.H = static_cast<int>(s_.h), a.W = static_cast<int>(s_.w), a.P = static_cast<int>(s_.p),
  a.Q = static_cast<int>(s_.q);
  a.stride_h = static_cast<int>(s_.stride_h), a.stride_w = static_cast<int>(s_.stride_w);
  a.pad_h = static_cast<int>(s_.pad_h), a.pad_w = static_cast<int>(s_.pad_w);
  a.chw = static_cast<int>(s_.c * s_.h * s_.w);
  a.b_pq = pointwise_ ? static_cast<int>(s_.p * s_.q) : 0;
  a.bias = bias_ ? static_cast<const float*>(b) : nullptr;
  a.residual = residual_ ? static_cast<const float*>(z) : nullptr;
  a.C = static_cast<float*>(y);
  a.vec = (s_.p * s_.q) % 4 == 0 && aligned16(y) && (!a.residual || aligned16(a.residual));
  a.act = act_;
  char* rest = static_cast<char*>(ws);
  if (mode == Mode::Packed) {
    // B from the packed copy: one image of batch·P·Q pixels per channel row.
    float* t = static_cast<float*>(ws);
    if (!t || !launch_conv_pack_f32(a.X, t, s_, stream)) return false;
    a.X = t;
    a.b_pq = a.N;
    a.chw = static_cast<int>(s_.c) * a.N;
    rest += pack_bytes(mode);
  }
  if (conv_igemm_workspace(cfg) > 0) {
    a.sk_work = reinterpret_cast<float*>(rest);
    a.sk_flags = static_cast<unsigned*>(flags_.get());
  }
  return launch_conv_igemm_f32(a, cfg, stream);
}

std::string ConvIgemmRoute::kernel_name(int i) const {
  return std::string("fusec implicit-GEMM conv fp32 NCHW ") + identity(i) +
         (bias_ || residual_ || act_ != SgemmAct::None ? " + fused epilogue" : "");
}

/// fusec's implicit-GEMM conv (conv_igemm.cuh) for a 2-D, ungrouped conv: timed beside cuDNN
/// at strict fp32. FUSEC_CONV_IGEMM=0 leaves it out; =N takes configuration N untimed;
/// FUSEC_CONV_TAP=0 keeps K in the weights' (c, r, s) order.
std::unique_ptr<ConvRoute> plan_conv_igemm_route(const PlanContext& c, const WindowGeometry& g, int group,
                                                 const ConvEpilogue& ep) {
  const char* e = env_switch("FUSEC_CONV_IGEMM");
  if ((e && std::string(e) == "0") || group != 1 || g.kernel.size() != 2) return nullptr;
  const auto& xd = c.in_dims(0);
  const auto& wd = c.in_dims(1);
  const auto& od = c.out_dims(0);
  ConvIgemmShape s;
  s.batch = xd[0], s.c = xd[1], s.h = xd[2], s.w = xd[3];
  s.cout = wd[0], s.r = wd[2], s.s = wd[3], s.p = od[2], s.q = od[3];
  s.stride_h = g.stride[0], s.stride_w = g.stride[1], s.pad_h = g.pad_begin[0], s.pad_w = g.pad_begin[1];
  s.dil_h = g.dilation[0], s.dil_w = g.dilation[1];
  if (wd[1] != xd[1]) return nullptr;
  auto route = std::make_unique<ConvIgemmRoute>();
  std::string why;
  if (route->plan(s, ep.has_bias, ep.has_z, ep.act, c.constant(1), c.ctx().stream(), &why)) return route;
  return nullptr;
}

int conv_igemm_forced() {
  const char* e = env_switch("FUSEC_CONV_IGEMM");
  if (!e || !*e || std::string(e) == "0" || std::string(e).find_first_not_of("0123456789") != std::string::npos)
    return -1;
  return std::atoi(e) - 1;
}

}  // namespace fusec::cuda
