// A squeeze-and-excite block (ai.fusec SqueezeExcite, docs/ops.md) in two kernels:
//
//   1. squeeze and excite: blocks over each image's pixels sum X per channel (fp32, in shared
//      memory, then one atomic add per channel into `sums`); the block that finishes an image last
//      (a ticket per image) takes the mean, runs both 1x1 layers and their activations on it, and
//      writes the image's gates; it leaves `sums` and its ticket at zero for the next launch.
//   2. scale: Y = X · gate of its image and channel.
//
// Unfused the block was four launches, three of them a few microseconds of latency for a few
// thousand multiply-adds. X is NCHW or channels-last, in fp32, fp16 or bf16; the gates and every
// sum stay fp32.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/ops/elementwise/epilogue.cuh"
#include "ir/dtype.h"

namespace fusec::cuda {

struct SqueezeExciteArgs {
  DType dtype = DType::Undefined;  // float32, float16 or bfloat16: X, Y and the weights
  bool nhwc = false;               // X and Y stored channels-last
  int64_t n = 0, c = 0, cr = 0;    // images, channels, the squeezed channels (W1's rows)
  int64_t hw = 0;                  // pixels per image (every spatial dim)
  const void* x = nullptr;
  void* y = nullptr;
  const void* w1 = nullptr;  // [cr, c]
  const void* b1 = nullptr;  // [cr] or null
  const void* w2 = nullptr;  // [c, cr]
  const void* b2 = nullptr;  // [c] or null
  ActParams act, gate;
  float* sums = nullptr;        // [n, c], zero before the first launch (the kernel leaves it so)
  unsigned* tickets = nullptr;  // [n], likewise
  float* gates = nullptr;       // [n, c] scratch between the two kernels
  int blocks_per_image = 1;     // squeeze blocks of one image (squeeze_excite_blocks)
};

/// Squeeze blocks per image for this shape on `sms` multiprocessors: about two waves in all, each
/// block at least a few dozen pixels.
int squeeze_excite_blocks(int64_t n, int64_t c, int64_t hw, int sms);

/// Bytes of op-owned state the kernels keep between launches: sums, then tickets (zeroed once).
size_t squeeze_excite_state_bytes(int64_t n, int64_t c);

/// Enqueues both kernels; false (nothing launched) for another dtype or sizes past 32 bits.
[[nodiscard]] bool launch_squeeze_excite(const SqueezeExciteArgs& a, cudaStream_t s);

}  // namespace fusec::cuda
