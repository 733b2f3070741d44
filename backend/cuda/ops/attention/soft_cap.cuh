// The soft cap on attention scores (ONNX Attention's and ai.fusec's `softcap`, Gemma 2's 50):
// c·tanh(x / c), taken on the scaled score before the mask. tanh.approx's relative error (2^-11)
// times a cap of 50 would move a score by 0.02, a 2% change in its probability; written as
// c − 2c / (e^(2x/c) + 1) with ex2.approx (2^-22) and a fast division, it stays within float
// rounding of the score.
#pragma once
#include <cuda_runtime.h>

namespace fusec::cuda {

__device__ __forceinline__ float soft_cap(float x, float cap) {
  constexpr float kTwoLog2e = 2.8853900817779268f;  // 2·log2(e)
  float e;
  // The exponent is held under 2^126, where __fdividef still divides (its result is then 0).
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(e) : "f"(fminf(x * (kTwoLog2e / cap), 126.0f)));
  return cap - __fdividef(2.0f * cap, e + 1.0f);
}

}  // namespace fusec::cuda
