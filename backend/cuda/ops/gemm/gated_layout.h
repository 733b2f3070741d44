// The gated product's packed weight (ai.fusec GatedMatMul, docs/ops.md): Y = act(X·Wg + bg) ·
// (X·Wv + bv), with the gate's and the value's columns interleaved in blocks, so that one GEMM
// produces both halves of each output side by side and its epilogue (or one pass after a library
// GEMM) multiplies them without a second read of either product.
#pragma once
#include <cstdint>
#include <cstring>

namespace fusec::cuda {

/// Packed columns alternate kGatedBlock gate columns and the kGatedBlock value columns of the same
/// outputs: block b holds outputs [b·64, b·64 + 64), gate first. A 128 x 128 tile of the product
/// (the ping-pong kernel's, hgemm_pingpong_sm90a.cu, and the TMA kernel's 128 x 128) is then a
/// whole block, gate and value. (Blocks of 128, for the TMA kernel's 128 x 256 tiles, ran 1-3%
/// behind the ping-pong kernel at Llama-3.2-1B's gate and up products.)
constexpr int kGatedBlock = 64;

/// The packed column count for n gated outputs: whole blocks, gate and value, zero-padded.
inline int64_t gated_packed_n(int64_t n) { return 2 * ((n + kGatedBlock - 1) / kGatedBlock) * kGatedBlock; }

/// The packed column of gate column j (value: + kGatedBlock).
inline int64_t gated_packed_col(int64_t j) { return j / kGatedBlock * 2 * kGatedBlock + j % kGatedBlock; }

/// Packs two row-major [rows, n] matrices of `size`-byte elements, the gate's and the value's
/// (GatedMatMul's weights, or its biases as one row each; a null one is zeros), into `out`,
/// [rows, gated_packed_n(n)]; padding columns are zero.
inline void pack_gated(const void* gate, const void* value, int64_t rows, int64_t n, size_t size, void* out) {
  const int64_t np = gated_packed_n(n);
  auto* dst = static_cast<uint8_t*>(out);
  std::memset(dst, 0, static_cast<size_t>(rows * np) * size);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j0 = 0; j0 < n; j0 += kGatedBlock) {
      const size_t len = static_cast<size_t>(j0 + kGatedBlock <= n ? kGatedBlock : n - j0) * size;
      const int64_t at = r * np + gated_packed_col(j0);
      for (int half = 0; half < 2; ++half) {
        const auto* src = static_cast<const uint8_t*>(half == 0 ? gate : value);
        if (src)
          std::memcpy(dst + static_cast<size_t>(at + half * kGatedBlock) * size,
                      src + static_cast<size_t>(r * n + j0) * size, len);
      }
    }
}

}  // namespace fusec::cuda
