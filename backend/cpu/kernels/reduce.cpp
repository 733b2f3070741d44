// CPU kernels for Reduce* and ArgMax/ArgMin.
//
// Float reductions accumulate in double and round once (closer to numpy's pairwise float32 sums
// than a float accumulator, and deterministic regardless of threading); integer reductions
// accumulate in int64 and cast back. Max/Min propagate NaN like numpy.
#include <cmath>
#include <limits>
#include <set>
#include <type_traits>

#include "backend/axis_layout.h"
#include "backend/cpu/kernels/common.h"
#include "backend/cpu/kernels/reduce_util.h"

namespace fusec::cpu {

namespace {

enum class Red { Sum, Mean, Max, Min, Prod, L1, L2, LogSum, LogSumExp, SumSquare };

/// Which axes a Reduce* node reduces at run time (the schema already validated them). Empty axes
/// reduce everything unless noop_with_empty_axes, which reduces nothing.
std::vector<bool> reduce_mask(const KernelContext& ctx, size_t rank) {
  std::vector<int64_t> axes;
  bool noop = false;
  if (ctx.schema().find_attr("axes")) {
    if (ctx.has_attr("axes")) axes = ctx.attr_ints("axes");
  } else {
    noop = ctx.attr_int("noop_with_empty_axes") != 0;
    if (ctx.has_input(1)) axes = ctx.input(1).to_int64_vector();
  }
  std::vector<bool> mask(rank, axes.empty() && !noop);
  for (int64_t a : axes) mask[static_cast<size_t>(normalize_axis(a, static_cast<int64_t>(rank), ctx))] = true;
  return mask;
}

/// Accumulated value converted to the output type; out-of-range floats saturate for integer
/// outputs instead of being undefined behaviour.
template <typename T, typename A>
T cast_out(A v) {
  if constexpr (std::is_floating_point_v<T> || !std::is_floating_point_v<A>) {
    return static_cast<T>(v);
  } else {
    if (std::isnan(v)) return T{0};
    if (v <= static_cast<A>(std::numeric_limits<T>::lowest())) return std::numeric_limits<T>::lowest();
    if (v >= static_cast<A>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
    return static_cast<T>(v);
  }
}

/// a + b, a * b and -a that wrap on integer overflow (two's complement, like onnxruntime's int
/// loops in practice) instead of being undefined behaviour.
template <typename A>
A wrap_add(A a, A b) {
  if constexpr (std::is_integral_v<A>)
    return static_cast<A>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
  else
    return a + b;
}
template <typename A>
A wrap_mul(A a, A b) {
  if constexpr (std::is_integral_v<A>)
    return static_cast<A>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
  else
    return a * b;
}
template <typename A>
A wrap_abs(A a) {
  if constexpr (std::is_integral_v<A>)
    return a < 0 ? static_cast<A>(0 - static_cast<uint64_t>(a)) : a;
  else
    return std::fabs(a);
}

template <typename T>
void run_reduce(Red kind, const ReduceLayout& L, const T* x, T* y) {
  using A = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;
  const int64_t n = L.reduced_count();
  auto ident = [](T v, int64_t) { return static_cast<A>(v); };
  auto add = [](A a, A b) { return wrap_add(a, b); };
  auto square = [](T v, int64_t) {
    A a = static_cast<A>(v);
    return wrap_mul(a, a);
  };
  auto as_is = [](A a, int64_t) { return cast_out<T>(a); };
  switch (kind) {
    case Red::Sum:
      return reduce_generic<A>(L, x, y, A{0}, ident, add, as_is);
    case Red::Mean:
      return reduce_generic<A>(L, x, y, A{0}, ident, add, [n](A a, int64_t) {
        if constexpr (std::is_floating_point_v<A>)
          return cast_out<T>(a / static_cast<A>(n));
        else
          return n == 0 ? T{0} : cast_out<T>(a / n);  // integer mean truncates, like numpy's astype
      });
    case Red::Max:
    case Red::Min: {
      const bool is_max = kind == Red::Max;
      A init;
      if constexpr (std::is_floating_point_v<T>)
        init = is_max ? -INFINITY : INFINITY;
      else
        init = static_cast<A>(is_max ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max());
      auto pick = [is_max](A a, A b) {
        if constexpr (std::is_floating_point_v<A>)
          if (std::isnan(b)) return b;  // NaN wins once seen
        return (is_max ? b > a : b < a) ? b : a;
      };
      return reduce_generic<A>(L, x, y, init, ident, pick, as_is);
    }
    case Red::Prod:
      return reduce_generic<A>(
          L, x, y, A{1}, ident, [](A a, A b) { return wrap_mul(a, b); }, as_is);
    case Red::L1:
      return reduce_generic<A>(
          L, x, y, A{0}, [](T v, int64_t) { return wrap_abs(static_cast<A>(v)); }, add, as_is);
    case Red::SumSquare:
      return reduce_generic<A>(L, x, y, A{0}, square, add, as_is);
    case Red::L2:
      return reduce_generic<A>(L, x, y, A{0}, square, add,
                               [](A a, int64_t) { return cast_out<T>(std::sqrt(static_cast<double>(a))); });
    case Red::LogSum:
      return reduce_generic<A>(L, x, y, A{0}, ident, add,
                               [](A a, int64_t) { return cast_out<T>(std::log(static_cast<double>(a))); });
    case Red::LogSumExp: {
      // log(sum(exp(x - m))) + m with m the maximum of the group, so large inputs do not overflow.
      std::vector<double> m(static_cast<size_t>(L.outputs()));
      reduce_generic<double>(
          L, x, m.data(), -INFINITY, [](T v, int64_t) { return static_cast<double>(v); },
          [](double a, double b) { return std::isnan(b) || b > a ? b : a; },
          [](double a, int64_t) { return std::isinf(a) ? 0.0 : a; });
      return reduce_generic<double>(
          L, x, y, 0.0, [&m](T v, int64_t o) { return std::exp(static_cast<double>(v) - m[o]); },
          [](double a, double b) { return a + b; },
          [&m](double a, int64_t o) { return cast_out<T>(std::log(a) + m[o]); });
    }
  }
}

Kernel reduce_kernel(Red kind) {
  return [kind](KernelContext& ctx) {
    if (has_half_io(ctx)) return via_float32(ctx, reduce_kernel(kind));
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    ReduceLayout L = make_reduce_layout(x.dims(), reduce_mask(ctx, x.rank()));
    if (L.outputs() != y.numel()) ctx.fail("output size does not match the reduction");
    if (x.dtype() == DType::Bool) {  // ReduceMax/Min from opset 20: any/all over 0/1 bytes
      if (kind != Red::Max && kind != Red::Min) ctx.fail("this reduction does not accept bool inputs");
      return run_reduce<uint8_t>(kind, L, x.data<uint8_t>(), y.data<uint8_t>());
    }
    dispatch_numeric(x.dtype(), ctx, [&](auto tag) {
      using T = decltype(tag);
      run_reduce<T>(kind, L, x.data<T>(), y.data<T>());
    });
  };
}

/// ArgMax (is_max) / ArgMin over one axis, viewing the input as [outer, n, inner]. NaN counts as
/// the extreme value (numpy returns the first NaN).
Kernel arg_kernel(bool is_max) {
  return [is_max](KernelContext& ctx) {
    if (has_half_io(ctx)) return via_float32(ctx, arg_kernel(is_max));
    const Tensor& x = ctx.input(0);
    const int64_t rank = static_cast<int64_t>(x.rank());
    const int64_t axis = normalize_axis(ctx.attr_int("axis"), rank, ctx);
    const bool last = ctx.schema().find_attr("select_last_index") && ctx.attr_int("select_last_index") != 0;
    const AxisView v = axis_view(x.dims(), axis);
    const int64_t outer = v.outer, n = v.n, inner = v.inner;
    if (n == 0 && outer * inner > 0) ctx.fail("cannot take ArgMax/ArgMin over an empty axis");
    int64_t* out = ctx.output(0).data<int64_t>();
    dispatch_numeric(x.dtype(), ctx, [&](auto tag) {
      using T = decltype(tag);
      const T* p = x.data<T>();
      // Whether v replaces the current best b.
      auto better = [is_max, last](T v, T b) {
        if constexpr (std::is_floating_point_v<T>) {
          if (std::isnan(b)) return last && std::isnan(v);
          if (std::isnan(v)) return true;
        }
        if (v == b) return last;
        return is_max ? v > b : v < b;
      };
      parallel_for(outer * inner, std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)), [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
          const int64_t o = t / inner, i = t % inner;
          const T* q = p + o * n * inner + i;
          T best = q[0];
          int64_t idx = 0;
          for (int64_t k = 1; k < n; ++k)
            if (better(q[k * inner], best)) {
              best = q[k * inner];
              idx = k;
            }
          out[t] = idx;
        }
      });
    });
  };
}

}  // namespace

void register_reduce_kernels(KernelRegistry& r) {
  // reduce_generic writes every output, an empty reduction its identity; ArgMax/ArgMin each index.
  r.add("ReduceSum", reduce_kernel(Red::Sum), "", Writes::Every);
  r.add("ReduceMean", reduce_kernel(Red::Mean), "", Writes::Every);
  r.add("ReduceMax", reduce_kernel(Red::Max), "", Writes::Every);
  r.add("ReduceMin", reduce_kernel(Red::Min), "", Writes::Every);
  r.add("ReduceProd", reduce_kernel(Red::Prod), "", Writes::Every);
  r.add("ReduceL1", reduce_kernel(Red::L1), "", Writes::Every);
  r.add("ReduceL2", reduce_kernel(Red::L2), "", Writes::Every);
  r.add("ReduceLogSum", reduce_kernel(Red::LogSum), "", Writes::Every);
  r.add("ReduceLogSumExp", reduce_kernel(Red::LogSumExp), "", Writes::Every);
  r.add("ReduceSumSquare", reduce_kernel(Red::SumSquare), "", Writes::Every);
  r.add("ArgMax", arg_kernel(true), "", Writes::Every);
  r.add("ArgMin", arg_kernel(false), "", Writes::Every);
}

}  // namespace fusec::cpu
