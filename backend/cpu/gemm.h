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
#include <cstddef>
#include <cstdint>
#include <memory>

namespace fusec::cpu {

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc);
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha, const double* A, int64_t lda,
          const double* B, int64_t ldb, double beta, double* C, int64_t ldc);

/// True when `gemm` packs its operands for an M×N×K product: not a single row or column (a
/// matrix-vector product reads each element once), not so small that straight loops win. Only then
/// does a PackedOperand save anything.
bool gemm_packs(int64_t M, int64_t N, int64_t K);

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

/// One operand of many products, packed once into the layout the micro-kernel reads: a layer's
/// weight. Packing otherwise takes a pass over the operand per product. MatMul and Gemm pack their
/// constant B this way (backend/cpu/kernels/packed_weight.h); side A is there for a weight read as
/// A, and measured no gain for Conv's.
/// A product with a packed operand computes exactly what `gemm` computes with its source, bit for
/// bit. It keeps a pointer to that source for the products that do not pack (a single row or
/// column, tiny sizes), so the source must outlive it. Its memory counts against the host budget.
template <typename T>
class PackedOperand {
 public:
  enum class Side { A, B };
  /// op(A), M×K (`rows`×`cols`), or op(B), K×N, packed for `isa`'s kernel.
  PackedOperand(Side side, bool trans, int64_t rows, int64_t cols, const T* src, int64_t ld,
                GemmIsa isa = gemm_default_isa());
  /// What such a packing allocates, to check before making it.
  static size_t bytes_for(Side side, int64_t rows, int64_t cols, GemmIsa isa = gemm_default_isa());

  Side side() const { return side_; }
  bool trans() const { return trans_; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  const T* source() const { return src_; }
  int64_t ld() const { return ld_; }
  GemmIsa isa() const { return isa_; }
  const T* data() const { return static_cast<const T*>(data_.get()); }
  size_t bytes() const { return bytes_; }

 private:
  Side side_;
  bool trans_;
  int64_t rows_, cols_;
  const T* src_;
  int64_t ld_;
  GemmIsa isa_;
  std::shared_ptr<void> data_;
  size_t bytes_;
};

/// C = op(A)·op(B) + beta·C with A packed (alpha is 1: packing A is where it would be applied).
void gemm(const PackedOperand<float>& A, bool trans_b, int64_t N, const float* B, int64_t ldb, float beta, float* C,
          int64_t ldc);
void gemm(const PackedOperand<double>& A, bool trans_b, int64_t N, const double* B, int64_t ldb, double beta, double* C,
          int64_t ldc);
/// C = alpha·op(A)·op(B) + beta·C with B packed.
void gemm(bool trans_a, int64_t M, float alpha, const float* A, int64_t lda, const PackedOperand<float>& B, float beta,
          float* C, int64_t ldc);
void gemm(bool trans_a, int64_t M, double alpha, const double* A, int64_t lda, const PackedOperand<double>& B,
          double beta, double* C, int64_t ldc);

}  // namespace fusec::cpu
