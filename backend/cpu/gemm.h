// Dense matrix multiply for the CPU backend: a cache-blocked, packed, multi-threaded GEMM
// (Goto/BLIS structure) that Conv, ConvTranspose, MatMul, Gemm and Einsum run on.
//
//   C = alpha · op(A) · op(B) + beta · C        all matrices row-major
//
// op(A) is M×K: A is stored M×K (lda >= K), or K×M when trans_a (lda >= M).
// op(B) is K×N: B is stored K×N (ldb >= N), or N×K when trans_b (ldb >= K).
// C is M×N with ldc >= N. beta == 0 overwrites C without reading it (BLAS convention: NaNs
// already in C do not propagate).
//
// The micro-kernel is chosen at run time from what the CPU supports (AVX-512, AVX2+FMA, or the
// SSE2 baseline every x86-64 has); FUSEC_GEMM_ISA=generic|avx2|avx512 caps the choice.
// Work is split over the thread pool; called from inside a parallel region it runs serially.
#pragma once
#include <cstdint>

namespace fusec::cpu {

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc);
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha, const double* A, int64_t lda,
          const double* B, int64_t ldb, double beta, double* C, int64_t ldc);

/// Micro-kernel instruction sets, for tests that cover every path and for benchmarks.
enum class GemmIsa { Generic, Avx2, Avx512 };
/// True if this CPU (and OS) can run `isa`.
bool gemm_isa_supported(GemmIsa isa);
/// The instruction set `gemm` uses: the best supported one, capped by FUSEC_GEMM_ISA.
GemmIsa gemm_default_isa();
const char* gemm_isa_name(GemmIsa isa);

/// `gemm` with a given instruction set (which must be supported) and without the shortcuts for
/// tiny problems and single rows or columns, so tests reach the packed kernels on any size.
void gemm_with_isa(GemmIsa isa, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                   const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);
void gemm_with_isa(GemmIsa isa, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha,
                   const double* A, int64_t lda, const double* B, int64_t ldb, double beta, double* C, int64_t ldc);

}  // namespace fusec::cpu
