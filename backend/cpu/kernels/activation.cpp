// CPU kernels for activation functions. Each computes in the input's own float type (half types
// via float32), using the numerically stable form where the naive formula overflows. The
// formulas are backend/formulas.h's, which the generated CUDA kernels also run.
#include <cmath>
#include <type_traits>

#include "backend/cpu/kernels/common.h"
#include "backend/formulas.h"

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

namespace fm = formulas;

void gelu_kernel(KernelContext& ctx) {
  const bool tanh = ctx.attr_string("approximate") == "tanh";
  float_activation([tanh](const KernelContext&) {
    return [tanh](auto x) { return tanh ? fm::gelu_tanh_via_f64(x) : fm::gelu_erf_via_f64(x); };
  })(ctx);
}

void relu_kernel(KernelContext& ctx) {
  if (has_half_io(ctx)) return via_float32(ctx, relu_kernel);
  const Tensor& x = ctx.input(0);
  dispatch_numeric(x.dtype(), ctx, [&](auto tag) {
    using T = decltype(tag);
    unary_map<T, T>(x, ctx.output(0), [](T v) { return fm::relu(v); });
  });
}

void shrink_kernel(KernelContext& ctx) {
  if (has_half_io(ctx)) return via_float32(ctx, shrink_kernel);
  const Tensor& x = ctx.input(0);
  const double bias = ctx.attr_float("bias"), lambd = ctx.attr_float("lambd");
  dispatch_numeric(x.dtype(), ctx, [&](auto tag) {
    using T = decltype(tag);
    unary_map<T, T>(x, ctx.output(0), [&](T v) { return fm::shrink(v, bias, lambd); });
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
    binary_broadcast<T, T, T>(x, slope, ctx.output(0), [](T v, T s) { return v < T{0} ? static_cast<T>(v * s) : v; });
  });
}

}  // namespace

void register_activation_kernels(KernelRegistry& r) {
  r.add("Relu", relu_kernel, "", Writes::Every);  // unary_map writes each element
  r.add("LeakyRelu", float_activation([](const KernelContext& ctx) {
          const float alpha = ctx.attr_float("alpha");
          return [alpha](auto x) { return fm::leaky_relu(x, static_cast<decltype(x)>(alpha)); };
        }),
        "", Writes::Every);
  r.add("PRelu", prelu_kernel, "", Writes::Every);  // binary_broadcast; the others unary_map
  r.add("Sigmoid", float_activation(no_attrs([](auto x) { return fm::sigmoid(x); })), "", Writes::Every);
  r.add("HardSigmoid", float_activation([](const KernelContext& ctx) {
          const float alpha = ctx.attr_float("alpha"), beta = ctx.attr_float("beta");
          return [alpha, beta](auto x) {
            using T = decltype(x);
            return fm::hard_sigmoid(x, static_cast<T>(alpha), static_cast<T>(beta));
          };
        }),
        "", Writes::Every);
  r.add("Swish", float_activation([](const KernelContext& ctx) {
          const float alpha = ctx.attr_float("alpha");
          return [alpha](auto x) { return fm::swish(x, static_cast<decltype(x)>(alpha)); };
        }),
        "", Writes::Every);
  r.add("HardSwish", float_activation(no_attrs([](auto x) { return fm::hard_swish(x); })), "", Writes::Every);
  r.add("Tanh", float_activation(no_attrs([](auto x) { return std::tanh(x); })), "", Writes::Every);
  r.add("Elu", float_activation([](const KernelContext& ctx) {
          const float alpha = ctx.attr_float("alpha");
          return [alpha](auto x) { return fm::elu(x, static_cast<decltype(x)>(alpha)); };
        }),
        "", Writes::Every);
  r.add("Selu", float_activation([](const KernelContext& ctx) {
          const float alpha = ctx.attr_float("alpha"), gamma = ctx.attr_float("gamma");
          return [alpha, gamma](auto x) {
            using T = decltype(x);
            return fm::selu(x, static_cast<T>(alpha), static_cast<T>(gamma));
          };
        }),
        "", Writes::Every);
  r.add("Celu", float_activation([](const KernelContext& ctx) {
          const float alpha = ctx.attr_float("alpha");
          if (alpha == 0.0f) ctx.fail("alpha must not be 0");
          return [alpha](auto x) { return fm::celu(x, static_cast<decltype(x)>(alpha)); };
        }),
        "", Writes::Every);
  r.add("Softplus", float_activation(no_attrs([](auto x) { return fm::softplus(x); })), "", Writes::Every);
  r.add("Softsign", float_activation(no_attrs([](auto x) { return fm::softsign(x); })), "", Writes::Every);
  r.add("ThresholdedRelu", float_activation([](const KernelContext& ctx) {
          const float alpha = ctx.attr_float("alpha");
          return [alpha](auto x) { return fm::thresholded_relu(x, static_cast<decltype(x)>(alpha)); };
        }),
        "", Writes::Every);
  r.add("Shrink", shrink_kernel, "", Writes::Every);
  r.add("Mish", float_activation(no_attrs([](auto x) { return fm::mish(x); })), "", Writes::Every);
  r.add("Gelu", gelu_kernel, "", Writes::Every);
  r.add("Gelu", gelu_kernel, "ai.fusec", Writes::Every);
}

}  // namespace fusec::cpu
