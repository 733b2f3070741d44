// A squeeze-and-excite block (ai.fusec SqueezeExcite, docs/ops.md) in two kernels, each over
// slices of 64 channels of each image (and, where the map is large, chunks of its pixels):
//
//   1. squeeze and layer 1: a block sums its slice's channels over its pixels (fp32) and adds its
//      share of layer 1, W1[:, slice] · sums / hw, into the image's hidden sums: layer 1 is linear
//      up to B1, so no block waits for another's sums.
//   2. layer 2 and scaling: a block applies B1 and the activation to its image's hidden sums,
//      computes its slice's gates, gate(W2[slice, :] · h + B2), four threads to a gate, and
//      scales its slice of X over its pixels. The last block to have read the hidden sums (by a
//      ticket) zeroes them, and the ticket, for the next launch.
//
// So the layers' weights are read by many blocks at once, and no block waits on another inside a
// kernel: with the layers on one block per image, MobileNetV3's 960x240 ones took 0.3 ms.
// Unfused the block was four launches, three of them a few microseconds of latency for a few
// thousand multiply-adds. X is NCHW or channels-last, in fp32, fp16 or bf16; every sum and the
// hidden units stay fp32.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/ops/elementwise/epilogue.cuh"
#include "ir/dtype.h"

namespace fusec::cuda {

/// Channels per slice: 128 bytes of a channels-last pixel at fp16.
constexpr int kSqueezeExciteSlice = 64;

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
  void* state = nullptr;         // squeeze_excite_state_bytes(), zero before the first launch (kept so)
  bool w1_rows_aligned = false;  // set by the launcher: W1's rows may be read 16 bytes at a time
  int squeeze_chunks = 1;        // pixel chunks per slice in kernel 1 (squeeze_excite_chunks)
  int scale_chunks = 1;          // and in kernel 2
};

/// Pixel chunks per slice for the two kernels on `sms` multiprocessors (about two waves of blocks
/// for the squeeze, up to four for the scaling; a chunk of at least 64 pixels), as {squeeze, scale}.
void squeeze_excite_chunks(int64_t n, int64_t c, int64_t hw, int sms, int* squeeze, int* scale);

/// Bytes of state the kernels keep between launches (the hidden sums and kernel 2's ticket),
/// zeroed once.
size_t squeeze_excite_state_bytes(int64_t n, int64_t cr);

/// Enqueues both kernels; false (nothing launched) for another dtype or sizes past 32 bits.
[[nodiscard]] bool launch_squeeze_excite(const SqueezeExciteArgs& a, cudaStream_t s);

}  // namespace fusec::cuda
