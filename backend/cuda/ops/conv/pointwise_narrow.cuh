// A channels-last 1x1 conv whose channel counts are not a multiple of 16 bytes (ShuffleNetV2's 58
// and 116, odd widths of searched nets), with the whole epilogue inside:
//
//   Y[m, n] = act(Σ_k X[m, k] · W[n, k] + b[n] + Z[m, n]),   X: [rows, Cin], W: [Cout, Cin]
//
// cuDNN runs such a conv channels-last by padding the channels on every call: about ten kernels
// (padding, a filter transform, memsets, the conv, the unpadding) for a conv of a few
// microseconds' work (docs/benchmarks.md has the profile). Rows whose pitch is not 16 bytes rule out the tensor-core
// tile loads, and these convs are small (Cin·Cout of a few thousand to tens of thousands), so a plain fp32 tile product
// does it in one kernel: each block stages a [BM rows x 16] slice of X and a [64 x 16] slice of W in shared memory with
// element loads, and each thread accumulates a 4x4 block of Y.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/ops/conv/pointwise_rows.cuh"

namespace fusec::cuda {

/// The few-rows kernel's operands (pointwise_rows.cuh): the same product and epilogue.
using PointwiseNarrowArgs = PointwiseRowsArgs;

/// The rows a block takes, one per configuration: 64 for many rows, 32 to fill the SMs when there
/// are few (ShuffleNetV2's 14x14 stage at batch 16 is 3136 rows: 49 blocks of 64 per 64 channels).
constexpr int kPointwiseNarrowConfigs = 2;
inline int pointwise_narrow_block_rows(int config) { return config == 0 ? 64 : 32; }

/// The widest Cin or Cout the kernel takes: past it a conv is a real GEMM, whose time goes to
/// multiply-adds the fp32 pipes do at a tenth of the tensor cores' rate.
constexpr int64_t kPointwiseNarrowMaxChannels = 1024;

/// Enqueues the kernel with configuration `config`; false (nothing launched) for another dtype or
/// configuration, or sizes past the limits.
[[nodiscard]] bool launch_pointwise_narrow(const PointwiseNarrowArgs& a, int config, cudaStream_t s);

}  // namespace fusec::cuda
