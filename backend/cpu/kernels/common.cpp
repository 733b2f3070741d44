#include "backend/cpu/kernels/common.h"

#include <cmath>
#include <limits>

namespace fusec::cpu {

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) s[i - 1] = s[i] * dims[i];
  return s;
}

Tensor to_float32(const Tensor& t) {
  Tensor out(DType::Float32, t.dims());
  convert_tensor(t, out);
  return out;
}

void from_float32(const Tensor& src, Tensor& dst) { convert_tensor(src, dst); }

namespace {

template <typename T>
double load(const Tensor& t, int64_t i) {
  return static_cast<double>(t.data<T>()[i]);
}

// Saturating-free C++ cast as ONNX Cast does for in-range values; out-of-range float->int is
// undefined in ONNX, we clamp instead of invoking UB.
template <typename O>
O to_int(double v) {
  if (std::isnan(v)) return 0;
  constexpr double lo = static_cast<double>(std::numeric_limits<O>::lowest());
  constexpr double hi = static_cast<double>(std::numeric_limits<O>::max());
  if (v <= lo) return std::numeric_limits<O>::lowest();
  if (v >= hi) return std::numeric_limits<O>::max();
  return static_cast<O>(v);
}

}  // namespace

void convert_tensor(const Tensor& src, Tensor& dst) {
  const int64_t n = src.numel();
  DType s = src.dtype(), d = dst.dtype();
  if (s == d) {
    if (src.nbytes()) std::memcpy(dst.raw(), src.raw(), src.nbytes());
    return;
  }
  // Integer -> integer keeps exact int64 values (doubles would round above 2^53).
  if ((is_integer(s) || s == DType::Bool) && (is_integer(d) || d == DType::Bool)) {
    for (int64_t i = 0; i < n; ++i) {
      int64_t v = src.as_int64(i);
      switch (d) {
        case DType::Int8:
          dst.data<int8_t>()[i] = static_cast<int8_t>(v);
          break;
        case DType::UInt8:
          dst.data<uint8_t>()[i] = static_cast<uint8_t>(v);
          break;
        case DType::Int16:
          dst.data<int16_t>()[i] = static_cast<int16_t>(v);
          break;
        case DType::Int32:
          dst.data<int32_t>()[i] = static_cast<int32_t>(v);
          break;
        case DType::Int64:
          dst.data<int64_t>()[i] = v;
          break;
        case DType::Bool:
          dst.data<uint8_t>()[i] = v != 0;
          break;
        default:
          break;
      }
    }
    return;
  }
  parallel_for(n, 16384, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      double v = src.as_double(i);
      switch (d) {
        case DType::Float32:
          dst.data<float>()[i] = static_cast<float>(v);
          break;
        case DType::Float64:
          dst.data<double>()[i] = v;
          break;
        case DType::Float16:
          dst.data<uint16_t>()[i] = float_to_half(static_cast<float>(v));
          break;
        case DType::BFloat16:
          dst.data<uint16_t>()[i] = float_to_bf16(static_cast<float>(v));
          break;
        case DType::Int8:
          dst.data<int8_t>()[i] = to_int<int8_t>(v);
          break;
        case DType::UInt8:
          dst.data<uint8_t>()[i] = to_int<uint8_t>(v);
          break;
        case DType::Int16:
          dst.data<int16_t>()[i] = to_int<int16_t>(v);
          break;
        case DType::Int32:
          dst.data<int32_t>()[i] = to_int<int32_t>(v);
          break;
        case DType::Int64:
          dst.data<int64_t>()[i] = to_int<int64_t>(v);
          break;
        case DType::Bool:
          dst.data<uint8_t>()[i] = v != 0.0;
          break;
        case DType::Undefined:
          break;
      }
    }
  });
}

bool has_half_io(const KernelContext& ctx) {
  auto half = [](DType t) { return t == DType::Float16 || t == DType::BFloat16; };
  for (size_t i = 0; i < ctx.num_inputs(); ++i)
    if (ctx.has_input(i) && half(ctx.input(i).dtype())) return true;
  for (size_t i = 0; i < ctx.num_outputs(); ++i)
    if (ctx.has_output(i) && half(ctx.output(i).dtype())) return true;
  return false;
}

void via_float32(KernelContext& ctx, const std::function<void(KernelContext&)>& kernel) {
  auto half = [](DType t) { return t == DType::Float16 || t == DType::BFloat16; };
  std::vector<Tensor> in_store(ctx.num_inputs()), out_store(ctx.num_outputs());
  std::vector<const Tensor*> ins(ctx.num_inputs(), nullptr);
  std::vector<Tensor*> outs(ctx.num_outputs(), nullptr);
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) continue;
    const Tensor& t = ctx.input(i);
    if (half(t.dtype())) {
      in_store[i] = to_float32(t);
      ins[i] = &in_store[i];
    } else
      ins[i] = &t;
  }
  for (size_t i = 0; i < ctx.num_outputs(); ++i) {
    if (!ctx.has_output(i)) continue;
    Tensor& t = ctx.output(i);
    if (half(t.dtype())) {
      out_store[i] = Tensor(DType::Float32, t.dims());
      outs[i] = &out_store[i];
    } else
      outs[i] = &t;
  }
  KernelContext inner(ctx.node(), ctx.schema(), ctx.opset(), ins, outs);
  kernel(inner);
  for (size_t i = 0; i < ctx.num_outputs(); ++i)
    if (ctx.has_output(i) && half(ctx.output(i).dtype())) from_float32(out_store[i], ctx.output(i));
}

}  // namespace fusec::cpu
