// CPU kernels for Constant, ConstantOfShape and Range.
#include "backend/cpu/kernels/common.h"
#include "backend/cpu/kernels/shape_util.h"

namespace fusec::cpu {

namespace {

void constant_kernel(KernelContext& ctx) {
  Tensor& out = ctx.output(0);
  auto check = [&](DType t, int64_t n) {
    if (out.dtype() != t || out.numel() != n) ctx.fail("output type does not match the value");
  };
  if (ctx.has_attr("value")) {
    const Tensor* v = ctx.attr_tensor("value");
    check(v->dtype(), v->numel());
    copy_bytes(out.raw(), v->raw(), v->nbytes());
  } else if (ctx.has_attr("value_float")) {
    check(DType::Float32, 1);
    out.data<float>()[0] = ctx.attr_float("value_float");
  } else if (ctx.has_attr("value_floats")) {
    auto v = ctx.attr_floats("value_floats");
    check(DType::Float32, static_cast<int64_t>(v.size()));
    std::copy(v.begin(), v.end(), out.data<float>());
  } else if (ctx.has_attr("value_int")) {
    check(DType::Int64, 1);
    out.data<int64_t>()[0] = ctx.attr_int("value_int");
  } else if (ctx.has_attr("value_ints")) {
    auto v = ctx.attr_ints("value_ints");
    check(DType::Int64, static_cast<int64_t>(v.size()));
    std::copy(v.begin(), v.end(), out.data<int64_t>());
  } else {
    ctx.unsupported("this value attribute is not supported");  // inference rejects these first
  }
}

void constant_of_shape_kernel(KernelContext& ctx) {
  const Tensor* v = ctx.attr_tensor("value");
  Tensor& out = ctx.output(0);
  if (v->numel() != 1 || v->dtype() != out.dtype()) ctx.fail("value must hold one element of the output type");
  fill_tensor(out, v->raw());
}

void range_kernel(KernelContext& ctx) {
  Tensor& out = ctx.output(0);
  const int64_t n = out.numel();
  dispatch_numeric(out.dtype(), ctx, [&](auto tag) {
    using T = decltype(tag);
    for (size_t i = 0; i < 3; ++i)
      if (ctx.input(i).dtype() != out.dtype() || ctx.input(i).numel() != 1)
        ctx.fail("start, limit and delta must be scalars of the output type");
    const T start = ctx.input(0).data<T>()[0];
    const T delta = ctx.input(2).data<T>()[0];
    T* y = out.data<T>();
    if constexpr (std::is_integral_v<T>) {
      // Every element lies in [start, limit), so start + i * delta fits int64, but i * delta alone
      // need not (start near INT64_MIN, limit near INT64_MAX): computed modulo 2^64, which gives
      // the exact value whenever the result fits.
      for (int64_t i = 0; i < n; ++i)
        y[i] = static_cast<T>(
            static_cast<int64_t>(static_cast<uint64_t>(static_cast<int64_t>(start)) +
                                 static_cast<uint64_t>(i) * static_cast<uint64_t>(static_cast<int64_t>(delta))));
    } else {
      // Accumulated as the spec's loop (and ONNX Runtime) does: value += delta.
      T value = start;
      for (int64_t i = 0; i < n; ++i) {
        y[i] = value;
        value = static_cast<T>(value + delta);
      }
    }
  });
}

}  // namespace

void register_generator_kernels(KernelRegistry& r) {
  // The whole value, a fill, or each of the n steps.
  r.add("Constant", constant_kernel, "", Writes::Every);
  r.add("ConstantOfShape", constant_of_shape_kernel, "", Writes::Every);
  r.add("Range", range_kernel, "", Writes::Every);
}

}  // namespace fusec::cpu
