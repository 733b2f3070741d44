// CPU kernels for linear quantization, as the ONNX reference computes it:
//   QuantizeLinear         y = saturate(round_half_even(x / scale) + zp)
//   DequantizeLinear       y = (x - zp) * scale
//   DynamicQuantizeLinear  uint8 y, with scale and zp mapping [min(x, 0), max(x, 0)] onto [0, 255]
//   MatMulInteger          int32 (A - a_zp)·(B - b_zp)
//   ConvInteger            int32 conv(x - x_zp, w - w_zp)
//   QLinearMatMul          saturate(round_half_even((a - a_zp)·(b - b_zp) · a_scale·b_scale / y_scale) + y_zp)
//   QLinearConv            the same over conv(x - x_zp, w - w_zp) + B
// The integer products shift both operands to int32 first and accumulate exactly, wrapping as
// int32 does. The requantizing multiplier is formed in float32 (the scales' type), applied in
// float64. A NaN quantizes to the zero point.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "backend/cpu/kernels/common.h"
#include "backend/cpu/kernels/conv_util.h"
#include "backend/cpu/kernels/linalg.h"
#include "ir/ops/quantize.h"

namespace fusec::cpu {

namespace {

using quant::ScaleLayout;

std::vector<double> values(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = t.as_double(i);
  return v;
}

std::vector<int64_t> ints(const Tensor& t) {
  std::vector<int64_t> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = t.as_int64(i);
  return v;
}

/// round_half_even(v) + zp saturated to [lo, hi]; NaN gives zp.
int64_t saturate(double v, int64_t zp, int64_t lo, int64_t hi) {
  if (std::isnan(v)) return std::clamp(zp, lo, hi);
  const double q = std::nearbyint(v) + static_cast<double>(zp);
  if (q <= static_cast<double>(lo)) return lo;
  if (q >= static_cast<double>(hi)) return hi;
  return static_cast<int64_t>(q);
}

/// Writes f(i) for every element of y, y being one of the quantized types.
template <typename F>
void write_quantized(const NodeAttrs& where, Tensor& y, F&& f) {
  auto fill = [&](auto* out) {
    parallel_for(y.numel(), 16384, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) out[i] = static_cast<std::remove_reference_t<decltype(*out)>>(f(i));
    });
  };
  switch (y.dtype()) {
    case DType::UInt8:
      return fill(y.data<uint8_t>());
    case DType::Int8:
      return fill(y.data<int8_t>());
    case DType::Int16:
      return fill(y.data<int16_t>());
    default:
      where.unsupported(std::string("quantized output of type ") + dtype_name(y.dtype()));
  }
}

/// The scale's layout against x, with the zero point (when given) checked to match the scale.
ScaleLayout checked_layout(const KernelContext& ctx, const Tensor& x, const Tensor& scale, const Tensor* zp) {
  if (zp && zp->dims() != scale.dims() && !(zp->numel() == 1 && scale.numel() == 1))
    ctx.fail("the zero point " + dims_str(zp->dims()) + " and the scale " + dims_str(scale.dims()) + " differ");
  const int64_t axis = ctx.opset() >= 13 ? ctx.attr_int("axis") : 1;
  const int64_t block = ctx.opset() >= 21 ? ctx.attr_int("block_size") : 0;
  if (ctx.opset() < 13 && scale.numel() != 1) ctx.fail("before opset 13 the scale must be a scalar");
  return quant::scale_layout(ctx, x.dims(), scale.dims(), axis, block);
}

/// Quantize- and DequantizeLinear's x (input 0) with its scales and zero points (inputs 1, 2), and
/// how they line up.
struct Linear {
  ScaleLayout layout;
  std::vector<float> scale;
  std::vector<int64_t> zp;
};

Linear linear_params(const KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& scale = ctx.input(1);
  const Tensor* zp = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  require_dims(ctx, ctx.output(0), x.dims());
  Linear p;
  p.layout = checked_layout(ctx, x, scale, zp);
  p.scale.resize(static_cast<size_t>(scale.numel()));
  for (int64_t i = 0; i < scale.numel(); ++i) p.scale[i] = static_cast<float>(scale.as_double(i));
  p.zp = zp ? ints(*zp) : std::vector<int64_t>(p.scale.size(), 0);
  return p;
}

void quantize_linear_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output(0);
  const Linear p = linear_params(ctx);
  const ScaleLayout& l = p.layout;
  const std::vector<float>& s = p.scale;
  const std::vector<int64_t>& z = p.zp;
  int64_t lo, hi;
  quant::quantized_range(y.dtype(), lo, hi);
  // x / scale in float32, as the reference divides float32 by float32.
  const Tensor xf = x.dtype() == DType::Float32 ? x : to_float32(x);
  const float* px = xf.data<float>();
  write_quantized(ctx, y, [&](int64_t i) {
    const int64_t k = l.index(i);
    return saturate(static_cast<double>(px[i] / s[k]), z[k], lo, hi);
  });
}

void dequantize_linear_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output(0);
  if (ctx.has_input(2) && ctx.input(2).dtype() != x.dtype()) ctx.fail("the zero point's type is not x's");
  const Linear p = linear_params(ctx);
  const ScaleLayout& l = p.layout;
  const std::vector<float>& s = p.scale;
  const std::vector<int64_t>& z = p.zp;
  if (x.dtype() == DType::Int32)
    for (int64_t v : z)
      if (v != 0) ctx.fail("an int32 x must have a zero point of 0, got " + std::to_string(v));
  Tensor yf = y.dtype() == DType::Float32 ? Tensor() : Tensor(DType::Float32, y.dims());
  float* py = y.dtype() == DType::Float32 ? y.data<float>() : yf.data<float>();
  dispatch_numeric(x.dtype(), ctx, [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    parallel_for(x.numel(), 16384, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t k = l.index(i);
        py[i] = static_cast<float>(static_cast<int64_t>(px[i]) - z[k]) * s[k];
      }
    });
  });
  if (y.dtype() != DType::Float32) from_float32(yf, y);
}

void dynamic_quantize_linear_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output(0);
  require_dims(ctx, y, x.dims());
  if (x.dtype() != DType::Float32) ctx.unsupported(std::string("x of type ") + dtype_name(x.dtype()));
  const float* px = x.data<float>();
  // The range always holds 0, so that 0 is exact; NaNs take no part in it.
  float lo = 0, hi = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    if (px[i] < lo) lo = px[i];
    if (px[i] > hi) hi = px[i];
  }
  const float scale = (hi - lo) / 255.0f;
  // All of x zero (or empty): any scale would do; 0 with zero point 0 keeps y at 0 without a 0/0.
  const int64_t zp = scale > 0 ? saturate(static_cast<double>(0.0f - lo / scale), 0, 0, 255) : 0;
  write_quantized(ctx, y,
                  [&](int64_t i) { return scale > 0 ? saturate(static_cast<double>(px[i] / scale), zp, 0, 255) : 0; });
  ctx.output(1).data<float>()[0] = scale;
  ctx.output(2).data<uint8_t>()[0] = static_cast<uint8_t>(zp);
}

/// One value, or one per index of a dim of `n`; anything else is a BadInput naming `what` and `per`.
void require_count(const NodeAttrs& where, const Tensor& t, int64_t n, const char* what, const char* per) {
  if (t.numel() == 1 && t.rank() <= 1) return;
  if (t.rank() == 1 && t.dim(0) == n) return;
  where.fail(std::string(what) + " must be a scalar or one value per " + per + " (" + std::to_string(n) + "), got " +
             dims_str(t.dims()));
}

/// value[k], or value[0] when there is one.
template <typename V>
auto at(const std::vector<V>& v, int64_t k) {
  return v.size() == 1 ? v[0] : v[static_cast<size_t>(k)];
}

/// t - zp as int32, zp one value or one per index of t's dim `axis` (counted from the end).
Tensor shifted(const Tensor& t, const std::vector<int64_t>& zp, size_t from_end) {
  Tensor out(DType::Int32, t.dims());
  int64_t inner = 1, d = 1;
  if (zp.size() > 1) {
    for (size_t i = t.rank() - from_end + 1; i < t.rank(); ++i) inner *= t.dim(i);
    d = t.dim(t.rank() - from_end);
  }
  int32_t* po = out.data<int32_t>();
  for (int64_t i = 0; i < t.numel(); ++i) po[i] = static_cast<int32_t>(t.as_int64(i) - at(zp, (i / inner) % d));
  return out;
}

/// M and N of a MatMul of a and b (1-D operands count as one row or one column).
void matmul_mn(const Tensor& a, const Tensor& b, int64_t& m, int64_t& n) {
  m = a.rank() >= 2 ? a.dim(a.rank() - 2) : 1;
  n = b.rank() >= 2 ? b.dim(b.rank() - 1) : 1;
}

/// Zero points of operand `t` (one, or one per row of A / column of B), `t` shifted by them.
Tensor shifted_operand(const NodeAttrs& where, const Tensor& t, const Tensor* zp, bool is_a, int64_t rows_or_cols) {
  if (!zp) return shifted(t, {0}, 1);
  if (zp->dtype() != t.dtype()) where.fail(std::string(is_a ? "A" : "B") + "'s zero point has another type");
  require_count(where, *zp, rows_or_cols, is_a ? "A's zero point" : "B's zero point",
                is_a ? "row of A" : "column of B");
  // A's rows run along its second-to-last dim, B's columns along its last.
  return shifted(t, ints(*zp), is_a && t.rank() >= 2 ? 2 : 1);
}

void matmul_integer_kernel(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  int64_t m, n;
  matmul_mn(a, b, m, n);
  const Tensor a32 = shifted_operand(ctx, a, ctx.has_input(2) ? &ctx.input(2) : nullptr, true, m);
  const Tensor b32 = shifted_operand(ctx, b, ctx.has_input(3) ? &ctx.input(3) : nullptr, false, n);
  matmul(ctx, a32, b32, ctx.output(0));
}

/// acc·(scale_a[row]·scale_b[col] / scale_y) + zp_y, saturated into y, for an int32 accumulator
/// laid out as y is; row and col of element i come from `row_col`.
template <typename RowCol>
void requantize(const NodeAttrs& where, const int32_t* acc, const std::vector<double>& sa,
                const std::vector<double>& sb, const Tensor& y_scale, const Tensor& y_zp, Tensor& y, RowCol&& row_col) {
  if (y_scale.numel() != 1 || y_zp.numel() != 1) where.unsupported("a y_scale or y_zero_point that is not one value");
  if (y_zp.dtype() != y.dtype()) where.fail("y_zero_point's type is not y's");
  const float ys = static_cast<float>(y_scale.as_double(0));
  const int64_t zp = y_zp.as_int64(0);
  int64_t lo, hi;
  quant::quantized_range(y.dtype(), lo, hi);
  write_quantized(where, y, [&](int64_t i) {
    int64_t r, c;
    row_col(i, r, c);
    const float mult = static_cast<float>(at(sa, r)) * static_cast<float>(at(sb, c)) / ys;
    return saturate(static_cast<double>(acc[i]) * static_cast<double>(mult), zp, lo, hi);
  });
}

/// Scales of one operand: one, or one per row / column / channel.
std::vector<double> operand_scales(const NodeAttrs& where, const Tensor& s, int64_t n, const char* what,
                                   const char* per) {
  require_count(where, s, n, what, per);
  return values(s);
}

void qlinear_matmul_kernel(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(3);
  Tensor& y = ctx.output(0);
  int64_t m, n;
  matmul_mn(a, b, m, n);
  const Tensor a32 = shifted_operand(ctx, a, &ctx.input(2), true, m);
  const Tensor b32 = shifted_operand(ctx, b, &ctx.input(5), false, n);
  const std::vector<double> sa = operand_scales(ctx, ctx.input(1), m, "a_scale", "row of a");
  const std::vector<double> sb = operand_scales(ctx, ctx.input(4), n, "b_scale", "column of b");
  Tensor acc(DType::Int32, y.dims());
  matmul(ctx, a32, b32, acc);
  requantize(ctx, acc.data<int32_t>(), sa, sb, ctx.input(6), ctx.input(7), y, [&](int64_t i, int64_t& r, int64_t& c) {
    c = i % n;
    r = (i / n) % m;
  });
}

/// y = bias + conv(x, w) in int32 arithmetic, x and w already shifted by their zero points; `where`
/// carries the convolution's attributes.
void conv_int32(const NodeAttrs& where, const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) {
  if (x.rank() < 3 || w.rank() != x.rank()) where.fail("x and w must have the same rank >= 3");
  const int64_t N = x.dim(0), C = x.dim(1), M = w.dim(0), G = where.attr_int("group");
  if (G < 1 || C % G != 0 || M % G != 0 || w.dim(1) != C / G)
    where.fail("channels do not match: x " + dims_str(x.dims()) + ", w " + dims_str(w.dims()) + ", group " +
               std::to_string(G));
  std::vector<int64_t> in(x.dims().begin() + 2, x.dims().end()), kernel(w.dims().begin() + 2, w.dims().end());
  const WindowGeometry wg = window_geometry(where, in, kernel, false);
  Geo3 g;
  if (!to_geo3(wg, g)) where.unsupported("a convolution with more than 3 spatial dims");
  const std::vector<int64_t> want = nc_and_out(N, M, wg);
  if (y.dims() != want) where.fail("output has shape " + dims_str(y.dims()) + ", expected " + dims_str(want));
  if (bias && (bias->rank() != 1 || bias->dim(0) != M)) where.fail("B must have one value per output channel");
  if (y.numel() == 0) return;
  const int64_t Cg = C / G, Mg = M / G, s_in = g.in_size(), s_out = g.out_size(), kk = g.kernel_size();
  const int32_t* px = x.data<int32_t>();
  const int32_t* pw = w.data<int32_t>();
  const int32_t* pb = bias ? bias->data<int32_t>() : nullptr;
  int32_t* py = y.data<int32_t>();
  parallel_for(N * M, std::max<int64_t>(1, 16384 / std::max<int64_t>(s_out * kk * Cg, 1)), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t nn = p / M, mm = p % M;
      const int32_t* xg = px + (nn * C + (mm / Mg) * Cg) * s_in;
      const int32_t* wm = pw + mm * Cg * kk;
      for (int64_t o = 0; o < s_out; ++o) {
        const int64_t o2 = o % g.out[2], o1 = (o / g.out[2]) % g.out[1], o0 = o / (g.out[2] * g.out[1]);
        int64_t acc = pb ? pb[mm] : 0;
        for (int64_t k0 = 0; k0 < g.k[0]; ++k0) {
          const int64_t i0 = o0 * g.s[0] - g.pb[0] + k0 * g.d[0];
          if (i0 < 0 || i0 >= g.in[0]) continue;
          for (int64_t k1 = 0; k1 < g.k[1]; ++k1) {
            const int64_t i1 = o1 * g.s[1] - g.pb[1] + k1 * g.d[1];
            if (i1 < 0 || i1 >= g.in[1]) continue;
            for (int64_t k2 = 0; k2 < g.k[2]; ++k2) {
              const int64_t i2 = o2 * g.s[2] - g.pb[2] + k2 * g.d[2];
              if (i2 < 0 || i2 >= g.in[2]) continue;
              const int64_t xoff = (i0 * g.in[1] + i1) * g.in[2] + i2, woff = (k0 * g.k[1] + k1) * g.k[2] + k2;
              for (int64_t c = 0; c < Cg; ++c) acc += int64_t{xg[c * s_in + xoff]} * wm[c * kk + woff];
            }
          }
        }
        py[p * s_out + o] = static_cast<int32_t>(static_cast<uint32_t>(acc));
      }
    }
  });
}

/// x shifted by its (single) zero point and w by its own (one, or one per output channel).
void shifted_conv_operands(const NodeAttrs& where, const Tensor& x, const Tensor* x_zp, const Tensor& w,
                           const Tensor* w_zp, Tensor& x32, Tensor& w32) {
  if (x_zp && x_zp->numel() != 1) where.fail("x's zero point must be a scalar, got " + dims_str(x_zp->dims()));
  if (x_zp && x_zp->dtype() != x.dtype()) where.fail("x's zero point has another type");
  if (w_zp && w_zp->dtype() != w.dtype()) where.fail("w's zero point has another type");
  if (w.rank() < 3) where.fail("w must have rank >= 3, got " + dims_str(w.dims()));
  if (w_zp) require_count(where, *w_zp, w.dim(0), "w's zero point", "output channel");
  x32 = shifted(x, {x_zp ? x_zp->as_int64(0) : 0}, 1);
  w32 = shifted(w, w_zp ? ints(*w_zp) : std::vector<int64_t>{0}, w.rank());
}

void conv_integer_kernel(KernelContext& ctx) {
  Tensor x32, w32;
  shifted_conv_operands(ctx, ctx.input(0), ctx.has_input(2) ? &ctx.input(2) : nullptr, ctx.input(1),
                        ctx.has_input(3) ? &ctx.input(3) : nullptr, x32, w32);
  conv_int32(ctx, x32, w32, nullptr, ctx.output(0));
}

void qlinear_conv_kernel(KernelContext& ctx) {
  const Tensor& w = ctx.input(3);
  Tensor& y = ctx.output(0);
  Tensor x32, w32;
  shifted_conv_operands(ctx, ctx.input(0), &ctx.input(2), w, &ctx.input(5), x32, w32);
  if (ctx.input(1).numel() != 1) ctx.fail("x_scale must be a scalar, got " + dims_str(ctx.input(1).dims()));
  const std::vector<double> sx = values(ctx.input(1));
  const std::vector<double> sw = operand_scales(ctx, ctx.input(4), w.dim(0), "w_scale", "output channel");
  const Tensor* bias = ctx.has_input(8) ? &ctx.input(8) : nullptr;
  if (bias && bias->dtype() != DType::Int32) ctx.fail("B must be int32");
  Tensor acc(DType::Int32, y.dims());
  conv_int32(ctx, x32, w32, bias, acc);
  if (y.numel() == 0) return;
  const int64_t plane = y.numel() / (y.dim(0) * y.dim(1)), channels = y.dim(1);
  requantize(ctx, acc.data<int32_t>(), sx, sw, ctx.input(6), ctx.input(7), y, [&](int64_t i, int64_t& r, int64_t& c) {
    r = 0;
    c = (i / plane) % channels;
  });
}

}  // namespace

void register_quantize_kernels(KernelRegistry& r) {
  r.add("QuantizeLinear", quantize_linear_kernel, "", Writes::Every);
  r.add("DequantizeLinear", dequantize_linear_kernel, "", Writes::Every);
  r.add("DynamicQuantizeLinear", dynamic_quantize_linear_kernel, "", Writes::Every);
  r.add("MatMulInteger", matmul_integer_kernel, "", Writes::Every);
  r.add("QLinearMatMul", qlinear_matmul_kernel, "", Writes::Every);
  r.add("ConvInteger", conv_integer_kernel, "", Writes::Every);
  r.add("QLinearConv", qlinear_conv_kernel, "", Writes::Every);
}

}  // namespace fusec::cpu
