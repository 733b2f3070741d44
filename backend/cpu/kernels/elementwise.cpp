// CPU kernels for elementwise arithmetic, math, comparison, logic and conversion.
// Integer arithmetic wraps (two's complement) like numpy instead of hitting C++ signed-overflow
// UB; integer division/modulo by zero is a BadInput error. Half types compute in float32.
#include <cmath>
#include <limits>
#include <type_traits>

#include "backend/cpu/kernels/common.h"
#include "backend/formulas.h"
#include "ir/ops/legacy_broadcast.h"

namespace fusec::cpu {

namespace {

/// Input 1 as a binary op reads it: reshaped for pre-opset-7 broadcasting (legacy_broadcast.h).
Tensor rhs(const KernelContext& ctx) {
  const Tensor& b = ctx.input(1);
  if (!legacy_broadcast_enabled(ctx)) return b;
  const Tensor& a = ctx.input(0);
  int64_t axis = legacy_broadcast_axis(a.rank(), b.rank(), ctx);
  return b.reshaped(legacy_padded_dims(b.dims(), a.rank(), axis));
}

// Unsigned type wide enough that arithmetic on it never promotes to (signed) int.
template <typename T>
using Wide = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

template <typename T>
T add(T x, T y) {
  if constexpr (std::is_integral_v<T>)
    return static_cast<T>(static_cast<Wide<T>>(x) + static_cast<Wide<T>>(y));
  else
    return x + y;
}
template <typename T>
T sub(T x, T y) {
  if constexpr (std::is_integral_v<T>)
    return static_cast<T>(static_cast<Wide<T>>(x) - static_cast<Wide<T>>(y));
  else
    return x - y;
}
template <typename T>
T mul(T x, T y) {
  if constexpr (std::is_integral_v<T>)
    return static_cast<T>(static_cast<Wide<T>>(x) * static_cast<Wide<T>>(y));
  else
    return x * y;
}
template <typename T>
T neg(T x) {
  return sub(T{0}, x);
}
/// Integer division truncates toward zero like C; INT_MIN / -1 wraps to INT_MIN.
template <typename T>
T div(T x, T y) {
  if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
    if (y == -1) return neg(x);
  }
  return static_cast<T>(x / y);
}

/// Fails if an integer divisor tensor holds a zero (checked up front, not inside the loop).
template <typename T>
void check_no_zero_divisor(const Tensor& b, const KernelContext& ctx) {
  if constexpr (std::is_integral_v<T>) {
    const T* p = b.data<T>();
    for (int64_t i = 0; i < b.numel(); ++i)
      if (p[i] == 0) ctx.fail("integer division by zero");
  }
}

/// Binary op with both inputs and the output of one numeric type: out = op(a, b).
template <bool kDivides, typename Op>
Kernel arithmetic(Op op) {
  return [op](KernelContext& ctx) {
    if (has_half_io(ctx)) return via_float32(ctx, arithmetic<kDivides>(op));
    const Tensor& a = ctx.input(0);
    Tensor b = rhs(ctx);
    dispatch_numeric(a.dtype(), ctx, [&](auto tag) {
      using T = decltype(tag);
      if constexpr (kDivides) check_no_zero_divisor<T>(b, ctx);
      binary_broadcast<T, T, T>(a, b, ctx.output(0), [&](T x, T y) { return static_cast<T>(op(x, y)); });
    });
  };
}

// ---- Mod ----

template <typename T>
T mod(T x, T y, bool fmod) {
  if constexpr (std::is_floating_point_v<T>) {
    T r = std::fmod(x, y);
    if (!fmod && r != 0 && ((r < 0) != (y < 0))) r += y;  // sign of the divisor
    if (!fmod && r == 0) r = std::copysign(T{0}, y);      // a zero too (opset 28)
    return r;
  } else {
    if constexpr (std::is_signed_v<T>) {
      if (y == -1) return 0;  // INT_MIN % -1 is UB in C++
    }
    T r = static_cast<T>(x % y);  // sign of the dividend (C)
    if constexpr (std::is_signed_v<T>) {
      if (!fmod && r != 0 && ((r < 0) != (y < 0))) r = static_cast<T>(r + y);
    }
    return r;
  }
}

void mod_kernel(KernelContext& ctx) {
  if (has_half_io(ctx)) return via_float32(ctx, mod_kernel);
  const bool fmod = ctx.attr_int("fmod") != 0;
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  dispatch_numeric(a.dtype(), ctx, [&](auto tag) {
    using T = decltype(tag);
    check_no_zero_divisor<T>(b, ctx);
    binary_broadcast<T, T, T>(a, b, ctx.output(0), [&](T x, T y) { return mod(x, y, fmod); });
  });
}

// ---- Pow ----

/// Float -> integer conversion that clamps instead of invoking UB (NaN -> 0).
template <typename I>
I clamp_to_int(double v) {
  if (std::isnan(v)) return 0;
  if (v <= static_cast<double>(std::numeric_limits<I>::lowest())) return std::numeric_limits<I>::lowest();
  if (v >= static_cast<double>(std::numeric_limits<I>::max())) return std::numeric_limits<I>::max();
  return static_cast<I>(v);
}

/// Exact integer power by squaring (wrapping); negative exponents truncate 1/x^n toward zero.
template <typename B, typename E>
B int_pow(B x, E y) {
  if constexpr (std::is_signed_v<E>) {
    if (y < 0) {
      if (x == 1) return 1;
      if (x == -1) return (y % 2) ? B(-1) : B(1);
      return 0;
    }
  }
  B result = 1;
  auto e = static_cast<std::make_unsigned_t<E>>(y);
  while (e) {
    if (e & 1) result = mul(result, x);
    x = mul(x, x);
    e >>= 1;
  }
  return result;
}

template <typename B, typename E>
B pow_elem(B x, E y) {
  if constexpr (std::is_integral_v<B> && std::is_integral_v<E>) {
    return int_pow(x, y);
  } else if constexpr (std::is_integral_v<B>) {
    return clamp_to_int<B>(std::pow(static_cast<double>(x), static_cast<double>(y)));
  } else if constexpr (std::is_same_v<B, float> && std::is_same_v<E, float>) {
    return std::pow(x, y);
  } else {
    // Mixed types promote to double, as the reference (numpy) does, then round once.
    return static_cast<B>(std::pow(static_cast<double>(x), static_cast<double>(y)));
  }
}

void pow_kernel(KernelContext& ctx) {
  if (has_half_io(ctx)) return via_float32(ctx, pow_kernel);
  const Tensor& a = ctx.input(0);
  Tensor b = rhs(ctx);
  auto with_base = [&](auto base_tag) {
    using B = decltype(base_tag);
    dispatch_numeric(b.dtype(), ctx, [&](auto exp_tag) {
      using E = decltype(exp_tag);
      binary_broadcast<B, E, B>(a, b, ctx.output(0), [](B x, E y) { return pow_elem(x, y); });
    });
  };
  switch (a.dtype()) {
    case DType::Float32:
      return with_base(float{});
    case DType::Float64:
      return with_base(double{});
    case DType::Int32:
      return with_base(int32_t{});
    case DType::Int64:
      return with_base(int64_t{});
    default:
      ctx.unsupported(std::string("unsupported base type ") + dtype_name(a.dtype()));
  }
}

// ---- variadic Max / Min / Sum / Mean ----

template <typename Op>
Kernel variadic(Op op, bool mean) {
  return [op, mean](KernelContext& ctx) {
    if (has_half_io(ctx)) return via_float32(ctx, variadic(op, mean));
    std::vector<const Tensor*> ins;
    for (size_t i = 0; i < ctx.num_inputs(); ++i)
      if (ctx.has_input(i)) ins.push_back(&ctx.input(i));
    if (ins.empty()) ctx.fail("needs at least one input");
    Tensor& out = ctx.output(0);
    dispatch_numeric(out.dtype(), ctx, [&](auto tag) {
      using T = decltype(tag);
      auto f = [&](T x, T y) { return static_cast<T>(op(x, y)); };
      if (ins.size() == 1) {
        // Same shape as the input (inference broadcast nothing).
        if (out.nbytes()) std::memcpy(out.raw(), ins[0]->raw(), out.nbytes());
      } else {
        binary_broadcast<T, T, T>(*ins[0], *ins[1], out, f);
        // The accumulator has the output's shape, so reading and writing it in place is safe.
        for (size_t i = 2; i < ins.size(); ++i) binary_broadcast<T, T, T>(out, *ins[i], out, f);
      }
      if (mean) {
        const T n = static_cast<T>(ins.size());
        T* p = out.data<T>();
        parallel_for(out.numel(), 16384, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) p[i] = static_cast<T>(p[i] / n);
        });
      }
    });
  };
}

// ---- unary ----

/// out = f(x) over float types (half via float32).
template <typename F>
Kernel unary_float(F f) {
  return [f](KernelContext& ctx) {
    if (has_half_io(ctx)) return via_float32(ctx, unary_float(f));
    const Tensor& x = ctx.input(0);
    dispatch_float(x.dtype(), ctx, [&](auto tag) {
      using T = decltype(tag);
      unary_map<T, T>(x, ctx.output(0), [&](T v) { return static_cast<T>(f(v)); });
    });
  };
}

/// out = f(x) over every numeric type (half via float32).
template <typename F>
Kernel unary_numeric(F f) {
  return [f](KernelContext& ctx) {
    if (has_half_io(ctx)) return via_float32(ctx, unary_numeric(f));
    const Tensor& x = ctx.input(0);
    dispatch_numeric(x.dtype(), ctx, [&](auto tag) {
      using T = decltype(tag);
      unary_map<T, T>(x, ctx.output(0), [&](T v) { return static_cast<T>(f(v)); });
    });
  };
}

/// bool out = f(x) over float types.
template <typename F>
Kernel float_predicate(F f) {
  return [f](KernelContext& ctx) {
    if (has_half_io(ctx)) return via_float32(ctx, float_predicate(f));
    const Tensor& x = ctx.input(0);
    dispatch_float(x.dtype(), ctx, [&](auto tag) {
      using T = decltype(tag);
      unary_map<T, uint8_t>(x, ctx.output(0), [&](T v) { return static_cast<uint8_t>(f(v, ctx)); });
    });
  };
}

void isinf_kernel(KernelContext& ctx) {
  const bool neg_inf = ctx.attr_int("detect_negative") != 0, pos_inf = ctx.attr_int("detect_positive") != 0;
  float_predicate([neg_inf, pos_inf](auto x, const KernelContext&) {
    return std::isinf(x) && ((x > 0 && pos_inf) || (x < 0 && neg_inf));
  })(ctx);
}

// ---- comparison and logic ----

template <typename Op>
Kernel compare(Op op) {
  return [op](KernelContext& ctx) {
    if (has_half_io(ctx)) return via_float32(ctx, compare(op));
    const Tensor& a = ctx.input(0);
    Tensor b = rhs(ctx);
    dispatch_all(a.dtype(), ctx, [&](auto tag) {
      using T = decltype(tag);
      binary_broadcast<T, T, uint8_t>(a, b, ctx.output(0), [&](T x, T y) { return static_cast<uint8_t>(op(x, y)); });
    });
  };
}

template <typename Op>
Kernel logic(Op op) {
  return [op](KernelContext& ctx) {
    Tensor b = rhs(ctx);
    binary_broadcast<uint8_t, uint8_t, uint8_t>(
        ctx.input(0), b, ctx.output(0), [&](uint8_t x, uint8_t y) { return static_cast<uint8_t>(op(x != 0, y != 0)); });
  };
}

void not_kernel(KernelContext& ctx) {
  unary_map<uint8_t, uint8_t>(ctx.input(0), ctx.output(0), [](uint8_t x) { return static_cast<uint8_t>(x == 0); });
}

/// f(T{}) for the integer types the bit ops take (uint8, fusec's only unsigned type, and the signed
/// ones); anything else is unsupported.
template <typename F>
void dispatch_bits(DType t, const KernelContext& ctx, F f) {
  switch (t) {
    case DType::UInt8:
      return f(uint8_t{});
    case DType::Int8:
      return f(int8_t{});
    case DType::Int16:
      return f(int16_t{});
    case DType::Int32:
      return f(int32_t{});
    case DType::Int64:
      return f(int64_t{});
    default:
      ctx.unsupported(std::string("unsupported data type ") + dtype_name(t));
  }
}

/// x shifted by y bits (opset 28): a signed right shift is arithmetic; a shift that is negative or
/// at least T's width leaves only the sign fill (-1 for a right shift of a negative x, else 0). The
/// left shift runs on the unsigned twin, where the bits past the sign bit are simply dropped.
template <typename T>
T bit_shift(T x, T y, bool left) {
  using U = std::make_unsigned_t<T>;
  constexpr int kBits = 8 * sizeof(T);
  if (y < 0 || y >= static_cast<T>(kBits)) return (!left && x < 0) ? static_cast<T>(-1) : T{0};
  if (left) return static_cast<T>(static_cast<U>(static_cast<U>(x) << static_cast<int>(y)));
  return static_cast<T>(x >> static_cast<int>(y));  // arithmetic for signed T (C++20, and g++/clang before)
}

void bitshift_kernel(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const bool left = ctx.attr_string("direction") == "LEFT";
  dispatch_bits(a.dtype(), ctx, [&](auto tag) {
    using T = decltype(tag);
    binary_broadcast<T, T, T>(a, ctx.input(1), ctx.output(0), [left](T x, T y) { return bit_shift(x, y, left); });
  });
}

/// BitwiseAnd, BitwiseOr and BitwiseXor over fusec's integer types.
template <typename Op>
Kernel bitwise(Op op) {
  return [op](KernelContext& ctx) {
    dispatch_bits(ctx.input(0).dtype(), ctx, [&](auto tag) {
      using T = decltype(tag);
      binary_broadcast<T, T, T>(ctx.input(0), ctx.input(1), ctx.output(0),
                                [&](T x, T y) { return static_cast<T>(op(x, y)); });
    });
  };
}

void bitwise_not_kernel(KernelContext& ctx) {
  dispatch_bits(ctx.input(0).dtype(), ctx, [&](auto tag) {
    using T = decltype(tag);
    unary_map<T, T>(ctx.input(0), ctx.output(0), [](T x) { return static_cast<T>(~x); });
  });
}

void where_kernel(KernelContext& ctx) {
  const Tensor& cond = ctx.input(0);
  const Tensor& x = ctx.input(1);
  const Tensor& y = ctx.input(2);
  Tensor& out = ctx.output(0);
  // Pure selection: half types are copied as raw 16-bit values.
  dispatch_all(x.dtype(), ctx, [&](auto tag) {
    using T = decltype(tag);
    const uint8_t* pc = cond.data<uint8_t>();
    const T* px = x.data<T>();
    const T* py = y.data<T>();
    T* po = out.data<T>();
    broadcast_rows<3>(out.dims(), {&cond.dims(), &x.dims(), &y.dims()},
                      [&](int64_t o, const std::array<int64_t, 3>& off, const std::array<int64_t, 3>& st, int64_t n) {
                        for (int64_t j = 0; j < n; ++j)
                          po[o + j] = pc[off[0] + j * st[0]] ? px[off[1] + j * st[1]] : py[off[2] + j * st[2]];
                      });
  });
}

// ---- Cast ----

/// double -> float rounded to odd: exact values stay, inexact ones take whichever float neighbour
/// has an odd mantissa. Rounding that to a narrower format (half, bfloat16) then equals rounding
/// the double directly, avoiding double-rounding errors.
float double_to_float_round_odd(double d) {
  float f = static_cast<float>(d);
  if (std::isnan(d) || std::isinf(f) || static_cast<double>(f) == d) return f;
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if (bits & 1u) return f;
  return std::nextafter(f, static_cast<float>(static_cast<double>(f) < d ? INFINITY : -INFINITY));
}

void cast_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Tensor& out = ctx.output(0);
  if (x.dtype() == DType::Float64 && (out.dtype() == DType::Float16 || out.dtype() == DType::BFloat16)) {
    const double* p = x.data<double>();
    uint16_t* q = out.data<uint16_t>();
    const bool half = out.dtype() == DType::Float16;
    parallel_for(x.numel(), 16384, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        float f = double_to_float_round_odd(p[i]);
        q[i] = half ? float_to_half(f) : float_to_bf16(f);
      }
    });
    return;
  }
  convert_tensor(x, out);
}

// ---- Clip ----

void clip_kernel(KernelContext& ctx) {
  if (has_half_io(ctx)) return via_float32(ctx, clip_kernel);
  const Tensor& x = ctx.input(0);
  dispatch_numeric(x.dtype(), ctx, [&](auto tag) {
    using T = decltype(tag);
    T lo = std::numeric_limits<T>::lowest(), hi = std::numeric_limits<T>::max();
    if (ctx.schema().find_attr("min")) {  // opset < 11: float attributes
      lo = static_cast<T>(ctx.attr_float("min"));
      hi = static_cast<T>(ctx.attr_float("max"));
    } else {
      auto bound = [&](size_t i, T& v) {
        if (!ctx.has_input(i)) return;
        const Tensor& t = ctx.input(i);
        if (t.numel() != 1) ctx.fail("min/max must be scalars, got shape " + dims_str(t.dims()));
        v = t.data<T>()[0];
      };
      bound(1, lo);
      bound(2, hi);
    }
    // max then min: when min > max every element becomes max (the spec's rule); NaN stays NaN.
    unary_map<T, T>(x, ctx.output(0), [lo, hi](T v) { return formulas::clamp(v, lo, hi); });
  });
}

}  // namespace

void register_elementwise_kernels(KernelRegistry& r) {
  // Writes::Every (kernel.h): binary_broadcast and unary_map write each output element once.
  r.add("Add", arithmetic<false>([](auto x, auto y) { return add(x, y); }), "", Writes::Every);
  r.add("Sub", arithmetic<false>([](auto x, auto y) { return sub(x, y); }), "", Writes::Every);
  r.add("Mul", arithmetic<false>([](auto x, auto y) { return mul(x, y); }), "", Writes::Every);
  r.add("Div", arithmetic<true>([](auto x, auto y) { return div(x, y); }), "", Writes::Every);
  r.add("Mod", mod_kernel, "", Writes::Every);  // binary_broadcast
  r.add("Pow", pow_kernel, "", Writes::Every);

  // The first pair broadcast into the output (or one input copied whole), then the rest in place.
  r.add("Max", variadic([](auto x, auto y) { return formulas::max_nan(x, y); }, false), "", Writes::Every);
  r.add("Min", variadic([](auto x, auto y) { return formulas::min_nan(x, y); }, false), "", Writes::Every);
  r.add("Sum", variadic([](auto x, auto y) { return add(x, y); }, false), "", Writes::Every);
  r.add("Mean", variadic([](auto x, auto y) { return add(x, y); }, true), "", Writes::Every);

  r.add("Abs", unary_numeric([](auto x) {
          using T = decltype(x);
          if constexpr (std::is_unsigned_v<T>)
            return x;
          else
            return x < 0 ? neg(x) : x;
        }),
        "", Writes::Every);
  r.add("Neg", unary_numeric([](auto x) { return neg(x); }), "", Writes::Every);
  r.add("Sign", unary_numeric([](auto x) {
          using T = decltype(x);
          if constexpr (std::is_unsigned_v<T>) {
            return static_cast<T>(x > 0);
          } else {
            if constexpr (std::is_floating_point_v<T>) {
              if (std::isnan(x)) return x;
            }
            return static_cast<T>((T{0} < x) - (x < T{0}));
          }
        }),
        "", Writes::Every);
  r.add("Reciprocal", unary_float([](auto x) { return decltype(x){1} / x; }), "", Writes::Every);
  r.add("Sqrt", unary_float([](auto x) { return std::sqrt(x); }), "", Writes::Every);
  r.add("Exp", unary_float([](auto x) { return std::exp(x); }), "", Writes::Every);
  r.add("Log", unary_float([](auto x) { return std::log(x); }), "", Writes::Every);
  r.add("Floor", unary_float([](auto x) { return std::floor(x); }), "", Writes::Every);
  r.add("Ceil", unary_float([](auto x) { return std::ceil(x); }), "", Writes::Every);
  // nearbyint in the default rounding mode rounds halves to even, as ONNX Round does.
  r.add("Round", unary_float([](auto x) { return std::nearbyint(x); }), "", Writes::Every);
  r.add("Erf", unary_numeric([](auto x) {
          using T = decltype(x);
          if constexpr (std::is_floating_point_v<T>)
            return std::erf(x);
          else
            return static_cast<T>(std::erf(static_cast<double>(x)));
        }),
        "", Writes::Every);
  r.add("Sin", unary_float([](auto x) { return std::sin(x); }), "", Writes::Every);
  r.add("Cos", unary_float([](auto x) { return std::cos(x); }), "", Writes::Every);
  r.add("Tan", unary_float([](auto x) { return std::tan(x); }), "", Writes::Every);
  r.add("Asin", unary_float([](auto x) { return std::asin(x); }), "", Writes::Every);
  r.add("Acos", unary_float([](auto x) { return std::acos(x); }), "", Writes::Every);
  r.add("Atan", unary_float([](auto x) { return std::atan(x); }), "", Writes::Every);
  r.add("Sinh", unary_float([](auto x) { return std::sinh(x); }), "", Writes::Every);
  r.add("Cosh", unary_float([](auto x) { return std::cosh(x); }), "", Writes::Every);
  r.add("Asinh", unary_float([](auto x) { return std::asinh(x); }), "", Writes::Every);
  r.add("Acosh", unary_float([](auto x) { return std::acosh(x); }), "", Writes::Every);
  r.add("Atanh", unary_float([](auto x) { return std::atanh(x); }), "", Writes::Every);
  r.add("IsNaN", float_predicate([](auto x, const KernelContext&) { return std::isnan(x); }), "", Writes::Every);
  r.add("IsInf", isinf_kernel, "", Writes::Every);

  // Comparisons, logic and bit ops: binary_broadcast or unary_map.
  r.add("Equal", compare([](auto x, auto y) { return x == y; }), "", Writes::Every);
  r.add("Less", compare([](auto x, auto y) { return x < y; }), "", Writes::Every);
  r.add("Greater", compare([](auto x, auto y) { return x > y; }), "", Writes::Every);
  r.add("LessOrEqual", compare([](auto x, auto y) { return x <= y; }), "", Writes::Every);
  r.add("GreaterOrEqual", compare([](auto x, auto y) { return x >= y; }), "", Writes::Every);
  r.add("And", logic([](bool x, bool y) { return x && y; }), "", Writes::Every);
  r.add("Or", logic([](bool x, bool y) { return x || y; }), "", Writes::Every);
  r.add("Xor", logic([](bool x, bool y) { return x != y; }), "", Writes::Every);
  r.add("Not", not_kernel, "", Writes::Every);
  r.add("BitShift", bitshift_kernel, "", Writes::Every);
  r.add("BitwiseAnd", bitwise([](auto x, auto y) { return x & y; }), "", Writes::Every);
  r.add("BitwiseOr", bitwise([](auto x, auto y) { return x | y; }), "", Writes::Every);
  r.add("BitwiseXor", bitwise([](auto x, auto y) { return x ^ y; }), "", Writes::Every);
  r.add("BitwiseNot", bitwise_not_kernel, "", Writes::Every);
  r.add("Where", where_kernel, "", Writes::Every);

  r.add("Cast", cast_kernel, "", Writes::Every);  // convert_tensor: every element, every type pair
  r.add("CastLike", cast_kernel, "", Writes::Every);
  r.add("Clip", clip_kernel, "", Writes::Every);
}

}  // namespace fusec::cpu
