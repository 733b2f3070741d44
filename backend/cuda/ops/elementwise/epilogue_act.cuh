// The fused-epilogue activation as a device function, for every kernel that applies a
// FusedConv/FusedMatMul `activation` in its own epilogue (epilogue.cu's pass, the depthwise conv):
// one switch over Act onto backend/formulas.h's fused-epilogue family, which the CPU reference
// (fused.cpp) also calls, so no kernel writes a formula again.
#pragma once
#include <cuda_runtime.h>

#include "backend/cuda/ops/elementwise/epilogue.cuh"
#include "backend/formulas.h"

namespace fusec::cuda {

// GELU is the branch-free logistic fit with the hardware's exponential and reciprocal
// (gelu_logistic_fit_fast_f32, within 1e-6·max(1, |x|) of the exact GELU): erff's two paths both
// ran in a warp of real activations and made the pass after an fp16 GEMM (BERT's, ViT's and
// ConvNeXt's first MLP layer) compute-bound, and the fit's instructions are what that pass and the
// wgmma GEMM's epilogue still issue most.
// Sigmoid and SiLU take the hardware's exponential and reciprocal too (sigmoid_fast_f32).
// The tanh form rounds √(2/π) to the nearest float where the CPU's is one unit below: the results
// differ in the last bits, well within tolerance.
__device__ __forceinline__ float apply_act(float x, ActParams a) {
  namespace fm = formulas;
  switch (a.act) {
    case Act::None:
      return x;
    case Act::Relu:
      return fm::relu(x);
    case Act::LeakyRelu:
      return fm::leaky_relu(x, a.p0);
    case Act::Clip:
      return fm::clamp(x, a.p0, a.p1);
    case Act::Sigmoid:
      return fm::sigmoid_fast_f32(x);
    case Act::Tanh:
      return tanhf(x);
    case Act::HardSigmoid:
      return fm::hard_sigmoid(x, a.p0, a.p1);
    case Act::HardSwish:
      return fm::hard_swish(x);
    case Act::SiLU:
      return fm::silu_fast_f32(x);
    case Act::Gelu:
      return fm::gelu_logistic_fit_fast_f32(x);
    case Act::GeluTanh:
      return fm::gelu_tanh_f32(x);
  }
  return x;
}

}  // namespace fusec::cuda
