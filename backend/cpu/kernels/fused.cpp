// CPU kernels of the ai.fusec ops. The CPU backend is the reference, so each fused op runs the
// standard kernels it replaces (Conv, MatMul, LayerNormalization) and then applies its epilogue
// exactly as the unfused graph would: same arithmetic, same rounding order.
#include <algorithm>
#include <cmath>

#include "backend/cpu/kernels/common.h"
#include "backend/cpu/kernels/linalg.h"
#include "backend/formulas.h"
#include "ir/ops/fused.h"

namespace fusec::cpu {

namespace {

const Kernel& standard_kernel(const char* op) {
  const Kernel* k = KernelRegistry::global().find("", op);
  if (!k) internal_error(std::string("ai.fusec kernels need the standard ") + op + " kernel");
  return *k;
}
const OpSchema& standard_schema(const char* op) {
  const OpSchema* s = OpRegistry::global().find("", op, kFusedBaseOpset);
  if (!s) internal_error(std::string("ai.fusec kernels need the standard ") + op + " schema");
  return *s;
}

/// Runs the standard op `op` on the first `n_in` inputs of this node into output 0.
void run_standard(const char* op, KernelContext& ctx, size_t n_in, Tensor* out) {
  std::vector<const Tensor*> ins;
  for (size_t i = 0; i < n_in; ++i) ins.push_back(ctx.has_input(i) ? &ctx.input(i) : nullptr);
  // The same inputs at the same positions: what the standard kernel caches from them holds here.
  KernelContext inner(ctx.node(), standard_schema(op), kFusedBaseOpset, ins, {out}, ctx.cache());
  standard_kernel(op)(inner);
}

template <typename F>
void map_inplace(Tensor& t, F&& f) {
  float* y = t.data<float>();
  parallel_for(t.numel(), 16384, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = f(y[i]);
  });
}

namespace fm = formulas;

/// GELU as the fused ops compute it, in float (backend/formulas.h; the standalone Gelu kernel
/// computes in double). √(2/π) is rounded through float arithmetic here, one unit below the
/// nearest float that the CUDA kernels use: kept, so these results stay what they were.
float gelu(float x, bool tanh_approx) {
  if (tanh_approx) return fm::gelu_tanh_f32(x, std::sqrt(2.0f / static_cast<float>(M_PI)));
  return fm::gelu_erf_f32(x);
}

/// Applies the node's `activation` in place, with the fused-epilogue formulas of
/// backend/formulas.h that epilogue.cu also calls. Each case is its own inlined loop: an indirect
/// call per element would cost more than the activation itself.
void apply_activation(const KernelContext& ctx, Tensor& y, const std::string& act, const std::vector<float>& p) {
  auto param = [&](size_t i, float def) { return i < p.size() ? p[i] : def; };
  if (act.empty()) return;
  if (act == "Relu") return map_inplace(y, [](float x) { return fm::relu(x); });
  if (act == "LeakyRelu") {
    float a = param(0, 0.01f);
    return map_inplace(y, [a](float x) { return fm::leaky_relu(x, a); });
  }
  if (act == "Clip") {
    float lo = param(0, -INFINITY), hi = param(1, INFINITY);
    return map_inplace(y, [lo, hi](float x) { return fm::clamp(x, lo, hi); });
  }
  if (act == "Sigmoid") return map_inplace(y, [](float x) { return fm::sigmoid_direct(x); });
  if (act == "Tanh") return map_inplace(y, [](float x) { return std::tanh(x); });
  if (act == "HardSigmoid") {
    float a = param(0, 0.2f), b = param(1, 0.5f);
    return map_inplace(y, [a, b](float x) { return fm::hard_sigmoid(x, a, b); });
  }
  if (act == "HardSwish") return map_inplace(y, [](float x) { return fm::hard_swish(x); });
  if (act == "SiLU") return map_inplace(y, [](float x) { return fm::silu(x); });
  if (act == "Gelu") return map_inplace(y, [](float x) { return gelu(x, false); });
  if (act == "GeluTanh") return map_inplace(y, [](float x) { return gelu(x, true); });
  ctx.fail("unknown activation '" + act + "'");
}

void apply_activation(const KernelContext& ctx, Tensor& y) {
  apply_activation(ctx, y, ctx.attr_string("activation"), ctx.attr_floats("activation_params"));
}

void require_f32(const KernelContext& ctx, const Tensor& t) {
  if (t.dtype() != DType::Float32) ctx.unsupported(std::string("unsupported data type ") + dtype_name(t.dtype()));
}

/// y += Z, FusedConv's and FusedMatMul's residual (the output's shape).
void add_residual(KernelContext& ctx, const Tensor& z, Tensor& y) {
  if (z.dims() != y.dims())
    ctx.fail("the residual Z has shape " + dims_str(z.dims()) + ", the output " + dims_str(y.dims()));
  const float* zp = z.data<float>();
  float* yp = y.data<float>();
  parallel_for(y.numel(), 16384, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) yp[i] += zp[i];
  });
}

/// Adds a 1-D bias of y's last dim to every row of y.
void add_row_bias(KernelContext& ctx, const Tensor& bias, Tensor& y) {
  const int64_t n = y.rank() ? y.dims().back() : 1;
  if (bias.numel() != n)
    ctx.fail("bias has " + std::to_string(bias.numel()) + " elements, the output's last dim is " + std::to_string(n));
  const float* bp = bias.data<float>();
  float* yp = y.data<float>();
  parallel_for(y.numel() / std::max<int64_t>(n, 1), std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)),
               [&](int64_t b, int64_t e) {
                 for (int64_t r = b; r < e; ++r)
                   for (int64_t j = 0; j < n; ++j) yp[r * n + j] += bp[j];
               });
}

void fused_conv(KernelContext& ctx) {
  if (has_half_io(ctx)) return via_float32(ctx, fused_conv);
  Tensor& y = ctx.output(0);
  require_f32(ctx, y);
  run_standard("Conv", ctx, 3, &y);
  if (ctx.has_input(3)) add_residual(ctx, ctx.input(3), y);
  apply_activation(ctx, y);
}

void fused_matmul(KernelContext& ctx) {
  if (has_half_io(ctx)) return via_float32(ctx, fused_matmul);
  Tensor& y = ctx.output(0);
  require_f32(ctx, y);
  run_standard("MatMul", ctx, 2, &y);
  if (ctx.has_input(2)) add_row_bias(ctx, ctx.input(2), y);
  if (ctx.has_input(3)) add_residual(ctx, ctx.input(3), y);  // after the bias, as FusedConv: act(A·B + bias + Z)
  apply_activation(ctx, y);
}

void layernorm_gelu(KernelContext& ctx) {
  if (has_half_io(ctx)) return via_float32(ctx, layernorm_gelu);
  Tensor& y = ctx.output(0);
  require_f32(ctx, y);
  run_standard("LayerNormalization", ctx, 3, &y);
  std::string approx = ctx.attr_string("approximate");
  if (approx != "none" && approx != "tanh") ctx.fail("approximate must be 'none' or 'tanh'");
  bool t = approx == "tanh";
  map_inplace(y, [t](float x) { return gelu(x, t); });
}

/// S = X + skip of the skip norms, into their output S when it is wanted, else into `local`.
Tensor* skip_sum(KernelContext& ctx, Tensor& local) {
  const Tensor& x = ctx.input(0);
  require_f32(ctx, x);
  Tensor* sum = ctx.has_output(1) ? &ctx.output(1) : nullptr;
  if (!sum) {
    local = Tensor(x.dtype(), ctx.output(0).dims());
    sum = &local;
  }
  binary_broadcast<float, float, float>(x, ctx.input(1), *sum, [](float a, float b) { return a + b; });
  return sum;
}

void skip_layernorm(KernelContext& ctx) {
  if (has_half_io(ctx)) return via_float32(ctx, skip_layernorm);
  Tensor local;
  Tensor* sum = skip_sum(ctx, local);
  std::vector<const Tensor*> ins = {sum, &ctx.input(2), ctx.has_input(3) ? &ctx.input(3) : nullptr};
  Tensor* y = &ctx.output(0);
  KernelContext inner(ctx.node(), standard_schema("LayerNormalization"), kFusedBaseOpset, ins, {y});
  standard_kernel("LayerNormalization")(inner);
}

/// RMSNorm of x's rows (the dims from `axis` on) into y.
void rms_rows(const KernelContext& ctx, const Tensor& x, const Tensor& scale, Tensor& y) {
  int64_t axis = normalize_axis(ctx.attr_int("axis"), static_cast<int64_t>(x.rank()), ctx);
  int64_t inner = 1;
  for (size_t i = static_cast<size_t>(axis); i < x.rank(); ++i) inner *= x.dim(i);
  if (scale.numel() != inner) ctx.fail("scale must have " + std::to_string(inner) + " elements");
  int64_t rows = inner ? x.numel() / inner : 0;
  float eps = ctx.attr_float("epsilon");
  const float* xp = x.data<float>();
  const float* sp = scale.data<float>();
  float* yp = y.data<float>();
  parallel_for(rows, 1, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* xr = xp + r * inner;
      double ss = 0;
      for (int64_t j = 0; j < inner; ++j) ss += static_cast<double>(xr[j]) * xr[j];
      float inv = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(inner)) + eps);
      for (int64_t j = 0; j < inner; ++j) yp[r * inner + j] = xr[j] * inv * sp[j];
    }
  });
}

void simplified_layernorm(KernelContext& ctx) {
  if (has_half_io(ctx)) return via_float32(ctx, simplified_layernorm);
  require_f32(ctx, ctx.input(0));
  rms_rows(ctx, ctx.input(0), ctx.input(1), ctx.output(0));
}

void skip_simplified_layernorm(KernelContext& ctx) {
  if (has_half_io(ctx)) return via_float32(ctx, skip_simplified_layernorm);
  Tensor local;
  rms_rows(ctx, *skip_sum(ctx, local), ctx.input(2), ctx.output(0));
}

/// Strides (in elements) of `t` read at `view`'s index, right-aligned, 0 where t broadcasts.
std::vector<int64_t> strides_in_view(const std::vector<int64_t>& t, const std::vector<int64_t>& view) {
  std::vector<int64_t> st(view.size(), 0);
  int64_t s = 1;
  for (size_t i = 0; i < t.size(); ++i) {
    const size_t ax = t.size() - 1 - i, vax = view.size() - 1 - i;
    st[vax] = t[ax] == 1 ? 0 : s;
    s *= t[ax];
  }
  return st;
}

/// Y = X·cos + rotate(X)·sin per head, over each head's first r values (rotary_dim, or all h),
/// the rest copied. rotate pairs (lo, hi) = (j, j + r/2) (rotate_half) or (2i, 2i + 1)
/// (interleaved, GPT-J's rotate_every_two): rotate(x)[lo] = −x[hi], rotate(x)[hi] = x[lo]. cos/sin
/// broadcast to X's head view narrowed to r. The arithmetic is the unfused graph's:
/// Mul(x, cos) + Mul(rotate(x), sin). The tables' strides come from their own dims, so a table
/// sized to the rotated heads reads right for them. With `norm`, x is first each rotated head
/// normalized as SimplifiedLayerNorm (1) or LayerNormalization (2) over that head would, or over
/// its run of heads (`norm_groups`: OLMo 2 normalizes Q's whole projection).
void rotary(KernelContext& ctx) {
  if (has_half_io(ctx)) return via_float32(ctx, rotary);
  const Tensor& x = ctx.input(0);
  const Tensor& cs = ctx.input(1);
  const Tensor& sn = ctx.input(2);
  require_f32(ctx, x);
  std::vector<int64_t> view = x.dims();
  const int64_t hs = ctx.attr_int("head_size");
  if (view.empty()) ctx.fail("X must have rank >= 1");
  if (hs > 0) {
    if (view.back() % hs != 0) ctx.fail("X's last dim is not a multiple of head_size");
    view.back() /= hs;
    view.push_back(hs);
  }
  const int64_t h = view.back();
  // Each head's first r values rotate, in pairs (lo(p), hi(p)); the rest are copied.
  const int64_t rd = ctx.attr_int("rotary_dim"), r = rd > 0 ? rd : h, half = r / 2;
  const bool interleaved = ctx.attr_int("interleaved") != 0;
  if (r % 2 != 0 || r > h) ctx.fail("the rotated size must be even and within the head");
  std::vector<int64_t> table_view = view;
  table_view.back() = r;
  for (const Tensor* t : {&cs, &sn})
    if (t->rank() > view.size() || t->rank() == 0 || t->dims().back() != r)
      ctx.fail("cos and sin must broadcast to X's head view " + dims_str(table_view));
  // With `rotated`, the heads from rotated / h on (of each row's view.end()[-2]) are copied.
  const int64_t rotated = ctx.attr_int("rotated");
  const int64_t per_row = hs > 0 ? view[view.size() - 2] : 1;
  const int64_t rotated_heads = rotated > 0 && hs > 0 ? rotated / hs : per_row;
  const std::vector<int64_t> cst = strides_in_view(cs.dims(), table_view), sst = strides_in_view(sn.dims(), table_view);
  // QK-norm (`norm`): each rotated head is normalized over its h values first, with row
  // `row % per_row` of a [R, h] scale and bias (one per rotated head) or the one row of an [h] one.
  const int64_t norm = ctx.attr_int("norm");
  if (norm < 0 || norm > 2) ctx.fail("norm must be 0, 1 or 2");
  if (norm && !ctx.has_input(3)) ctx.fail("norm needs norm_scale (input 3)");
  const Tensor* ns = norm && ctx.has_input(3) ? &ctx.input(3) : nullptr;
  const Tensor* nb = norm && ctx.has_input(4) ? &ctx.input(4) : nullptr;
  for (const Tensor* t : {ns, nb})
    if (t && !(t->dims() == std::vector<int64_t>{h} || t->dims() == std::vector<int64_t>{rotated_heads, h}))
      ctx.fail("norm_scale and norm_bias must be [" + std::to_string(h) + "] or [" + std::to_string(rotated_heads) +
               ", " + std::to_string(h) + "]");
  const float eps = ctx.attr_float("epsilon");
  // norm_groups: the rotated heads of a row in runs normalized together; group_of[j] is head j's
  // run as (first head, heads). Without it every head is its own run.
  std::vector<std::pair<int64_t, int64_t>> group_of(static_cast<size_t>(rotated_heads));
  for (int64_t j = 0; j < rotated_heads; ++j) group_of[static_cast<size_t>(j)] = {j, 1};
  const std::vector<int64_t> groups = ctx.attr_ints("norm_groups");
  if (!groups.empty()) {
    if (!norm) ctx.fail("norm_groups needs norm");
    int64_t first = 0;
    for (int64_t n : groups) {
      if (n < 1 || first + n > rotated_heads) break;
      for (int64_t j = first; j < first + n; ++j) group_of[static_cast<size_t>(j)] = {first, n};
      first += n;
    }
    if (first != rotated_heads || std::any_of(groups.begin(), groups.end(), [](int64_t n) { return n < 1; }))
      ctx.fail("norm_groups must be runs of heads that add up to the " + std::to_string(rotated_heads) +
               " rotated heads of a row");
  }
  const float* xp = x.data<float>();
  const float* cp = cs.data<float>();
  const float* sp = sn.data<float>();
  float* yp = ctx.output(0).data<float>();
  const int64_t rows = h ? x.numel() / h : 0;
  parallel_for(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(h, 1)), [&](int64_t b, int64_t e) {
    std::vector<float> normed(ns ? static_cast<size_t>(h) : 0);
    int64_t run_at = -1;  // the first head row of the run whose statistics are in mean and inv
    double mean = 0;
    float inv = 0;
    for (int64_t row = b; row < e; ++row) {
      int64_t co = 0, so = 0;
      for (int64_t i = static_cast<int64_t>(view.size()) - 2, rem = row; i >= 0; --i) {
        const int64_t idx = rem % view[i];
        rem /= view[i];
        co += idx * cst[i];
        so += idx * sst[i];
      }
      const float* xr = xp + row * h;
      float* yr = yp + row * h;
      if (row % per_row >= rotated_heads) {
        std::copy(xr, xr + h, yr);
        continue;
      }
      if (ns) {
        const auto [first, count] = group_of[static_cast<size_t>(row % per_row)];
        const int64_t start = row - (row % per_row - first);
        if (start != run_at) {  // the run's values: `count` heads from `start`
          const float* xs = xp + start * h;
          const int64_t n = count * h;
          double ss = 0;
          mean = 0;
          if (norm == 2) {
            for (int64_t j = 0; j < n; ++j) mean += xs[j];
            mean /= static_cast<double>(n);
          }
          for (int64_t j = 0; j < n; ++j) ss += (xs[j] - mean) * (xs[j] - mean);
          inv = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(n)) + eps);
          run_at = start;
        }
        const int64_t at = ns->rank() == 2 ? (row % per_row) * h : 0, bt = nb && nb->rank() == 2 ? at : 0;
        for (int64_t j = 0; j < h; ++j)
          normed[j] = static_cast<float>(xr[j] - mean) * inv * ns->data<float>()[at + j] +
                      (nb ? nb->data<float>()[bt + j] : 0.0f);
        xr = normed.data();
      }
      for (int64_t p = 0; p < half; ++p) {
        const int64_t lo = interleaved ? 2 * p : p, hi = interleaved ? 2 * p + 1 : p + half;
        yr[lo] = xr[lo] * cp[co + lo] + (-xr[hi]) * sp[so + lo];
        yr[hi] = xr[hi] * cp[co + hi] + xr[lo] * sp[so + hi];
      }
      std::copy(xr + r, xr + h, yr + r);
    }
  });
}

/// GatedMatMul (docs/ops.md): each projection as FusedMatMul computes it (the product, then its
/// bias), the activation of the gate, then the element-wise product.
void gated_matmul(KernelContext& ctx) {
  if (has_half_io(ctx)) return via_float32(ctx, gated_matmul);
  Tensor& y = ctx.output(0);
  require_f32(ctx, y);
  Tensor value(DType::Float32, y.dims());
  for (int half = 0; half < 2; ++half) {
    Tensor& out = half == 0 ? y : value;
    KernelContext inner(ctx.node(), standard_schema("MatMul"), kFusedBaseOpset, {&ctx.input(0), &ctx.input(1 + half)},
                        {&out});
    standard_kernel("MatMul")(inner);
    if (ctx.has_input(3 + half)) add_row_bias(ctx, ctx.input(3 + half), out);
  }
  apply_activation(ctx, y);
  const float* vp = value.data<float>();
  float* yp = y.data<float>();
  parallel_for(y.numel(), 16384, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) yp[i] *= vp[i];
  });
}

/// ExpertMatMul (docs/ops.md): the rows that picked one expert gathered into one matrix and
/// multiplied by that expert's weight once, as a grouped GEMM does, instead of a copy of the
/// weight per row as the exported graph gathers it.
void expert_matmul(KernelContext& ctx) {
  if (has_half_io(ctx)) return via_float32(ctx, expert_matmul);
  const Tensor& x = ctx.input(0);
  const Tensor& w = ctx.input(1);
  const Tensor& ind = ctx.input(2);
  const Tensor* b = ctx.has_input(3) ? &ctx.input(3) : nullptr;
  Tensor& y = ctx.output(0);
  require_f32(ctx, x);
  const bool trans = ctx.attr_int("trans_w") != 0;
  const int64_t repeat = ctx.attr_int("repeat");
  if (x.rank() != 2 || w.rank() != 3 || ind.rank() != 1 || (b && b->rank() != 2))
    ctx.fail("X " + dims_str(x.dims()) + ", W " + dims_str(w.dims()) + " and indices " + dims_str(ind.dims()) +
             " are not [N, K], [E, K, M] (or [E, M, K]) and [S]");
  const int64_t experts = w.dim(0), k = x.dim(1), m = w.dim(trans ? 1 : 2), rows = ind.dim(0);
  int64_t read = 0;
  if (repeat < 1 || __builtin_mul_overflow(x.dim(0), repeat, &read) || w.dim(trans ? 2 : 1) != k || read != rows ||
      (b && (b->dim(0) != experts || b->dim(1) != m)))
    ctx.fail("X " + dims_str(x.dims()) + " (each row read " + std::to_string(repeat) + " times), W " +
             dims_str(w.dims()) + ", indices " + dims_str(ind.dims()) + (b ? ", B " + dims_str(b->dims()) : "") +
             " do not fit together");
  std::vector<std::vector<int64_t>> picked(static_cast<size_t>(experts));
  for (int64_t s = 0; s < rows; ++s) {
    const int64_t given = ind.dtype() == DType::Int32 ? ind.data<int32_t>()[s] : ind.data<int64_t>()[s];
    const int64_t e = given < 0 ? given + experts : given;
    if (e < 0 || e >= experts)  // Gather's words: the CUDA kernel's device error reads the same
      ctx.fail("index " + std::to_string(given) + " is out of range for an axis of length " + std::to_string(experts));
    picked[static_cast<size_t>(e)].push_back(s);
  }
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  for (int64_t e = 0; e < experts; ++e) {
    const std::vector<int64_t>& at = picked[static_cast<size_t>(e)];
    const int64_t n = static_cast<int64_t>(at.size());
    if (n == 0) continue;
    float* we = const_cast<float*>(w.data<float>()) + e * k * m;
    // Without trans_w: [n, K] · W[e] [K, M]. With it: W[e] [M, K] · [K, n], the rows as columns, so
    // that the weight is read in place rather than transposed.
    Tensor rows_in(DType::Float32, trans ? std::vector<int64_t>{k, n} : std::vector<int64_t>{n, k});
    Tensor out(DType::Float32, trans ? std::vector<int64_t>{m, n} : std::vector<int64_t>{n, m});
    float* rp = rows_in.data<float>();
    for (int64_t j = 0; j < n; ++j) {
      const float* src = xp + (at[static_cast<size_t>(j)] / repeat) * k;
      for (int64_t q = 0; q < k; ++q) rp[trans ? q * n + j : j * k + q] = src[q];
    }
    const Tensor weight =
        Tensor::view(DType::Float32, trans ? std::vector<int64_t>{m, k} : std::vector<int64_t>{k, m}, we, nullptr);
    if (trans)
      matmul(ctx, weight, rows_in, out);
    else
      matmul(ctx, rows_in, weight, out);
    const float* op = out.data<float>();
    const float* bias = b ? b->data<float>() + e * m : nullptr;
    for (int64_t j = 0; j < n; ++j) {
      float* dst = yp + at[static_cast<size_t>(j)] * m;
      for (int64_t q = 0; q < m; ++q) dst[q] = (trans ? op[q * n + j] : op[j * m + q]) + (bias ? bias[q] : 0.0f);
    }
  }
}

/// Runs the standard op `op` on `ins` into `out`.
void run_standard_on(const char* op, KernelContext& ctx, std::vector<const Tensor*> ins, Tensor* out) {
  KernelContext inner(ctx.node(), standard_schema(op), kFusedBaseOpset, std::move(ins), {out});
  standard_kernel(op)(inner);
}

/// SqueezeExcite (docs/ops.md) as the block it replaces runs: GlobalAveragePool, the first 1x1
/// conv and its activation, the second and its gate, then the broadcast Mul.
void squeeze_excite(KernelContext& ctx) {
  if (has_half_io(ctx)) return via_float32(ctx, squeeze_excite);
  const Tensor& x = ctx.input(0);
  require_f32(ctx, x);
  const Tensor &w1 = ctx.input(1), &w2 = ctx.input(2);
  if (x.rank() < 3 || w1.rank() != x.rank() || w2.rank() != x.rank() || w1.dim(1) != x.dim(1) ||
      w2.dim(0) != x.dim(1) || w2.dim(1) != w1.dim(0))
    ctx.fail("X " + dims_str(x.dims()) + ", W1 " + dims_str(w1.dims()) + " and W2 " + dims_str(w2.dims()) +
             " are not [N, C, ...], [Cr, C, 1...] and [C, Cr, 1...]");
  std::vector<int64_t> pooled_dims(x.rank(), 1), hidden_dims(x.rank(), 1);
  pooled_dims[0] = hidden_dims[0] = x.dim(0);
  pooled_dims[1] = x.dim(1);
  hidden_dims[1] = w1.dim(0);
  Tensor pooled(DType::Float32, pooled_dims), hidden(DType::Float32, hidden_dims), gate(DType::Float32, pooled_dims);
  run_standard_on("GlobalAveragePool", ctx, {&x}, &pooled);
  run_standard_on("Conv", ctx, {&pooled, &w1, ctx.has_input(3) ? &ctx.input(3) : nullptr}, &hidden);
  apply_activation(ctx, hidden);
  run_standard_on("Conv", ctx, {&hidden, &w2, ctx.has_input(4) ? &ctx.input(4) : nullptr}, &gate);
  apply_activation(ctx, gate, ctx.attr_string("gate"), ctx.attr_floats("gate_params"));
  binary_broadcast<float, float, float>(x, gate, ctx.output(0), [](float a, float b) { return a * b; });
}

}  // namespace

void register_fused_kernels(KernelRegistry& r) {
  r.add("FusedConv", fused_conv, "ai.fusec", Writes::Every);      // Conv's, then in place
  r.add("FusedMatMul", fused_matmul, "ai.fusec", Writes::Every);  // MatMul's, then in place
  r.add("GatedMatMul", gated_matmul, "ai.fusec", Writes::Every);
  r.add("ExpertMatMul", expert_matmul, "ai.fusec", Writes::Every);  // every row picks an expert
  r.add("LayerNormGelu", layernorm_gelu, "ai.fusec", Writes::Every);
  r.add("SkipLayerNorm", skip_layernorm, "ai.fusec", Writes::Every);  // Add's S, LayerNormalization's Y
  r.add("SimplifiedLayerNorm", simplified_layernorm, "ai.fusec", Writes::Every);
  r.add("SkipSimplifiedLayerNorm", skip_simplified_layernorm, "ai.fusec", Writes::Every);
  r.add("Rotary", rotary, "ai.fusec", Writes::Every);  // the r rotated values of a head and the rest copied
  r.add("SqueezeExcite", squeeze_excite, "ai.fusec", Writes::Every);
}

}  // namespace fusec::cpu
