// The implicit-GEMM convolution's configurations and entry points; see conv_igemm.cuh. The
// kernel is sgemm_core.cuh's, instantiated here for ConvIgemmArgs (the tap table), ConvTapArgs
// (tap-major) and ConvPointwiseArgs (1x1).
#include "backend/cuda/conv_igemm.cuh"

#include <algorithm>
#include <climits>

#include "backend/cuda/sgemm_core.cuh"

namespace fusec::cuda {

namespace {

bool aligned16(const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 == 0; }

template <int BM, int BN, int BK, int TM, int TN, int WR, int STAGES, int MIN_BLOCKS, int SPLIT = 1>
bool launch_conv(const ConvIgemmArgs& a, cudaStream_t s) {
  if (!a.tap_major) return sgemm_core::launch_tiled_kernel<ConvIgemmArgs, BM, BN, BK, TM, TN, WR, STAGES, MIN_BLOCKS, SPLIT>(a, s);
  if (a.K % BK != 0) return false;
  ConvTapArgs t;
  static_cast<ConvIgemmArgs&>(t) = a;
  return sgemm_core::launch_tiled_kernel<ConvTapArgs, BM, BN, BK, TM, TN, WR, STAGES, MIN_BLOCKS, SPLIT>(t, s);
}

/// Whether a 1x1 conv's B rows can be copied 16 bytes at a time (conv_igemm.cuh).
bool pointwise_applies(const ConvIgemmArgs& a) {
  return a.K == a.chw / (a.H * a.W) && a.H == a.P && a.W == a.Q && a.stride_h == 1 && a.stride_w == 1 && a.pad_h == 0 &&
         a.pad_w == 0 && (a.P * a.Q) % 4 == 0 && aligned16(a.X) && int64_t(a.N) / (a.P * a.Q) * a.chw < (int64_t(1) << 30);
}

// The pointwise form where it applies, else the im2col form of the same tile (as correct, slower):
// a plan timed on one buffer stays valid for another.
template <int BM, int BN, int BK, int TM, int TN, int WR, int STAGES, int MIN_BLOCKS, int SPLIT = 1>
bool launch_pointwise(const ConvIgemmArgs& a, cudaStream_t s) {
  if (!pointwise_applies(a)) return launch_conv<BM, BN, BK, TM, TN, WR, STAGES, MIN_BLOCKS, SPLIT>(a, s);
  ConvPointwiseArgs pw;
  static_cast<ConvIgemmArgs&>(pw) = a;
  return sgemm_core::launch_tiled_kernel<ConvPointwiseArgs, BM, BN, BK, TM, TN, WR, STAGES, MIN_BLOCKS, SPLIT>(pw, s);
}

// A stream-K configuration's resident CTAs, the most of its kernels' (the pointwise one falls back
// to the im2col one, and either order of K may run): its workspace slots and flags.
template <int BM, int BN, int BK, int TM, int TN, int WR, int STAGES, int MIN_BLOCKS>
int sk_ctas() {
  using sgemm_core::stream_k_ctas;
  return std::max({stream_k_ctas<ConvIgemmArgs, BM, BN, BK, TM, TN, WR, STAGES, MIN_BLOCKS>(),
                   stream_k_ctas<ConvTapArgs, BM, BN, BK, TM, TN, WR, STAGES, MIN_BLOCKS>(),
                   stream_k_ctas<ConvPointwiseArgs, BM, BN, BK, TM, TN, WR, STAGES, MIN_BLOCKS>()});
}

struct Config {
  const char* name;
  bool (*launch)(const ConvIgemmArgs&, cudaStream_t);
  bool pointwise;
  int (*ctas)() = nullptr;  // stream-K: its resident CTAs
  int tile = 0;             // stream-K: BM x BN, a CTA's slot of partial sums
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
    {"64x128 t8x8 128thr 2/SM streamK", launch_conv<64, 128, 16, 8, 8, 4, 4, 2, SK>, false, sk_ctas<64, 128, 16, 8, 8, 4, 4, 2>, 64 * 128},
    {"pointwise 64x128 t8x8 128thr 2/SM streamK", launch_pointwise<64, 128, 16, 8, 8, 4, 4, 2, SK>, true, sk_ctas<64, 128, 16, 8, 8, 4, 4, 2>,
     64 * 128},
    {"128x128 t8x8 256thr 2/SM streamK", launch_conv<128, 128, 16, 8, 8, 4, 3, 2, SK>, false, sk_ctas<128, 128, 16, 8, 8, 4, 3, 2>,
     128 * 128},
    {"pointwise 128x128 t8x8 256thr 2/SM streamK", launch_pointwise<128, 128, 16, 8, 8, 4, 3, 2, SK>, true,
     sk_ctas<128, 128, 16, 8, 8, 4, 3, 2>, 128 * 128},

};
constexpr int kConfigCount = int(sizeof(kConfigs) / sizeof(kConfigs[0]));

}  // namespace

const char* conv_igemm_refusal(const ConvIgemmShape& s) {
  for (int64_t v : {s.batch, s.c, s.h, s.w, s.cout, s.r, s.s, s.p, s.q, s.stride_h, s.stride_w, s.dil_h, s.dil_w})
    if (v < 1) return "an empty or degenerate convolution";
  if (s.pad_h < 0 || s.pad_w < 0) return "negative padding";
  // 32-bit element offsets into X and Y, and taps packed as two 16-bit window offsets.
  if (s.batch * s.c * s.h * s.w > INT_MAX || s.batch * s.cout * s.p * s.q > INT_MAX) return "tensors beyond 2^31 elements";
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
        taps[static_cast<size_t>(k)] = make_int2(static_cast<int>(c * s.h * s.w + dh * s.w + dw), static_cast<int>(dh << 16 | dw));
      }
  return taps;
}

int conv_igemm_config_count() { return kConfigCount; }

bool conv_igemm_config_pointwise(int config) { return config >= 0 && config < kConfigCount && kConfigs[config].pointwise; }

const char* conv_igemm_config_name(int config) {
  return config >= 0 && config < kConfigCount ? kConfigs[config].name : "?";
}

size_t conv_igemm_workspace(int config) {
  if (config < 0 || config >= kConfigCount || !kConfigs[config].ctas) return 0;
  return size_t(kConfigs[config].ctas()) * size_t(kConfigs[config].tile) * sizeof(float);
}

int conv_igemm_flags(int config) {
  return config >= 0 && config < kConfigCount && kConfigs[config].ctas ? kConfigs[config].ctas() : 0;
}

bool launch_conv_igemm_f32(const ConvIgemmArgs& a, int config, cudaStream_t s) {
  if (config < 0 || config >= kConfigCount || a.M < 1 || a.N < 1 || a.K < 1 || !a.taps) return false;
  return kConfigs[config].launch(a, s);
}

}  // namespace fusec::cuda
