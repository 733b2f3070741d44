// Scalar formulas shared by every backend, written once: the activations, GELU in each of its
// forms, NaN-aware max/min/clamp. The same text compiles as plain C++ (the CPU kernels and the
// FusedElementwise interpreter), as CUDA (epilogue.cu, norm.cu, sgemm_core.cuh) and under NVRTC:
// CMakeLists.txt embeds this file verbatim at the start of every generated elementwise kernel
// (elementwise_codegen.cpp), so the generated code calls these functions by name.
//
// Two families, because the CPU reference itself has two:
//  - operator semantics (the standalone ONNX ops of activation.cpp and elementwise.cpp, the
//    FusedElementwise opcodes, the generated kernels): templates over the compute type T (float
//    or double; integers where the op takes them), NaN kept where ONNX keeps it;
//  - fused-epilogue semantics (the `activation` of FusedConv/FusedMatMul and LayerNormGelu:
//    fused.cpp on the CPU, epilogue.cu, norm.cu and sgemm_core.cuh on the GPU): float32 only,
//    written as those kernels have always computed them (Sigmoid is the direct 1 / (1 + e^-x)).
//    Relu, LeakyRelu, Clip, HardSigmoid and HardSwish take the standalone templates: a fused
//    activation keeps a NaN where the op it replaces keeps it, so fusing never turns a NaN into a
//    number.
// Where two places compute "the same" function with different arithmetic (GELU alone has eight:
// in double or float, erf or erfc or a fitted erfc, x/√2 or x·(1/√2), two roundings of √(2/π)),
// each variant is its own named function here, with what tells it apart: this file moves no bit
// of any result. Unifying two variants is a numerics change, for
// its own commit and its own tolerance check.
//
// Include guard rather than #pragma once: NVRTC reads this text as its main file.
#ifndef FUSEC_BACKEND_FORMULAS_H
#define FUSEC_BACKEND_FORMULAS_H

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define FUSEC_HD __host__ __device__ __forceinline__
#else
#define FUSEC_HD inline
#endif

#ifndef __CUDACC_RTC__  // NVRTC has the math functions built in, and no standard headers
#include <algorithm>
#include <cmath>
#endif

namespace fusec {
namespace formulas {

// ---- math of float or double ----
// exp(x) etc. for T = float call the C library's expf (on the host what std::exp(float) calls,
// on the device CUDA's expf), for T = double its exp: one name for templates over T, which the
// generated kernels' unary ops (fm::sqrt, fm::sin, ...) call too.
#define FUSEC_FORMULAS_MATH1(name)                      \
  FUSEC_HD float name(float x) { return ::name##f(x); } \
  FUSEC_HD double name(double x) { return ::name(x); }
FUSEC_FORMULAS_MATH1(exp)
FUSEC_FORMULAS_MATH1(log) FUSEC_FORMULAS_MATH1(sqrt) FUSEC_FORMULAS_MATH1(floor) FUSEC_FORMULAS_MATH1(ceil)
    FUSEC_FORMULAS_MATH1(rint) FUSEC_FORMULAS_MATH1(erf) FUSEC_FORMULAS_MATH1(erfc) FUSEC_FORMULAS_MATH1(sin)
        FUSEC_FORMULAS_MATH1(cos) FUSEC_FORMULAS_MATH1(tan) FUSEC_FORMULAS_MATH1(asin) FUSEC_FORMULAS_MATH1(acos)
            FUSEC_FORMULAS_MATH1(atan) FUSEC_FORMULAS_MATH1(sinh) FUSEC_FORMULAS_MATH1(cosh) FUSEC_FORMULAS_MATH1(asinh)
                FUSEC_FORMULAS_MATH1(acosh) FUSEC_FORMULAS_MATH1(atanh) FUSEC_FORMULAS_MATH1(tanh)
                    FUSEC_FORMULAS_MATH1(expm1) FUSEC_FORMULAS_MATH1(log1p) FUSEC_FORMULAS_MATH1(fabs)
#undef FUSEC_FORMULAS_MATH1

    /// 1 / x rounded to nearest: CUDA's __frcp_rn on the device (IEEE division gives the same value).
    FUSEC_HD float rcp_rn(float x) {
#ifdef __CUDA_ARCH__
  return __frcp_rn(x);
#else
  return 1.0f / x;
#endif
}

// Constants are literals in the functions, with the float they round to: a namespace-scope
// constant would become a __device__ variable under NVRTC's -default-device, one more global in
// every generated module.

// ---- operator semantics (activation.cpp, elementwise.cpp, FusedElementwise, generated kernels) ----

/// ONNX Max/Min of two values: NaN if either is NaN.
template <typename T>
FUSEC_HD T max_nan(T x, T y) {
  return (x >= y || x != x) ? x : y;
}
template <typename T>
FUSEC_HD T min_nan(T x, T y) {
  return (x <= y || x != x) ? x : y;
}
/// max then min (ONNX Clip: with lo > hi every value becomes hi); NaN stays NaN. Also the fused
/// epilogues' Clip: std::min(std::max(x, lo), hi) makes the same comparisons.
template <typename T>
FUSEC_HD T clamp(T x, T lo, T hi) {
  x = x < lo ? lo : x;
  return x > hi ? hi : x;
}
/// NaN stays NaN.
template <typename T>
FUSEC_HD T relu(T x) {
  return x < T(0) ? T(0) : x;
}
template <typename T>
FUSEC_HD T leaky_relu(T x, T alpha) {
  return x < T(0) ? alpha * x : x;
}
/// Never exponentiates a positive number, so it cannot overflow.
template <typename T>
FUSEC_HD T sigmoid(T x) {
  if (x >= T(0)) return T(1) / (T(1) + exp(-x));
  T e = exp(x);
  return e / (T(1) + e);
}
/// Swish (opset 24): x * sigmoid(alpha * x); alpha 1 is SiLU.
template <typename T>
FUSEC_HD T swish(T x, T alpha) {
  return x * sigmoid(alpha * x);
}
/// log(1 + e^x) = max(x, 0) + log1p(e^-|x|).
template <typename T>
FUSEC_HD T softplus(T x) {
  return (x > T(0) ? x : T(0)) + log1p(exp(-fabs(x)));
}
template <typename T>
FUSEC_HD T hard_sigmoid(T x, T alpha, T beta) {
  return clamp(alpha * x + beta, T(0), T(1));
}
/// x · HardSigmoid(x) with alpha = 1/6 (a division by 6), beta = 0.5.
template <typename T>
FUSEC_HD T hard_swish(T x) {
  return x * clamp(x / T(6) + T(0.5), T(0), T(1));
}
template <typename T>
FUSEC_HD T elu(T x, T alpha) {
  return x < T(0) ? alpha * expm1(x) : x;
}
template <typename T>
FUSEC_HD T selu(T x, T alpha, T gamma) {
  return gamma * (x > T(0) ? x : alpha * expm1(x));
}
/// alpha != 0 (the callers refuse 0).
template <typename T>
FUSEC_HD T celu(T x, T alpha) {
  return x > T(0) ? x : alpha * expm1(x / alpha);
}
template <typename T>
FUSEC_HD T softsign(T x) {
  return x / (T(1) + fabs(x));
}
template <typename T>
FUSEC_HD T thresholded_relu(T x, T alpha) {
  return x > alpha ? x : T(0);
}
template <typename T>
FUSEC_HD T mish(T x) {
  return x * tanh(softplus(x));
}
/// Any numeric T: compared and shifted in double, rounded once to T.
template <typename T>
FUSEC_HD T shrink(T x, double bias, double lambd) {
  const double d = static_cast<double>(x);
  if (d < -lambd) return static_cast<T>(d + bias);
  if (d > lambd) return static_cast<T>(d - bias);
  return T(0);
}
/// GELU, 0.5·x·(1 + erf(x/√2)), in double and rounded once to T: the CPU's Gelu (float and
/// double), the FusedElementwise `gelu` opcode on the CPU, and generated kernels on double data.
template <typename T>
FUSEC_HD T gelu_erf_via_f64(T x) {
  const double v = static_cast<double>(x);
  return static_cast<T>(0.5 * v * (1.0 + erf(v * 0.70710678118654752440)));
}
/// GELU's tanh form, 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), in double, rounded once to T.
template <typename T>
FUSEC_HD T gelu_tanh_via_f64(T x) {
  const double v = static_cast<double>(x), k = 0.79788456080286535588;  // √(2/π)
  return static_cast<T>(0.5 * v * (1.0 + tanh(k * (v + 0.044715 * v * v * v))));
}
/// GELU in float as generated kernels compute it: erfc keeps the negative tail accurate (1 +
/// erf(x) would cancel), within 1e-5 of gelu_erf_via_f64.
FUSEC_HD float gelu_erfc_f32(float x) { return 0.5f * x * erfc(x * -0.707106781186547524f); }  // -1/√2: 0xbf3504f3

// ---- both families ----

/// GELU's tanh form in float, with k = √(2/π) as the caller rounds it: by default the nearest
/// float, 0x3f4c422a (generated kernels, epilogue.cu, norm.cu); fused.cpp passes its own
/// std::sqrt(2.0f / (float)M_PI), one unit below (0x3f4c4229).
FUSEC_HD float gelu_tanh_f32(float x, float k = 0.797884560802865356f) {
  return 0.5f * x * (1.0f + tanh(k * (x + 0.044715f * x * x * x)));
}

// ---- fused-epilogue semantics (fused.cpp, epilogue.cu, norm.cu, sgemm_core.cuh), float32 ----

/// 1 / (1 + e^-x), direct: e^-x overflows to inf for x < -88, giving 0.
FUSEC_HD float sigmoid_direct(float x) { return 1.0f / (1.0f + exp(-x)); }
FUSEC_HD float silu(float x) { return x * (1.0f / (1.0f + exp(-x))); }
/// sigmoid_direct with, on the device, the hardware's exponential and reciprocal (ex2.approx and
/// rcp.approx, flushing denormals: within a few units in the last place). expf's range reduction
/// and the IEEE division were most of the instructions of the pass that applies SiLU after a
/// cuDNN conv (EfficientNet's), which ran at half the copy peak; generated elementwise kernels take
/// it too. 1 + e >= 1 has no denormal to flush; e = inf (x < -88) gives 0, where the exact result
/// is denormal, and NaN stays NaN. The rounding of x·log2(e) bounds the relative error in the tail
/// (about 4e-6 near x = -87, less as |x| shrinks). The host computes it exactly.
FUSEC_HD float sigmoid_fast_f32(float x) {
#ifdef __CUDA_ARCH__
  float e, r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(x * -1.44269504088896341f));
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(1.0f + e));
  return r;
#else
  return sigmoid_direct(x);
#endif
}
FUSEC_HD float silu_fast_f32(float x) { return x * sigmoid_fast_f32(x); }
/// GELU, 0.5·x·(1 + erf(x / √2)), in float, dividing by √2 (0x3fb504f3, which std::sqrt(2.0f)
/// also gives): fused.cpp and norm.cu.
FUSEC_HD float gelu_erf_f32(float x) { return 0.5f * x * (1.0f + erf(x / 1.41421356237f)); }
/// GELU as x - 0.5·x·erfc(z) (x >= 0) or 0.5·x·erfc(z) (x < 0), z = |x|/√2, with erfc from a
/// Chebyshev fit of relative error below 1.2e-7 (Numerical Recipes' erfcc): no branch, where
/// erff's two paths both run in a warp with real data: in the model erff made BERT-base's FFN1
/// epilogue a visible share of the kernel, which it was not on uniform scratch data. Within
/// 1e-7·max(1, |x|) of the exact GELU over [-12, 12], and accurate relative to the result in the
/// negative tail, where 1 + erff cancels.
FUSEC_HD float gelu_erfc_fit(float x) {
  const float z = fabs(x) * 0.70710678118654752f;
  const float d = ::fmaf(0.5f, z, 1.0f);
  const float t = rcp_rn(d);
  float p = 0.17087277f;
  p = ::fmaf(p, t, -0.82215223f);
  p = ::fmaf(p, t, 1.48851587f);
  p = ::fmaf(p, t, -1.13520398f);
  p = ::fmaf(p, t, 0.27886807f);
  p = ::fmaf(p, t, -0.18628806f);
  p = ::fmaf(p, t, 0.09678418f);
  p = ::fmaf(p, t, 0.37409196f);
  p = ::fmaf(p, t, 1.00002368f);
  p = ::fmaf(p, t, -1.26551223f);
  const float e = exp(::fmaf(-z, z, p));
  const float erfc_z = t * e;
  const float h = 0.5f * x;
  return x >= 0.0f ? ::fmaf(-h, erfc_z, x) : h * erfc_z;
}
/// GELU as x·Φ(x) with Φ(x) = σ(g(x)), g(x) = ln(Φ(x) / Φ(-x)) odd: a least-squares fit of g on
/// [0, 13.25] as a·P(a²), P of degree 6, weighted by how much an error in g moves the result
/// (Φ(x)Φ(-x)·max(1, x)), so the fit is close where GELU needs it and merely large past 5. For
/// a = min(|x|, 13.25), e = exp(-g(a)) = Φ(-a) / Φ(a) ∈ (0, 1]: Φ(a) = 1 / (1 + e) and
/// Φ(-a) = e / (1 + e), so neither tail cancels. Within 1.4e-7·max(1, |x|) of the exact GELU
/// with exact steps (`Formulas.*` checks [-40, 40] and every fp16 value); GELU(+inf) = inf, -inf gives
/// NaN as 0.5·x·(1 + erf(x/√2)) does. Against gelu_erfc_fit it trades the nine-term Chebyshev
/// series in 1 / (1 + z/2) for six terms in a², the reciprocal moving to the end: the pass after
/// cuBLASLt and the wgmma GEMM's epilogue issue its instructions for every output, and that issue
/// was their bound. `Fast` takes the exponential and the reciprocal from the hardware's
/// approximations on the device (ex2.approx and rcp.approx, flushing denormals, which spares each a
/// range fix-up: a few units in the last place more); the host computes them exactly either way.
template <bool Fast>
FUSEC_HD float gelu_logistic_fit(float x) {
  const float a = fminf(fabsf(x), 13.25f);
  const float s = a * a;
  // -g(a)·log2(e) / a as a polynomial in a²
  float p = -5.220722520959953e-09f;
  p = ::fmaf(p, s, 3.8562350823667657e-07f);
  p = ::fmaf(p, s, -1.1463984264992177e-05f);
  p = ::fmaf(p, s, 0.0001594984350958839f);
  p = ::fmaf(p, s, 9.50872854446061e-05f);
  p = ::fmaf(p, s, -0.10483750700950623f);
  p = ::fmaf(p, s, -2.3022079467773438f);
  const float y = p * a;  // <= 0
#ifdef __CUDA_ARCH__
  float e, r;
  if (Fast) {  // e <= 1 and 1 + e in [1, 2]: a flushed denormal is far inside the error bound
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(y));
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(1.0f + e));
  } else {
    e = exp2f(y);
    r = rcp_rn(1.0f + e);
  }
#else
  const float e = std::exp2(y);
  const float r = rcp_rn(1.0f + e);
#endif
  return x * (x >= 0.0f ? r : e * r);
}
/// epilogue_act.cuh's: the pass after a cuBLASLt GEMM or a cuDNN conv, the wgmma GEMM's and the
/// depthwise conv's epilogues.
FUSEC_HD float gelu_logistic_fit_fast_f32(float x) { return gelu_logistic_fit<true>(x); }
/// sgemm_core.cuh's GEMM epilogue.
FUSEC_HD float gelu_erfc_fit_f32(float x) { return gelu_erfc_fit(x); }

}  // namespace formulas
}  // namespace fusec

#endif  // FUSEC_BACKEND_FORMULAS_H
