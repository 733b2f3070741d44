// The implicit-GEMM convolution's configurations and entry points; see conv_igemm.cuh. The
// kernel is sgemm_core.cuh's, instantiated for ConvIgemmArgs (the tap table), ConvTapArgs
// (tap-major) and ConvPointwiseArgs (1x1): here, but for the stream-K configurations'
// instances, which conv_igemm_streamk.cu compiles (conv_igemm_launch.cuh).
#include "backend/cuda/ops/conv/conv_igemm.cuh"

#include <algorithm>
#include <climits>

#include "backend/cuda/ops/conv/conv_igemm_launch.cuh"

namespace fusec::cuda {

namespace {

using namespace conv_igemm_detail;

struct Config {
  const char* name;
  bool (*launch)(const ConvIgemmArgs&, cudaStream_t);
  bool pointwise;
  SkNeeds (*sk)() = nullptr;  // stream-K: its resident CTAs and their partial sums' bytes
};
constexpr int SK = sgemm_core::kStreamK;

// The GEMM's two fastest tiles on BERT-base (sgemm.cu), each with and without split-K: split-K
// for the late layers, whose few output pixels leave too few tiles (ResNet-50's layer 4 at batch
// 16: Cout 512 x 784 pixels, 28 tiles of 128x128, 56 of 64x128: split 4 for 224 CTAs). Every
// thread of an im2col configuration copies one pixel's column, so its thread count must be a
// multiple of BN.
//                                                    BM   BN  BK TM TN WR ST MIN SPLIT
const Config kConfigs[] = {
    {"64x128 t8x8 128thr 2/SM", launch_conv<64, 128, 16, 8, 8, 4, 4, 2>, false},
    {"64x128 t8x8 128thr 2/SM splitK2", launch_conv<64, 128, 16, 8, 8, 4, 4, 2, 2>, false},
    {"128x128 t8x8 256thr 2/SM", launch_conv<128, 128, 16, 8, 8, 4, 3, 2>, false},
    {"128x128 t8x8 256thr 2/SM splitK2", launch_conv<128, 128, 16, 8, 8, 4, 3, 2, 2>, false},
    {"64x128 t8x8 128thr 2/SM splitK4", launch_conv<64, 128, 16, 8, 8, 4, 4, 2, 4>, false},
    // A third CTA per SM: the stem and layer 2's downsample (a pointwise twin won nothing).
    {"64x128 t8x8 128thr 3/SM 3st", launch_conv<64, 128, 16, 8, 8, 4, 3, 3>, false},
    // 1x1 convs: B copied as a GEMM's, 16 bytes at a time, no tap table.
    {"pointwise 64x128 t8x8 128thr 2/SM", launch_pointwise<64, 128, 16, 8, 8, 4, 4, 2>, true},
    {"pointwise 64x128 t8x8 128thr 2/SM splitK2", launch_pointwise<64, 128, 16, 8, 8, 4, 4, 2, 2>, true},
    {"pointwise 128x128 t8x8 256thr 2/SM", launch_pointwise<128, 128, 16, 8, 8, 4, 3, 2>, true},
    {"pointwise 128x128 t8x8 256thr 2/SM splitK2", launch_pointwise<128, 128, 16, 8, 8, 4, 3, 2, 2>, true},
    // Stream-K: the late layers' few tiles spread over every resident CTA (sgemm_core::stream_k).
    {"64x128 t8x8 128thr 2/SM streamK", launch_conv<64, 128, 16, 8, 8, 4, 4, 2, SK>, false,
     sk_needs<64, 128, 16, 8, 8, 4, 4, 2>},
    {"pointwise 64x128 t8x8 128thr 2/SM streamK", launch_pointwise<64, 128, 16, 8, 8, 4, 4, 2, SK>, true,
     sk_needs<64, 128, 16, 8, 8, 4, 4, 2>},
    {"128x128 t8x8 256thr 2/SM streamK", launch_conv<128, 128, 16, 8, 8, 4, 3, 2, SK>, false,
     sk_needs<128, 128, 16, 8, 8, 4, 3, 2>},
    {"pointwise 128x128 t8x8 256thr 2/SM streamK", launch_pointwise<128, 128, 16, 8, 8, 4, 3, 2, SK>, true,
     sk_needs<128, 128, 16, 8, 8, 4, 3, 2>},
    {"64x128 t8x8 128thr 3/SM 3st streamK", launch_conv<64, 128, 16, 8, 8, 4, 3, 3, SK>, false,
     sk_needs<64, 128, 16, 8, 8, 4, 3, 3>},
    {"pointwise 64x128 t8x8 128thr 3/SM 3st streamK", launch_pointwise<64, 128, 16, 8, 8, 4, 3, 3, SK>, true,
     sk_needs<64, 128, 16, 8, 8, 4, 3, 3>},
    // The GEMM's BERT tile (sgemm.cu), 1 CTA per SM, with stream-K for the few tiles it leaves;
    // and its transpose for the im2col loader, whose threads each copy one pixel's column.
    {"pointwise 128x192 t8x12 256thr 1/SM streamK", launch_pointwise<128, 192, 16, 8, 12, 4, 3, 1, SK>, true,
     sk_needs<128, 192, 16, 8, 12, 4, 3, 1>},
    {"192x128 t12x8 256thr 1/SM streamK", launch_conv<192, 128, 16, 12, 8, 4, 3, 1, SK>, false,
     sk_needs<192, 128, 16, 12, 8, 4, 3, 1>},

};
constexpr int kConfigCount = int(sizeof(kConfigs) / sizeof(kConfigs[0]));

}  // namespace

const char* conv_igemm_refusal(const ConvIgemmShape& s) {
  for (int64_t v : {s.batch, s.c, s.h, s.w, s.cout, s.r, s.s, s.p, s.q, s.stride_h, s.stride_w, s.dil_h, s.dil_w})
    if (v < 1) return "an empty or degenerate convolution";
  if (s.pad_h < 0 || s.pad_w < 0) return "negative padding";
  // 32-bit element offsets into X and Y, and taps packed as two 16-bit window offsets.
  if (s.batch * s.c * s.h * s.w > INT_MAX || s.batch * s.cout * s.p * s.q > INT_MAX)
    return "tensors beyond 2^31 elements";
  if ((s.r - 1) * s.dil_h >= 32768 || (s.s - 1) * s.dil_w >= 32768) return "a dilated window beyond 32767";
  if (s.c * s.r * s.s > (INT_MAX / 4) / 128) return "a filter too deep for 32-bit tile offsets";
  if ((s.cout + 63) / 64 > 65535) return "too many output channels";
  return nullptr;
}

std::vector<int2> conv_igemm_taps(const ConvIgemmShape& s, bool tap_major) {
  std::vector<int2> taps(static_cast<size_t>(s.c * s.r * s.s));
  for (int64_t c = 0; c < s.c; ++c)
    for (int64_t r = 0; r < s.r; ++r)
      for (int64_t q = 0; q < s.s; ++q) {
        const int64_t dh = r * s.dil_h, dw = q * s.dil_w;
        const int64_t k = tap_major ? (r * s.s + q) * s.c + c : (c * s.r + r) * s.s + q;
        taps[static_cast<size_t>(k)] =
            make_int2(static_cast<int>(c * s.h * s.w + dh * s.w + dw), static_cast<int>(dh << 16 | dw));
      }
  return taps;
}

int conv_igemm_config_count() { return kConfigCount; }

bool conv_igemm_config_pointwise(int config) {
  return config >= 0 && config < kConfigCount && kConfigs[config].pointwise;
}

const char* conv_igemm_config_name(int config) {
  return config >= 0 && config < kConfigCount ? kConfigs[config].name : "?";
}

namespace {

__global__ void conv_pack_kernel(const float* __restrict__ x, float* __restrict__ t, int64_t total, int channels,
                                 int batch, int pq, int q_out, int hw, int w_in, int sh, int sw) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t cn = i / pq;
    const int pix = int(i - cn * pq), c = int(cn / batch), n = int(cn - int64_t(c) * batch);
    const int p = pix / q_out, q = pix - p * q_out;
    t[i] = __ldg(x + (int64_t(n) * channels + c) * hw + int64_t(p) * sh * w_in + int64_t(q) * sw);
  }
}

}  // namespace

bool launch_conv_pack_f32(const float* x, float* t, const ConvIgemmShape& s, cudaStream_t stream) {
  const int64_t total = s.batch * s.c * s.p * s.q;
  if (total < 1 || s.r != 1 || s.s != 1 || s.pad_h != 0 || s.pad_w != 0) return false;
  const int block = 256;
  const int64_t blocks = std::min<int64_t>((total + block - 1) / block, 65535 * 8);
  conv_pack_kernel<<<int(blocks), block, 0, stream>>>(x, t, total, int(s.c), int(s.batch), int(s.p * s.q), int(s.q),
                                                      int(s.h * s.w), int(s.w), int(s.stride_h), int(s.stride_w));
  return true;
}

size_t conv_igemm_workspace(int config) {
  return config >= 0 && config < kConfigCount && kConfigs[config].sk ? kConfigs[config].sk().bytes : 0;
}

int conv_igemm_flags(int config) {
  return config >= 0 && config < kConfigCount && kConfigs[config].sk ? kConfigs[config].sk().ctas : 0;
}

bool launch_conv_igemm_f32(const ConvIgemmArgs& a, int config, cudaStream_t s) {
  if (config < 0 || config >= kConfigCount || a.M < 1 || a.N < 1 || a.K < 1 || !a.taps) return false;
  return kConfigs[config].launch(a, s);
}

}  // namespace fusec::cuda
