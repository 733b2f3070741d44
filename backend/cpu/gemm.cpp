// Packed GEMM in the Goto/BLIS structure. C is cut into a grid of blocks, one task each, run on
// the thread pool; a task computes its block of C over all of K:
//
//   for jc over the task's columns in NC                     packed B panel (KC×NC)  -> L2
//     for pc over K in KC:   pack op(B)[pc, jc] into NR-wide slivers
//       for ic over the task's rows in MC:                   packed A block (MC×KC)  -> L2
//         pack alpha·op(A)[ic, pc] into MR-tall slivers
//         for each B sliver (KC×NR, stays in L1), each A sliver: MR×NR micro-kernel
//
// Tasks share nothing, so there is no barrier between packing and computing; the price is that
// A is packed once per column block of the grid and B once per row block, and the grid's shape is
// chosen to keep that small (a Conv with 64 output channels splits only N).
//
// The micro-kernel keeps an MR×NR block of C in vector registers and does KC rank-1 updates. It
// is written once with GCC vector extensions and instantiated per instruction set inside
// functions compiled for that target (float: AVX-512 8×48, AVX2+FMA 6×16, SSE2 6×8), so a
// baseline -O3 build still runs the wide kernels where the CPU has them.
#include "backend/cpu/gemm.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "backend/cpu/parallel.h"
#include "ir/error.h"
#include "ir/switches.h"
#include "ir/tensor.h"

#define FUSEC_GEMM_INLINE inline __attribute__((always_inline))

namespace fusec::cpu {
namespace {

// ---- kernels and packing (generic code, inlined into per-instruction-set functions) ----

/// C[0:m, 0:n] (+)= Ap·Bp for one MR×NR tile; Ap is an MR-tall packed sliver and Bp an NR-wide
/// packed sliver, both kc long. Without `accumulate`, C is overwritten and not read. (There is
/// no floating-point beta here: a live beta vector would take a register the accumulators need.)
template <typename T, int VL, int MR, int NV>
FUSEC_GEMM_INLINE void micro_kernel(int64_t kc, const T* __restrict a, const T* __restrict b, T* __restrict c,
                                    int64_t ldc, bool accumulate, int m, int n) {
  constexpr int NR = VL * NV;
  typedef T V __attribute__((vector_size(VL * sizeof(T))));
  V acc[MR][NV];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) acc[i][j] = V{};
  for (int64_t k = 0; k < kc; ++k) {
    V bv[NV];
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) __builtin_memcpy(&bv[j], b + j * VL, sizeof(V));
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const T av = a[i];
#pragma GCC unroll 8
      for (int j = 0; j < NV; ++j) acc[i][j] += av * bv[j];
    }
    a += MR;
    b += NR;
  }
  if (m == MR && n == NR) {
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      T* ci = c + i * ldc;
#pragma GCC unroll 8
      for (int j = 0; j < NV; ++j) {
        V r = acc[i][j];
        if (accumulate) {
          V old;
          __builtin_memcpy(&old, ci + j * VL, sizeof(V));
          r += old;
        }
        __builtin_memcpy(ci + j * VL, &r, sizeof(V));
      }
    }
    return;
  }
  alignas(64) T tile[MR][NR];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) __builtin_memcpy(&tile[i][j * VL], &acc[i][j], sizeof(V));
  for (int i = 0; i < m; ++i) {
    T* ci = c + i * ldc;
    if (accumulate) {
      for (int j = 0; j < n; ++j) ci[j] += tile[i][j];
    } else {
      for (int j = 0; j < n; ++j) ci[j] = tile[i][j];
    }
  }
}

/// Every tile of an mc×nc block of C from a packed A block and a packed B panel.
template <typename T, int VL, int MR, int NV>
FUSEC_GEMM_INLINE void macro_kernel(int64_t mc, int64_t nc, int64_t kc, const T* ap, const T* bp, T* c, int64_t ldc,
                                    bool accumulate) {
  constexpr int NR = VL * NV;
  for (int64_t jr = 0; jr < nc; jr += NR) {
    const int n = static_cast<int>(std::min<int64_t>(NR, nc - jr));
    for (int64_t ir = 0; ir < mc; ir += MR) {
      const int m = static_cast<int>(std::min<int64_t>(MR, mc - ir));
      micro_kernel<T, VL, MR, NV>(kc, ap + ir * kc, bp + jr * kc, c + ir * ldc + jr, ldc, accumulate, m, n);
    }
  }
}

/// alpha·op(A)[i0:i0+mc, p0:p0+kc] into MR-tall slivers: a sliver holds, for each k, MR values
/// (rows past mc are zero).
template <typename T, int MR>
FUSEC_GEMM_INLINE void pack_a(bool trans, const T* A, int64_t lda, int64_t i0, int64_t mc, int64_t p0, int64_t kc,
                              T alpha, T* out) {
  for (int64_t s = 0; s < mc; s += MR) {
    const int m = static_cast<int>(std::min<int64_t>(MR, mc - s));
    T* o = out + s * kc;
    if (!trans) {
      // op(A)(i, k) = A[i*lda + k]: MR row streams.
      if (m == MR) {
        const T* src[MR];
        for (int i = 0; i < MR; ++i) src[i] = A + (i0 + s + i) * lda + p0;
        for (int64_t k = 0; k < kc; ++k)
#pragma GCC unroll 16
          for (int i = 0; i < MR; ++i) o[k * MR + i] = alpha * src[i][k];
      } else {
        for (int64_t k = 0; k < kc; ++k) {
          for (int i = 0; i < m; ++i) o[k * MR + i] = alpha * A[(i0 + s + i) * lda + p0 + k];
          for (int i = m; i < MR; ++i) o[k * MR + i] = T(0);
        }
      }
    } else {
      // op(A)(i, k) = A[k*lda + i]: each k is a contiguous run.
      for (int64_t k = 0; k < kc; ++k) {
        const T* src = A + (p0 + k) * lda + i0 + s;
        T* dst = o + k * MR;
        if (m == MR) {
#pragma GCC unroll 16
          for (int i = 0; i < MR; ++i) dst[i] = alpha * src[i];
        } else {
          for (int i = 0; i < m; ++i) dst[i] = alpha * src[i];
          for (int i = m; i < MR; ++i) dst[i] = T(0);
        }
      }
    }
  }
}

/// op(B)[p0:p0+kc, j0:j0+nc] into NR-wide slivers: a sliver holds, for each k, NR values
/// (columns past nc are zero).
template <typename T, int NR>
FUSEC_GEMM_INLINE void pack_b(bool trans, const T* B, int64_t ldb, int64_t p0, int64_t kc, int64_t j0, int64_t nc,
                              T* out) {
  const int64_t full = nc / NR;
  if (!trans) {
    // op(B)(k, j) = B[k*ldb + j]: sweep each row once (rows are far apart, and short strided
    // reads would defeat the hardware prefetcher).
    for (int64_t k = 0; k < kc; ++k) {
      const T* src = B + (p0 + k) * ldb + j0;
      for (int64_t s = 0; s < full; ++s) {
        T* dst = out + (s * kc + k) * NR;
#pragma GCC unroll 4
        for (int j = 0; j < NR; ++j) dst[j] = src[s * NR + j];
      }
      if (full * NR < nc) {
        const int n = static_cast<int>(nc - full * NR);
        T* dst = out + (full * kc + k) * NR;
        for (int j = 0; j < n; ++j) dst[j] = src[full * NR + j];
        for (int j = n; j < NR; ++j) dst[j] = T(0);
      }
    }
    return;
  }
  // op(B)(k, j) = B[j*ldb + k]: NR column streams per sliver.
  for (int64_t s = 0; s * NR < nc; ++s) {
    const int n = static_cast<int>(std::min<int64_t>(NR, nc - s * NR));
    T* o = out + s * NR * kc;
    const T* src[NR];
    for (int j = 0; j < n; ++j) src[j] = B + (j0 + s * NR + j) * ldb + p0;
    if (n == NR) {
      for (int64_t k = 0; k < kc; ++k)
#pragma GCC unroll 8
        for (int j = 0; j < NR; ++j) o[k * NR + j] = src[j][k];
    } else {
      for (int64_t k = 0; k < kc; ++k) {
        for (int j = 0; j < n; ++j) o[k * NR + j] = src[j][k];
        for (int j = n; j < NR; ++j) o[k * NR + j] = T(0);
      }
    }
  }
}

/// One instruction set's kernel: register-block shape, cache blocking and the three routines.
template <typename T>
struct Kernel {
  int mr, nr;
  int64_t kc, mc, nc;  // KC·NR (one B sliver) fits L1; MC·KC (A block) and KC·NC (B panel) fit L2
  void (*macro)(int64_t mc, int64_t nc, int64_t kc, const T* ap, const T* bp, T* c, int64_t ldc, bool acc);
  void (*pack_a)(bool trans, const T* A, int64_t lda, int64_t i0, int64_t mc, int64_t p0, int64_t kc, T alpha, T* out);
  void (*pack_b)(bool trans, const T* B, int64_t ldb, int64_t p0, int64_t kc, int64_t j0, int64_t nc, T* out);
};

// Register budget: MR·NV accumulators + NV B vectors + 1 broadcast (16 registers below AVX-512,
// 32 with it).
#define FUSEC_GEMM_KERNEL(name, target, T, VL, MR, NV, KC, MC, NC)                                               \
  target void name##_macro(int64_t mc, int64_t nc, int64_t kc, const T* ap, const T* bp, T* c, int64_t ldc,      \
                           bool acc) {                                                                           \
    macro_kernel<T, VL, MR, NV>(mc, nc, kc, ap, bp, c, ldc, acc);                                                \
  }                                                                                                              \
  target void name##_pack_a(bool trans, const T* A, int64_t lda, int64_t i0, int64_t mc, int64_t p0, int64_t kc, \
                            T alpha, T* out) {                                                                   \
    pack_a<T, MR>(trans, A, lda, i0, mc, p0, kc, alpha, out);                                                    \
  }                                                                                                              \
  target void name##_pack_b(bool trans, const T* B, int64_t ldb, int64_t p0, int64_t kc, int64_t j0, int64_t nc, \
                            T* out) {                                                                            \
    pack_b<T, VL * NV>(trans, B, ldb, p0, kc, j0, nc, out);                                                      \
  }                                                                                                              \
  const Kernel<T> name = {MR, VL * NV, KC, MC, NC, name##_macro, name##_pack_a, name##_pack_b};

#define FUSEC_AVX2 __attribute__((target("avx2,fma")))
#define FUSEC_AVX512 __attribute__((target("avx512f,fma")))
FUSEC_GEMM_KERNEL(f32_generic, , float, 4, 6, 2, 256, 144, 2048)
FUSEC_GEMM_KERNEL(f64_generic, , double, 2, 6, 2, 256, 144, 1024)
FUSEC_GEMM_KERNEL(f32_avx2, FUSEC_AVX2, float, 8, 6, 2, 256, 144, 2048)
FUSEC_GEMM_KERNEL(f64_avx2, FUSEC_AVX2, double, 4, 6, 2, 256, 144, 1024)
FUSEC_GEMM_KERNEL(f32_avx512, FUSEC_AVX512, float, 16, 8, 3, 128, 192, 1536)
FUSEC_GEMM_KERNEL(f64_avx512, FUSEC_AVX512, double, 8, 8, 3, 128, 192, 768)
#undef FUSEC_GEMM_KERNEL
#undef FUSEC_AVX2
#undef FUSEC_AVX512

const Kernel<float>& kernel_for(GemmIsa isa, float) {
  return isa == GemmIsa::Avx512 ? f32_avx512 : isa == GemmIsa::Avx2 ? f32_avx2 : f32_generic;
}
const Kernel<double>& kernel_for(GemmIsa isa, double) {
  return isa == GemmIsa::Avx512 ? f64_avx512 : isa == GemmIsa::Avx2 ? f64_avx2 : f64_generic;
}

// ---- driver ----

/// Grow-only 64-byte aligned scratch, one per thread (packing buffers are reused across calls so
/// a Conv running GEMM per group does not fault in fresh pages every time).
class Scratch {
 public:
  void* get(size_t bytes) {
    if (bytes > size_) {
      size_t n = (std::max(bytes, size_ * 3 / 2) + 63) / 64 * 64;
      ptr_.reset(static_cast<char*>(std::aligned_alloc(64, n)));
      if (!ptr_) {
        size_ = 0;
        throw std::bad_alloc();
      }
      size_ = n;
    }
    return ptr_.get();
  }

 private:
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  std::unique_ptr<char, Free> ptr_;
  size_t size_ = 0;
};

thread_local Scratch a_scratch, b_scratch;

template <typename T>
void scale_c(int64_t M, int64_t N, T beta, T* C, int64_t ldc) {
  if (beta == T(1)) return;
  parallel_for(M, std::max<int64_t>(1, 16384 / std::max<int64_t>(N, 1)), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      T* c = C + i * ldc;
      if (beta == T(0))
        std::fill(c, c + N, T(0));
      else
        for (int64_t j = 0; j < N; ++j) c[j] *= beta;
    }
  });
}

struct GemmArgs {
  bool ta, tb;
  int64_t M, N, K;
};

/// Operands packed ahead of the product (PackedOperand), or null where gemm_block packs them.
/// Both hold every K block in turn, each block's slivers in order over the whole M (or N), so the
/// sliver of rows ic (a multiple of MR) in block pc is at pc·M_padded + ic·kc.
template <typename T>
struct Prepacked {
  const T* a = nullptr;
  const T* b = nullptr;
};

/// C[i0:i1, j0:j1] (+)= alpha·op(A)·op(B) over all of K, on the calling thread.
template <typename T>
void gemm_block(const Kernel<T>& kn, const GemmArgs& g, T alpha, const T* A, int64_t lda, const T* B, int64_t ldb,
                Prepacked<T> pre, bool accumulate_first, T* C, int64_t ldc, int64_t i0, int64_t i1, int64_t j0,
                int64_t j1) {
  const int64_t kc_max = std::min(kn.kc, g.K);
  const int64_t nc_max = std::min(kn.nc, j1 - j0), mc_max = std::min(kn.mc, i1 - i0);
  const int64_t m_padded = (g.M + kn.mr - 1) / kn.mr * kn.mr, n_padded = (g.N + kn.nr - 1) / kn.nr * kn.nr;
  const size_t b_elems = static_cast<size_t>((nc_max + kn.nr - 1) / kn.nr * kn.nr * kc_max);
  const size_t a_elems = static_cast<size_t>((mc_max + kn.mr - 1) / kn.mr * kn.mr * kc_max);
  T* bp = pre.b ? nullptr : static_cast<T*>(b_scratch.get(sizeof(T) * b_elems));
  T* ap = pre.a ? nullptr : static_cast<T*>(a_scratch.get(sizeof(T) * a_elems));
  for (int64_t jc = j0; jc < j1; jc += nc_max) {
    const int64_t nc = std::min(nc_max, j1 - jc);
    for (int64_t pc = 0; pc < g.K; pc += kc_max) {
      const int64_t kc = std::min(kc_max, g.K - pc);
      const T* b_panel = pre.b ? pre.b + pc * n_padded + jc * kc : bp;
      if (!pre.b) kn.pack_b(g.tb, B, ldb, pc, kc, jc, nc, bp);
      const bool accumulate = pc > 0 || accumulate_first;
      for (int64_t ic = i0; ic < i1; ic += mc_max) {
        const int64_t mc = std::min(mc_max, i1 - ic);
        const T* a_block = pre.a ? pre.a + pc * m_padded + ic * kc : ap;
        if (!pre.a) kn.pack_a(g.ta, A, lda, ic, mc, pc, kc, alpha, ap);
        kn.macro(mc, nc, kc, a_block, b_panel, C + ic * ldc + jc, ldc, accumulate);
      }
    }
  }
}

template <typename T>
void gemm_packed(const Kernel<T>& kn, const GemmArgs& g, T alpha, const T* A, int64_t lda, const T* B, int64_t ldb,
                 Prepacked<T> pre, T beta, T* C, int64_t ldc) {
  // The kernels overwrite or accumulate; any other beta scales C first.
  if (beta != T(0) && beta != T(1)) scale_c(g.M, g.N, beta, C, ldc);
  const bool accumulate_first = beta != T(0);

  // Task grid: about 4 tasks per thread (the pool balances them), each worth at least ~1 MFLOP,
  // shaped (mp × np) to minimise the extra packing M·K·(np-1) + K·N·(mp-1).
  const int64_t mslots = (g.M + kn.mr - 1) / kn.mr, nslots = (g.N + kn.nr - 1) / kn.nr;
  const double flops = 2.0 * static_cast<double>(g.M) * static_cast<double>(g.N) * static_cast<double>(g.K);
  int64_t tasks = 1;
  if (num_threads() > 1)
    tasks = std::clamp<int64_t>(static_cast<int64_t>(flops / 1e6), 1, 4 * static_cast<int64_t>(num_threads()));
  tasks = std::min(tasks, mslots * nslots);
  int64_t mp = 1, np = 1;
  double best = -1;
  for (int64_t m = 1; m <= std::min(tasks, mslots); ++m) {
    const int64_t n = std::min((tasks + m - 1) / m, nslots);
    const double cost = static_cast<double>(g.M) * static_cast<double>(n - 1) +
                        static_cast<double>(g.N) * static_cast<double>(m - 1) +
                        (m * n < tasks ? 1e30 : 0);  // too few tasks
    if (best < 0 || cost < best) {
      best = cost;
      mp = m;
      np = n;
    }
  }
  parallel_for(mp * np, 1, [&](int64_t t0, int64_t t1) {
    if (t1 - t0 == mp * np) {  // running serially (e.g. nested in a parallel Conv): one block, no re-packing
      gemm_block(kn, g, alpha, A, lda, B, ldb, pre, accumulate_first, C, ldc, 0, g.M, 0, g.N);
      return;
    }
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t tm = t / np, tn = t % np;
      const int64_t i0 = mslots * tm / mp * kn.mr, i1 = std::min(g.M, mslots * (tm + 1) / mp * kn.mr);
      const int64_t j0 = nslots * tn / np * kn.nr, j1 = std::min(g.N, nslots * (tn + 1) / np * kn.nr);
      if (i0 < i1 && j0 < j1) gemm_block(kn, g, alpha, A, lda, B, ldb, pre, accumulate_first, C, ldc, i0, i1, j0, j1);
    }
  });
}

/// y[i·incy] = alpha·Σ_k X(i, k)·v[k] + beta·y[i·incy] for i < n, where X(i, k) = X[i·xi + k·xk].
/// A matrix product with one row or one column: every element of X is used once, so packing
/// would only add a copy. Rows of X that are contiguous in k are dot products (split by i);
/// columns contiguous in i are axpy sweeps over a block of y kept in L1 (split by i blocks).
template <typename T>
void gemv(int64_t n, int64_t K, T alpha, const T* X, int64_t xi, int64_t xk, const T* v, int64_t incv, T beta, T* y,
          int64_t incy) {
  std::vector<T> vbuf;
  if (incv != 1) {
    vbuf.resize(static_cast<size_t>(K));
    for (int64_t k = 0; k < K; ++k) vbuf[k] = v[k * incv];
    v = vbuf.data();
  }
  auto finish = [&](int64_t i, T acc) {
    T& out = y[i * incy];
    out = beta == T(0) ? alpha * acc : alpha * acc + beta * out;
  };
  if (xk == 1 || xi != 1) {
    parallel_for(n, std::max<int64_t>(1, 16384 / std::max<int64_t>(K, 1)), [&](int64_t i0, int64_t i1) {
      constexpr int U = 8;  // independent partial sums, so the loop vectorizes without reassociation
      for (int64_t i = i0; i < i1; ++i) {
        const T* x = X + i * xi;
        T part[U] = {};
        int64_t k = 0;
        if (xk == 1)
          for (; k + U <= K; k += U)
            for (int u = 0; u < U; ++u) part[u] += x[k + u] * v[k + u];
        T acc = 0;
        for (int u = 0; u < U; ++u) acc += part[u];
        for (; k < K; ++k) acc += x[k * xk] * v[k];
        finish(i, acc);
      }
    });
    return;
  }
  constexpr int64_t kBlock = 1024;
  parallel_for((n + kBlock - 1) / kBlock, std::max<int64_t>(1, 16384 / std::max<int64_t>(K * kBlock, 1)),
               [&](int64_t b0, int64_t b1) {
                 T acc[kBlock];
                 for (int64_t b = b0; b < b1; ++b) {
                   const int64_t i0 = b * kBlock, len = std::min(kBlock, n - i0);
                   std::fill(acc, acc + len, T(0));
                   for (int64_t k = 0; k < K; ++k) {
                     const T* x = X + k * xk + i0;
                     const T vk = v[k];
                     for (int64_t i = 0; i < len; ++i) acc[i] += vk * x[i];
                   }
                   for (int64_t i = 0; i < len; ++i) finish(i0 + i, acc[i]);
                 }
               });
}

/// Straight loops for problems too small to repay packing.
template <typename T>
void gemm_small(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, const T* B,
                int64_t ldb, T beta, T* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i) {
    T* c = C + i * ldc;
    if (beta == T(0))
      std::fill(c, c + N, T(0));
    else if (beta != T(1))
      for (int64_t j = 0; j < N; ++j) c[j] *= beta;
    if (!tb) {
      for (int64_t k = 0; k < K; ++k) {
        const T a = alpha * (ta ? A[k * lda + i] : A[i * lda + k]);
        const T* b = B + k * ldb;
        for (int64_t j = 0; j < N; ++j) c[j] += a * b[j];
      }
    } else {
      for (int64_t j = 0; j < N; ++j) {
        const T* b = B + j * ldb;
        T s = 0;
        if (ta)
          for (int64_t k = 0; k < K; ++k) s += A[k * lda + i] * b[k];
        else
          for (int64_t k = 0; k < K; ++k) s += A[i * lda + k] * b[k];
        c[j] += alpha * s;
      }
    }
  }
}

template <typename T>
void gemm_impl(GemmIsa isa, bool allow_small, bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
               int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc, Prepacked<T> pre = {}) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0 || alpha == T(0)) {
    scale_c(M, N, beta, C, ldc);
    return;
  }
  if (allow_small && M == 1) {  // C row = op(A) row · op(B)
    gemv(N, K, alpha, B, tb ? ldb : 1, tb ? 1 : ldb, A, ta ? lda : 1, beta, C, 1);
    return;
  }
  if (allow_small && N == 1) {  // C column = op(A) · op(B) column
    gemv(M, K, alpha, A, ta ? 1 : lda, ta ? lda : 1, B, tb ? 1 : ldb, beta, C, ldc);
    return;
  }
  if (allow_small && !gemm_packs(M, N, K)) {
    gemm_small(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  gemm_packed(kernel_for(isa, T{}), GemmArgs{ta, tb, M, N, K}, alpha, A, lda, B, ldb, pre, beta, C, ldc);
}

/// Every K block of op(A) (side A: M×K, MR-tall slivers) or op(B) (side B: K×N, NR-wide slivers)
/// in the order Prepacked describes, the blocks packed in parallel.
template <typename T>
void pack_whole(const Kernel<T>& kn, bool side_a, bool trans, int64_t rows, int64_t cols, const T* src, int64_t ld,
                T* out) {
  const int64_t K = side_a ? cols : rows, span = side_a ? rows : cols;  // span: M or N
  const int64_t step = side_a ? kn.mr : kn.nr, padded = (span + step - 1) / step * step;
  const int64_t kc_max = std::min(kn.kc, K), kblocks = (K + kc_max - 1) / kc_max;
  // A task packs a run of slivers of one K block: about 64 slivers, so the threads share the work.
  const int64_t per_task = 64 * step, runs = (span + per_task - 1) / per_task;
  parallel_for(kblocks * runs, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t pc = t / runs * kc_max, kc = std::min(kc_max, K - pc);
      const int64_t s0 = t % runs * per_task, n = std::min(per_task, span - s0);
      T* dst = out + pc * padded + s0 * kc;
      if (side_a)
        kn.pack_a(trans, src, ld, s0, n, pc, kc, T(1), dst);
      else
        kn.pack_b(trans, src, ld, pc, kc, s0, n, dst);
    }
  });
}

}  // namespace

template <typename T>
size_t PackedOperand<T>::bytes_for(Side side, int64_t rows, int64_t cols, GemmIsa isa) {
  const Kernel<T>& kn = kernel_for(isa, T{});
  const int64_t step = side == Side::A ? kn.mr : kn.nr, span = side == Side::A ? rows : cols;
  const int64_t K = side == Side::A ? cols : rows;
  return sizeof(T) * static_cast<size_t>((span + step - 1) / step * step) * static_cast<size_t>(K);
}

template <typename T>
PackedOperand<T>::PackedOperand(Side side, bool trans, int64_t rows, int64_t cols, const T* src, int64_t ld,
                                GemmIsa isa)
    : side_(side), trans_(trans), rows_(rows), cols_(cols), src_(src), ld_(ld), isa_(isa) {
  bytes_ = bytes_for(side, rows, cols, isa);
  data_ = aligned_storage(bytes_, false);
  if (rows > 0 && cols > 0)
    pack_whole(kernel_for(isa, T{}), side == Side::A, trans, rows, cols, src, ld, static_cast<T*>(data_.get()));
}

template class PackedOperand<float>;
template class PackedOperand<double>;

namespace {

template <typename T>
void gemm_packed_a(const PackedOperand<T>& A, bool tb, int64_t N, const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  if (A.side() != PackedOperand<T>::Side::A) internal_error("gemm: a packed B operand given as A");
  const int64_t K = A.cols();
  gemm_impl(A.isa(), true, A.trans(), tb, A.rows(), N, K, T(1), A.source(), A.ld(), B, ldb, beta, C, ldc,
            Prepacked<T>{A.data(), nullptr});
}

template <typename T>
void gemm_packed_b(bool ta, int64_t M, T alpha, const T* A, int64_t lda, const PackedOperand<T>& B, T beta, T* C,
                   int64_t ldc) {
  if (B.side() != PackedOperand<T>::Side::B) internal_error("gemm: a packed A operand given as B");
  gemm_impl(B.isa(), true, ta, B.trans(), M, B.cols(), B.rows(), alpha, A, lda, B.source(), B.ld(), beta, C, ldc,
            Prepacked<T>{nullptr, B.data()});
}

}  // namespace

bool gemm_packs(int64_t M, int64_t N, int64_t K) {
  return M > 1 && N > 1 && static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K) > 4096;
}

bool gemm_isa_supported(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::Generic:
      return true;
    case GemmIsa::Avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case GemmIsa::Avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
  }
  return false;
}

GemmIsa gemm_default_isa() {
  static const GemmIsa isa = [] {
    GemmIsa cap = GemmIsa::Avx512;
    if (const char* e = env_switch("FUSEC_GEMM_ISA")) {
      std::string s = e;
      if (s == "generic") cap = GemmIsa::Generic;
      if (s == "avx2") cap = GemmIsa::Avx2;
    }
    for (GemmIsa i : {GemmIsa::Avx512, GemmIsa::Avx2})
      if (static_cast<int>(i) <= static_cast<int>(cap) && gemm_isa_supported(i)) return i;
    return GemmIsa::Generic;
  }();
  return isa;
}

const char* gemm_isa_name(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::Avx512:
      return "avx512";
    case GemmIsa::Avx2:
      return "avx2";
    default:
      return "generic";
  }
}

void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const float* B,
          int64_t ldb, float beta, float* C, int64_t ldc) {
  gemm_impl(gemm_default_isa(), true, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const double* A, int64_t lda,
          const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
  gemm_impl(gemm_default_isa(), true, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
void gemm_with_isa(GemmIsa isa, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                   int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  gemm_impl(isa, false, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
void gemm_with_isa(GemmIsa isa, bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const double* A,
                   int64_t lda, const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
  gemm_impl(isa, false, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm(const PackedOperand<float>& A, bool tb, int64_t N, const float* B, int64_t ldb, float beta, float* C,
          int64_t ldc) {
  gemm_packed_a(A, tb, N, B, ldb, beta, C, ldc);
}
void gemm(const PackedOperand<double>& A, bool tb, int64_t N, const double* B, int64_t ldb, double beta, double* C,
          int64_t ldc) {
  gemm_packed_a(A, tb, N, B, ldb, beta, C, ldc);
}
void gemm(bool ta, int64_t M, float alpha, const float* A, int64_t lda, const PackedOperand<float>& B, float beta,
          float* C, int64_t ldc) {
  gemm_packed_b(ta, M, alpha, A, lda, B, beta, C, ldc);
}
void gemm(bool ta, int64_t M, double alpha, const double* A, int64_t lda, const PackedOperand<double>& B, double beta,
          double* C, int64_t ldc) {
  gemm_packed_b(ta, M, alpha, A, lda, B, beta, C, ldc);
}

}  // namespace fusec::cpu
