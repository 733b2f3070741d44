// The implicit-GEMM convolution's launchers, shared by its two translation units and by nothing
// else: conv_igemm.cu (the configuration table, the entry points, the non-stream-K kernels) and
// conv_igemm_streamk.cu (the stream-K kernels). Two files so that a parallel build compiles the
// ~30 kernel instances on two cores; see FUSEC_CONV_IGEMM_STREAMK_INSTANCES for how each instance
// is compiled in exactly one of them.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <initializer_list>

#include "backend/cuda/core/common.cuh"
#include "backend/cuda/ops/conv/conv_igemm.cuh"
#include "backend/cuda/ops/gemm/sgemm_core.cuh"

namespace fusec::cuda::conv_igemm_detail {

template <int BM, int BN, int BK, int TM, int TN, int WR, int STAGES, int MIN_BLOCKS, int SPLIT = 1>
bool launch_conv(const ConvIgemmArgs& a, cudaStream_t s) {
  if (!a.tap_major)
    return sgemm_core::launch_tiled_kernel<ConvIgemmArgs, BM, BN, BK, TM, TN, WR, STAGES, MIN_BLOCKS, SPLIT>(a, s);
  if (a.K % BK != 0) return false;
  ConvTapArgs t;
  static_cast<ConvIgemmArgs&>(t) = a;
  return sgemm_core::launch_tiled_kernel<ConvTapArgs, BM, BN, BK, TM, TN, WR, STAGES, MIN_BLOCKS, SPLIT>(t, s);
}

/// Whether a 1x1 conv's B rows can be copied 16 bytes at a time (conv_igemm.cuh).
inline bool pointwise_applies(const ConvIgemmArgs& a) {
  return a.b_pq > 0 && a.b_pq % 4 == 0 && a.K == a.chw / a.b_pq && a.N % a.b_pq == 0 && aligned16(a.X) &&
         int64_t(a.N) / a.b_pq * a.chw < (int64_t(1) << 30);
}

// The pointwise form where it applies, else the im2col form of the same tile (as correct, slower):
// a plan timed on one buffer stays valid for another. A tile whose threads cannot each copy one
// pixel's column (NT % BN != 0) falls back to the 128x128 tile instead.
template <int BM, int BN, int BK, int TM, int TN, int WR, int STAGES, int MIN_BLOCKS, int SPLIT = 1>
bool launch_pointwise(const ConvIgemmArgs& a, cudaStream_t s) {
  if (!pointwise_applies(a)) {
    if constexpr ((BM / TM) * (BN / TN) % BN == 0)
      return launch_conv<BM, BN, BK, TM, TN, WR, STAGES, MIN_BLOCKS, SPLIT>(a, s);
    else
      return launch_conv<128, 128, 16, 8, 8, 4, 3, 2, SPLIT>(a, s);
  }
  ConvPointwiseArgs pw;
  static_cast<ConvIgemmArgs&>(pw) = a;
  return sgemm_core::launch_tiled_kernel<ConvPointwiseArgs, BM, BN, BK, TM, TN, WR, STAGES, MIN_BLOCKS, SPLIT>(pw, s);
}

// A stream-K configuration's resident CTAs and the bytes of their slots of partial sums, the most
// of its kernels' (the pointwise one falls back to an im2col one, and either order of K may run).
struct SkNeeds {
  int ctas = 0;
  size_t bytes = 0;
};
template <class P, int BM, int BN, int BK, int TM, int TN, int WR, int STAGES, int MIN_BLOCKS>
SkNeeds sk_kernel_needs() {
  const int ctas = sgemm_core::stream_k_ctas<P, BM, BN, BK, TM, TN, WR, STAGES, MIN_BLOCKS>();
  return {ctas, size_t(ctas) * BM * BN * sizeof(float)};
}
inline SkNeeds sk_max(std::initializer_list<SkNeeds> l) {
  SkNeeds m;
  for (const SkNeeds& n : l) m.ctas = std::max(m.ctas, n.ctas), m.bytes = std::max(m.bytes, n.bytes);
  return m;
}
template <int BM, int BN, int BK, int TM, int TN, int WR, int STAGES, int MIN_BLOCKS>
SkNeeds sk_im2col_needs() {
  return sk_max({sk_kernel_needs<ConvIgemmArgs, BM, BN, BK, TM, TN, WR, STAGES, MIN_BLOCKS>(),
                 sk_kernel_needs<ConvTapArgs, BM, BN, BK, TM, TN, WR, STAGES, MIN_BLOCKS>()});
}
template <int BM, int BN, int BK, int TM, int TN, int WR, int STAGES, int MIN_BLOCKS>
SkNeeds sk_needs() {
  SkNeeds twin;
  if constexpr ((BM / TM) * (BN / TN) % BN == 0)
    twin = sk_im2col_needs<BM, BN, BK, TM, TN, WR, STAGES, MIN_BLOCKS>();
  else
    twin = sk_im2col_needs<128, 128, 16, 8, 8, 4, 3, 2>();
  return sk_max({twin, sk_kernel_needs<ConvPointwiseArgs, BM, BN, BK, TM, TN, WR, STAGES, MIN_BLOCKS>()});
}

// The stream-K configurations' launchers and needs, each of which instantiates its kernels: one
// list, expanded as `extern template` below (conv_igemm.cu then only points at them) and as
// `template` in conv_igemm_streamk.cu (the one place they are compiled). Add a stream-K
// configuration here as well as to the table: left out, it compiles in conv_igemm.cu, and a
// kernel it shares with one listed here (the 128x128 fallback) would be compiled in both files.
#define FUSEC_CONV_IGEMM_STREAMK_INSTANCES(KW)                                                                      \
  KW bool launch_conv<64, 128, 16, 8, 8, 4, 4, 2, sgemm_core::kStreamK>(const ConvIgemmArgs&, cudaStream_t);        \
  KW bool launch_pointwise<64, 128, 16, 8, 8, 4, 4, 2, sgemm_core::kStreamK>(const ConvIgemmArgs&, cudaStream_t);   \
  KW SkNeeds sk_needs<64, 128, 16, 8, 8, 4, 4, 2>();                                                                \
  KW bool launch_conv<128, 128, 16, 8, 8, 4, 3, 2, sgemm_core::kStreamK>(const ConvIgemmArgs&, cudaStream_t);       \
  KW bool launch_pointwise<128, 128, 16, 8, 8, 4, 3, 2, sgemm_core::kStreamK>(const ConvIgemmArgs&, cudaStream_t);  \
  KW SkNeeds sk_needs<128, 128, 16, 8, 8, 4, 3, 2>();                                                               \
  KW bool launch_conv<64, 128, 16, 8, 8, 4, 3, 3, sgemm_core::kStreamK>(const ConvIgemmArgs&, cudaStream_t);        \
  KW bool launch_pointwise<64, 128, 16, 8, 8, 4, 3, 3, sgemm_core::kStreamK>(const ConvIgemmArgs&, cudaStream_t);   \
  KW SkNeeds sk_needs<64, 128, 16, 8, 8, 4, 3, 3>();                                                                \
  KW bool launch_pointwise<128, 192, 16, 8, 12, 4, 3, 1, sgemm_core::kStreamK>(const ConvIgemmArgs&, cudaStream_t); \
  KW SkNeeds sk_needs<128, 192, 16, 8, 12, 4, 3, 1>();                                                              \
  KW bool launch_conv<192, 128, 16, 12, 8, 4, 3, 1, sgemm_core::kStreamK>(const ConvIgemmArgs&, cudaStream_t);      \
  KW SkNeeds sk_needs<192, 128, 16, 12, 8, 4, 3, 1>();

FUSEC_CONV_IGEMM_STREAMK_INSTANCES(extern template)

}  // namespace fusec::cuda::conv_igemm_detail
