// CPU kernels for the signal ops (ir/ops/signal.cpp), in float64 as the ONNX reference's numpy
// computes them. The DFT is direct (n multiply-adds per output value): a reference, not a fast FFT;
// twiddles are taken at (k·t mod n) so long transforms keep their precision.
#include <cmath>
#include <vector>

#include "backend/cpu/kernels/common.h"
#include "ir/dim_math.h"
#include "ir/ops/signal_axis.h"

namespace fusec::cpu {

namespace {

constexpr double kPi = 3.14159265358979323846;

int64_t scalar_input(const KernelContext& ctx, size_t i) {
  const Tensor& t = ctx.input(i);
  if (t.numel() != 1) ctx.fail("input " + std::to_string(i) + " must hold one value, got " + dims_str(t.dims()));
  return t.as_int64(0);
}

/// Writes v[i] into y (float32 or float64).
void store(const NodeAttrs& where, Tensor& y, const std::vector<double>& v) {
  if (static_cast<int64_t>(v.size()) != y.numel())
    where.fail("output has " + std::to_string(y.numel()) + " elements, expected " + std::to_string(v.size()));
  dispatch_float(y.dtype(), where, [&](auto tag) {
    using T = decltype(tag);
    T* p = y.data<T>();
    for (size_t i = 0; i < v.size(); ++i) p[i] = static_cast<T>(v[i]);
  });
}

/// Generalized cosine windows: a0 - a1·cos(2πn/N) + a2·cos(4πn/N), N the size (periodic) or size - 1.
Kernel cosine_window(double a0, double a1, double a2) {
  return [a0, a1, a2](KernelContext& ctx) {
    if (has_half_io(ctx)) return via_float32(ctx, cosine_window(a0, a1, a2));
    const int64_t size = scalar_input(ctx, 0);
    if (size < 0) ctx.fail("size must be >= 0, got " + std::to_string(size));
    const double n = static_cast<double>(ctx.attr_int("periodic") != 0 ? size : size - 1);
    std::vector<double> w(static_cast<size_t>(size));
    for (int64_t i = 0; i < size; ++i) {
      // A symmetric window of one sample has no period: it is [1], as in numpy and torch.
      const double x = 2 * kPi * static_cast<double>(i) / n;
      w[static_cast<size_t>(i)] = n > 0 ? a0 - a1 * std::cos(x) + a2 * std::cos(2 * x) : 1.0;
    }
    store(ctx, ctx.output(0), w);
  };
}

/// x as complex samples in float64: `count` lines of `n` samples, sample t of line l at
/// x[(l / inner) * n * inner + t * inner + l % inner] (times `c` components).
struct Lines {
  std::vector<double> re, im;
  int64_t outer, n, inner;
  double at_re(int64_t l, int64_t t) const {
    return re[static_cast<size_t>(((l / inner) * n + t) * inner + l % inner)];
  }
  double at_im(int64_t l, int64_t t) const {
    return im[static_cast<size_t>(((l / inner) * n + t) * inner + l % inner)];
  }
};

Lines lines_of(const Tensor& x, int64_t axis) {
  Lines L;
  const int64_t r = static_cast<int64_t>(x.rank()), c = x.dim(static_cast<size_t>(r - 1));
  L.outer = 1, L.inner = 1, L.n = x.dim(static_cast<size_t>(axis));
  for (int64_t i = 0; i < axis; ++i) L.outer *= x.dim(static_cast<size_t>(i));
  for (int64_t i = axis + 1; i < r - 1; ++i) L.inner *= x.dim(static_cast<size_t>(i));
  const int64_t samples = x.numel() / std::max<int64_t>(c, 1);
  L.re.resize(static_cast<size_t>(samples));
  L.im.assign(static_cast<size_t>(samples), 0.0);
  for (int64_t i = 0; i < samples; ++i) {
    L.re[static_cast<size_t>(i)] = x.as_double(i * c);
    if (c == 2) L.im[static_cast<size_t>(i)] = x.as_double(i * c + 1);
  }
  return L;
}

/// e^(sign·2πi·k·t/n), the angle reduced first.
inline void twiddle(int64_t k, int64_t t, int64_t n, double sign, double& c, double& s) {
  // In 128 bits: k·t overflows int64 for transforms of more than about 3e9 points.
  const auto r =
      static_cast<unsigned __int128>(k) * static_cast<unsigned __int128>(t) % static_cast<unsigned __int128>(n);
  const double a = sign * 2 * kPi * static_cast<double>(static_cast<uint64_t>(r)) / static_cast<double>(n);
  c = std::cos(a);
  s = std::sin(a);
}

void dft_kernel(KernelContext& ctx) {
  if (has_half_io(ctx)) return via_float32(ctx, dft_kernel);
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output(0);
  const int64_t r = static_cast<int64_t>(x.rank());
  if (r < 2 || (x.dim(x.rank() - 1) != 1 && x.dim(x.rank() - 1) != 2))
    ctx.fail("the input must end in a dim of 1 (real) or 2 (complex), got " + dims_str(x.dims()));
  const int64_t given = ctx.opset() < 20 ? ctx.attr_int("axis") : ctx.has_input(2) ? scalar_input(ctx, 2) : -2;
  const auto normalized = dft_signal_axis(given, r);
  if (!normalized) ctx.fail("axis " + std::to_string(given) + " is not a signal axis");
  const int64_t axis = *normalized;
  const bool inverse = ctx.attr_int("inverse") != 0, onesided = ctx.attr_int("onesided") != 0;
  const Lines in = lines_of(x, axis);
  int64_t len = ctx.has_input(1)      ? scalar_input(ctx, 1)
                : inverse && onesided ? dims::mul(2, in.n - 1, ctx, "the inverse's length")
                                      : in.n;
  if (len < 1) ctx.fail("dft_length must be >= 1, got " + std::to_string(len));
  const int64_t lines = in.outer * in.inner;
  const int64_t out_n = inverse && onesided ? len : onesided ? len / 2 + 1 : len;
  const int64_t comps = inverse && onesided ? 1 : 2;
  std::vector<int64_t> want = x.dims();
  want[static_cast<size_t>(axis)] = out_n;
  want.back() = comps;
  if (y.dims() != want) ctx.fail("output has shape " + dims_str(y.dims()) + ", expected " + dims_str(want));
  std::vector<double> out(static_cast<size_t>(lines * out_n * comps));
  const int64_t avail = std::min(in.n, len);  // samples past dft_length are dropped, missing ones are 0
  parallel_for(lines, 1, [&](int64_t l0, int64_t l1) {
    for (int64_t l = l0; l < l1; ++l) {
      const int64_t base = (l / in.inner) * out_n * in.inner + l % in.inner;
      for (int64_t k = 0; k < out_n; ++k) {
        double re = 0, im = 0, c, s;
        if (inverse && onesided) {
          // A real signal from the non-negative half of a Hermitian spectrum: numpy's irfft.
          const int64_t half = len / 2;
          for (int64_t f = 0; f <= half && f < in.n; ++f) {
            twiddle(f, k, len, 1.0, c, s);
            const double term = in.at_re(l, f) * c - in.at_im(l, f) * s;
            const bool edge = f == 0 || (len % 2 == 0 && f == half);
            re += edge ? (f == 0 ? in.at_re(l, 0) : in.at_re(l, f) * c) : 2 * term;
          }
          out[static_cast<size_t>(base + k * in.inner)] = re / static_cast<double>(len);
          continue;
        }
        const double sign = inverse ? 1.0 : -1.0;
        for (int64_t t = 0; t < avail; ++t) {
          twiddle(k, t, len, sign, c, s);
          const double xr = in.at_re(l, t), xi = in.at_im(l, t);
          re += xr * c - xi * s;
          im += xr * s + xi * c;
        }
        if (inverse) re /= static_cast<double>(len), im /= static_cast<double>(len);
        const size_t o = static_cast<size_t>((base + k * in.inner) * 2);
        out[o] = re;
        out[o + 1] = im;
      }
    }
  });
  store(ctx, y, out);
}

void stft_kernel(KernelContext& ctx) {
  if (has_half_io(ctx)) return via_float32(ctx, stft_kernel);
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output(0);
  if (x.rank() != 3 || (x.dim(2) != 1 && x.dim(2) != 2))
    ctx.fail("the signal must be [batch, length, 1 or 2], got " + dims_str(x.dims()));
  const int64_t step = scalar_input(ctx, 1);
  const Tensor* window = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  const int64_t frame = ctx.has_input(3) ? scalar_input(ctx, 3) : window ? window->numel() : x.dim(1);
  if (step < 1) ctx.fail("frame_step must be >= 1, got " + std::to_string(step));
  if (frame < 1 || frame > x.dim(1))
    ctx.fail("frame_length " + std::to_string(frame) + " does not fit the signal's " + std::to_string(x.dim(1)) +
             " samples");
  if (window && (window->rank() != 1 || window->numel() != frame))
    ctx.fail("the window must be [" + std::to_string(frame) + "], got " + dims_str(window->dims()));
  const int64_t B = x.dim(0), frames = 1 + (x.dim(1) - frame) / step;
  const int64_t bins = ctx.attr_int("onesided") != 0 ? frame / 2 + 1 : frame;
  const std::vector<int64_t> want{B, frames, bins, 2};
  if (y.dims() != want) ctx.fail("output has shape " + dims_str(y.dims()) + ", expected " + dims_str(want));
  const Lines in = lines_of(x, 1);
  std::vector<double> w(static_cast<size_t>(frame), 1.0);
  if (window)
    for (int64_t t = 0; t < frame; ++t) w[static_cast<size_t>(t)] = window->as_double(t);
  std::vector<double> out(static_cast<size_t>(B * frames * bins * 2));
  parallel_for(B * frames, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t b = p / frames, f = p % frames, start = f * step;
      for (int64_t k = 0; k < bins; ++k) {
        double re = 0, im = 0, c, s;
        for (int64_t t = 0; t < frame; ++t) {
          twiddle(k, t, frame, -1.0, c, s);
          const double xr = in.at_re(b, start + t) * w[static_cast<size_t>(t)];
          const double xi = in.at_im(b, start + t) * w[static_cast<size_t>(t)];
          re += xr * c - xi * s;
          im += xr * s + xi * c;
        }
        const size_t o = static_cast<size_t>((p * bins + k) * 2);
        out[o] = re;
        out[o + 1] = im;
      }
    }
  });
  store(ctx, y, out);
}

/// Triangular filters spaced evenly in mel (2595·log10(1 + f/700)), as the ONNX reference builds
/// them: num_mel_bins + 2 edges, spaced (high - low) / (num_mel_bins + 2) apart, each mapped to the
/// spectrogram bin floor((dft_length + 1)·f / sample_rate).
void mel_weight_matrix_kernel(KernelContext& ctx) {
  if (has_half_io(ctx)) return via_float32(ctx, mel_weight_matrix_kernel);
  const int64_t mels = scalar_input(ctx, 0), len = scalar_input(ctx, 1), rate = scalar_input(ctx, 2);
  const double lo = ctx.input(3).as_double(0), hi = ctx.input(4).as_double(0);
  if (mels < 1 || len < 1 || rate < 1)
    ctx.fail("num_mel_bins, dft_length and sample_rate must be >= 1, got " + std::to_string(mels) + ", " +
             std::to_string(len) + ", " + std::to_string(rate));
  if (!(lo >= 0 && hi >= lo && std::isfinite(hi))) ctx.fail("the edges must satisfy 0 <= lower <= upper");
  const int64_t spectrum = len / 2 + 1;
  auto mel = [](double f) { return 2595 * std::log1p(f / 700) / std::log(10.0); };
  const double lo_mel = mel(lo), step = (mel(hi) - lo_mel) / static_cast<double>(mels + 2);
  std::vector<int64_t> edge(static_cast<size_t>(mels + 2));
  for (int64_t i = 0; i < mels + 2; ++i) {
    const double f = 700 * std::expm1((static_cast<double>(i) * step + lo_mel) / 2595 * std::log(10.0));
    const double bin = std::floor(static_cast<double>(len + 1) * f / static_cast<double>(rate));
    if (!(bin >= 0 && bin < static_cast<double>(spectrum)))  // also an overflow to inf, before the cast
      ctx.fail("upper_edge_hertz " + std::to_string(hi) + " is above the Nyquist frequency of sample_rate " +
               std::to_string(rate));
    edge[static_cast<size_t>(i)] = static_cast<int64_t>(bin);
  }
  std::vector<double> m(static_cast<size_t>(spectrum * mels), 0.0);
  auto at = [&](int64_t j, int64_t i) -> double& { return m[static_cast<size_t>(j * mels + i)]; };
  for (int64_t i = 0; i < mels; ++i) {
    const int64_t l = edge[static_cast<size_t>(i)], c = edge[static_cast<size_t>(i + 1)],
                  h = edge[static_cast<size_t>(i + 2)];
    if (c == l) {
      at(c, i) = 1;
    } else {
      for (int64_t j = l; j <= c; ++j) at(j, i) = static_cast<double>(j - l) / static_cast<double>(c - l);
    }
    for (int64_t j = c; j < h; ++j) at(j, i) = static_cast<double>(h - j) / static_cast<double>(h - c);
  }
  store(ctx, ctx.output(0), m);
}

}  // namespace

void register_signal_kernels(KernelRegistry& r) {
  r.add("HannWindow", cosine_window(0.5, 0.5, 0), "", Writes::Every);
  r.add("HammingWindow", cosine_window(25.0 / 46.0, 21.0 / 46.0, 0), "", Writes::Every);
  r.add("BlackmanWindow", cosine_window(0.42, 0.5, 0.08), "", Writes::Every);
  r.add("DFT", dft_kernel, "", Writes::Every);
  r.add("STFT", stft_kernel, "", Writes::Every);
  r.add("MelWeightMatrix", mel_weight_matrix_kernel, "", Writes::Every);
}

}  // namespace fusec::cpu
