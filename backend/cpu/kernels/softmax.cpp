// CPU kernels for Softmax, LogSoftmax, Hardmax, NegativeLogLikelihoodLoss and
// SoftmaxCrossEntropyLoss.
//
// Every op here views its input as [outer, n, inner] and normalizes over n. exp runs in the input
// type (float32 expf is accurate to an ulp); the sums of exponentials and the loss reductions
// accumulate in double.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "backend/axis_layout.h"
#include "backend/cpu/kernels/common.h"
#include "backend/cpu/kernels/exp_vec.h"

namespace fusec::cpu {

namespace {

enum class Smx { Soft, Log, Hard };

/// q[j] = exp(p[j] - m) for j < n.
template <typename T>
void exp_shifted(const T* p, T m, T* q, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    for (int64_t j = 0; j < n; ++j) q[j] = exp_vec(p[j] - m);
  } else {
    for (int64_t j = 0; j < n; ++j) q[j] = std::exp(p[j] - m);
  }
}

/// Maximum of n >= 1 values; eight independent chains so the compares overlap.
template <typename T>
T row_max(const T* p, int64_t n) {
  T m[8];
  for (T& v : m) v = p[0];
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int k = 0; k < 8; ++k) m[k] = std::max(m[k], p[j + k]);
  for (; j < n; ++j) m[0] = std::max(m[0], p[j]);
  for (int k = 1; k < 8; ++k) m[0] = std::max(m[0], m[k]);
  return m[0];
}

/// Sum of n values in double, four independent accumulators.
template <typename T>
double sum_double(const T* q, int64_t n) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    s0 += q[j];
    s1 += q[j + 1];
    s2 += q[j + 2];
    s3 += q[j + 3];
  }
  for (; j < n; ++j) s0 += q[j];
  return (s0 + s1) + (s2 + s3);
}

/// y = softmax / log-softmax / hardmax of x over the n dim of `l`. x and y may not alias.
template <typename T>
void softmax_into(Smx kind, const AxisView& l, const T* x, T* y) {
  const int64_t n = l.n, inner = l.inner;
  if (n == 0 || l.outer == 0 || inner == 0) return;
  if (inner == 1) {
    // Contiguous rows.
    parallel_for(l.outer, std::max<int64_t>(1, 4096 / n), [&](int64_t o0, int64_t o1) {
      for (int64_t o = o0; o < o1; ++o) {
        const T* p = x + o * n;
        T* q = y + o * n;
        if (kind == Smx::Hard) {
          int64_t arg = 0;
          for (int64_t j = 1; j < n; ++j)
            if (p[j] > p[arg]) arg = j;
          for (int64_t j = 0; j < n; ++j) q[j] = j == arg ? T{1} : T{0};
          continue;
        }
        const T m = row_max(p, n);
        // The exponentials go to q first (the output, overwritten below for LogSoftmax).
        exp_shifted(p, m, q, n);
        const double s = sum_double(q, n);
        if (kind == Smx::Soft) {
          const T inv = static_cast<T>(1.0 / s);
          for (int64_t j = 0; j < n; ++j) q[j] *= inv;
        } else {
          // (x - m) - log(s), not x - (m + log(s)): near the maximum the result is tiny and
          // rounding m + log(s) to T first would lose its digits.
          const T ls = static_cast<T>(std::log(s));
          for (int64_t j = 0; j < n; ++j) q[j] = (p[j] - m) - ls;
        }
      }
    });
    return;
  }
  // Strided: for each outer index, walk the n rows of `inner` contiguous values, column blocks
  // of up to 512 at a time so the per-column state stays in cache.
  const int64_t block = std::min<int64_t>(inner, 512);
  const int64_t blocks = (inner + block - 1) / block;
  parallel_for(l.outer * blocks, std::max<int64_t>(1, 4096 / (n * block)), [&](int64_t t0, int64_t t1) {
    std::vector<T> m(static_cast<size_t>(block));
    std::vector<double> s(static_cast<size_t>(block));
    std::vector<int64_t> arg(static_cast<size_t>(block));
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t o = t / blocks, c0 = (t % blocks) * block;
      const int64_t w = std::min(block, inner - c0);
      const T* p = x + o * n * inner + c0;
      T* q = y + o * n * inner + c0;
      for (int64_t j = 0; j < w; ++j) {
        m[j] = p[j];
        arg[j] = 0;
        s[j] = 0;
      }
      for (int64_t k = 1; k < n; ++k)
        for (int64_t j = 0; j < w; ++j)
          if (p[k * inner + j] > m[j]) {
            m[j] = p[k * inner + j];
            arg[j] = k;
          }
      if (kind == Smx::Hard) {
        for (int64_t k = 0; k < n; ++k)
          for (int64_t j = 0; j < w; ++j) q[k * inner + j] = arg[j] == k ? T{1} : T{0};
        continue;
      }
      for (int64_t k = 0; k < n; ++k)
        for (int64_t j = 0; j < w; ++j) {
          T e;
          if constexpr (std::is_same_v<T, float>)
            e = exp_vec(p[k * inner + j] - m[j]);
          else
            e = std::exp(p[k * inner + j] - m[j]);
          if (kind == Smx::Soft) q[k * inner + j] = e;
          s[j] += e;
        }
      if (kind == Smx::Soft) {
        for (int64_t j = 0; j < w; ++j) s[j] = 1.0 / s[j];
        for (int64_t k = 0; k < n; ++k)
          for (int64_t j = 0; j < w; ++j) q[k * inner + j] = static_cast<T>(q[k * inner + j] * s[j]);
      } else {
        for (int64_t j = 0; j < w; ++j) s[j] = std::log(s[j]);
        for (int64_t k = 0; k < n; ++k)
          for (int64_t j = 0; j < w; ++j)
            q[k * inner + j] = static_cast<T>(static_cast<double>(p[k * inner + j] - m[j]) - s[j]);
      }
    }
  });
}

Kernel softmax_kernel(Smx kind) {
  return [kind](KernelContext& ctx) {
    if (has_half_io(ctx)) return via_float32(ctx, softmax_kernel(kind));
    const Tensor& x = ctx.input(0);
    if (x.rank() == 0) ctx.fail("softmax needs an input of rank >= 1");
    const int64_t axis = normalize_axis(ctx.attr_int("axis"), static_cast<int64_t>(x.rank()), ctx);
    const AxisView l = softmax_view(x.dims(), axis, ctx.opset());  // as the CUDA planner (softmax_op.cpp)
    dispatch_float(x.dtype(), ctx, [&](auto tag) {
      using T = decltype(tag);
      softmax_into<T>(kind, l, x.data<T>(), ctx.output(0).data<T>());
    });
  };
}

/// Negative log-likelihood of log-probabilities `logp` [N, C, D] at `target` [N, D]:
///   loss[n, d] = -logp[n, target[n, d], d] * w[target[n, d]]    (0 where target == ignore_index)
/// reduced by `reduction`; 'mean' divides by the sum of the weights of the non-ignored targets
/// (their count when there are no weights), as the ONNX reference and PyTorch do.
template <typename T, typename I>
void nll_loss(const KernelContext& ctx, const T* logp, const I* target, const T* weight, int64_t N, int64_t C,
              int64_t D, bool has_ignore, int64_t ignore, const std::string& reduction, T* out) {
  double total = 0, wsum = 0;
  const bool none = reduction == "none";
  for (int64_t b = 0; b < N; ++b)
    for (int64_t d = 0; d < D; ++d) {
      const int64_t t = static_cast<int64_t>(target[b * D + d]);
      double loss = 0, w = 0;
      if (!(has_ignore && t == ignore)) {
        if (t < 0 || t >= C)
          ctx.fail("target " + std::to_string(t) + " is out of range for " + std::to_string(C) + " classes");
        w = weight ? static_cast<double>(weight[t]) : 1.0;
        loss = -static_cast<double>(logp[(b * C + t) * D + d]) * w;
      }
      if (none) out[b * D + d] = static_cast<T>(loss);
      total += loss;
      wsum += w;
    }
  if (reduction == "sum")
    out[0] = static_cast<T>(total);
  else if (reduction == "mean")
    out[0] = static_cast<T>(total / wsum);
}

/// softmax_ce: SoftmaxCrossEntropyLoss (log-softmax over dim 1, then NLL); else NLL on input 0.
Kernel loss_kernel(bool softmax_ce) {
  return [softmax_ce](KernelContext& ctx) {
    if (has_half_io(ctx)) return via_float32(ctx, loss_kernel(softmax_ce));
    const Tensor& x = ctx.input(0);
    const Tensor& target = ctx.input(1);
    if (x.rank() < 2) ctx.fail("scores must have shape [N, C, d1, ...]");
    const int64_t N = x.dim(0), C = x.dim(1);
    const int64_t D = N * C == 0 ? 0 : x.numel() / (N * C);
    if (target.numel() != N * D) ctx.fail("target does not match the scores' shape");
    const Tensor* weight = ctx.has_input(2) ? &ctx.input(2) : nullptr;
    if (weight && weight->numel() != C) ctx.fail("weights must have C entries");
    const bool has_ignore = ctx.has_attr("ignore_index");
    const int64_t ignore = has_ignore ? ctx.attr_int("ignore_index") : 0;
    const std::string reduction = ctx.attr_string("reduction");
    dispatch_float(x.dtype(), ctx, [&](auto tag) {
      using T = decltype(tag);
      const T* logp = x.data<T>();
      std::vector<T> scratch;
      if (softmax_ce) {
        T* lp;
        if (ctx.has_output(1)) {
          lp = ctx.output(1).data<T>();
        } else {
          scratch.resize(static_cast<size_t>(x.numel()));
          lp = scratch.data();
        }
        softmax_into<T>(Smx::Log, AxisView{N, C, D}, x.data<T>(), lp);
        logp = lp;
      }
      const T* w = weight ? weight->data<T>() : nullptr;
      T* out = ctx.output(0).data<T>();
      if (target.dtype() == DType::Int64)
        nll_loss<T>(ctx, logp, target.data<int64_t>(), w, N, C, D, has_ignore, ignore, reduction, out);
      else if (target.dtype() == DType::Int32)
        nll_loss<T>(ctx, logp, target.data<int32_t>(), w, N, C, D, has_ignore, ignore, reduction, out);
      else
        ctx.fail("target must be int32 or int64");
    });
  };
}

}  // namespace

void register_softmax_kernels(KernelRegistry& r) {
  r.add("Softmax", softmax_kernel(Smx::Soft), "", Writes::Every);  // every row, both layouts
  r.add("LogSoftmax", softmax_kernel(Smx::Log), "", Writes::Every);
  r.add("Hardmax", softmax_kernel(Smx::Hard), "", Writes::Every);  // a 1 or 0 for each element
  // Each target's loss (reduction none) or the one reduced value; SCE's log_prob every row.
  r.add("NegativeLogLikelihoodLoss", loss_kernel(false), "", Writes::Every);
  r.add("SoftmaxCrossEntropyLoss", loss_kernel(true), "", Writes::Every);
}

}  // namespace fusec::cpu
