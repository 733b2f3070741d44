// CPU kernels for BatchNormalization, InstanceNormalization, GroupNormalization, LayerNormalization,
// RMSNormalization,
// MeanVarianceNormalization and LRN.
//
// Statistics (means, variances) accumulate in double with a two-pass mean/variance, so they match
// numpy's float64-free references and onnxruntime well within 1e-5 even for long rows with a large
// mean; the normalization itself runs in the tensor's type.
#include <cmath>
#include <string>
#include <vector>

#include "backend/axis_layout.h"
#include "backend/cpu/kernels/common.h"
#include "backend/cpu/kernels/reduce_util.h"

namespace fusec::cpu {

namespace {

/// All elements of a float tensor as double (small parameter vectors).
std::vector<double> as_doubles(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[static_cast<size_t>(i)] = t.as_double(i);
  return v;
}

/// Writes v into a float/double output tensor (halves were already widened by via_float32).
void store(const KernelContext& ctx, Tensor& t, const std::vector<double>& v) {
  dispatch_float(t.dtype(), ctx, [&](auto tag) {
    using T = decltype(tag);
    T* p = t.data<T>();
    for (size_t i = 0; i < v.size() && static_cast<int64_t>(i) < t.numel(); ++i) p[i] = static_cast<T>(v[i]);
  });
}

/// Mean and (population) variance of n contiguous values, two-pass in double. Four accumulators
/// give the adds room to overlap.
template <typename T>
void mean_var(const T* p, int64_t n, double& mean, double& var) {
  if (n == 0) {
    mean = var = 0;
    return;
  }
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    s0 += static_cast<double>(p[j]);
    s1 += static_cast<double>(p[j + 1]);
    s2 += static_cast<double>(p[j + 2]);
    s3 += static_cast<double>(p[j + 3]);
  }
  for (; j < n; ++j) s0 += static_cast<double>(p[j]);
  mean = (s0 + s1 + s2 + s3) / static_cast<double>(n);
  s0 = s1 = s2 = s3 = 0;
  j = 0;
  for (; j + 4 <= n; j += 4) {
    double d0 = p[j] - mean, d1 = p[j + 1] - mean, d2 = p[j + 2] - mean, d3 = p[j + 3] - mean;
    s0 += d0 * d0;
    s1 += d1 * d1;
    s2 += d2 * d2;
    s3 += d3 * d3;
  }
  for (; j < n; ++j) {
    double d = p[j] - mean;
    s0 += d * d;
  }
  var = (s0 + s1 + s2 + s3) / static_cast<double>(n);
}

// ---- BatchNormalization ----

void batchnorm(KernelContext& ctx) {
  if (has_half_io(ctx)) return via_float32(ctx, batchnorm);
  const Tensor& x = ctx.input(0);
  if (x.rank() < 2) ctx.fail("X must have shape [N, C, ...]");
  const int64_t N = x.dim(0), C = x.dim(1);
  const int64_t S = N * C == 0 ? 0 : x.numel() / (N * C);
  const float eps = ctx.attr_float("epsilon");
  const float momentum = ctx.attr_float("momentum");
  bool training;
  if (ctx.schema().find_attr("training_mode")) {
    training = ctx.attr_int("training_mode") != 0;
  } else {
    // Before opset 14 the outputs say the mode: Y alone is test mode (is_test too, in opset 6).
    training = false;
    for (size_t i = 1; i < ctx.num_outputs(); ++i) training = training || ctx.has_output(i);
    if (ctx.schema().find_attr("is_test") && ctx.attr_int("is_test") != 0) training = false;
  }
  const std::vector<double> scale = as_doubles(ctx.input(1)), bias = as_doubles(ctx.input(2));
  std::vector<double> mean = as_doubles(ctx.input(3)), var = as_doubles(ctx.input(4));
  // Per-channel parameters, or per-activation ([C, D1, ...]) with spatial=0 in opsets 6-8.
  const int64_t P = static_cast<int64_t>(scale.size());
  const bool per_channel = P == C;
  if (!per_channel && !(P == C * S && P > 0 && ctx.schema().find_attr("spatial") && ctx.attr_int("spatial") == 0))
    ctx.fail("scale has " + std::to_string(P) + " entries for " + std::to_string(C) + " channels");
  if (static_cast<int64_t>(bias.size()) != P || static_cast<int64_t>(mean.size()) != P ||
      static_cast<int64_t>(var.size()) != P)
    ctx.fail("B, mean and var must have the shape of scale");
  if (training && !per_channel) ctx.unsupported("training mode with spatial=0 is not supported");

  dispatch_float(x.dtype(), ctx, [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* py = ctx.output(0).data<T>();
    std::vector<double> batch_mean, batch_var;
    if (training) {
      // Batch statistics per channel over N and the spatial dims, two-pass in double.
      batch_mean.assign(static_cast<size_t>(C), 0);
      batch_var.assign(static_cast<size_t>(C), 0);
      parallel_for(C, 1, [&](int64_t c0, int64_t c1) {
        for (int64_t c = c0; c < c1; ++c) {
          double s = 0;
          for (int64_t n = 0; n < N; ++n) {
            const T* p = px + (n * C + c) * S;
            for (int64_t j = 0; j < S; ++j) s += p[j];
          }
          const int64_t count = N * S;
          const double m = count > 0 ? s / static_cast<double>(count) : 0;
          double q = 0;
          for (int64_t n = 0; n < N; ++n) {
            const T* p = px + (n * C + c) * S;
            for (int64_t j = 0; j < S; ++j) q += (p[j] - m) * (p[j] - m);
          }
          batch_mean[c] = m;
          batch_var[c] = count > 0 ? q / static_cast<double>(count) : 0;
        }
      });
    }
    const std::vector<double>& use_mean = training ? batch_mean : mean;
    const std::vector<double>& use_var = training ? batch_var : var;
    // y = (x - mean) * s + B with s = scale / sqrt(var + eps): the subtraction first keeps
    // precision when |mean| is large relative to the spread.
    std::vector<T> m(static_cast<size_t>(P)), s(static_cast<size_t>(P)), b(static_cast<size_t>(P));
    for (int64_t i = 0; i < P; ++i) {
      m[i] = static_cast<T>(use_mean[i]);
      s[i] = static_cast<T>(scale[i] / std::sqrt(use_var[i] + static_cast<double>(eps)));
      b[i] = static_cast<T>(bias[i]);
    }
    parallel_for(N * C, std::max<int64_t>(1, 16384 / std::max<int64_t>(S, 1)), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t c = r % C;
        const T* p = px + r * S;
        T* q = py + r * S;
        if (per_channel) {
          const T mc = m[c], sc = s[c], bc = b[c];
          for (int64_t j = 0; j < S; ++j) q[j] = (p[j] - mc) * sc + bc;
        } else {
          const int64_t o = c * S;
          for (int64_t j = 0; j < S; ++j) q[j] = (p[j] - m[o + j]) * s[o + j] + b[o + j];
        }
      }
    });
    if (!training) {
      // Outputs beyond Y in test mode (only reachable with training_mode=0 and extra outputs):
      // the statistics pass through unchanged.
      if (ctx.has_output(1)) store(ctx, ctx.output(1), mean);
      if (ctx.has_output(2)) store(ctx, ctx.output(2), var);
      return;
    }
    std::vector<double> run_mean(static_cast<size_t>(C)), run_var(static_cast<size_t>(C));
    for (int64_t c = 0; c < C; ++c) {
      run_mean[c] = mean[c] * momentum + batch_mean[c] * (1.0 - momentum);
      run_var[c] = var[c] * momentum + batch_var[c] * (1.0 - momentum);
    }
    if (ctx.has_output(1)) store(ctx, ctx.output(1), run_mean);
    if (ctx.has_output(2)) store(ctx, ctx.output(2), run_var);
    if (ctx.has_output(3)) store(ctx, ctx.output(3), batch_mean);  // saved_mean (opset < 14)
    if (ctx.has_output(4)) store(ctx, ctx.output(4), batch_var);   // saved_var (opset < 14)
  });
}

// ---- InstanceNormalization, GroupNormalization ----

/// Each instance's `groups` runs of C / groups channels (contiguous in X) normalized as one row
/// each, then scaled and shifted per channel (`per_channel`: C values) or per group. The statistics
/// in double, whatever a stash_type asks, as the other norms'.
void normalize_channel_groups(KernelContext& ctx, int64_t groups, bool per_channel) {
  const Tensor& x = ctx.input(0);
  const int64_t N = x.dim(0), C = x.dim(1);
  const int64_t S = N * C == 0 ? 0 : x.numel() / (N * C), per_group = C / groups, len = per_group * S;
  const std::vector<double> scale = as_doubles(ctx.input(1)), bias = as_doubles(ctx.input(2));
  const int64_t want = per_channel ? C : groups;
  if (static_cast<int64_t>(scale.size()) != want || static_cast<int64_t>(bias.size()) != want)
    ctx.fail(std::string("scale and bias must have one entry per ") + (per_channel ? "channel" : "group") + " (" +
             std::to_string(want) + ")");
  const double eps = ctx.attr_float("epsilon");
  dispatch_float(x.dtype(), ctx, [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* py = ctx.output(0).data<T>();
    parallel_for(N * groups, std::max<int64_t>(1, 8192 / std::max<int64_t>(len, 1)), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t g = r % groups;
        const T* p = px + r * len;
        T* q = py + r * len;
        double mean, var;
        mean_var(p, len, mean, var);
        const double root = std::sqrt(var + eps);
        const T m = static_cast<T>(mean);
        for (int64_t k = 0; k < per_group; ++k) {
          const int64_t at = per_channel ? g * per_group + k : g;
          const T sc = static_cast<T>(scale[at] / root), b = static_cast<T>(bias[at]);
          for (int64_t j = k * S; j < (k + 1) * S; ++j) q[j] = (p[j] - m) * sc + b;
        }
      }
    });
  });
}

void instancenorm(KernelContext& ctx) {
  if (has_half_io(ctx)) return via_float32(ctx, instancenorm);
  if (ctx.input(0).rank() < 2) ctx.fail("input must have shape [N, C, ...]");
  normalize_channel_groups(ctx, ctx.input(0).dim(1), true);
}

/// GroupNormalization: per group at opset 18, per channel from 21.
void groupnorm(KernelContext& ctx) {
  if (has_half_io(ctx)) return via_float32(ctx, groupnorm);
  const Tensor& x = ctx.input(0);
  if (x.rank() < 2) ctx.fail("X must have shape [N, C, ...]");
  const int64_t C = x.dim(1), G = ctx.attr_int("num_groups");
  if (G <= 0 || C % G != 0)
    ctx.fail("num_groups " + std::to_string(G) + " does not divide the " + std::to_string(C) + " channels");
  normalize_channel_groups(ctx, G, ctx.opset() >= 21);
}

// ---- LayerNormalization ----

/// Values of `t` broadcast (unidirectionally, numpy rules) to `to` dims, flattened.
template <typename T>
std::vector<T> broadcast_to(const KernelContext& ctx, const Tensor& t, const std::vector<int64_t>& to) {
  int64_t n = 1;
  for (int64_t d : to) n *= d;
  std::vector<T> out(static_cast<size_t>(n));
  if (t.rank() > to.size()) ctx.fail("Scale/B do not broadcast to the normalized shape " + dims_str(to));
  std::vector<int64_t> strides(to.size(), 0);
  int64_t s = 1;
  for (size_t k = 0; k < t.rank(); ++k) {
    const size_t ti = t.rank() - 1 - k, oi = to.size() - 1 - k;
    if (t.dim(ti) != 1 && t.dim(ti) != to[oi])
      ctx.fail("Scale/B shape " + dims_str(t.dims()) + " does not broadcast to " + dims_str(to));
    strides[oi] = t.dim(ti) == 1 ? 0 : s;
    s *= t.dim(ti);
  }
  const T* p = t.data<T>();
  std::vector<int64_t> idx(to.size(), 0);
  int64_t off = 0;
  for (int64_t i = 0; i < n; ++i) {
    out[static_cast<size_t>(i)] = p[off];
    for (size_t k = to.size(); k-- > 0;) {
      ++idx[k];
      off += strides[k];
      if (idx[k] < to[k]) break;
      off -= strides[k] * to[k];
      idx[k] = 0;
    }
  }
  return out;
}

/// X as rows of its dims from `axis` on (LayerNormalization's and RMSNormalization's split).
struct NormRows {
  std::vector<int64_t> norm_dims;  // X's dims from the axis on
  int64_t inner = 1, outer = 0;    // a row's values, and the rows
};

NormRows norm_rows(const KernelContext& ctx, const Tensor& x) {
  const int64_t rank = static_cast<int64_t>(x.rank());
  if (rank == 0) ctx.fail("X must have rank >= 1");
  const int64_t axis = normalize_axis(ctx.attr_int("axis"), rank, ctx);
  NormRows r;
  r.norm_dims.assign(x.dims().begin() + axis, x.dims().end());
  for (int64_t d : r.norm_dims) r.inner *= d;
  r.outer = r.inner == 0 ? 0 : x.numel() / r.inner;
  return r;
}

void layernorm(KernelContext& ctx) {
  if (has_half_io(ctx)) return via_float32(ctx, layernorm);
  const Tensor& x = ctx.input(0);
  const NormRows rows = norm_rows(ctx, x);  // no structured binding: lambdas below capture them
  const std::vector<int64_t>& norm_dims = rows.norm_dims;
  const int64_t inner = rows.inner, outer = rows.outer;
  const double eps = ctx.attr_float("epsilon");
  // No rows (an empty dim before the axis): every output is empty. Return before broadcasting
  // Scale/B to the normalized dims, whose product an empty X does not bound.
  if (outer == 0 && inner != 0) return;
  dispatch_float(x.dtype(), ctx, [&](auto tag) {
    using T = decltype(tag);
    if (ctx.input(1).dtype() != x.dtype() || (ctx.has_input(2) && ctx.input(2).dtype() != x.dtype()))
      ctx.fail("Scale and B must have the type of X");
    const std::vector<T> scale = broadcast_to<T>(ctx, ctx.input(1), norm_dims);
    const std::vector<T> bias = ctx.has_input(2) ? broadcast_to<T>(ctx, ctx.input(2), norm_dims)
                                                 : std::vector<T>(static_cast<size_t>(inner), T{0});
    const T* px = x.data<T>();
    T* py = ctx.output(0).data<T>();
    std::vector<double> means(ctx.has_output(1) ? outer : 0), inv_stds(ctx.has_output(2) ? outer : 0);
    parallel_for(outer, std::max<int64_t>(1, 8192 / std::max<int64_t>(inner, 1)), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T* p = px + r * inner;
        T* q = py + r * inner;
        double mean, var;
        mean_var(p, inner, mean, var);
        const double inv = 1.0 / std::sqrt(var + eps);
        if (!means.empty()) means[r] = mean;
        if (!inv_stds.empty()) inv_stds[r] = inv;
        const T m = static_cast<T>(mean), s = static_cast<T>(inv);
        for (int64_t j = 0; j < inner; ++j) q[j] = (p[j] - m) * s * scale[j] + bias[j];
      }
    });
    if (ctx.has_output(1)) store(ctx, ctx.output(1), means);
    if (ctx.has_output(2)) store(ctx, ctx.output(2), inv_stds);
  });
}

// ---- RMSNormalization ----

/// Y = X / sqrt(mean(X² over [axis:]) + epsilon) · scale, in X's type (float or double after the
/// half types' widening), Y stored in scale's type. Sums of squares in double. Scale broadcasts to
/// X: over the normalized dims alone where it is 1 before them (the usual [hidden] vector), else
/// to the whole of X.
void rmsnorm(KernelContext& ctx) {
  if (has_half_io(ctx)) return via_float32(ctx, rmsnorm);
  const Tensor& x = ctx.input(0);
  const NormRows rows = norm_rows(ctx, x);  // no structured binding: lambdas below capture them
  const std::vector<int64_t>& norm_dims = rows.norm_dims;
  const int64_t inner = rows.inner, outer = rows.outer;
  if (outer == 0) return;
  const double eps = ctx.attr_float("epsilon");
  Tensor& y = ctx.output(0);
  // Scale (and so Y) may be stored in another float type than X: both are taken in X's.
  Tensor scale_as_x, y_as_x;
  const Tensor* scale = &ctx.input(1);
  if (scale->dtype() != x.dtype()) {
    scale_as_x = Tensor(x.dtype(), scale->dims());
    convert_tensor(*scale, scale_as_x);
    scale = &scale_as_x;
  }
  Tensor* out = &y;
  if (y.dtype() != x.dtype()) {
    y_as_x = Tensor(x.dtype(), y.dims());
    out = &y_as_x;
  }
  const size_t sr = scale->rank();
  bool per_row_only = sr <= norm_dims.size();
  for (size_t k = norm_dims.size(); k < sr; ++k) per_row_only = per_row_only && scale->dim(sr - 1 - k) == 1;
  dispatch_float(x.dtype(), ctx, [&](auto tag) {
    using T = decltype(tag);
    // Leading 1s before the normalized dims: the same values, viewed without them.
    const Tensor trimmed =
        per_row_only && sr > norm_dims.size()
            ? scale->reshaped(std::vector<int64_t>(scale->dims().end() - norm_dims.size(), scale->dims().end()))
            : Tensor();
    const std::vector<T> s = per_row_only ? broadcast_to<T>(ctx, sr > norm_dims.size() ? trimmed : *scale, norm_dims)
                                          : broadcast_to<T>(ctx, *scale, x.dims());
    const int64_t s_row = per_row_only ? 0 : inner;
    const T* px = x.data<T>();
    T* py = out->data<T>();
    parallel_for(outer, std::max<int64_t>(1, 8192 / inner), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T* p = px + r * inner;
        const T* sc = s.data() + r * s_row;
        T* q = py + r * inner;
        double ss = 0;
        for (int64_t j = 0; j < inner; ++j) ss += static_cast<double>(p[j]) * p[j];
        const T inv = static_cast<T>(1.0 / std::sqrt(ss / static_cast<double>(inner) + eps));
        for (int64_t j = 0; j < inner; ++j) q[j] = p[j] * inv * sc[j];
      }
    });
  });
  if (out != &y) convert_tensor(*out, y);
}

// ---- MeanVarianceNormalization ----

/// y = (x - E[x]) / (sqrt(E[(x - E[x])^2]) + 1e-9) over `axes`, the epsilon of the ONNX function
/// body (and onnxruntime).
void mvn(KernelContext& ctx) {
  if (has_half_io(ctx)) return via_float32(ctx, mvn);
  const Tensor& x = ctx.input(0);
  const int64_t rank = static_cast<int64_t>(x.rank());
  std::vector<bool> mask(x.rank(), false);
  for (int64_t a : ctx.attr_ints("axes")) mask[static_cast<size_t>(normalize_axis(a, rank, ctx))] = true;
  const ReduceLayout L = make_reduce_layout(x.dims(), mask);
  const double n = static_cast<double>(L.reduced_count());
  std::vector<double> mean(static_cast<size_t>(L.outputs())), stdev(mean.size());
  dispatch_float(x.dtype(), ctx, [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* py = ctx.output(0).data<T>();
    auto add = [](double a, double b) { return a + b; };
    reduce_generic<double>(
        L, px, mean.data(), 0.0, [](T v, int64_t) { return static_cast<double>(v); }, add,
        [n](double a, int64_t) { return a / n; });
    reduce_generic<double>(
        L, px, stdev.data(), 0.0,
        [&mean](T v, int64_t o) {
          const double d = v - mean[o];
          return d * d;
        },
        add, [n](double a, int64_t) { return std::sqrt(a / n) + 1e-9; });
    reduce_layout_for_each(L, [&](int64_t i, int64_t o) { py[i] = static_cast<T>((px[i] - mean[o]) / stdev[o]); });
  });
}

// ---- LpNormalization ----

/// y = x / ||x||_p along the axis (p 1 or 2), in double; a slice whose norm is 0 gives 0 (opset 22
/// says so; the older text divided by it).
void lpnorm(KernelContext& ctx) {
  if (has_half_io(ctx)) return via_float32(ctx, lpnorm);
  const Tensor& x = ctx.input(0);
  const int64_t axis = normalize_axis(ctx.attr_int("axis"), static_cast<int64_t>(x.rank()), ctx);
  const bool l1 = ctx.attr_int("p") == 1;
  const AxisView v = axis_view(x.dims(), axis);
  dispatch_float(x.dtype(), ctx, [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* py = ctx.output(0).data<T>();
    parallel_for(v.outer * v.inner, std::max<int64_t>(1, 4096 / std::max<int64_t>(v.n, 1)), [&](int64_t b, int64_t e) {
      for (int64_t s = b; s < e; ++s) {
        const int64_t base = (s / v.inner) * v.n * v.inner + s % v.inner;
        double acc = 0;
        for (int64_t k = 0; k < v.n; ++k) {
          const double a = static_cast<double>(px[base + k * v.inner]);
          acc += l1 ? std::fabs(a) : a * a;
        }
        const double norm = l1 ? acc : std::sqrt(acc);
        for (int64_t k = 0; k < v.n; ++k) {
          const int64_t i = base + k * v.inner;
          py[i] = norm == 0 ? T(0) : static_cast<T>(static_cast<double>(px[i]) / norm);
        }
      }
    });
  });
}

// ---- LRN ----

/// y = x / (bias + alpha/size * sum of x^2 over the channel window [c - (size-1)/2, c + ceil((size-1)/2)])^beta
void lrn(KernelContext& ctx) {
  if (has_half_io(ctx)) return via_float32(ctx, lrn);
  const Tensor& x = ctx.input(0);
  if (x.rank() < 2) ctx.fail("X must have shape [N, C, ...]");
  const int64_t N = x.dim(0), C = x.dim(1);
  const int64_t S = N * C == 0 ? 0 : x.numel() / (N * C);
  const int64_t size = ctx.attr_int("size");
  if (size <= 0) ctx.fail("size must be positive");
  const double alpha = ctx.attr_float("alpha"), beta = ctx.attr_float("beta"), bias = ctx.attr_float("bias");
  const int64_t before = (size - 1) / 2, after = size - 1 - before;
  dispatch_float(x.dtype(), ctx, [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* py = ctx.output(0).data<T>();
    parallel_for(N * C, std::max<int64_t>(1, 4096 / std::max<int64_t>(S * size, 1)), [&](int64_t r0, int64_t r1) {
      std::vector<double> sq(static_cast<size_t>(S));
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t n = r / C, c = r % C;
        std::fill(sq.begin(), sq.end(), 0.0);
        const int64_t lo = std::max<int64_t>(0, c - before), hi = std::min<int64_t>(C - 1, c + after);
        for (int64_t k = lo; k <= hi; ++k) {
          const T* p = px + (n * C + k) * S;
          for (int64_t j = 0; j < S; ++j) sq[j] += static_cast<double>(p[j]) * p[j];
        }
        const T* p = px + r * S;
        T* q = py + r * S;
        for (int64_t j = 0; j < S; ++j)
          q[j] = static_cast<T>(p[j] / std::pow(bias + alpha / static_cast<double>(size) * sq[j], beta));
      }
    });
  });
}

}  // namespace

void register_normalization_kernels(KernelRegistry& r) {
  // Writes::Some: at opset 6 with is_test=1 and all five outputs, saved_mean and saved_var are not written.
  r.add("BatchNormalization", batchnorm);
  r.add("InstanceNormalization", instancenorm, "", Writes::Every);
  r.add("GroupNormalization", groupnorm, "", Writes::Every);
  r.add("RMSNormalization", rmsnorm, "", Writes::Every);
  r.add("LayerNormalization", layernorm, "", Writes::Every);  // every row; Mean and InvStdDev whole
  r.add("LayerNormalization", layernorm, "ai.fusec", Writes::Every);
  r.add("MeanVarianceNormalization", mvn, "", Writes::Every);  // every input position of the layout
  r.add("LRN", lrn, "", Writes::Every);
  r.add("LpNormalization", lpnorm, "", Writes::Every);
}

}  // namespace fusec::cpu
