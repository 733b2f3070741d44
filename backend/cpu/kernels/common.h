// Helpers shared by the CPU kernel families: dtype dispatch, fp16/bf16 via float32, and the
// broadcasting loop every elementwise op uses.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <vector>

#include "backend/cpu/kernel.h"
#include "backend/cpu/parallel.h"
#include "ir/error.h"
#include "ir/half.h"

namespace fusec::cpu {

/// Calls f(T{}) with T the C++ type of `t` for the types listed by the macro families below.
/// fp16/bf16 are not dispatched here: kernels run them through `via_float32`.
template <typename F>
void dispatch_float(DType t, const NodeAttrs& where, F&& f) {
  switch (t) {
    case DType::Float32:
      f(float{});
      return;
    case DType::Float64:
      f(double{});
      return;
    default:
      where.unsupported(std::string("unsupported data type ") + dtype_name(t));
  }
}

template <typename F>
void dispatch_numeric(DType t, const NodeAttrs& where, F&& f) {
  switch (t) {
    case DType::Float32:
      f(float{});
      return;
    case DType::Float64:
      f(double{});
      return;
    case DType::Int8:
      f(int8_t{});
      return;
    case DType::UInt8:
      f(uint8_t{});
      return;
    case DType::Int16:
      f(int16_t{});
      return;
    case DType::Int32:
      f(int32_t{});
      return;
    case DType::Int64:
      f(int64_t{});
      return;
    default:
      where.unsupported(std::string("unsupported data type ") + dtype_name(t));
  }
}

/// Numeric types plus bool (stored as uint8_t): for data movement and comparisons.
template <typename F>
void dispatch_all(DType t, const NodeAttrs& where, F&& f) {
  if (t == DType::Bool) {
    f(uint8_t{});
    return;
  }
  if (t == DType::Float16 || t == DType::BFloat16) {
    f(uint16_t{});
    return;
  }
  dispatch_numeric(t, where, std::forward<F>(f));
}

/// Runs `kernel` with every float16/bfloat16 input and output converted to float32, then converts
/// the outputs back. Lets a kernel written for float/double serve the half types exactly as the
/// reference does (compute in float, round once).
void via_float32(KernelContext& ctx, const std::function<void(KernelContext&)>& kernel);
bool has_half_io(const KernelContext& ctx);
Tensor to_float32(const Tensor& t);
/// Converts float32 `src` into `dst` (float16 or bfloat16) with round-to-nearest-even.
void from_float32(const Tensor& src, Tensor& dst);
/// Copies with conversion between any two dtypes (Cast semantics: float->int truncates).
void convert_tensor(const Tensor& src, Tensor& dst);

/// Strides of a row-major tensor.
std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& dims);

/// Iterates an N-input broadcast over `out_dims`: calls
///   row(out_offset, in_offsets, in_inner_strides, count)
/// for each run of `count` contiguous output elements, where input k's elements are at
/// in_offsets[k] + j * in_inner_strides[k] (stride 0 when broadcast). Rows run in parallel.
template <size_t N, typename Row>
void broadcast_rows(const std::vector<int64_t>& out_dims, const std::array<const std::vector<int64_t>*, N>& in_dims,
                    Row&& row) {
  const size_t rank = out_dims.size();
  int64_t total = 1;
  for (int64_t d : out_dims) total *= d;
  if (total == 0) return;
  // Per-input strides aligned to the output rank (0 on broadcast dims).
  std::array<std::vector<int64_t>, N> strides;
  for (size_t k = 0; k < N; ++k) {
    const auto& d = *in_dims[k];
    strides[k].assign(rank, 0);
    int64_t s = 1;
    for (size_t i = 0; i < d.size(); ++i) {
      size_t ax = d.size() - 1 - i;
      size_t oax = rank - 1 - i;
      strides[k][oax] = d[ax] == 1 ? 0 : s;
      s *= d[ax];
    }
  }
  // Merge trailing dims while every input is either contiguous or broadcast across them, so the
  // inner run is as long as possible.
  int64_t inner = rank ? out_dims[rank - 1] : 1;
  std::array<int64_t, N> inner_stride{};
  for (size_t k = 0; k < N; ++k) inner_stride[k] = rank ? strides[k][rank - 1] : 0;
  size_t split = rank ? rank - 1 : 0;
  while (split > 0) {
    size_t ax = split - 1;
    bool ok = true;
    for (size_t k = 0; k < N; ++k) {
      int64_t want = inner_stride[k] == 0 ? 0 : inner_stride[k] * inner;
      if (inner_stride[k] == 0 && strides[k][ax] != 0) ok = false;
      if (inner_stride[k] != 0 && strides[k][ax] != want) ok = false;
    }
    if (!ok) break;
    inner *= out_dims[ax];
    --split;
  }
  int64_t rows = total / inner;
  // Row r's index over the outer `split` dims (into idx) and each input's offset of its start.
  auto row_start = [&](int64_t r, std::vector<int64_t>& idx) {
    std::array<int64_t, N> off{};
    for (size_t i = split; i-- > 0;) {
      idx[i] = r % out_dims[i];
      r /= out_dims[i];
      for (size_t k = 0; k < N; ++k) off[k] += idx[i] * strides[k][i];
    }
    return off;
  };
  // Rows too few to give each thread two and long enough to cut (a same-shape Add merges into one
  // row of every element, which ran on one thread): each is cut into pieces of about kPiece
  // elements. An innermost stride is 0 or 1, so a piece of a row is a row of its own.
  constexpr int64_t kPiece = 16384;
  if (rows < 2 * num_threads() && inner >= 4 * kPiece) {
    const int64_t pieces = (inner + kPiece - 1) / kPiece, len = (inner + pieces - 1) / pieces;
    parallel_for(rows * pieces, 1, [&](int64_t t0, int64_t t1) {
      std::vector<int64_t> idx(split, 0);
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t r = t / pieces, j0 = (t % pieces) * len;
        std::array<int64_t, N> off = row_start(r, idx);
        for (size_t k = 0; k < N; ++k) off[k] += j0 * inner_stride[k];
        row(r * inner + j0, off, inner_stride, std::min(len, inner - j0));
      }
    });
    return;
  }
  int64_t min_rows = std::max<int64_t>(1, 16384 / std::max<int64_t>(inner, 1));
  parallel_for(rows, min_rows, [&](int64_t r0, int64_t r1) {
    std::vector<int64_t> idx(split, 0);
    std::array<int64_t, N> off = row_start(r0, idx);
    for (int64_t r = r0; r < r1; ++r) {
      row(r * inner, off, inner_stride, inner);
      // Advance the outer index like an odometer.
      for (size_t i = split; i-- > 0;) {
        ++idx[i];
        for (size_t k = 0; k < N; ++k) off[k] += strides[k][i];
        if (idx[i] < out_dims[i]) break;
        for (size_t k = 0; k < N; ++k) off[k] -= strides[k][i] * out_dims[i];
        idx[i] = 0;
      }
    }
  });
}

/// out[i] = f(a[i], b[i]) with ONNX broadcasting; A, B input types, O output type.
template <typename A, typename B, typename O, typename F>
void binary_broadcast(const Tensor& a, const Tensor& b, Tensor& out, F&& f) {
  const A* pa = a.data<A>();
  const B* pb = b.data<B>();
  O* po = out.data<O>();
  broadcast_rows<2>(out.dims(), {&a.dims(), &b.dims()},
                    [&](int64_t o, const std::array<int64_t, 2>& off, const std::array<int64_t, 2>& st, int64_t n) {
                      const A* x = pa + off[0];
                      const B* y = pb + off[1];
                      O* z = po + o;
                      if (st[0] == 1 && st[1] == 1) {
                        for (int64_t j = 0; j < n; ++j) z[j] = f(x[j], y[j]);
                      } else if (st[0] == 1 && st[1] == 0) {
                        const B yv = *y;
                        for (int64_t j = 0; j < n; ++j) z[j] = f(x[j], yv);
                      } else if (st[0] == 0 && st[1] == 1) {
                        const A xv = *x;
                        for (int64_t j = 0; j < n; ++j) z[j] = f(xv, y[j]);
                      } else {
                        for (int64_t j = 0; j < n; ++j) z[j] = f(x[j * st[0]], y[j * st[1]]);
                      }
                    });
}

/// out[i] = f(in[i]) over contiguous data, in parallel.
template <typename I, typename O, typename F>
void unary_map(const Tensor& in, Tensor& out, F&& f) {
  const I* x = in.data<I>();
  O* y = out.data<O>();
  parallel_for(in.numel(), 16384, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = f(x[i]);
  });
}

}  // namespace fusec::cpu
