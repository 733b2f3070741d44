#include <algorithm>
#include <cmath>
#include <map>

#include "ir/cost.h"
#include "profiler/profile.h"

namespace fusec::profiler {

const char* record_kind_name(RecordKind k) {
  switch (k) {
    case RecordKind::Kernel:
      return "kernel";
    case RecordKind::Memcpy:
      return "memcpy";
    case RecordKind::Memset:
      return "memset";
    case RecordKind::Host:
      return "host";
    case RecordKind::Step:
      return "step";
  }
  return "";
}

bool tensor_core_op(const std::string& op) {
  static const char* const kOps[] = {"MatMul",      "Gemm",        "Conv",          "ConvTranspose",     "FusedConv",
                                     "FusedMatMul", "GatedMatMul", "MatMulInteger", "QLinearMatMul",     "QLinearConv",
                                     "ConvInteger", "Einsum",      "Attention",     "MultiHeadAttention"};
  for (const char* o : kOps)
    if (op == o) return true;
  return false;
}

namespace {

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int median_int(std::vector<int> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// The length of the union of [start, end) intervals, in ms.
double union_ms(std::vector<std::pair<uint64_t, uint64_t>> iv) {
  std::sort(iv.begin(), iv.end());
  double total = 0;
  uint64_t cur_s = 0, cur_e = 0;
  bool open = false;
  for (auto [s, e] : iv) {
    if (!open || s > cur_e) {
      if (open) total += static_cast<double>(cur_e - cur_s);
      cur_s = s;
      cur_e = e;
      open = true;
    } else {
      cur_e = std::max(cur_e, e);
    }
  }
  if (open) total += static_cast<double>(cur_e - cur_s);
  return total * 1e-6;
}

void roofline(NodeProfile& n, const Peaks& peaks, Precision precision) {
  if (!n.cost || n.median_ms <= 0) return;
  const double s = n.median_ms * 1e-3;
  const double bytes = n.cost->bytes_read + n.cost->bytes_written;
  const double flops = n.cost->flops;
  n.bytes_per_s = bytes / s;
  n.flops_per_s = flops / s;
  n.intensity = bytes > 0 ? flops / bytes : 0;
  std::string key = tensor_core_op(n.op_type) ? precision_name(precision) : "fp32";
  if (!peaks.flops_per_s.count(key)) key = "fp32";
  auto pf_it = peaks.flops_per_s.find(key);
  const double pf = pf_it == peaks.flops_per_s.end() ? 0 : pf_it->second;
  const double bw = peaks.bandwidth_bytes_per_s;
  const double t_mem = bw > 0 ? bytes / bw : 0;
  const double t_comp = pf > 0 ? flops / pf : 0;
  n.roofline_ms = std::max(t_mem, t_comp) * 1e3;
  if (t_comp > t_mem) {
    n.bound = "compute";
    n.peak = key;
    n.pct_of_peak = 100.0 * n.flops_per_s / pf;
  } else if (bw > 0 && bytes > 0) {
    n.bound = "memory";
    n.peak = "bandwidth";
    n.pct_of_peak = 100.0 * n.bytes_per_s / bw;
  }
}

}  // namespace

Analysis analyze(const Collected& c, const Peaks& peaks, Precision precision, DType float32_storage) {
  Analysis a;
  const int iters = c.modes.empty() ? 0 : static_cast<int>(c.modes[0].wall_ms.size());
  a.iterations = iters;

  // Records of each (mode, iteration), in start order.
  std::map<std::pair<int, int>, std::vector<const Record*>> by_iter;
  for (const Record& r : c.records)
    if (r.iteration >= 0 && r.iteration < static_cast<int>(c.modes.size() ? c.modes[r.mode].wall_ms.size() : 0))
      by_iter[{r.mode, r.iteration}].push_back(&r);
  for (auto& [k, v] : by_iter)
    std::stable_sort(v.begin(), v.end(), [](const Record* x, const Record* y) { return x->start_ns < y->start_ns; });

  // Per node: the sum of its records per iteration of the primary mode; per kernel position.
  const size_t nsteps = c.steps.size();
  std::vector<std::vector<double>> step_samples(nsteps, std::vector<double>(static_cast<size_t>(iters), 0.0));
  std::vector<std::vector<int>> step_counts(nsteps, std::vector<int>(static_cast<size_t>(iters), 0));
  std::map<std::pair<int, int>, size_t> kernel_index;  // (step, ordinal) -> a.kernels
  for (int it = 0; it < iters; ++it) {
    auto found = by_iter.find({0, it});
    if (found == by_iter.end()) continue;
    std::map<int, int> ordinal;
    for (const Record* r : found->second) {
      int ord = ordinal[r->step]++;
      if (r->step >= 0 && static_cast<size_t>(r->step) < nsteps) {
        step_samples[r->step][it] += r->ms();
        step_counts[r->step][it] += 1;
      }
      auto [pos, fresh] = kernel_index.try_emplace({r->step, ord}, a.kernels.size());
      if (fresh) {
        KernelProfile k;
        k.name = r->name;
        k.kind = r->kind;
        k.step = r->step;
        k.ordinal = ord;
        std::copy(r->grid, r->grid + 3, k.grid);
        std::copy(r->block, r->block + 3, k.block);
        k.registers = r->registers;
        k.static_smem = r->static_smem;
        k.dynamic_smem = r->dynamic_smem;
        k.occupancy = r->occupancy;
        k.bytes = r->bytes;
        a.kernels.push_back(std::move(k));
      }
      a.kernels[pos->second].samples_ms.push_back(r->ms());
    }
  }
  for (KernelProfile& k : a.kernels) k.median_ms = median_of(k.samples_ms);

  for (size_t s = 0; s < nsteps; ++s) {
    const StepDesc& sd = c.steps[s];
    NodeProfile n;
    n.step = static_cast<int>(s);
    n.name = sd.label;
    n.kind = sd.kind;
    if (sd.node) {
      n.op_type = sd.node->op_type;
      n.fused_from = sd.node->fused_from;
      if (c.graph) n.cost = node_cost(*c.graph, *sd.node, float32_storage);
    } else {
      n.op_type = "(" + sd.kind + ")";
    }
    n.samples_ms = step_samples[s];
    n.median_ms = median_of(n.samples_ms);
    n.records_per_iteration = median_int(step_counts[s]);
    roofline(n, peaks, precision);
    a.node_ms += n.median_ms;
    if (n.cost) {
      a.total_cost.flops += n.cost->flops;
      a.total_cost.bytes_read += n.cost->bytes_read;
      a.total_cost.bytes_written += n.cost->bytes_written;
    }
    a.nodes.push_back(std::move(n));
  }

  std::map<std::string, OpTypeProfile> ops;
  for (const NodeProfile& n : a.nodes) {
    OpTypeProfile& o = ops[n.op_type];
    o.op_type = n.op_type;
    o.nodes += 1;
    o.ms += n.median_ms;
    if (n.cost) {
      o.flops += n.cost->flops;
      o.bytes += n.cost->bytes_read + n.cost->bytes_written;
    }
  }
  for (auto& [name, o] : ops) {
    o.share = a.node_ms > 0 ? o.ms / a.node_ms : 0;
    a.op_types.push_back(o);
  }
  std::stable_sort(a.op_types.begin(), a.op_types.end(), [](const auto& x, const auto& y) { return x.ms > y.ms; });

  for (size_t m = 0; m < c.modes.size(); ++m) {
    ModeSummary ms;
    ms.name = c.modes[m].name;
    ms.wall = compute_latency_stats(c.modes[m].wall_ms);
    std::vector<double> dev, busy, span, idle;
    std::vector<int> launches, copies, unattributed;
    for (int it = 0; it < static_cast<int>(c.modes[m].wall_ms.size()); ++it) {
      auto found = by_iter.find({static_cast<int>(m), it});
      if (found == by_iter.end()) continue;
      double sum = 0;
      int nk = 0, nc = 0, nu = 0;
      uint64_t first = UINT64_MAX, last = 0;
      std::vector<std::pair<uint64_t, uint64_t>> iv;
      for (const Record* r : found->second) {
        sum += r->ms();
        if (r->kind != RecordKind::Memcpy && r->kind != RecordKind::Memset)
          ++nk;
        else
          ++nc;
        if (r->step < 0) ++nu;
        first = std::min(first, r->start_ns);
        last = std::max(last, r->end_ns);
        iv.push_back({r->start_ns, r->end_ns});
      }
      double b = union_ms(iv);
      double sp = last > first ? static_cast<double>(last - first) * 1e-6 : 0;
      dev.push_back(sum);
      busy.push_back(b);
      span.push_back(sp);
      idle.push_back(sp > 0 ? (sp - b) / sp : 0);
      launches.push_back(nk);
      copies.push_back(nc);
      unattributed.push_back(nu);
    }
    ms.device_ms = median_of(dev);
    ms.busy_ms = median_of(busy);
    ms.span_ms = median_of(span);
    ms.idle_share = median_of(idle);
    ms.launches = median_int(launches);
    ms.copies = median_int(copies);
    ms.unattributed = median_int(unattributed);
    a.modes.push_back(ms);
  }
  return a;
}

}  // namespace fusec::profiler
