// The Winograd candidates of the implicit-GEMM route (conv_igemm_route.h; kernels in winograd.cu):
// which 3x3 convs take them, their transformed filters (made at plan time, per layout, only when a
// candidate of that layout is timed or picked) and their launch. They are not a ConvRoute of their
// own: they share the implicit-GEMM route's numbering, which the tuning cache and
// FUSEC_CONV_IGEMM=N name, and where they do not apply they run as its first plain configuration.
#include "ir/switches.h"
#include "backend/cuda/ops/conv/conv_igemm_route.h"

#include <cstdint>
#include <cstdlib>
#include <string>

#include "backend/cuda/core/check.h"
#include "backend/cuda/ops/conv/winograd.cuh"

namespace fusec::cuda {

// A 3x3, stride-1, pad-1, undilated conv (output size = input size): the Winograd candidates
// (FUSEC_CONV_WINOGRAD=0: none, for A/B runs). Their transformed filters are made by prepare(),
// only for the layouts a plan times or recalls: making all of them on the host made ResNet-50's
// warm build much slower.
void ConvIgemmRoute::plan_winograd(const Tensor& weights) {
  const ConvIgemmShape& s = s_;
  const char* off = env_switch("FUSEC_CONV_WINOGRAD");
  if ((off && std::string(off) == "0") || s.r != 3 || s.s != 3 || s.stride_h != 1 || s.stride_w != 1 || s.dil_h != 1 ||
      s.dil_w != 1 || s.pad_h != 1 || s.pad_w != 1 || s.p != s.h || s.q != s.w || s.batch > INT32_MAX ||
      s.c > INT32_MAX || s.cout > INT32_MAX || s.h > INT32_MAX || s.w > INT32_MAX)
    return;
  wino_ = WinogradShape{static_cast<int>(s.batch), static_cast<int>(s.c), static_cast<int>(s.h), static_cast<int>(s.w),
                        static_cast<int>(s.cout)};
  wino_channels_ok_ = !winograd_refusal(wino_, false);
  wino_tiles_ok_ = !winograd_refusal(wino_, true);
  if (wino_channels_ok_ || wino_tiles_ok_) weights_host_ = &weights;
}

bool ConvIgemmRoute::prepare(int i) {
  Mode mode = Mode::Plain;
  config_of(i, &mode);
  if (!winograd(mode) || !applies(mode)) return true;
  const bool tiles = mode == Mode::WinogradTiles;
  DeviceBuffer& d = tiles ? wino_tiles_ : wino_channels_;
  if (d.get()) return true;
  if (!weights_host_) return false;  // past the plan: the weights are gone
  if (!wino_w_.get()) {
    wino_w_ = DeviceBuffer(weights_host_->nbytes(), "a Winograd conv's weights, for their transform");
    FUSEC_CUDA_CHECK(
        cudaMemcpyAsync(wino_w_.get(), weights_host_->raw(), wino_w_.size(), cudaMemcpyHostToDevice, stream_));
  }
  d = DeviceBuffer(size_t(36) * wino_.cout * wino_.c * sizeof(float), "a Winograd conv's transformed filter");
  if (!launch_winograd_filter_f32(static_cast<const float*>(wino_w_.get()), static_cast<float*>(d.get()), wino_.cout,
                                  wino_.c, tiles, stream_)) {
    d = DeviceBuffer();
    return false;
  }
  FUSEC_CUDA_CHECK(cudaGetLastError());
  FUSEC_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return true;
}

bool ConvIgemmRoute::run_winograd(Mode mode, int cfg, const void* x, const void* b, const void* z, void* y, void* ws,
                                  cudaStream_t stream) const {
  WinogradArgs wa;
  wa.shape = wino_;
  wa.tile_major = mode == Mode::WinogradTiles;
  wa.x = static_cast<const float*>(x);
  wa.u = static_cast<const float*>((wa.tile_major ? wino_tiles_ : wino_channels_).get());  // null: not prepared
  wa.bias = bias_ ? static_cast<const float*>(b) : nullptr;
  wa.residual = residual_ ? static_cast<const float*>(z) : nullptr;
  wa.y = static_cast<float*>(y);
  wa.act = act_;
  wa.workspace = ws;
  return launch_winograd_f32(wa, cfg, stream);
}

}  // namespace fusec::cuda
