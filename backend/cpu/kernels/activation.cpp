// CPU kernels for activation functions. Each computes in the input's own float type (half types
// via float32), using the numerically stable form where the naive formula overflows.
#include <cmath>
#include <type_traits>

#include "backend/cpu/kernels/common.h"

namespace fusec::cpu {

namespace {

/// A kernel for a float-only activation. `make(ctx)` reads the attributes once and returns the
/// per-element function (generic over float/double).
template <typename Make>
Kernel float_activation(Make make) {
  return [make](KernelContext& ctx) {
    if (has_half_io(ctx)) return via_float32(ctx, float_activation(make));
    const Tensor& x = ctx.input(0);
    auto f = make(ctx);
    dispatch_float(x.dtype(), ctx, [&](auto tag) {
      using T = decltype(tag);
      unary_map<T, T>(x, ctx.output(0), [&](T v) { return static_cast<T>(f(v)); });
    });
  };
}

/// Attributes are read once per call, not per element.
auto no_attrs = [](auto f) { return [f](const KernelContext&) { return f; }; };

/// Clamp to [0, 1]; NaN stays NaN.
template <typename T> T clamp01(T v) {
  v = v < T{0} ? T{0} : v;
  return v > T{1} ? T{1} : v;
}

template <typename T> T sigmoid(T x) {
  // Never exponentiates a positive number, so it cannot overflow.
  if (x >= 0) return T{1} / (T{1} + std::exp(-x));
  T e = std::exp(x);
  return e / (T{1} + e);
}

template <typename T> T softplus(T x) {
  // log(1 + e^x) = max(x, 0) + log1p(e^-|x|)
  return (x > 0 ? x : T{0}) + std::log1p(std::exp(-std::fabs(x)));
}

template <typename T> T gelu_exact(T x) {
  const double v = static_cast<double>(x);
  return static_cast<T>(0.5 * v * (1.0 + std::erf(v * 0.70710678118654752440)));
}

template <typename T> T gelu_tanh(T x) {
  const double v = static_cast<double>(x);
  const double k = 0.79788456080286535588;  // sqrt(2/pi)
  return static_cast<T>(0.5 * v * (1.0 + std::tanh(k * (v + 0.044715 * v * v * v))));
}

void gelu_kernel(KernelContext& ctx) {
  const bool tanh = ctx.attr_string("approximate") == "tanh";
  float_activation([tanh](const KernelContext&) {
    return [tanh](auto x) { return tanh ? gelu_tanh(x) : gelu_exact(x); };
  })(ctx);
}

void relu_kernel(KernelContext& ctx) {
  if (has_half_io(ctx)) return via_float32(ctx, relu_kernel);
  const Tensor& x = ctx.input(0);
  dispatch_numeric(x.dtype(), ctx, [&](auto tag) {
    using T = decltype(tag);
    unary_map<T, T>(x, ctx.output(0), [](T v) { return v < T{0} ? T{0} : v; });  // NaN stays NaN
  });
}

void shrink_kernel(KernelContext& ctx) {
  if (has_half_io(ctx)) return via_float32(ctx, shrink_kernel);
  const Tensor& x = ctx.input(0);
  const double bias = ctx.attr_float("bias"), lambd = ctx.attr_float("lambd");
  dispatch_numeric(x.dtype(), ctx, [&](auto tag) {
    using T = decltype(tag);
    unary_map<T, T>(x, ctx.output(0), [&](T v) {
      const double d = static_cast<double>(v);
      if (d < -lambd) return static_cast<T>(d + bias);
      if (d > lambd) return static_cast<T>(d - bias);
      return T{0};
    });
  });
}

void prelu_kernel(KernelContext& ctx) {
  if (has_half_io(ctx)) return via_float32(ctx, prelu_kernel);
  const Tensor& x = ctx.input(0);
  Tensor slope = ctx.input(1);
  // Before opset 7 a 1-D slope of X's channel count is per channel (axis 1); see the schema.
  if (ctx.opset() < 7 && slope.rank() == 1 && x.rank() >= 2 && slope.dim(0) == x.dim(1) && slope.dim(0) != 1) {
    std::vector<int64_t> d(x.rank() - 1, 1);
    d[0] = slope.dim(0);
    slope = slope.reshaped(d);
  }
  dispatch_numeric(x.dtype(), ctx, [&](auto tag) {
    using T = decltype(tag);
    binary_broadcast<T, T, T>(x, slope, ctx.output(0), [](T v, T s) {
      return v < T{0} ? static_cast<T>(v * s) : v;
    });
  });
}

}  // namespace

void register_activation_kernels(KernelRegistry& r) {
  r.add("Relu", relu_kernel, "", Writes::Every);  // unary_map writes each element
  r.add("LeakyRelu", float_activation([](const KernelContext& ctx) {
    const float alpha = ctx.attr_float("alpha");
    return [alpha](auto x) { using T = decltype(x); return x < T{0} ? static_cast<T>(alpha) * x : x; };
  }));
  r.add("PRelu", prelu_kernel);
  r.add("Sigmoid", float_activation(no_attrs([](auto x) { return sigmoid(x); })), "", Writes::Every);
  r.add("HardSigmoid", float_activation([](const KernelContext& ctx) {
    const float alpha = ctx.attr_float("alpha"), beta = ctx.attr_float("beta");
    return [alpha, beta](auto x) {
      using T = decltype(x);
      T v = static_cast<T>(alpha) * x + static_cast<T>(beta);
      return clamp01(v);
    };
  }));
  // HardSwish = x * HardSigmoid(x) with alpha = 1/6, beta = 0.5.
  r.add("HardSwish", float_activation(no_attrs([](auto x) {
    using T = decltype(x);
    T v = x / T{6} + T{0.5};
    return x * clamp01(v);
  })));
  r.add("Tanh", float_activation(no_attrs([](auto x) { return std::tanh(x); })), "", Writes::Every);
  r.add("Elu", float_activation([](const KernelContext& ctx) {
    const float alpha = ctx.attr_float("alpha");
    return [alpha](auto x) { using T = decltype(x); return x < T{0} ? static_cast<T>(alpha) * std::expm1(x) : x; };
  }));
  r.add("Selu", float_activation([](const KernelContext& ctx) {
    const float alpha = ctx.attr_float("alpha"), gamma = ctx.attr_float("gamma");
    return [alpha, gamma](auto x) {
      using T = decltype(x);
      return static_cast<T>(gamma) * (x > T{0} ? x : static_cast<T>(alpha) * std::expm1(x));
    };
  }));
  r.add("Celu", float_activation([](const KernelContext& ctx) {
    const float alpha = ctx.attr_float("alpha");
    if (alpha == 0.0f) ctx.fail("alpha must not be 0");
    return [alpha](auto x) {
      using T = decltype(x);
      const T a = static_cast<T>(alpha);
      return x > T{0} ? x : a * std::expm1(x / a);
    };
  }));
  r.add("Softplus", float_activation(no_attrs([](auto x) { return softplus(x); })));
  r.add("Softsign", float_activation(no_attrs([](auto x) { return x / (decltype(x){1} + std::fabs(x)); })));
  r.add("ThresholdedRelu", float_activation([](const KernelContext& ctx) {
    const float alpha = ctx.attr_float("alpha");
    return [alpha](auto x) { using T = decltype(x); return x > static_cast<T>(alpha) ? x : T{0}; };
  }));
  r.add("Shrink", shrink_kernel);
  r.add("Mish", float_activation(no_attrs([](auto x) { return x * std::tanh(softplus(x)); })));
  r.add("Gelu", gelu_kernel, "", Writes::Every);
  r.add("Gelu", gelu_kernel, "ai.fusec", Writes::Every);
}

}  // namespace fusec::cpu
