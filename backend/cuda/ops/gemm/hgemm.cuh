// fp16/bf16 GEMM on Hopper's warpgroup tensor-core instructions (wgmma), with the whole
// FusedMatMul epilogue inside:
//
//   C[M,N] = act(A[M,K] · op(B)[K,N] + bias[N] + R[M,N]),  op(B) = B, or Bᵀ of B stored [N,K]
//
// accumulated in fp32 and rounded once to the storage type. It exists for the epilogues cuBLASLt
// cannot fuse (erf-GELU, SiLU, HardSwish, ...): there cuBLASLt writes the product and a second pass
// reads it back and writes it again, which on the transformer MLPs and ConvNeXt's 1x1 layers costs
// about as much as the product itself. The tuner (gemm_op.cpp) times it beside cuBLASLt plus that
// pass, per shape, and keeps the faster.
//
// The kernels are compiled for sm_90a only (hgemm_sm90a.cu, its own CMake object library): on any
// other device hgemm_available() is false and nothing here launches.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/ops/elementwise/epilogue.cuh"
#include "backend/cuda/ops/gemm/gated_layout.h"
#include "backend/cuda/ops/gemm/gemm_operands.h"

namespace fusec::cuda {

struct HgemmArgs : GemmOperands<void> {
  ActParams act;
  bool bf16 = false;  // storage type of every operand: bf16, else fp16
  // > 0: a gated product (gated_layout.h) of gated_n output columns. B ([K,N], N-major) holds the
  // gate's and the value's columns packed, N = gated_packed_n(gated_n), and so does the bias;
  // C [M, gated_n] = act(gate) · value.
  int gated_n = 0;
};

/// True when `device` can run these kernels (compute capability 9.0) and they were compiled in.
bool hgemm_available(int device);

/// Number of tile configurations; configuration ids are 0..count-1.
int hgemm_config_count();

/// Short name of a configuration ("128x256 3st" ...), or "?" for an unknown id.
const char* hgemm_config_name(int config);

/// Whether the kernels take this problem's layout: K, N and every row stride multiples of 8, and
/// A, B, C, the bias and the residual 16-byte aligned.
bool hgemm_applies(const HgemmArgs& a);

/// Launches configuration `config` on stream s. Returns false, launching nothing, when the problem
/// does not apply (hgemm_applies) or the configuration is unknown. Launch errors are left for the
/// caller's cudaGetLastError.
[[nodiscard]] bool launch_hgemm(const HgemmArgs& a, int config, cudaStream_t s);

/// Uniform values in [-1, 1) in fp16 or bf16, from a hash of the index (timing data).
void hgemm_fill_random(void* p, int64_t n, bool bf16, uint32_t seed, cudaStream_t s);

}  // namespace fusec::cuda
