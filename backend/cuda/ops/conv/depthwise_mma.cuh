// The depthwise conv (depthwise.cuh) on tensor cores, for fp16 and bf16 storage: one of the
// kernel configurations depthwise.cu offers the tuner, beside its FMA kernels.
//
// Why: a k×k window costs k² fp32 FMAs per output element, and at 7×7 the FMA kernels could not
// reach half of the copy peak (docs/benchmarks.md, "Depthwise convolutions": the FMAs alone take
// longer than moving the bytes at that rate). Per channel, one output row segment is a product
// with a banded matrix, which mma.sync computes off the FMA pipe: depthwise_mma.cu says how.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "backend/cuda/ops/conv/depthwise.cuh"
#include "ir/tensor.h"

namespace fusec::cuda {

/// A block's share of the conv: `channels` (8 or 16) channels of a patch of 16·row_tiles output
/// rows × 8·col_tiles output columns.
struct DepthwiseMmaTile {
  int channels = 8, row_tiles = 1, col_tiles = 4;
};

/// Whether the banded kernel takes the shape with some tile: fp16 or bf16 storage, M = 1, c a
/// multiple of 8, a window at most 7 high whose W extent fits the band (W stride 1 or 2), an H
/// stride of 1 or 2.
bool depthwise_mma_shape_ok(const DepthwiseShape& s, DType dtype);

/// Whether the banded kernel takes the shape with this tile: fp16 or bf16 storage, M = 1, c a
/// multiple of the tile's channels, a window at most 7 high whose W extent fits the band (W
/// stride 1 or 2), an H stride of 1 or 2, and the staged patch within the shared memory it asks.
bool depthwise_mma_takes(const DepthwiseShape& s, DType dtype, const DepthwiseMmaTile& t);

/// The band fragments the kernel multiplies by, from the weights (ONNX's [c][1][kh][kw]), rounded to
/// the storage type: for each channel, window row and K-step (2 at W stride 2), each lane's two B
/// registers of the m16n8k16 product. The launch reads them from DepthwiseArgs::band; empty where
/// the kernel takes no tile of the shape. They are 1792 bytes per channel of a 7-high window (3584
/// at W stride 2): built once, so that no block spends its time deriving them.
std::vector<uint32_t> depthwise_mma_band(const DepthwiseShape& s, DType dtype, const Tensor& weights);

/// Runs the conv on the banded kernel; false, launching nothing, where it does not take the shape
/// or a tensor is not 16-byte aligned, or a.band is null.
[[nodiscard]] bool launch_depthwise_mma(const DepthwiseArgs& a, const DepthwiseMmaTile& t, cudaStream_t s);

}  // namespace fusec::cuda
