// CPU kernel for RNN, GRU and LSTM, as ONNX defines them.
//
// Each batch row runs through time on its own (rows run in parallel), one direction after the
// other, every gate's pre-activation summed in float64. A row past its sequence_lens entry writes
// zeros to Y and keeps the state it had at its last step; the reverse direction starts at the
// row's last step.
// fp16/bf16 run through float32.
#include <algorithm>
#include <cstring>

#include "backend/cpu/kernels/common.h"
#include "ir/ops/recurrent.h"

namespace fusec::cpu {

namespace {

using recurrent::Cell;
using recurrent::Config;

constexpr size_t kX = 0, kW = 1, kR = 2, kB = 3, kLens = 4, kH0 = 5, kC0 = 6, kP = 7;

struct Dims {
  int64_t seq = 0, batch = 0, input = 0, hidden = 0, dirs = 1, gates = 1;
};

template <typename T>
struct Operands {
  const T *x = nullptr, *w = nullptr, *r = nullptr, *b = nullptr, *h0 = nullptr, *c0 = nullptr, *p = nullptr;
  const int32_t* lens = nullptr;
  T *y = nullptr, *yh = nullptr, *yc = nullptr;
};

template <typename T>
class Runner {
 public:
  Runner(const Config& cfg, const Dims& d, const Operands<T>& o) : cfg_(cfg), d_(d), o_(o) {}

  // Element offsets: X, Y and the states follow the layout.
  int64_t x_at(int64_t t, int64_t b) const { return (cfg_.batch_major ? b * d_.seq + t : t * d_.batch + b) * d_.input; }
  int64_t y_at(int64_t t, int64_t dir, int64_t b) const {
    return (cfg_.batch_major ? (b * d_.seq + t) * d_.dirs + dir : (t * d_.dirs + dir) * d_.batch + b) * d_.hidden;
  }
  int64_t state_at(int64_t dir, int64_t b) const {
    return (cfg_.batch_major ? b * d_.dirs + dir : dir * d_.batch + b) * d_.hidden;
  }

  /// One batch row, one direction, through its steps.
  void row(int64_t b, int64_t dir, std::vector<double>& h, std::vector<double>& c, std::vector<double>& pre,
           std::vector<double>& rec) const {
    const int64_t H = d_.hidden, G = d_.gates, I = d_.input;
    const int64_t len = o_.lens ? o_.lens[b] : d_.seq;
    const T* w = o_.w + dir * G * H * I;
    const T* r = o_.r + dir * G * H * H;
    const T* bias = o_.b ? o_.b + dir * 2 * G * H : nullptr;
    const T* peep = o_.p ? o_.p + dir * 3 * H : nullptr;
    const auto* act = &cfg_.acts[static_cast<size_t>(dir) * (cfg_.acts.size() / static_cast<size_t>(d_.dirs))];
    for (int64_t k = 0; k < H; ++k) {
      h[k] = o_.h0 ? static_cast<double>(o_.h0[state_at(dir, b) + k]) : 0.0;
      c[k] = o_.c0 ? static_cast<double>(o_.c0[state_at(dir, b) + k]) : 0.0;
    }
    const bool backwards = cfg_.reverse || dir == 1;
    auto clip = [&](double v) { return cfg_.clip > 0 ? std::clamp(v, -cfg_.clip, cfg_.clip) : v; };
    for (int64_t s = 0; s < len; ++s) {
      const int64_t t = backwards ? len - 1 - s : s;
      const T* xt = o_.x + x_at(t, b);
      // pre: X_t W^T + Wb; rec: H_{t-1} R^T + Rb, per gate row.
      for (int64_t g = 0; g < G * H; ++g) {
        double a = bias ? static_cast<double>(bias[g]) : 0.0, q = bias ? static_cast<double>(bias[G * H + g]) : 0.0;
        const T* wg = w + g * I;
        for (int64_t i = 0; i < I; ++i) a += static_cast<double>(xt[i]) * static_cast<double>(wg[i]);
        const T* rg = r + g * H;
        for (int64_t k = 0; k < H; ++k) q += h[k] * static_cast<double>(rg[k]);
        pre[g] = a;
        rec[g] = q;
      }
      switch (cfg_.cell) {
        case Cell::Rnn:
          for (int64_t k = 0; k < H; ++k) h[k] = act[0](clip(pre[k] + rec[k]));
          break;
        case Cell::Gru:
          // z and r first (kept in pre's first two thirds): the candidate of the default form reads
          // every unit's r.
          for (int64_t k = 0; k < 2 * H; ++k) pre[k] = act[0](clip(pre[k] + rec[k]));
          for (int64_t k = 0; k < H; ++k) {
            double cand;
            if (cfg_.linear_before_reset) {
              cand = pre[2 * H + k] + pre[H + k] * rec[2 * H + k];
            } else {
              // (r ⊙ H_{t-1}) R_h^T + Rb_h
              double q = bias ? static_cast<double>(bias[G * H + 2 * H + k]) : 0.0;
              const T* rg = r + (2 * H + k) * H;
              for (int64_t j = 0; j < H; ++j) q += pre[H + j] * h[j] * static_cast<double>(rg[j]);
              cand = pre[2 * H + k] + q;
            }
            rec[k] = act[1](clip(cand));  // h~; rec's first third is free once z is in pre
          }
          for (int64_t k = 0; k < H; ++k) h[k] = (1 - pre[k]) * rec[k] + pre[k] * h[k];
          break;
        case Cell::Lstm:
          for (int64_t k = 0; k < H; ++k) {
            const double pi = peep ? static_cast<double>(peep[k]) : 0.0;
            const double po = peep ? static_cast<double>(peep[H + k]) : 0.0;
            const double pf = peep ? static_cast<double>(peep[2 * H + k]) : 0.0;
            const double in = act[0](clip(pre[k] + rec[k] + pi * c[k]));
            const double forget =
                cfg_.input_forget ? 1 - in : act[0](clip(pre[2 * H + k] + rec[2 * H + k] + pf * c[k]));
            const double cand = act[1](clip(pre[3 * H + k] + rec[3 * H + k]));
            c[k] = forget * c[k] + in * cand;
            const double out = act[0](clip(pre[H + k] + rec[H + k] + po * c[k]));
            h[k] = out * act[2](c[k]);
          }
          break;
      }
      if (o_.y)
        for (int64_t k = 0; k < H; ++k) o_.y[y_at(t, dir, b) + k] = static_cast<T>(h[k]);
    }
    if (o_.y)
      for (int64_t t = len; t < d_.seq; ++t) std::fill_n(o_.y + y_at(t, dir, b), H, T(0));
    // A row of length 0 reports zero states, not its initial ones, as onnxruntime does (ONNX does
    // not say).
    for (int64_t k = 0; k < H; ++k) {
      if (o_.yh) o_.yh[state_at(dir, b) + k] = static_cast<T>(len > 0 ? h[k] : 0.0);
      if (o_.yc) o_.yc[state_at(dir, b) + k] = static_cast<T>(len > 0 ? c[k] : 0.0);
    }
  }

  void run() const {
    parallel_for(d_.batch, 1, [&](int64_t b0, int64_t b1) {
      std::vector<double> h(d_.hidden), c(d_.hidden), pre(d_.gates * d_.hidden), rec(d_.gates * d_.hidden);
      for (int64_t b = b0; b < b1; ++b)
        for (int64_t dir = 0; dir < d_.dirs; ++dir) row(b, dir, h, c, pre, rec);
    });
  }

 private:
  const Config& cfg_;
  Dims d_;
  Operands<T> o_;
};

void recurrent_kernel(KernelContext& ctx) {
  if (has_half_io(ctx)) return via_float32(ctx, recurrent_kernel);
  const Config cfg = recurrent::configure(ctx, ctx.opset());
  const Tensor& x = ctx.input(kX);
  const Tensor& w = ctx.input(kW);
  const Tensor& r = ctx.input(kR);
  Dims d;
  d.seq = x.dim(cfg.batch_major ? 1 : 0);
  d.batch = x.dim(cfg.batch_major ? 0 : 1);
  d.input = x.dim(2);
  d.hidden = r.dim(2);
  d.dirs = cfg.directions;
  d.gates = cfg.gates;
  if (w.dim(1) != d.gates * d.hidden || r.dim(1) != d.gates * d.hidden || w.dim(2) != d.input)
    ctx.fail("W " + dims_str(w.dims()) + " and R " + dims_str(r.dims()) + " do not fit X " + dims_str(x.dims()));
  if (ctx.has_input(kLens)) {
    const Tensor& lens = ctx.input(kLens);
    for (int64_t b = 0; b < lens.numel(); ++b) {
      const int32_t n = lens.data<int32_t>()[b];
      if (n < 0 || n > d.seq)
        ctx.fail("sequence_lens[" + std::to_string(b) + "] is " + std::to_string(n) + ", outside [0, " +
                 std::to_string(d.seq) + "]");
    }
  }
  auto run = [&](auto tag) {
    using T = decltype(tag);
    Operands<T> o;
    o.x = x.data<T>();
    o.w = w.data<T>();
    o.r = r.data<T>();
    auto opt_in = [&](size_t i) -> const T* { return ctx.has_input(i) ? ctx.input(i).data<T>() : nullptr; };
    o.b = opt_in(kB);
    o.h0 = opt_in(kH0);
    o.c0 = opt_in(kC0);
    o.p = opt_in(kP);
    o.lens = ctx.has_input(kLens) ? ctx.input(kLens).data<int32_t>() : nullptr;
    auto opt_out = [&](size_t i) -> T* { return ctx.has_output(i) ? ctx.output(i).data<T>() : nullptr; };
    o.y = opt_out(0);
    o.yh = opt_out(1);
    o.yc = opt_out(2);
    Runner<T>(cfg, d, o).run();
  };
  dispatch_float(x.dtype(), ctx, run);
}

}  // namespace

void register_recurrent_kernels(KernelRegistry& r) {
  for (const char* op : {"RNN", "GRU", "LSTM"}) r.add(op, recurrent_kernel, "", Writes::Every);
}

}  // namespace fusec::cpu
