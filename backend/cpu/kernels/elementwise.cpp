// CPU kernels for elementwise arithmetic, comparison and logic.
#include <cmath>

#include "backend/cpu/kernels/common.h"

namespace fusec::cpu {

namespace {

template <typename Op>
Kernel arithmetic(Op op) {
  return [op](KernelContext& ctx) {
    if (has_half_io(ctx)) return via_float32(ctx, arithmetic(op));
    const Tensor& a = ctx.input(0);
    dispatch_numeric(a.dtype(), ctx, [&](auto tag) {
      using T = decltype(tag);
      binary_broadcast<T, T, T>(a, ctx.input(1), ctx.output(0), [&](T x, T y) { return op(x, y, ctx); });
    });
  };
}

}  // namespace

void register_elementwise_kernels(KernelRegistry& r) {
  r.add("Add", arithmetic([](auto x, auto y, const KernelContext&) { return static_cast<decltype(x)>(x + y); }));
  r.add("Sub", arithmetic([](auto x, auto y, const KernelContext&) { return static_cast<decltype(x)>(x - y); }));
  r.add("Mul", arithmetic([](auto x, auto y, const KernelContext&) { return static_cast<decltype(x)>(x * y); }));
  r.add("Div", arithmetic([](auto x, auto y, const KernelContext& ctx) {
    using T = decltype(x);
    if constexpr (std::is_integral_v<T>) {
      if (y == 0) ctx.fail("integer division by zero");
      return static_cast<T>(x / y);
    } else {
      return static_cast<T>(x / y);
    }
  }));
}

}  // namespace fusec::cpu
