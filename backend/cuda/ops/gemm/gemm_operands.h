// The operands of one row-major product as fusec's own GEMMs take them (the strict-fp32 SGEMM,
// sgemm.cuh, and the fp16/bf16 wgmma GEMM, hgemm.cuh):
//
//   C[M,N] = act(A[M,K] · op(B)[K,N] + bias[N] + R[M,N]),  op(B) = B, or Bᵀ of B stored [N,K]
#pragma once
#include <cstdint>

namespace fusec::cuda {

/// E: the element type, or void where the storage type is chosen at run time.
template <typename E>
struct GemmOperands {
  int M = 0, N = 0, K = 0;
  const E* A = nullptr;  // [M,K], row stride lda
  int64_t lda = 0;
  const E* B = nullptr;  // [K,N], row stride ldb; trans_b: [N,K], row stride ldb
  int64_t ldb = 0;
  bool trans_b = false;         // B stored [N,K]: element (k,n) at B[n*ldb + k] (Gemm transB=1)
  const E* bias = nullptr;      // [N] or null
  const E* residual = nullptr;  // [M,N], row stride ldr, or null
  int64_t ldr = 0;
  E* C = nullptr;  // [M,N], row stride ldc; may alias residual when ldr == ldc
  int64_t ldc = 0;
};

}  // namespace fusec::cuda
