// The fused-epilogue activation as a device function, for every kernel that applies a
// FusedConv/FusedMatMul `activation` in its own epilogue (epilogue.cu's pass, the depthwise conv):
// one switch over Act onto backend/formulas.h's fused-epilogue family, which the CPU reference
// (fused.cpp) also calls, so no kernel writes a formula again.
#pragma once
#include <cuda_runtime.h>

#include <type_traits>

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
template <Act A>
__device__ __forceinline__ float apply_act_as(float x, ActParams a) {
  namespace fm = formulas;
  if constexpr (A == Act::None) {
    return x;
  } else if constexpr (A == Act::Relu) {
    return fm::relu(x);
  } else if constexpr (A == Act::LeakyRelu) {
    return fm::leaky_relu(x, a.p0);
  } else if constexpr (A == Act::Clip) {
    return fm::clamp(x, a.p0, a.p1);
  } else if constexpr (A == Act::Sigmoid) {
    return fm::sigmoid_fast_f32(x);
  } else if constexpr (A == Act::Tanh) {
    return tanhf(x);
  } else if constexpr (A == Act::HardSigmoid) {
    return fm::hard_sigmoid(x, a.p0, a.p1);
  } else if constexpr (A == Act::HardSwish) {
    return fm::hard_swish(x);
  } else if constexpr (A == Act::SiLU) {
    return fm::silu_fast_f32(x);
  } else if constexpr (A == Act::Gelu) {
    return fm::gelu_logistic_fit_fast_f32(x);
  } else {
    static_assert(A == Act::GeluTanh, "every Act has a formula");
    return fm::gelu_tanh_f32(x);
  }
}

/// Calls f(std::integral_constant<Act, a.act>{}): a kernel whose thread applies the activation to
/// many outputs takes the switch once and runs apply_act_as<A> on each. Per output, the switch
/// compiled into a tree of compares and branches in front of every element (the depthwise conv's
/// tiled kernel: 9 compares an element in PTX), which in a memory-light epilogue is instructions
/// the kernel is bound by.
template <typename F>
__device__ __forceinline__ void with_act(ActParams a, F&& f) {
  using std::integral_constant;
  switch (a.act) {
    case Act::None:
      return f(integral_constant<Act, Act::None>{});
    case Act::Relu:
      return f(integral_constant<Act, Act::Relu>{});
    case Act::LeakyRelu:
      return f(integral_constant<Act, Act::LeakyRelu>{});
    case Act::Clip:
      return f(integral_constant<Act, Act::Clip>{});
    case Act::Sigmoid:
      return f(integral_constant<Act, Act::Sigmoid>{});
    case Act::Tanh:
      return f(integral_constant<Act, Act::Tanh>{});
    case Act::HardSigmoid:
      return f(integral_constant<Act, Act::HardSigmoid>{});
    case Act::HardSwish:
      return f(integral_constant<Act, Act::HardSwish>{});
    case Act::SiLU:
      return f(integral_constant<Act, Act::SiLU>{});
    case Act::Gelu:
      return f(integral_constant<Act, Act::Gelu>{});
    case Act::GeluTanh:
      return f(integral_constant<Act, Act::GeluTanh>{});
  }
}

/// One element, the activation known only at run time.
__device__ __forceinline__ float apply_act(float x, ActParams a) {
  float y = x;
  with_act(a, [&](auto k) { y = apply_act_as<decltype(k)::value>(x, a); });
  return y;
}

}  // namespace fusec::cuda
