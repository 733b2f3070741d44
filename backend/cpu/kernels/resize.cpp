// CPU kernels for Resize and Upsample, following the ONNX reference implementation.
//
// The sampling tables (source indices and weights per output coordinate, per axis) are
// ir/ops/resize_taps.h's, which the CUDA planner uploads too. nearest gathers through one index
// map per axis; linear / cubic run separable passes, one per resized axis (last axis first, as
// the reference recurses), accumulating in float64.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/kernels/common.h"
#include "backend/dispatch_bytes.h"
#include "ir/ops/resize_taps.h"

namespace fusec::cpu {

namespace {

using resize::ResizeConfig;

ResizeConfig configure(const KernelContext& ctx) {
  const std::string& op = ctx.node().op_type;
  const int64_t opset = ctx.opset();
  const Tensor& x = ctx.input(0);
  const auto ins = resize::resize_inputs(op, opset);
  std::vector<double> roi, scales;
  std::vector<int64_t> sizes;
  if (ins.scales_attr) {
    for (float f : ctx.attr_floats("scales")) scales.push_back(f);
  } else if (ins.scales >= 0 && ctx.has_input(ins.scales)) {
    scales = resize::doubles_of(ctx.input(ins.scales));
  }
  if (ins.sizes >= 0 && ctx.has_input(ins.sizes)) sizes = ctx.input(ins.sizes).to_int64_vector();
  if (ins.roi >= 0 && ctx.has_input(ins.roi)) roi = resize::doubles_of(ctx.input(ins.roi));
  resize::ResizeParams p = resize::resize_params(ctx, opset, x.dims(), roi, scales, sizes);
  if (p.out_dims != ctx.output(0).dims())
    internal_error("Resize output shape disagrees with inference" + ctx.node().ref());
  return resize::resize_config(ctx, opset, std::move(p));
}

// ------------------------------------------------------------------ nearest

void resize_nearest(KernelContext& ctx, const ResizeConfig& c) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output(0);
  if (y.numel() == 0) return;
  const size_t r = x.rank();
  if (r == 0) {
    std::memcpy(y.raw(), x.raw(), x.nbytes());
    return;
  }
  if (x.numel() == 0 && !(c.ctm == "tf_crop_and_resize"))
    ctx.fail("cannot resize an empty input to a non-empty output");
  std::vector<std::vector<int64_t>> maps(r);
  for (size_t a = 0; a < r; ++a) maps[a] = resize::nearest_map(c, a, x.dim(a));
  Tensor ev(y.dtype(), {});
  convert_tensor(Tensor::scalar_float(static_cast<float>(c.extrapolation)), ev);
  auto xs = contiguous_strides(x.dims());
  std::vector<int64_t> od(y.dims().begin(), y.dims().end() - 1);
  int64_t rows = 1;
  for (int64_t d : od) rows *= d;
  const int64_t inner = y.dims().back();
  const auto& last = maps[r - 1];
  auto run = [&](auto tag) {
    using U = decltype(tag);
    const U e = *ev.data<U>();
    const U* src = x.data<U>();
    U* dst = y.data<U>();
    parallel_for(rows, std::max<int64_t>(1, 16384 / inner), [&](int64_t r0, int64_t r1) {
      for (int64_t row = r0; row < r1; ++row) {
        int64_t rem = row, off = 0;
        bool outside = false;
        for (size_t d = od.size(); d-- > 0;) {
          const int64_t i = rem % od[d];
          rem /= od[d];
          const int64_t s = maps[d][i];
          if (s < 0) outside = true;
          off += s * xs[d];
        }
        U* out = dst + row * inner;
        if (outside) {
          std::fill(out, out + inner, e);
          continue;
        }
        const U* in = src + off;
        for (int64_t j = 0; j < inner; ++j) out[j] = last[j] < 0 ? e : in[last[j]];
      }
    });
  };
  if (!dispatch_bytes(dtype_size(x.dtype()), run)) ctx.unsupported("unsupported data type");
}

// ------------------------------------------------------------------ linear / cubic

/// One separable pass: [outer, in_len, inner] -> [outer, out_len, inner] along the taps,
/// accumulating in double (the reference computes in float64 and rounds once at the end).
template <typename S, typename D>
void interpolate_axis(const S* src, D* dst, int64_t outer, int64_t in_len, int64_t out_len, int64_t inner,
                      const resize::ResizeTaps& t, double extrapolation) {
  const int64_t n = t.n;
  const int64_t total = outer * out_len;
  const int64_t min_chunk = std::max<int64_t>(1, 8192 / std::max<int64_t>(1, inner * n));
  if (inner == 1) {
    // Resampling the innermost axis: a short gather per output element.
    parallel_for(total, std::max<int64_t>(min_chunk, 256), [&](int64_t b, int64_t e) {
      int64_t o = b / out_len, j = b % out_len;
      for (int64_t q = b; q < e; ++q) {
        const S* base = src + o * in_len;
        const int64_t* idx = t.idx.data() + j * n;
        const double* w = t.w.data() + j * n;
        double a;
        if (t.outside[j])
          a = extrapolation;
        else if (n == 2)
          a = w[0] * static_cast<double>(base[idx[0]]) + w[1] * static_cast<double>(base[idx[1]]);
        else if (n == 4)
          a = w[0] * static_cast<double>(base[idx[0]]) + w[1] * static_cast<double>(base[idx[1]]) +
              w[2] * static_cast<double>(base[idx[2]]) + w[3] * static_cast<double>(base[idx[3]]);
        else {
          a = 0;
          for (int64_t k = 0; k < n; ++k) a += w[k] * static_cast<double>(base[idx[k]]);
        }
        dst[q] = static_cast<D>(a);
        if (++j == out_len) {
          j = 0;
          ++o;
        }
      }
    });
    return;
  }
  // Resampling an outer axis: whole contiguous rows of `inner` elements blend together.
  parallel_for(total, min_chunk, [&](int64_t b, int64_t e) {
    std::vector<double> acc(static_cast<size_t>(inner));
    for (int64_t q = b; q < e; ++q) {
      const int64_t o = q / out_len, j = q % out_len;
      D* out = dst + q * inner;
      if (t.outside[j]) {
        std::fill(out, out + inner, static_cast<D>(extrapolation));
        continue;
      }
      const S* base = src + o * in_len * inner;
      const int64_t* idx = t.idx.data() + j * n;
      const double* w = t.w.data() + j * n;
      double* ac = acc.data();
      {
        const double w0 = w[0];
        const S* in = base + idx[0] * inner;
        for (int64_t i = 0; i < inner; ++i) ac[i] = w0 * static_cast<double>(in[i]);
      }
      for (int64_t k = 1; k < n; ++k) {
        const double wk = w[k];
        if (wk == 0) continue;
        const S* in = base + idx[k] * inner;
        for (int64_t i = 0; i < inner; ++i) ac[i] += wk * static_cast<double>(in[i]);
      }
      for (int64_t i = 0; i < inner; ++i) out[i] = static_cast<D>(ac[i]);
    }
  });
}

/// Integer outputs round half to even and saturate, as the reference's saturate_cast does.
void store_result(const Tensor& src, Tensor& dst) {
  if (!is_integer(dst.dtype())) {
    convert_tensor(src, dst);
    return;
  }
  Tensor rounded(DType::Float64, src.dims());
  const double* s = src.data<double>();
  double* r = rounded.data<double>();
  for (int64_t i = 0; i < src.numel(); ++i) r[i] = std::nearbyint(s[i]);
  convert_tensor(rounded, dst);  // clamps to the integer range
}

/// Resamples one contiguous block of shape `dims` along `order` (last axis first; entries are
/// axis numbers of the full tensor, `first` the full-tensor number of dims[0]). Intermediates are
/// float64 in `scratch`.
template <typename S, typename D>
void run_passes(const S* src, D* dst, std::vector<int64_t> dims, size_t first, const std::vector<size_t>& order,
                const std::vector<resize::ResizeTaps>& taps, const ResizeConfig& c, std::vector<double> (&scratch)[2]) {
  const double* cur = nullptr;
  for (size_t step = 0; step < order.size(); ++step) {
    const size_t full = order[step], a = full - first;
    const int64_t in_len = dims[a], out_len = c.p.out_dims[full];
    int64_t outer = 1, inner = 1;
    for (size_t i = 0; i < a; ++i) outer *= dims[i];
    for (size_t i = a + 1; i < dims.size(); ++i) inner *= dims[i];
    dims[a] = out_len;
    const bool last = step + 1 == order.size();
    double* buf = nullptr;
    if (!last) {
      int64_t n = 1;
      for (int64_t d : dims) n *= d;
      scratch[step % 2].resize(static_cast<size_t>(n));
      buf = scratch[step % 2].data();
    }
    const resize::ResizeTaps& t = taps[full];
    if (step == 0 && last)
      interpolate_axis(src, dst, outer, in_len, out_len, inner, t, c.extrapolation);
    else if (step == 0)
      interpolate_axis(src, buf, outer, in_len, out_len, inner, t, c.extrapolation);
    else if (last)
      interpolate_axis(cur, dst, outer, in_len, out_len, inner, t, c.extrapolation);
    else
      interpolate_axis(cur, buf, outer, in_len, out_len, inner, t, c.extrapolation);
    cur = buf;
  }
}

void resize_interpolate(KernelContext& ctx, const ResizeConfig& c) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output(0);
  if (y.numel() == 0) return;
  const size_t r = x.rank();
  if (x.numel() == 0) ctx.fail("cannot resize an empty input to a non-empty output");
  std::vector<resize::ResizeTaps> taps(r);
  std::vector<size_t> order;  // axes to resample, last first (as the reference recurses)
  for (size_t a = r; a-- > 0;) {
    taps[a] = resize::make_taps(c, a, x.dim(a));
    if (!taps[a].identity) order.push_back(a);
  }
  if (order.empty()) {
    convert_tensor(x, y);
    return;
  }
  // float32/float64 data is read directly, other types through a float64 copy; float outputs are
  // written directly, others through a float64 buffer that rounds at the end.
  Tensor src_store, dst_store;
  const Tensor* src = &x;
  if (x.dtype() != DType::Float32 && x.dtype() != DType::Float64) {
    src_store = Tensor(DType::Float64, x.dims());
    convert_tensor(x, src_store);
    src = &src_store;
  }
  Tensor* dst = &y;
  if (y.dtype() != DType::Float32 && y.dtype() != DType::Float64) {
    dst_store = Tensor(DType::Float64, y.dims());
    dst = &dst_store;
  }
  // Leading axes that are not resampled split the work into independent blocks (N·C images):
  // one block per task keeps each block's intermediates in cache.
  const size_t first = order.back();
  int64_t blocks = 1, in_block = 1, out_block = 1;
  for (size_t i = 0; i < first; ++i) blocks *= x.dim(i);
  for (size_t i = first; i < r; ++i) {
    in_block *= x.dim(i);
    out_block *= y.dim(i);
  }
  const bool per_block = blocks >= 2 * num_threads();
  auto run = [&](auto* s, auto* d) {
    if (per_block) {
      std::vector<int64_t> sub(x.dims().begin() + first, x.dims().end());
      parallel_for(blocks, 1, [&](int64_t b0, int64_t b1) {
        std::vector<double> scratch[2];
        for (int64_t b = b0; b < b1; ++b)
          run_passes(s + b * in_block, d + b * out_block, sub, first, order, taps, c, scratch);
      });
    } else {
      std::vector<double> scratch[2];
      run_passes(s, d, x.dims(), 0, order, taps, c, scratch);
    }
  };
  auto with_dst = [&](auto* s) {
    if (dst->dtype() == DType::Float32)
      run(s, dst->data<float>());
    else
      run(s, dst->data<double>());
  };
  if (src->dtype() == DType::Float32)
    with_dst(src->data<float>());
  else
    with_dst(src->data<double>());
  if (dst != &y) store_result(*dst, y);
}

void resize_kernel(KernelContext& ctx) {
  const ResizeConfig c = configure(ctx);
  if (c.mode == "nearest") return resize_nearest(ctx, c);
  if (has_half_io(ctx)) return via_float32(ctx, resize_kernel);
  if (ctx.input(0).dtype() == DType::Bool) ctx.fail("linear and cubic modes need numeric data, not bool");
  resize_interpolate(ctx, c);
}

}  // namespace

void register_resize_kernels(KernelRegistry& r) {
  // nearest: every row (extrapolated or gathered); linear/cubic: each pass writes its whole output.
  r.add("Resize", resize_kernel, "", Writes::Every);
  r.add("Upsample", resize_kernel, "", Writes::Every);
}

}  // namespace fusec::cpu
