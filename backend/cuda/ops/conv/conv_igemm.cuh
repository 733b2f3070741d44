// Strict-fp32 2-D convolution over NCHW memory as an implicit GEMM on fusec's SGEMM core
// (sgemm_core.cuh): FFMA only, the FusedConv epilogue (bias per output channel, residual,
// ReLU) fused in.
//
//   Y[n, k, p, q] = act(Σ_{c,r,s} W[k, c, r, s] · X[n, c, p·sh - ph + r·dh, q·sw - pw + s·dw] + b[k] + Z[n, k, p, q])
//
// As a GEMM: rows are output channels (M = Cout), columns are output pixels over the whole batch
// (N = batch·P·Q), the depth is the filter's taps (K = C·R·S). W's [Cout][C·R·S] memory is the A
// operand as it is; the B operand, im2col(X), is never built: each B copy of the main loop reads
// its pixel's input element for its tap, zero where the tap falls in the padding. A tap table
// (one entry per k, built on the host) gives each tap's offset into an image and its (dh, dw).
//
// Why: at strict fp32 cuDNN's kernels ran ResNet-50's 3x3 and strided convs well below the rate
// the SGEMM core reaches on BERT's GEMMs (fusec profile).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "backend/cuda/ops/gemm/sgemm.cuh"

namespace fusec::cuda {

struct ConvIgemmArgs {
  int M = 0, N = 0, K = 0;         // Cout, batch·P·Q, C·R·S
  const float* A = nullptr;        // weights [Cout][C·R·S]
  int64_t lda = 0;                 // C·R·S
  const float* X = nullptr;        // input [batch, C, H, W]
  const int2* taps = nullptr;      // [K]: {c·H·W + dh·W + dw, dh << 16 | dw}, dh = r·dil_h, dw = s·dil_w
  int H = 0, W = 0, P = 0, Q = 0;  // input and output spatial sizes
  int stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  int chw = 0;             // C·H·W: one input image
  bool vec = false;        // P·Q % 4 == 0 and Y, Z 16-byte aligned: 16-byte stores
  bool tap_major = false;  // K in (r, s, c) order, C % 16 == 0 (ConvTapArgs)
  // Pointwise configurations: the length of a channel's row of B in one image of X (P·Q for a
  // 1x1 stride-1 conv over X; batch·P·Q over a packed [C][batch·P·Q] copy, chw = C·batch·P·Q);
  // 0 where X is not so read (they then run as their im2col twin).
  int b_pq = 0;
  const float* bias = nullptr;      // [Cout] or null
  const float* residual = nullptr;  // [batch, Cout, P, Q] or null; may alias C
  float* C = nullptr;               // Y [batch, Cout, P, Q]
  SgemmAct act = SgemmAct::None;
  // Stream-K configurations only (conv_igemm_workspace > 0): a slot of partial sums per CTA, and
  // one flag per CTA, zero before the launch (the launch leaves them zero).
  float* sk_work = nullptr;
  unsigned* sk_flags = nullptr;
};

/// The same arguments with K in (r, s, c) order (weights [Cout][R][S][C], the tap table likewise)
/// and C % 16 == 0: each 16-deep slice of K is one tap over 16 channels, so a copy needs no table
/// entry or bounds test of its own.
struct ConvTapArgs : ConvIgemmArgs {};

/// The same arguments for a 1x1 conv whose B rows are channel rows of X, b_pq long, with
/// b_pq % 4 == 0, X 16-byte aligned and under 2^30 elements: copied 16 bytes at a time as a GEMM's
/// (the tap table is not read). A type of its own so that it gets its own kernel instances.
struct ConvPointwiseArgs : ConvIgemmArgs {};

struct ConvIgemmShape {
  int64_t batch = 0, c = 0, h = 0, w = 0;  // input
  int64_t cout = 0, r = 0, s = 0;          // filter [cout, c, r, s]
  int64_t p = 0, q = 0;                    // output
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dil_h = 1, dil_w = 1;
};

/// Whether the kernel's 32-bit offsets and packed taps hold the shape (empty reason) or why not.
const char* conv_igemm_refusal(const ConvIgemmShape& s);

/// The tap table of a shape conv_igemm_refusal takes, K in (c, r, s) order (the weights' own) or,
/// with tap_major, in (r, s, c) order.
std::vector<int2> conv_igemm_taps(const ConvIgemmShape& s, bool tap_major = false);

int conv_igemm_config_count();
const char* conv_igemm_config_name(int config);
/// Whether a configuration is a pointwise one: worth timing only for a 1x1, stride-1, unpadded
/// conv with P·Q % 4 == 0 (elsewhere it runs as its im2col twin).
bool conv_igemm_config_pointwise(int config);

/// The workspace configuration `config` needs (0 but for stream-K: its CTAs' partial sums) and
/// the flags it needs zeroed (count of unsigned).
size_t conv_igemm_workspace(int config);
int conv_igemm_flags(int config);

/// Packs a 1x1 conv's input for the pointwise configurations where X's own planes have no 16-byte
/// rows (P·Q % 4 != 0) or are strided: t[c][n·P·Q + p·Q + q] = x[n][c][p·sh][q·sw].
bool launch_conv_pack_f32(const float* x, float* t, const ConvIgemmShape& s, cudaStream_t stream);

/// Launches configuration `config`; false, launching nothing, when it does not apply.
bool launch_conv_igemm_f32(const ConvIgemmArgs& a, int config, cudaStream_t s);

}  // namespace fusec::cuda
