// The tiled strict-fp32 SGEMM kernel, shared by the plain GEMM (sgemm.cu, SgemmArgs) and the
// implicit-GEMM convolution (conv_igemm.cu, ConvIgemmArgs), which differ only in where the B
// operand's copies read from and where the epilogue writes: one main loop for both, and each
// .cu file instantiates its own configurations (the GEMM's are unchanged by the conv's).
//
// The tiled kernel, per CTA: a BM x BN tile of C, BK-deep slices of A and B streamed through a
// STAGES-deep cp.async ring in shared memory.
//
//   global A [M,K] row-major --cp.async 4 B, transposed--> As[stage][k][BM + 4]   (k-major)
//   global B [K,N] row-major --cp.async 16 B-------------> Bs[stage][k][BN]
//   (conv: im2col(X) --------cp.async 4 B, one pixel per thread--> Bs[stage][k][BN])
//
// Each thread owns a TM x TN block of C made of 4x4 pieces strided TR*4 rows and TC*4 columns
// apart (TR x TC threads), so at every k one 128-bit LDS per piece fetches its A column and B row
// and a warp reads consecutive 16-byte words: no bank conflicts, A words broadcast across the
// warp's columns. Fragments are double-buffered in registers across k. The transposing 4-byte
// copies of A cost 2-way bank conflicts on the store side (the +4 padding), a few instructions
// per BK*TM*TN FFMAs; the alternative, LDG + STS through registers, costs registers the 8x12
// tiles need for accumulators.
//
// Tile shapes are picked for BERT-base at M = 2048 on 132 SMs, where wave quantization decides
// as much as per-CTA speed. The 8x12 thread tile (96 accumulators, ~180 registers, 1 CTA of 8
// warps per SM) issues 90% FFMAs in its main loop; to fill the SMs with it, split-K 2 runs the
// two K halves of a tile as a cluster of 2 CTAs and adds their partial sums through distributed
// shared memory (no workspace, no atomics: deterministic).
#pragma once
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/ops/conv/conv_igemm.cuh"
#include "backend/cuda/ops/gemm/sgemm.cuh"
#include "backend/formulas.h"

namespace fusec::cuda::sgemm_core {

/// SPLIT value of the stream-K form (conv only; see stream_k).
constexpr int kStreamK = 0;
/// SPLIT value of the batched form (SgemmBatchedArgs, winograd.cuh): grid z is the batch index.
constexpr int kBatched = -1;

// issue false: no copy at all, as a predicated instruction rather than a branch (see the main
// loop). full false: src-size 0, which writes zeros and reads nothing (the K edge's padding).
__device__ __forceinline__ void cp_async_4(float* dst, const float* src, bool full, bool issue) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %3, 0;\n @p cp.async.ca.shared.global [%0], [%1], 4, %2;\n}\n" ::"r"(d),
      "l"(src), "r"(full ? 4 : 0), "r"(int(issue))
      : "memory");
}

__device__ __forceinline__ void cp_async_16(float* dst, const float* src, bool full, bool issue) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %3, 0;\n @p cp.async.cg.shared.global [%0], [%1], 16, %2;\n}\n" ::"r"(d),
      "l"(src), "r"(full ? 16 : 0), "r"(int(issue))
      : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// The epilogue activations are backend/formulas.h's: ReLU keeps NaN as the CPU's FusedMatMul
// does, and GELU is gelu_erfc_fit_f32, a branch-free Chebyshev fit (why, and how close: there).
__device__ __forceinline__ float activate(float x, SgemmAct act) {
  switch (act) {
    case SgemmAct::Relu:
      return formulas::relu(x);
    case SgemmAct::GeluErf:
      return formulas::gelu_erfc_fit_f32(x);
    default:
      return x;
  }
}

// Which cluster rank finishes a thread's accumulator row under split-K: SPLIT 2 by 4-row piece
// (piece i to rank i % 2), SPLIT 4 by row (row i to rank i % 4).
template <int SPLIT, int RK>
__device__ __forceinline__ constexpr bool split_owns(int row) {
  return SPLIT == 1 || (SPLIT == 2 ? (row / 4) % 2 == RK : row % 4 == RK);
}

// The conv epilogue: Y = act(acc + b[m] + Z) over NCHW memory, where column j (an output pixel
// over the batch) lives at img·M·PQ + pix and row m (an output channel) adds m·PQ. mt and nt are
// the thread's first row and column. Four consecutive columns share an image when PQ % 4 == 0
// (p.vec): one 16-byte word; otherwise each column is addressed on its own.
//
// rs: where the residual tile was staged in shared memory (residual_to_smem), at the thread's
// first row and column, rows BN floats apart; null: read from global memory.
template <int TM, int TN, int TR, int TC, int BN, int SPLIT, int RK, bool RS, class Act>
__device__ __forceinline__ void finish_conv(const ConvIgemmArgs& p, float (&acc)[TM][TN], Act act, int mt, int nt,
                                            const float* rs) {
  const int M = p.M, N = p.N, pq = p.P * p.Q;
  int off[TN];  // each column's offset in Y but for the row (with p.vec only every fourth is used)
#pragma unroll
  for (int j = 0; j < TN; ++j) {
    // Past N, a word reads the last whole word (N % 4 == 0 with p.vec) and a column the last one.
    const int col = p.vec ? min(nt + (j / 4) * TC * 4, N - 4) : min(nt + (j / 4) * TC * 4 + j % 4, N - 1);
    const int img = col / pq;
    off[j] = img * M * pq + (col - img * pq);
  }
#pragma unroll
  for (int i = 0; i < TM / 4; ++i)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      if (!split_owns<SPLIT, RK>(i * 4 + r)) continue;
      const int m = min(mt + i * TR * 4 + r, M - 1);
      float* a = acc[i * 4 + r];
      const float b = p.bias ? __ldg(p.bias + m) : 0.0f;
#pragma unroll
      for (int j = 0; j < TN; ++j) a[j] += b;
      if (!p.residual) continue;
      if (RS && rs) {
#pragma unroll
        for (int j = 0; j < TN; j += 4) {
          const float4 z = *reinterpret_cast<const float4*>(rs + (i * TR * 4 + r) * BN + (j / 4) * TC * 4);
          a[j] += z.x, a[j + 1] += z.y, a[j + 2] += z.z, a[j + 3] += z.w;
        }
      } else if (p.vec) {
#pragma unroll
        for (int j = 0; j < TN; j += 4) {
          const float4 z = *reinterpret_cast<const float4*>(p.residual + off[j] + m * pq);
          a[j] += z.x, a[j + 1] += z.y, a[j + 2] += z.z, a[j + 3] += z.w;
        }
      } else {
#pragma unroll
        for (int j = 0; j < TN; ++j) a[j] += p.residual[off[j] + m * pq];
      }
    }
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j)
      if (split_owns<SPLIT, RK>(i)) acc[i][j] = act(acc[i][j]);
#pragma unroll
  for (int i = 0; i < TM / 4; ++i)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int m = mt + i * TR * 4 + r;
      if (m >= M || !split_owns<SPLIT, RK>(i * 4 + r)) continue;
      const float* a = acc[i * 4 + r];
#pragma unroll
      for (int j = 0; j < TN; j += 4) {
        const int col = nt + (j / 4) * TC * 4;
        if (p.vec) {
          if (col < N)
            *reinterpret_cast<float4*>(p.C + off[j] + m * pq) = make_float4(a[j], a[j + 1], a[j + 2], a[j + 3]);
        } else {
#pragma unroll
          for (int t = 0; t < 4; ++t)
            if (col + t < N) p.C[off[j + t] + m * pq] = a[j + t];
        }
      }
    }
}

// The main loop of one tile: acc += A[m0.., kt0·BK..] · B[kt0·BK.., n0..] over KT K tiles, the
// thread's TM x TN block of it at row tr·4 and column tc·4 of its 4x4 pieces. Returns with no
// copy in flight; the caller syncs before the pipeline's shared memory is written again.
struct NoHook {
  __device__ void operator()() const {}
};

// after_prologue runs once the ring's first tiles are in flight (residual_to_smem's copies).
template <class P, int BM, int BN, int BK, int TM, int TN, int STAGES, class Hook = NoHook>
__device__ __forceinline__ void tile_mainloop(const P& p, int m0, int n0, int kt0, int KT, float (&acc)[TM][TN],
                                              float* const As, float* const Bs, int tid, int tr, int tc,
                                              const Hook& after_prologue = Hook()) {
  constexpr bool PW = std::is_same_v<P, ConvPointwiseArgs>;  // a 1x1 conv: B rows are X's channel planes
  constexpr bool TAP = std::is_same_v<P, ConvTapArgs>;       // K in (r, s, c) order: one tap per slice
  constexpr bool CONV = PW || TAP || std::is_same_v<P, ConvIgemmArgs>;
  constexpr bool IM2COL = CONV && !PW;
  constexpr int TR = BM / TM, TC = BN / TN, NT = TR * TC;  // thread grid
  constexpr int AP = BM + 4;                               // padded k-row of the A tile
  constexpr int A_STAGE = BK * AP, B_STAGE = BK * BN, BV = BN / 4;
  constexpr int A_LOADS = (BM * BK + NT - 1) / NT, B_LOADS = IM2COL ? BK * BN / NT : (BK * BV + NT - 1) / NT;
  const int M = p.M, N = p.N, K = p.K;

  // Copy assignments, fixed for the whole K loop: 32-bit byte offsets from running pointers to
  // the next tile to load (two adds per copy). Rows past M and columns past N read clamped, valid
  // addresses: their products only reach outputs that are never stored. Only the K edge needs
  // zeros, from cp.async's zero-fill.
  // A: k column ak, rows am + i*(NT/BK).
  const int ak = tid % BK, am = tid / BK;
  unsigned a_off[A_LOADS];
#pragma unroll
  for (int i = 0; i < A_LOADS; ++i) a_off[i] = unsigned(min(am + i * (NT / BK), M - 1 - m0)) * unsigned(p.lda) * 4u;
  // B: 16-byte word i of the tile is row b_k[i], columns col..col+3 (N % 4 == 0: a word is all
  // in or all out, and n0 <= N - 4).
  [[maybe_unused]] unsigned b_off[IM2COL ? 1 : B_LOADS];
  [[maybe_unused]] int b_soff[IM2COL ? 1 : B_LOADS], b_k[IM2COL ? 1 : B_LOADS];
  [[maybe_unused]] int64_t b_step = 0;
  // Conv: the thread's column is one output pixel (past N: the last one, never stored), fixed for
  // the whole loop: its image's offset and the top-left input position its window starts at.
  [[maybe_unused]] int x_col = 0, x_base = 0, x_h0 = 0, x_w0 = 0;
  // Tap-major: where in X this pixel reads the slice's next channel (0 in the padding), and the
  // step to the channel after (0 in the padding).
  [[maybe_unused]] int tap_off = 0, tap_step = 0;
  if constexpr (IM2COL) {
    x_col = tid % BN;
    const int j = min(n0 + x_col, N - 1), pq = p.P * p.Q;
    const int img = j / pq, pix = j - img * pq, op = pix / p.Q, oq = pix - op * p.Q;
    x_h0 = op * p.stride_h - p.pad_h, x_w0 = oq * p.stride_w - p.pad_w;
    x_base = img * p.chw + x_h0 * p.W + x_w0;
  } else {
#pragma unroll
    for (int i = 0; i < B_LOADS; ++i) {
      const int idx = tid + i * NT;
      b_k[i] = idx / BV;
      const int col = (idx % BV) * 4;
      if constexpr (PW) {
        // Row k of B is channel k's plane of the column's image: the word's 4 pixels are
        // contiguous (b_pq % 4 == 0), at img·chw + pix + k·b_pq.
        const int pq = p.b_pq, j = min(n0 + col, N - 4), img = j / pq;
        b_off[i] = (unsigned(img * p.chw + j - img * pq) + unsigned(b_k[i]) * unsigned(pq)) * 4u;
      } else {
        b_off[i] = (unsigned(b_k[i]) * unsigned(p.ldb) + unsigned(min(col, N - 4 - n0))) * 4u;
      }
      b_soff[i] = b_k[i] * BN + col;
    }
    if constexpr (PW)
      b_step = int64_t(BK) * p.b_pq * 4;
    else
      b_step = int64_t(BK) * p.ldb * 4;
  }

  int k_next = kt0 * BK;  // the next tile to load, and its rows of A and B
  const char* a_next = reinterpret_cast<const char*>(p.A + int64_t(m0) * p.lda + ak + k_next);
  [[maybe_unused]] const char* b_next = nullptr;
  if constexpr (PW)
    b_next = reinterpret_cast<const char*>(p.X) + k_next * b_step / BK;
  else if constexpr (!CONV)
    b_next = reinterpret_cast<const char*>(p.B + n0) + k_next * b_step / BK;

  // Copy c (A words first, then B words) of the tile at k_next into stage, if live.
  auto load_copy = [&](int c, int stage, bool live) {
    if (c < A_LOADS) {
      const int i = c;
      if (BM * BK % NT != 0 && am + i * (NT / BK) >= BM) return;
      cp_async_4(As + stage * A_STAGE + ak * AP + am + i * (NT / BK), reinterpret_cast<const float*>(a_next + a_off[i]),
                 k_next + ak < K, live);
    } else if constexpr (TAP) {
      // The whole slice is one tap (C % BK == 0): its bounds test and address once, at its first
      // copy; then row r of the slice is channel c0 + r, one plane further on.
      const int row = tid / BN + (c - A_LOADS) * (NT / BN);
      if (c == A_LOADS) {
        const int2 t = __ldg(p.taps + min(k_next, K - 1));
        const int h = x_h0 + (t.y >> 16), w = x_w0 + (t.y & 0xFFFF);
        const bool in = unsigned(h) < unsigned(p.H) && unsigned(w) < unsigned(p.W);
        tap_step = in ? (NT / BN) * p.H * p.W : 0;
        tap_off = in ? x_base + t.x + (tid / BN) * p.H * p.W : 0;
      }
      cp_async_4(Bs + stage * B_STAGE + row * BN + x_col, p.X + tap_off, tap_step != 0, live);
      tap_off += tap_step;
    } else if constexpr (IM2COL) {
      // Row `row` of the tile is tap k: its table entry is the same for the whole warp (one
      // transaction, L1-resident); zeros where the tap falls outside the image or past K.
      const int row = tid / BN + (c - A_LOADS) * (NT / BN), k = k_next + row;
      const int2 t = __ldg(p.taps + min(k, K - 1));
      const int h = x_h0 + (t.y >> 16), w = x_w0 + (t.y & 0xFFFF);
      const bool in = k < K && unsigned(h) < unsigned(p.H) && unsigned(w) < unsigned(p.W);
      cp_async_4(Bs + stage * B_STAGE + row * BN + x_col, p.X + (in ? x_base + t.x : 0), in, live);
    } else {
      const int i = c - A_LOADS;
      if (BK * BV % NT != 0 && tid + i * NT >= BK * BV) return;
      cp_async_16(Bs + stage * B_STAGE + b_soff[i], reinterpret_cast<const float*>(b_next + b_off[i]),
                  k_next + b_k[i] < K, live);
    }
  };
  auto next_tile = [&] {
    k_next += BK, a_next += BK * 4;
    if constexpr (!IM2COL) b_next += b_step;
  };
  constexpr int COPIES = A_LOADS + B_LOADS;
  // Copies go out four at a time: each cp.async costs three no-op issue slots the compiler puts
  // before it when it stands alone (in the lab one per k step was slower on FFN1).
  constexpr int CPS = 4;
  constexpr int GROUPS = (COPIES + CPS - 1) / CPS;
  auto copy_step = [](int c) { return (c / CPS) * BK / GROUPS; };
  static_assert((GROUPS - 1) * BK / GROUPS < BK - 1, "a tile's copies are committed before the last k step's wait");

  float af[2][TM], bf[2][TN];  // fragments, double-buffered across k
  auto load_frag = [&](int buf, int stage, int k) {
    const float* as = As + stage * A_STAGE + k * AP + tr * 4;
    const float* bs = Bs + stage * B_STAGE + k * BN + tc * 4;
#pragma unroll
    for (int i = 0; i < TM / 4; ++i) {
      const float4 v = *reinterpret_cast<const float4*>(as + i * TR * 4);
      af[buf][i * 4 + 0] = v.x, af[buf][i * 4 + 1] = v.y, af[buf][i * 4 + 2] = v.z, af[buf][i * 4 + 3] = v.w;
    }
#pragma unroll
    for (int j = 0; j < TN / 4; ++j) {
      const float4 v = *reinterpret_cast<const float4*>(bs + j * TC * 4);
      bf[buf][j * 4 + 0] = v.x, bf[buf][j * 4 + 1] = v.y, bf[buf][j * 4 + 2] = v.z, bf[buf][j * 4 + 3] = v.w;
    }
  };
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < KT) {
#pragma unroll
      for (int c = 0; c < COPIES; ++c) load_copy(c, s, true);
      next_tile();
    }
    cp_async_commit();
  }
  after_prologue();
  // The next tile's copies are spread over the k steps, between the FFMAs, rather than issued
  // together after the barrier: ncu showed a large share of all warp samples in that burst of
  // address arithmetic and in the barrier right before it, with the FMA pipe idle (64x128 tiles on
  // BERT-base's FFN1); spread and without a branch, FFN1 ran faster in the lab. The barrier sits
  // in the last k step, so the next tile's first fragments can load while that step's FFMAs issue.
  cp_async_wait<STAGES - 2>();
  __syncthreads();
  load_frag(0, 0, 0);
  for (int kt = 0; kt < KT; ++kt) {
    const int stage = kt % STAGES;
    // Past the last tile the copies are predicated off: a predicate, where a branch around them
    // kept the FFMAs from hiding their address arithmetic, and a second copy of the loop for the
    // tail cost time on FFN1 in the lab. Zero-filling the spent stage instead was as fast,
    // but left copies in flight that compute-sanitizer's racecheck flags against split-K's
    // exchange.
    const bool refill = kt + STAGES - 1 < KT;  // stage (kt-1)%STAGES, free since the last barrier
    const int fill = (kt + STAGES - 1) % STAGES;
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      if (k + 1 < BK) {
        load_frag((k + 1) & 1, stage, k + 1);
      } else if (kt + 1 < KT) {
        cp_async_wait<STAGES - 2>();  // tile kt+1 landed (this thread's copies)
        __syncthreads();              // ... everyone's, and no one reads stage kt%STAGES again
        load_frag(0, (kt + 1) % STAGES, 0);
      }
#pragma unroll
      for (int c = 0; c < COPIES; ++c)
        if (copy_step(c) == k) load_copy(c, fill, refill);
      if (k == copy_step(COPIES - 1)) {
        if (refill) next_tile();
        cp_async_commit();
      }
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(af[k & 1][i], bf[k & 1][j], acc[i][j]);
    }
  }
  cp_async_wait<0>();  // nothing is pending (the last groups are empty), but leave none behind
}

template <class P, int BM, int BN, int TM, int TN, int SPLIT, bool RS = false>
__device__ __forceinline__ void finish_tile(const P& p, float (&acc)[TM][TN], int m0, int n0, int tr, int tc, int rank,
                                            const float* rs = nullptr) {
  constexpr bool CONV =
      std::is_same_v<P, ConvPointwiseArgs> || std::is_same_v<P, ConvTapArgs> || std::is_same_v<P, ConvIgemmArgs>;
  constexpr int TR = BM / TM, TC = BN / TN;
  const int M = p.M, N = p.N;
  // Epilogue: C = act(acc + bias + R), one 16-byte word per 4x4 piece row. The activation is
  // picked once, outside the unrolled loops, and runs over all of the thread's outputs with no
  // branch between them (rows past M read row M-1's residual, never stored), so the compiler can
  // interleave the erf-GELUs' dependent chains: with a per-element switch, GELU cost BERT-base's
  // FFN1 more on top of the GEMM than the separate pass did.
  auto finish = [&](auto act, auto rank_c) {
    constexpr int RK = decltype(rank_c)::value;
    if constexpr (CONV) {
      finish_conv<TM, TN, TR, TC, BN, SPLIT, RK, RS>(p, acc, act, m0 + tr * 4, n0 + tc * 4, rs);
    } else {
#pragma unroll
      for (int j = 0; j < TN / 4; ++j) {
        const int n = min(n0 + j * TC * 4 + tc * 4, N - 4);
        const float4 b = p.bias ? *reinterpret_cast<const float4*>(p.bias + n) : make_float4(0, 0, 0, 0);
#pragma unroll
        for (int i = 0; i < TM / 4; ++i)
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            if (SPLIT == 2 && i % 2 != RK) continue;
            float* a = acc[i * 4 + r] + j * 4;
            a[0] += b.x, a[1] += b.y, a[2] += b.z, a[3] += b.w;
            if (p.residual) {
              const int m = min(m0 + i * TR * 4 + tr * 4 + r, M - 1);
              const float4 z = *reinterpret_cast<const float4*>(p.residual + int64_t(m) * p.ldr + n);
              a[0] += z.x, a[1] += z.y, a[2] += z.z, a[3] += z.w;
            }
          }
      }
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j)
          if (SPLIT == 1 || (i / 4) % 2 == RK) acc[i][j] = act(acc[i][j]);
#pragma unroll
      for (int j = 0; j < TN / 4; ++j) {
        const int n = n0 + j * TC * 4 + tc * 4;
        if (n >= N) continue;  // N % 4 == 0: a word is all in or all out
#pragma unroll
        for (int i = 0; i < TM / 4; ++i)
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            const int m = m0 + i * TR * 4 + tr * 4 + r;
            if (m >= M || (SPLIT == 2 && i % 2 != RK)) continue;
            const float* a = acc[i * 4 + r] + j * 4;
            *reinterpret_cast<float4*>(p.C + int64_t(m) * p.ldc + n) = make_float4(a[0], a[1], a[2], a[3]);
          }
      }
    }
  };
  auto finish_rank = [&](auto act) {
    if constexpr (SPLIT == 4) {
      switch (rank) {
        case 1:
          finish(act, std::integral_constant<int, 1>());
          break;
        case 2:
          finish(act, std::integral_constant<int, 2>());
          break;
        case 3:
          finish(act, std::integral_constant<int, 3>());
          break;
        default:
          finish(act, std::integral_constant<int, 0>());
          break;
      }
    } else if (SPLIT == 2 && rank == 1) {
      finish(act, std::integral_constant<int, 1>());
    } else {
      finish(act, std::integral_constant<int, 0>());
    }
  };
  switch (p.act) {
    case SgemmAct::GeluErf:
      finish_rank([](float x) { return formulas::gelu_erfc_fit_f32(x); });
      break;
    case SgemmAct::Relu:
      finish_rank([](float x) { return formulas::relu(x); });
      break;
    default:
      finish_rank([](float x) { return x; });
      break;
  }
}

// Stream-K (SPLIT = kStreamK, conv only): a grid of as many CTAs as fit on the GPU at once
// splits the whole problem's K tiles (tiles x K tiles, tile-major) into equal contiguous ranges,
// one per CTA, so the late layers' few tiles still fill every SM: ResNet-50's layer 3 at batch
// 16 has 100 tiles of 64x128, 1.5 waves of 2 per SM on 132 SMs with split-K 2 (76% of the
// slots), 24.2 K tiles per CTA here. A range covers the tail of one tile, whole tiles, then the
// head of another. The CTA holding a tile's last K tile owns it: it adds the partial sums of the
// CTAs before it that cover the rest (in their order: the same bits whatever the timing) and runs
// the epilogue. The others store theirs in p.sk_work, one slot per CTA, and raise p.sk_flags[cta].
//
// Each CTA walks its range backwards, so its one partial (the head of its last tile) is the first
// thing it computes, and an owner's wait for it is short; and a CTA waits only for CTAs of lower
// index, which never wait before their partial is out: no wait can depend on itself. The owner
// lowers the flags it consumed, so they are zero again for the next launch (cudaMemset once).
__device__ __forceinline__ unsigned ld_acquire(const unsigned* f) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(f) : "memory");
  return v;
}

// The CTA whose range [total·c/G, total·(c+1)/G) holds K tile x.
__device__ __forceinline__ int stream_k_cta(int64_t x, int64_t total, int G) {
  int c = int(x * G / total);
  while (c + 1 < G && total * (c + 1) / G <= x) ++c;
  while (c > 0 && total * c / G > x) --c;
  return c;
}

template <class P, int BM, int BN, int BK, int TM, int TN, int STAGES>
__device__ __forceinline__ void stream_k(const P& p, float* const As, float* const Bs, int tid, int tr, int tc) {
  constexpr int NT = (BM / TM) * (BN / TN), WORDS = TM * TN / 4;
  const int tiles_n = (p.N + BN - 1) / BN, KTt = (p.K + BK - 1) / BK;
  const int64_t total = int64_t(tiles_n) * ((p.M + BM - 1) / BM) * KTt;
  const int G = int(gridDim.x), cta = int(blockIdx.x);
  const int64_t beg = total * cta / G;
  float4* const work = reinterpret_cast<float4*>(p.sk_work);
  for (int64_t end = total * (cta + 1) / G; end > beg;) {
    const int tile = int((end - 1) / KTt);
    const int64_t t0 = int64_t(tile) * KTt, s0 = max(beg, t0);
    const int m0 = (tile / tiles_n) * BM, n0 = (tile % tiles_n) * BN;
    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;
    tile_mainloop<P, BM, BN, BK, TM, TN, STAGES>(p, m0, n0, int(s0 - t0), int(end - s0), acc, As, Bs, tid, tr, tc);
    if (end < t0 + KTt) {
      // Not the tile's end: the partial for its owner, word q of thread t at [q][t].
      float4* const slot = work + int64_t(cta) * WORDS * NT;
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN / 4; ++j)
          __stcg(slot + (i * (TN / 4) + j) * NT + tid,
                 make_float4(acc[i][j * 4], acc[i][j * 4 + 1], acc[i][j * 4 + 2], acc[i][j * 4 + 3]));
      __syncthreads();
      if (tid == 0) {
        __threadfence();
        atomicExch(p.sk_flags + cta, 1u);
      }
    } else {
      if (s0 > t0) {
        // All the flags first, then the slots' loads with no barrier between them.
        const int first = stream_k_cta(t0, total, G);
        if (tid == 0)
          for (int c = first; c < cta; ++c)
            while (ld_acquire(p.sk_flags + c) == 0) {
            }
        __syncthreads();
        for (int c = first; c < cta; ++c) {
          const float4* const slot = work + int64_t(c) * WORDS * NT;
#pragma unroll
          for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN / 4; ++j) {
              const float4 v = __ldcg(slot + (i * (TN / 4) + j) * NT + tid);
              acc[i][j * 4] += v.x, acc[i][j * 4 + 1] += v.y, acc[i][j * 4 + 2] += v.z, acc[i][j * 4 + 3] += v.w;
            }
        }
        __syncthreads();  // every thread has read the slots before their flags drop
        if (tid == 0)
          for (int c = first; c < cta; ++c) p.sk_flags[c] = 0;
      }
      finish_tile<P, BM, BN, TM, TN, 1>(p, acc, m0, n0, tr, tc, 0);
    }
    end = s0;
    __syncthreads();  // the last fragments are read before the next tile's copies land
  }
}

// A conv's residual tile staged in shared memory, after the ring: cp.async copies issued once the
// ring's first tiles are in flight, so the epilogue's reads of it no longer wait on DRAM after the
// main loop. ResNet-50's layer-1 residual 1x1 convs (K = 64: four K tiles) spent their time in
// that wait, well below DRAM bandwidth with the FMA pipe idle in the epilogue (ncu). Staged, the
// tuner timed the 64x128 pointwise tile faster on layers 1 and 2 (slower on layer 3, where it is
// not picked). Only where the tile fits beside the ring at the configuration's CTAs per SM (not the
// 128x128 tile at 2), and for the plain form (SPLIT 1), where one CTA finishes the whole tile.
template <class P, int BM, int BN, int BK, int STAGES, int MIN_BLOCKS, int SPLIT>
constexpr int residual_smem_bytes() {
  constexpr bool CONV =
      std::is_same_v<P, ConvPointwiseArgs> || std::is_same_v<P, ConvTapArgs> || std::is_same_v<P, ConvIgemmArgs>;
  constexpr int ring = STAGES * (BK * (BM + 4) + BK * BN) * int(sizeof(float)), tile = BM * BN * int(sizeof(float));
  return CONV && SPLIT == 1 && MIN_BLOCKS * (ring + tile + 1024) <= 228 * 1024 ? tile : 0;
}

// The copies: row r of the tile is output channel m0 + r (past M: the last), word w its columns
// n0 + 4w.. (past N: the last whole word; p.vec: four columns share an image and 16 bytes).
template <int BM, int BN, int NT>
__device__ __forceinline__ void residual_to_smem(const ConvIgemmArgs& p, float* rs, int m0, int n0, int tid) {
  const int pq = p.P * p.Q;
#pragma unroll 4
  for (int w = tid; w < BM * BN / 4; w += NT) {
    const int row = w / (BN / 4), cw = (w % (BN / 4)) * 4;
    const int m = min(m0 + row, p.M - 1), col = min(n0 + cw, p.N - 4), img = col / pq;
    cp_async_16(rs + row * BN + cw, p.residual + (img * p.M + m) * pq + (col - img * pq), true, true);
  }
  cp_async_commit();
}

// SPLIT = 2: a cluster of two CTAs along grid z shares one tile, each running half of the K
// tiles; they swap half their accumulators through distributed shared memory and each finishes
// half the tile's rows. Two partial sums added once: the same bits whichever CTA adds them.
//
// P is SgemmArgs (B row-major in memory) or ConvIgemmArgs (B = im2col of an NCHW input, C the
// NCHW output, the bias along rows); everything between the copies and the epilogue is shared.
template <class P, int BM, int BN, int BK, int TM, int TN, int WR, int STAGES, int MIN_BLOCKS, int SPLIT>
__global__ void __launch_bounds__((BM / TM) * (BN / TN), MIN_BLOCKS) sgemm_tiled_kernel(const P p) {
  constexpr bool PW = std::is_same_v<P, ConvPointwiseArgs>;  // a 1x1 conv: B rows are X's channel planes
  constexpr bool TAP = std::is_same_v<P, ConvTapArgs>;       // K in (r, s, c) order: one tap per slice
  constexpr bool CONV = PW || TAP || std::is_same_v<P, ConvIgemmArgs>;
  constexpr bool IM2COL = CONV && !PW;
  constexpr int TR = BM / TM, TC = BN / TN, NT = TR * TC;  // thread grid
  constexpr int WC = 32 / WR;                              // a warp is WR x WC threads
  constexpr int AP = BM + 4;                               // padded k-row of the A tile
  constexpr int A_STAGE = BK * AP, B_STAGE = BK * BN;
  static_assert(TM % 4 == 0 && TN % 4 == 0 && BM % TM == 0 && BN % TN == 0, "4x4 pieces");
  static_assert(WR * WC == 32 && TR % WR == 0 && TC % WC == 0, "warps tile the thread grid");
  static_assert(NT % BK == 0, "each thread copies one k column of A");
  static_assert(BK % 2 == 0 && STAGES >= 2, "pipeline shape");
  static_assert(SPLIT == 1 || (SPLIT == kStreamK && CONV) || (SPLIT == kBatched && !CONV) ||
                    (SPLIT == 2 && TM % 8 == 0 && TM * TN / 2 * NT <= STAGES * (A_STAGE + B_STAGE)) ||
                    (SPLIT == 4 && CONV && TM % 4 == 0 && TM * TN / 4 * 3 * NT <= STAGES * (A_STAGE + B_STAGE)),
                "split-K swaps accumulators through the pipeline's shared memory");
  static_assert(!IM2COL || (NT % BN == 0 && BK * BN % NT == 0), "conv: each thread copies one pixel's column");

  extern __shared__ float4 smem4[];
  float* const As = reinterpret_cast<float*>(smem4);
  float* const Bs = As + STAGES * A_STAGE;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int tr = (warp / (TC / WC)) * WR + lane / WC;
  const int tc = (warp % (TC / WC)) * WC + lane % WC;

  if constexpr (SPLIT == kStreamK) {
    stream_k<P, BM, BN, BK, TM, TN, STAGES>(p, As, Bs, tid, tr, tc);
    return;
  }
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  if constexpr (SPLIT == kBatched) {
    P q = p;
    const int64_t z = blockIdx.z;
    q.A += z * p.batch_a, q.B += z * p.batch_b, q.C += z * p.batch_c;
    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;
    tile_mainloop<P, BM, BN, BK, TM, TN, STAGES>(q, m0, n0, 0, (q.K + BK - 1) / BK, acc, As, Bs, tid, tr, tc);
    finish_tile<P, BM, BN, TM, TN, 1>(q, acc, m0, n0, tr, tc, 0);
    return;
  }
  const int K = p.K;

  // This CTA's K tiles: [kt0, kt0 + KT).
  int kt0 = 0, KT = (K + BK - 1) / BK;
  if (SPLIT == 2) {
    const int first = (KT + 1) / 2;
    kt0 = blockIdx.z == 0 ? 0 : first;
    KT = blockIdx.z == 0 ? first : KT - first;
  } else if (SPLIT == 4) {
    const int per = (KT + 3) / 4;
    kt0 = min(KT, int(blockIdx.z) * per);
    KT = min(KT - kt0, per);
  }
  float acc[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;
  [[maybe_unused]] const float* rs = nullptr;
  if constexpr (residual_smem_bytes<P, BM, BN, BK, STAGES, MIN_BLOCKS, SPLIT>() > 0) {
    float* const tile = Bs + STAGES * B_STAGE;
    const bool staged = p.residual && p.vec;
    tile_mainloop<P, BM, BN, BK, TM, TN, STAGES>(p, m0, n0, kt0, KT, acc, As, Bs, tid, tr, tc, [&] {
      if (staged) residual_to_smem<BM, BN, NT>(p, tile, m0, n0, tid);
    });
    if (staged) {
      rs = tile + (tr * 4) * BN + tc * 4;
      __syncthreads();  // every thread's copies landed (the main loop waited for all its own)
    }
  } else {
    tile_mainloop<P, BM, BN, BK, TM, TN, STAGES>(p, m0, n0, kt0, KT, acc, As, Bs, tid, tr, tc);
  }

  // Split-K: row piece i (rows i*TR*4 + tr*4 + 0..3) is finished by cluster rank i % 2. Each CTA
  // stores the pieces the other finishes into the other's shared memory, 16-byte word q of
  // thread t at [q][t] (conflict-free), then adds what it received.
  [[maybe_unused]] const int rank = SPLIT > 1 ? int(blockIdx.z) : 0;
  if (SPLIT == 2) {
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();  // both CTAs are done with their pipelines' shared memory
    float4* const peer = reinterpret_cast<float4*>(cluster.map_shared_rank(As, rank ^ 1));
#pragma unroll
    for (int i = 0; i < TM / 4; ++i)
#pragma unroll
      for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int j = 0; j < TN / 4; ++j) {
          const int q = ((i / 2) * 4 + r) * (TN / 4) + j;
          const float* a = acc[i * 4 + r] + j * 4;
          if (i % 2 != rank) peer[q * NT + tid] = make_float4(a[0], a[1], a[2], a[3]);
        }
    cluster.sync();  // the peer's words have landed here
    const float4* const mine = reinterpret_cast<const float4*>(As);
#pragma unroll
    for (int i = 0; i < TM / 4; ++i)
#pragma unroll
      for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int j = 0; j < TN / 4; ++j) {
          const int q = ((i / 2) * 4 + r) * (TN / 4) + j;
          if (i % 2 != rank) continue;
          const float4 v = mine[q * NT + tid];
          float* a = acc[i * 4 + r] + j * 4;
          a[0] += v.x, a[1] += v.y, a[2] += v.z, a[3] += v.w;
        }
  }
  // Split-K 4: row i of every thread's block is finished by rank i % 4. Sender s (1..3 ranks
  // after the owner) stores its words for the owner's rows into the owner's slot s - 1; the owner
  // adds slots 0, 1, 2 in that order: the same bits whatever the timing.
  if (SPLIT == 4) {
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    constexpr int WORDS = (TM / 4) * (TN / 4);  // per thread, per owner
    cluster.sync();
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const int owner = i % 4;
      if (owner == rank) continue;
      float4* const dst = reinterpret_cast<float4*>(cluster.map_shared_rank(As, owner));
      const int slot = (rank - owner + 3) % 4;  // 0..2
#pragma unroll
      for (int j = 0; j < TN / 4; ++j)
        dst[((slot * WORDS) + (i / 4) * (TN / 4) + j) * NT + tid] =
            make_float4(acc[i][j * 4], acc[i][j * 4 + 1], acc[i][j * 4 + 2], acc[i][j * 4 + 3]);
    }
    cluster.sync();
    const float4* const mine = reinterpret_cast<const float4*>(As);
#pragma unroll
    for (int slot = 0; slot < 3; ++slot)
#pragma unroll
      for (int i = 0; i < TM; ++i) {
        if (i % 4 != rank) continue;
#pragma unroll
        for (int j = 0; j < TN / 4; ++j) {
          const float4 v = mine[((slot * WORDS) + (i / 4) * (TN / 4) + j) * NT + tid];
          acc[i][j * 4] += v.x, acc[i][j * 4 + 1] += v.y, acc[i][j * 4 + 2] += v.z, acc[i][j * 4 + 3] += v.w;
        }
      }
  }

  finish_tile<P, BM, BN, TM, TN, SPLIT, (residual_smem_bytes<P, BM, BN, BK, STAGES, MIN_BLOCKS, SPLIT>() > 0)>(
      p, acc, m0, n0, tr, tc, rank, rs);
}

/// The grid of a stream-K configuration: as many CTAs as are resident at once on the device
/// (every owner's wait is then on a running CTA); 0 when that cannot be found.
template <class P, int BM, int BN, int BK, int TM, int TN, int WR, int STAGES, int MIN_BLOCKS>
int stream_k_ctas() {
  static const int ctas = [] {
    constexpr int threads = (BM / TM) * (BN / TN);
    constexpr int smem = STAGES * (BK * (BM + 4) + BK * BN) * int(sizeof(float));
    auto* kernel = sgemm_tiled_kernel<P, BM, BN, BK, TM, TN, WR, STAGES, MIN_BLOCKS, kStreamK>;
    int dev = 0, sms = 0, per_sm = 0;
    if (smem > 48 * 1024 &&
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) != cudaSuccess)
      return 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem) != cudaSuccess)
      return 0;
    return sms * per_sm;
  }();
  return ctas;
}

/// Launches one tiled configuration on a grid of (N tiles, M tiles, SPLIT or the batch); false
/// when the shared memory cannot be raised or the cluster launch fails.
template <class P, int BM, int BN, int BK, int TM, int TN, int WR, int STAGES, int MIN_BLOCKS, int SPLIT>
bool launch_tiled_kernel(const P& a, cudaStream_t s) {
  if ((a.M + BM - 1) / BM > 65535) return false;
  constexpr int threads = (BM / TM) * (BN / TN);
  constexpr int res = residual_smem_bytes<P, BM, BN, BK, STAGES, MIN_BLOCKS, SPLIT>();
  constexpr int smem = STAGES * (BK * (BM + 4) + BK * BN) * int(sizeof(float)) + res;
  auto* kernel = sgemm_tiled_kernel<P, BM, BN, BK, TM, TN, WR, STAGES, MIN_BLOCKS, SPLIT>;
  if (smem > 48 * 1024) {
    // Once per process (the attribute is per function; fusec uses one device).
    static const cudaError_t raised = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (raised != cudaSuccess) return false;
  }
  dim3 grid((a.N + BN - 1) / BN, (a.M + BM - 1) / BM, SPLIT > 1 ? SPLIT : 1);
  if constexpr (SPLIT == kBatched) {
    if (a.batch < 1 || a.batch > 65535) return false;
    grid.z = unsigned(a.batch);
  }
  if constexpr (SPLIT == kStreamK) {
    const int ctas = stream_k_ctas<P, BM, BN, BK, TM, TN, WR, STAGES, MIN_BLOCKS>();
    const int64_t total = int64_t((a.N + BN - 1) / BN) * ((a.M + BM - 1) / BM) * ((a.K + BK - 1) / BK);
    if (ctas < 1 || !a.sk_work || !a.sk_flags) return false;
    grid = dim3(unsigned(std::min<int64_t>(ctas, total)));
  }
  if constexpr (SPLIT <= 1) {
    // The residual's room only where it is staged: elsewhere it would cost occupancy.
    int bytes = smem;
    if constexpr (res > 0) bytes -= a.residual && a.vec ? 0 : res;
    kernel<<<grid, threads, bytes, s>>>(a);
    return true;
  } else {
    cudaLaunchAttribute cluster;
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim.x = 1, cluster.val.clusterDim.y = 1, cluster.val.clusterDim.z = SPLIT;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid, cfg.blockDim = dim3(threads), cfg.dynamicSmemBytes = smem, cfg.stream = s;
    cfg.attrs = &cluster, cfg.numAttrs = 1;
    return cudaLaunchKernelEx(&cfg, kernel, a) == cudaSuccess;
  }
}

}  // namespace fusec::cuda::sgemm_core
