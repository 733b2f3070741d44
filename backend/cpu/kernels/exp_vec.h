// exp for the softmax-style kernels (Softmax, LogSoftmax, Attention): their arguments are x - max <= 0.
#pragma once
#include <bit>
#include <cstdint>

namespace fusec::cpu {

/// exp(x) for x <= 0 (softmax's shifted arguments) in float, written so the compiler vectorizes
/// it: no libm call, no float->int conversion, and no float compare-and-select (which GCC will not
/// if-convert under -ftrapping-math). Cephes' range reduction x = n ln2 + r, |r| <= ln2/2, a
/// degree-6 polynomial for e^r (within 1.4 ulp), and 2^n built in the exponent bits. Arguments are
/// clamped to |x| <= 87.3 on their bit pattern; below -87.3 (e^x < FLT_MIN, down to -inf) the
/// result is exactly 0; NaN stays NaN.
///
/// Why 0 and not the clamped ~1.2e-38: a softmax scales these by 1/sum, which makes them subnormal,
/// and every multiply that then reads a subnormal (the P·V product over masked keys: BERT's mask
/// adds -10000 or finfo.min) takes a microcode assist on x86, about 40x slower. e^x is below FLT_MIN
/// there, so 0 is also the closer answer (and the exact one below -103.97).
inline float exp_vec(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  // 1 for negative x with |x| > 87.3 (-inf included, NaN not), else 0: integer compares, which
  // vectorize where a float compare-and-select would not.
  const uint32_t underflows = static_cast<uint32_t>(u > 0xc2ae999au) & static_cast<uint32_t>(u <= 0xff800000u);
  uint32_t mag = u & 0x7fffffffu;
  const uint32_t clamped = mag > 0x42ae999au ? 0x42ae999au : mag;  // 0x42ae999a = 87.3f
  mag = mag > 0x7f800000u ? mag : clamped;                         // NaN keeps its payload
  x = std::bit_cast<float>((u & 0x80000000u) | mag);
  // n = round(x / ln2) via the 1.5 * 2^23 trick: the sum's low mantissa bits hold n.
  const float shifted = x * 1.44269504088896341f + 12582912.0f;
  const float n = shifted - 12582912.0f;
  const uint32_t n_bits = std::bit_cast<uint32_t>(shifted) - std::bit_cast<uint32_t>(12582912.0f);
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  const float z = r * r;
  float y = 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * z + r + 1.0f;
  const float e = y * std::bit_cast<float>((n_bits + 127u) << 23);
  return std::bit_cast<float>(std::bit_cast<uint32_t>(e) & (underflows - 1u));  // underflows: all bits cleared
}

}  // namespace fusec::cpu
