// A direct depthwise convolution over channels-last (NHWC) memory, with the FusedConv epilogue:
//
//   y[n, oh, ow, k] = act( Σ_{r,s} x[n, oh·sh − pt + r·dh, ow·sw − pl + s·dw, k / M] · w[r, s, k]
//                          + b[k] + z[n, oh, ow, k] )
//
// for a conv whose group count equals its input channels C (k = c·M + m, M the channel
// multiplier), 2-D, any window, stride, dilation and asymmetric pads, fp32/fp16/bf16 storage with
// fp32 accumulation. The weights are the route's own fp32 copy in [R][S][K] order (K = C·M), made
// once at plan time from ONNX's [K][1][R][S] (depthwise_route.cpp).
//
// Why: a depthwise conv moves far more bytes than it computes (a 3x3 conv reads and writes 4 bytes
// per output at fp16 for 9 FMAs), and cuDNN's channels-last depthwise kernels ran ConvNeXt's 7x7
// convs at a few percent of the copy peak (issue 27, fusec profile). depthwise.cu says how the
// kernels reach the bandwidth instead.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/ops/elementwise/epilogue.cuh"
#include "ir/dtype.h"

namespace fusec::cuda {

/// One depthwise conv's geometry (dims as ONNX has them; memory is channels-last).
struct DepthwiseShape {
  int64_t batch = 0, h = 0, w = 0, c = 0;  // x: [batch, h, w, c]
  int64_t m = 1;                           // channel multiplier: y has k = c·m channels
  int64_t oh = 0, ow = 0;                  // y: [batch, oh, ow, c·m]
  int64_t kh = 0, kw = 0;                  // the window
  int64_t stride_h = 1, stride_w = 1, dil_h = 1, dil_w = 1;
  int64_t pad_top = 0, pad_left = 0;  // the bottom and right pads follow from oh and ow
  int multiprocessors = 132;          // the device's: a small conv gets smaller blocks, to fill them
  int64_t channels_out() const { return c * m; }
};

struct DepthwiseArgs {
  DepthwiseShape s;
  DType dtype = DType::Undefined;  // storage of x, y, z and the bias: float32, float16 or bfloat16
  const void* x = nullptr;
  const float* w = nullptr;    // [kh][kw][c·m] float32
  const void* band = nullptr;  // the banded kernel's fragments (depthwise_mma_band), or null
  const void* bias = nullptr;  // [c·m] or null
  const void* z = nullptr;     // like y, or null
  void* y = nullptr;
  ActParams act;
};

/// Why no configuration takes the conv (a dtype, dims past 32-bit indexing), or null.
const char* depthwise_refusal(const DepthwiseShape& s, DType dtype);

/// The kernel configurations: 0 is the generic kernel (any shape depthwise_refusal takes); then
/// the tiled kernel's (a window 3, 5 or 7 wide, stride 1 or 2, no dilation along W, M = 1, c·m a
/// multiple of the vector), each a vector width, a number of output pixels per thread and a block
/// size; then the shared-memory kernel's (a window 3, 5 or 7 wide and at most 7 high, stride 1, no
/// dilation, M = 1, c·m a multiple of 32), each an output patch 8, 14 or 16 wide; then the tiled
/// kernel's on channel pairs (2-byte storage); then the banded tensor-core kernel's (fp16 and bf16,
/// depthwise_mma.cuh), each a block tile. Their numbering is stable within a build of fusec.
int depthwise_config_count();
const char* depthwise_config_name(int config);
/// Whether `config` takes the shape (the launch also wants 16-byte aligned tensors).
bool depthwise_config_applies(const DepthwiseShape& s, DType dtype, int config);

/// Runs the conv with `config` on stream s; false, launching nothing, where that configuration
/// does not take the shape, the dtype or the tensors' alignment.
[[nodiscard]] bool launch_depthwise(const DepthwiseArgs& a, int config, cudaStream_t s);

}  // namespace fusec::cuda
