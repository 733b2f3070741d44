// Strict-fp32 SGEMM (FFMA only: no TF32, no tensor cores) for row-major ONNX MatMul with the
// FusedMatMul epilogue fused in:
//
//   C[M,N] = act(A[M,K] · B[K,N] + bias[N] + R[M,N])
//
// A small fixed set of tile configurations, so a tuner can time each one per shape and keep the
// fastest; scripts/lab/sgemm_lab.cu times them against cuBLASLt on BERT-base's GEMMs. Every
// configuration accumulates each output in ascending k with fmaf, so results are deterministic
// and do not depend on the launch (the generic configuration rounds identically too).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace fusec::cuda {

enum class SgemmAct : int { None, Relu, GeluErf };  // Relu maps NaN to 0, as the CPU reference

struct SgemmArgs {
  int M = 0, N = 0, K = 0;
  const float* A = nullptr;         // [M,K], row stride lda
  int64_t lda = 0;
  const float* B = nullptr;         // [K,N], row stride ldb
  int64_t ldb = 0;
  const float* bias = nullptr;      // [N] or null
  const float* residual = nullptr;  // [M,N], row stride ldr, or null
  int64_t ldr = 0;
  float* C = nullptr;               // [M,N], row stride ldc; may alias residual when ldr == ldc
  int64_t ldc = 0;
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
/// configuration does not apply: the tiled ones need N, ldb, ldc (and ldr) multiples of 4 and
/// 16-byte aligned B, C (and residual); the last one ("generic") takes any shape and stride.
/// Launch errors are left for the caller's cudaGetLastError.
bool launch_sgemm_f32(const SgemmArgs& a, int config, cudaStream_t s);

}  // namespace fusec::cuda
