// CPU kernels for the shape ops. Reshape & co. copy bytes (the executor allocated the output with
// the inferred shape); Shape and Size read only the input's dims, because the inference driver
// calls them with a dims-only tensor that has no data.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "backend/axis_layout.h"
#include "backend/cpu/kernels/common.h"
#include "backend/cpu/kernels/shape_util.h"

namespace fusec::cpu {

namespace {

void copy_input(KernelContext& ctx) { copy_tensor(ctx, ctx.input(0), ctx.output(0)); }

void shape_kernel(KernelContext& ctx) {
  const auto& dims = ctx.input(0).dims();
  const int64_t r = static_cast<int64_t>(dims.size());
  int64_t start = 0, end = r;
  if (ctx.schema().find_attr("start")) {
    start = ctx.attr_int("start");
    if (ctx.has_attr("end")) end = ctx.attr_int("end");
  }
  auto clamp = [r](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + r : v, 0, r); };
  start = clamp(start);
  end = std::max(start, clamp(end));
  Tensor& out = ctx.output(0);
  if (out.numel() != end - start) ctx.fail("output has the wrong length");
  for (int64_t i = start; i < end; ++i) out.data<int64_t>()[i - start] = dims[i];
}

void size_kernel(KernelContext& ctx) {
  int64_t n = 1;
  for (int64_t d : ctx.input(0).dims()) n *= d;
  ctx.output(0).data<int64_t>()[0] = n;
}

void dropout_kernel(KernelContext& ctx) {
  if (ctx.opset() >= 12) {
    bool training = ctx.has_input(2) && ctx.input(2).numel() > 0 && ctx.input(2).as_int64(0) != 0;
    double ratio = ctx.has_input(1) && ctx.input(1).numel() > 0 ? ctx.input(1).as_double(0) : 0.5;
    if (training && ratio != 0) ctx.unsupported("Dropout in training mode (random masking) is not supported");
  }
  copy_input(ctx);
  if (ctx.has_output(1)) {
    Tensor& mask = ctx.output(1);
    Tensor one = scalar_of(mask.dtype(), 1.0);
    fill_tensor(mask, one.raw());
  }
}

void eyelike_kernel(KernelContext& ctx) {
  Tensor& out = ctx.output(0);
  if (out.rank() != 2) ctx.fail("output must be 2-D");
  const int64_t rows = out.dim(0), cols = out.dim(1), k = ctx.attr_int("k");
  const size_t es = dtype_size(out.dtype());
  std::memset(out.raw(), 0, out.nbytes());
  Tensor one = scalar_of(out.dtype(), 1.0);
  char* base = static_cast<char*>(out.raw());
  for (int64_t i = 0; i < rows; ++i) {
    int64_t j = i + k;
    if (j >= 0 && j < cols) std::memcpy(base + (i * cols + j) * es, one.raw(), es);
  }
}

void trilu_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Tensor& out = ctx.output(0);
  if (x.rank() < 2 || out.dims() != x.dims()) ctx.fail("input must have rank >= 2");
  int64_t k = 0;
  if (ctx.has_input(1)) {
    if (ctx.input(1).numel() != 1) ctx.fail("k must be a scalar");
    k = ctx.input(1).as_int64(0);
  }
  const bool upper = ctx.attr_int("upper") != 0;
  const int64_t m = x.dim(x.rank() - 2), n = x.dim(x.rank() - 1);
  const int64_t rows = m == 0 ? 0 : x.numel() / n;
  if (n == 0 || rows == 0) return;
  const size_t es = dtype_size(x.dtype());
  const char* src = static_cast<const char*>(x.raw());
  char* dst = static_cast<char*>(out.raw());
  parallel_for(rows, std::max<int64_t>(1, 16384 / n), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const int64_t i = r % m;
      // Kept columns: j <= i + k (lower) or j >= i + k (upper). A huge |k| is clamped first so
      // i + k cannot overflow.
      auto col = [&](int64_t extra) -> int64_t {
        if (k >= n) return n;
        if (k < -m) return 0;
        return std::clamp<int64_t>(i + k + extra, 0, n);
      };
      int64_t lo = 0, hi = n;
      if (upper)
        lo = col(0);
      else
        hi = col(1);
      const char* s = src + r * n * es;
      char* d = dst + r * n * es;
      std::memset(d, 0, static_cast<size_t>(lo) * es);
      std::memcpy(d + lo * es, s + lo * es, static_cast<size_t>(hi - lo) * es);
      std::memset(d + hi * es, 0, static_cast<size_t>(n - hi) * es);
    }
  });
}

/// a + b, wrapping (two's complement) on integer overflow like the elementwise Add, instead of
/// signed overflow.
template <typename T>
T add_wrapping(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return static_cast<T>(a + b);
  }
}

/// a * b, wrapping on integer overflow like the elementwise Mul.
template <typename T>
T mul_wrapping(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    // uint16 operands would promote to int and overflow; unsigned arithmetic is at least 32 bits.
    using W = std::conditional_t<(sizeof(U) < sizeof(unsigned)), unsigned, U>;
    return static_cast<T>(static_cast<U>(static_cast<W>(static_cast<U>(a)) * static_cast<W>(static_cast<U>(b))));
  } else {
    return static_cast<T>(a * b);
  }
}

/// CumSum and CumProd: an inclusive or exclusive scan along the axis, either way.
template <bool kProduct>
void scan_kernel(KernelContext& ctx) {
  if (has_half_io(ctx)) return via_float32(ctx, scan_kernel<kProduct>);
  const Tensor& x = ctx.input(0);
  const Tensor& a = ctx.input(1);
  if (a.numel() != 1) ctx.fail("axis must be a scalar");
  const int64_t axis = normalize_axis(a.as_int64(0), static_cast<int64_t>(x.rank()), ctx);
  const bool exclusive = ctx.attr_int("exclusive") != 0, reverse = ctx.attr_int("reverse") != 0;
  const AxisView v = axis_view(x.dims(), axis);  // as the CUDA planner (movement_op.cpp)
  const int64_t outer = v.outer, n = v.n, inner = v.inner;
  if (x.numel() == 0) return;
  dispatch_numeric(x.dtype(), ctx, [&](auto tag) {
    using T = decltype(tag);
    const T* src = x.data<T>();
    T* dst = ctx.output(0).data<T>();
    // Work items: (outer slice, block of inner lanes); each scans its lanes along the axis, using
    // the previous output row as the running sum (or product).
    constexpr int64_t kBlock = 4096;
    const int64_t blocks = (inner + kBlock - 1) / kBlock;
    parallel_for(outer * blocks, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, n * std::min(inner, kBlock))),
                 [&](int64_t b, int64_t e) {
                   for (int64_t w = b; w < e; ++w) {
                     const int64_t o = w / blocks, j0 = (w % blocks) * kBlock, j1 = std::min(inner, j0 + kBlock);
                     const T* xs = src + o * n * inner;
                     T* ys = dst + o * n * inner;
                     for (int64_t step = 0; step < n; ++step) {
                       const int64_t kk = reverse ? n - 1 - step : step;
                       T* y = ys + kk * inner;
                       if (step == 0) {
                         for (int64_t j = j0; j < j1; ++j) y[j] = exclusive ? T(kProduct ? 1 : 0) : xs[kk * inner + j];
                         continue;
                       }
                       const int64_t prev = reverse ? kk + 1 : kk - 1;
                       const T* yp = ys + prev * inner;
                       const T* xv = xs + (exclusive ? prev : kk) * inner;
                       for (int64_t j = j0; j < j1; ++j)
                         y[j] = kProduct ? mul_wrapping(yp[j], xv[j]) : add_wrapping(yp[j], xv[j]);
                     }
                   }
                 });
  });
}

void onehot_kernel(KernelContext& ctx) {
  const Tensor& ind = ctx.input(0);
  const Tensor& dep = ctx.input(1);
  const Tensor& vals = ctx.input(2);
  Tensor& out = ctx.output(0);
  if (dep.numel() != 1) ctx.fail("depth must be a scalar");
  if (vals.numel() != 2) ctx.fail("values must hold exactly 2 elements");
  const int64_t depth = static_cast<int64_t>(dep.as_double(0));
  const int64_t r = static_cast<int64_t>(ind.rank());
  const int64_t axis = normalize_axis(ctx.attr_int("axis"), r + 1, ctx);
  if (out.rank() != ind.rank() + 1 || out.dim(axis) != depth) ctx.fail("output shape does not match");
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= ind.dim(i);
  for (int64_t i = axis; i < r; ++i) inner *= ind.dim(i);
  const size_t es = dtype_size(vals.dtype());
  const char* off = static_cast<const char*>(vals.raw());
  const char* on = off + es;
  fill_tensor(out, off);
  char* dst = static_cast<char*>(out.raw());
  const bool float_idx = is_float(ind.dtype());
  // Indices in [-depth, depth) select a class (negative ones count from the end); any other
  // value (or NaN) leaves its row all off, as the spec says.
  parallel_for(outer * inner, 16384, [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) {
      const int64_t o = p / inner, i = p % inner;
      int64_t idx;
      if (float_idx) {
        double v = ind.as_double(p);
        if (!(v > -static_cast<double>(depth) - 1 && v < static_cast<double>(depth))) continue;
        idx = static_cast<int64_t>(v);  // truncates toward zero, like a cast to int64
      } else {
        idx = ind.as_int64(p);
      }
      if (idx < -depth || idx >= depth) continue;
      if (idx < 0) idx += depth;
      std::memcpy(dst + ((o * depth + idx) * inner + i) * es, on, es);
    }
  });
}

}  // namespace

void register_shape_kernels(KernelRegistry& r) {
  for (const char* op : {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"})
    r.add(op, copy_input, "", Writes::Every);  // a whole copy (or a size error)
  // Whole outputs: EyeLike and OneHot fill first, Trilu zeroes what it does not copy, Dropout's mask is filled.
  r.add("Shape", shape_kernel, "", Writes::Every);
  r.add("Size", size_kernel, "", Writes::Every);
  r.add("Dropout", dropout_kernel, "", Writes::Every);
  r.add("EyeLike", eyelike_kernel, "", Writes::Every);
  r.add("Trilu", trilu_kernel, "", Writes::Every);
  r.add("CumSum", scan_kernel<false>, "", Writes::Every);
  r.add("CumProd", scan_kernel<true>, "", Writes::Every);
  r.add("OneHot", onehot_kernel, "", Writes::Every);
}

}  // namespace fusec::cpu
