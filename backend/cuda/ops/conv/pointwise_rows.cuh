// A 1x1 conv over few pixels, as a squeeze-excite block's two layers run (N images of 1x1 spatial:
// rows = N·H·W of 1 to a few dozen), with the whole epilogue inside:
//
//   Y[m, n] = act(Σ_k X[m, k] · W[n, k] + b[n] + Z[m, n]),   X: [rows, Cin], W: [Cout, Cin]
//
// in channels-last memory (for 1x1 spatial, NCHW is the same memory). cuDNN ran these as a
// tensor-core tile kernel sized for hundreds of rows plus, for SiLU or Sigmoid, the epilogue pass:
// two launches of a few microseconds each for a few thousand multiply-adds. One warp per output
// channel takes 16 rows at a time: its lanes split K, a shuffle tree sums each row, and lane r
// applies the epilogue to row r.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/ops/elementwise/epilogue.cuh"
#include "ir/dtype.h"

namespace fusec::cuda {

struct PointwiseRowsArgs {
  DType dtype = DType::Undefined;  // float32, float16 or bfloat16: every tensor
  int64_t rows = 0, cin = 0, cout = 0;
  const void* x = nullptr;     // [rows, cin]
  const void* w = nullptr;     // [cout, cin]
  const void* bias = nullptr;  // [cout] or null
  const void* z = nullptr;     // [rows, cout] or null
  void* y = nullptr;           // [rows, cout]
  ActParams act;
};

/// The most rows the kernel takes: past this a tile GEMM reuses each weight row better.
constexpr int64_t kPointwiseRowsMax = 64;

/// Enqueues the kernel; false (nothing launched) for another dtype, no rows past the limit, or
/// sizes past 32 bits.
[[nodiscard]] bool launch_pointwise_rows(const PointwiseRowsArgs& a, cudaStream_t s);

}  // namespace fusec::cuda
