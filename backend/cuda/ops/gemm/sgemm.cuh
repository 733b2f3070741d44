// Strict-fp32 SGEMM (FFMA only: no TF32, no tensor cores) for row-major ONNX MatMul and Gemm with
// the FusedMatMul epilogue fused in:
//
//   C[M,N] = act(A[M,K] · op(B)[K,N] + bias[N] + R[M,N]),  op(B) = B, or Bᵀ of B stored [N,K]
//
// A small fixed set of tile configurations, so a tuner can time each one per shape and keep the
// fastest; scripts/lab/sgemm_lab.cu times them against cuBLASLt on BERT-base's GEMMs. Results are
// deterministic: the same bits for the same inputs and configuration, whatever the timing (no
// atomics). The tiled and generic configurations accumulate each output in ascending k with fmaf
// (split-K adds its halves' partial sums in a fixed order); the skinny ones (sgemm_skinny.cu, for
// a few rows against a weight B stored [N,K]) sum k in interleaved partial sums that a fixed tree
// adds up, so the configurations may differ from each other in the last bits.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/ops/gemm/gemm_operands.h"

namespace fusec::cuda {

enum class SgemmAct : int { None, Relu, GeluErf };  // Relu keeps NaN, as the CPU reference

struct SgemmArgs : GemmOperands<float> {
  SgemmAct act = SgemmAct::None;
};

/// Uniform values in [-1, 1) from a hash of the index (timing data: real data diverges in the
/// epilogue's activation where a constant fill does not).
void sgemm_fill_random(float* p, int64_t n, uint32_t seed, cudaStream_t s);

/// Number of tile configurations; configuration ids are 0..count-1.
int sgemm_config_count();

/// Short name of a configuration ("128x96 t4x12" ...), or "?" for an unknown id.
const char* sgemm_config_name(int config);

/// Launches configuration `config` on stream s. Returns false, launching nothing, when the
/// configuration does not apply: the tiled ones need !trans_b, N, ldb, ldc (and ldr) multiples of
/// 4 and 16-byte aligned B, C (and residual); the skinny ones need trans_b, K, lda and ldb
/// multiples of 4 and 16-byte aligned A and B; the last one ("generic") takes any shape, stride
/// and either B layout.
/// Launch errors are left for the caller's cudaGetLastError.
[[nodiscard]] bool launch_sgemm_f32(const SgemmArgs& a, int config, cudaStream_t s);

}  // namespace fusec::cuda
