// The warp-specialized configurations of the wgmma GEMM (hgemm_tma_sm90a.cu, hgemm_pingpong_sm90a.cu), for the
// configuration table in hgemm_sm90a.cu: each launches one tile shape, both storage types and both
// weight layouts, and returns false, launching nothing, where it cannot (no driver entry point for
// the tensor maps, a tensor map the driver refuses, a grid too tall).
#pragma once
#include <cuda_runtime.h>

#include "backend/cuda/ops/gemm/hgemm.cuh"

namespace fusec::cuda {

/// 128 x 128 tiles, 3 stages, two CTAs per SM: one CTA's epilogue overlaps the other's products.
[[nodiscard]] bool launch_hgemm_tma_128x128(const HgemmArgs& a, cudaStream_t s);
/// 128 x 256 tiles, 4 stages, one CTA per SM: the most work per byte loaded, for long K. The one
/// configuration that takes a gated product (HgemmArgs::gated_n).
[[nodiscard]] bool launch_hgemm_tma_128x256(const HgemmArgs& a, cudaStream_t s);
/// 128 x 128 tiles, persistent, one CTA per SM whose two warpgroups take alternate tiles: one's
/// epilogue overlaps the other's products (hgemm_pingpong_sm90a.cu).
[[nodiscard]] bool launch_hgemm_pingpong_128x128(const HgemmArgs& a, cudaStream_t s);

}  // namespace fusec::cuda
