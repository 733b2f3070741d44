#include "profiler/report.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "ir/json_text.h"

namespace fusec::profiler {

namespace {

using ojson = nlohmann::ordered_json;

ojson stats_json(const LatencyStats& s) {
  return {{"min", s.min_ms}, {"median", s.median_ms}, {"mean", s.mean_ms},     {"p90", s.p90_ms}, {"p95", s.p95_ms},
          {"p99", s.p99_ms}, {"max", s.max_ms},       {"stddev", s.stddev_ms}, {"cv", s.cv}};
}

ojson num_or_null(double x, bool have) { return have ? ojson(x) : ojson(nullptr); }

std::string fmt(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

std::string rate(double per_s, const char* unit) {
  if (per_s <= 0) return "-";
  if (per_s >= 1e12) return fmt("%.2f T", per_s / 1e12) + unit;
  if (per_s >= 1e9) return fmt("%.1f G", per_s / 1e9) + unit;
  return fmt("%.1f M", per_s / 1e6) + unit;
}

std::string shorten(const std::string& s, size_t n) {
  if (s.size() <= n) return s;
  return s.substr(0, n - 3) + "...";
}

std::string node_of(const Analysis& a, int step) {
  if (step < 0 || static_cast<size_t>(step) >= a.nodes.size()) return "(unattributed)";
  return a.nodes[step].name;
}

}  // namespace

UnfusedComparison compare_unfused(const Analysis& given, const Analysis& opt) {
  UnfusedComparison u;
  std::map<std::string, const NodeProfile*> before;
  auto bytes = [](const NodeProfile& n) { return n.cost ? n.cost->bytes_read + n.cost->bytes_written : 0.0; };
  for (const NodeProfile& n : given.nodes) {
    if (n.kind != "kernel" && n.kind != "cpu" && n.kind != "node") {
      u.kernels_before += n.records_per_iteration;
      u.ms_before += n.median_ms;
      continue;
    }
    before[n.name] = &n;
    u.nodes_before += 1;
    u.kernels_before += n.records_per_iteration;
    u.bytes_before += bytes(n);
    u.ms_before += n.median_ms;
  }
  std::set<std::string> claimed;
  for (const NodeProfile& n : opt.nodes) {
    u.kernels_after += n.records_per_iteration;
    u.ms_after += n.median_ms;
    if (n.kind != "kernel" && n.kind != "cpu" && n.kind != "node") continue;
    u.nodes_after += 1;
    u.bytes_after += bytes(n);
    std::vector<std::string> originals = n.fused_from.empty() ? std::vector<std::string>{n.name} : n.fused_from;
    for (const auto& o : originals) claimed.insert(o);
    auto same = before.find(n.name);
    if (originals.size() == 1 && originals[0] == n.name && same != before.end() && same->second->op_type == n.op_type)
      continue;  // untouched by the passes
    FusionRow r;
    r.node = n.name;
    r.op_type = n.op_type;
    r.originals = originals;
    for (const auto& o : originals) {
      auto it = before.find(o);
      if (it == before.end()) continue;
      r.kernels_before += it->second->records_per_iteration;
      r.bytes_before += bytes(*it->second);
      r.ms_before += it->second->median_ms;
    }
    r.kernels_after = n.records_per_iteration;
    r.bytes_after = bytes(n);
    r.ms_after = n.median_ms;
    u.fusions.push_back(std::move(r));
  }
  for (const auto& [name, n] : before) {
    if (claimed.count(name)) continue;
    u.removed.originals.push_back(name);
    u.removed.kernels_before += n->records_per_iteration;
    u.removed.bytes_before += bytes(*n);
    u.removed.ms_before += n->median_ms;
  }
  std::stable_sort(u.fusions.begin(), u.fusions.end(), [](const FusionRow& x, const FusionRow& y) {
    return x.ms_before - x.ms_after > y.ms_before - y.ms_after;
  });
  if (!given.modes.empty()) u.wall_before = given.modes[0].wall.median_ms;
  if (!opt.modes.empty()) u.wall_after = opt.modes[0].wall.median_ms;
  return u;
}

ojson report_json(const ReportMeta& m, const Peaks& p, const Collected& c, const Analysis& a,
                  const CountersSection* counters, const UnfusedComparison* unfused) {
  ojson j;
  j["schema"] = "fusec.profile/1";
  j["model"] = m.model;
  j["variant"] = m.variant;
  j["created"] = m.created;
  ojson dev = {{"kind", m.device_kind}, {"name", m.device_name}};
  if (m.device_kind == "cuda") {
    dev["index"] = m.device_index;
    dev["sm"] = m.sm;
    dev["multiprocessors"] = m.multiprocessors;
    dev["memory_bytes"] = m.device_memory_bytes;
  } else {
    dev["threads"] = m.threads;
  }
  j["device"] = dev;
  j["build"] = m.build;
  j["precision"] = precision_name(m.precision);
  j["batch"] = m.batch;
  j["iterations"] = a.iterations;
  j["warmup"] = m.warmup;
  if (m.device_kind == "cuda") j["cuda_graph"] = m.cuda_graph;
  j["peaks"] = {{"device", p.device},
                {"bandwidth_bytes_per_s", p.bandwidth_bytes_per_s},
                {"flops_per_s", p.flops_per_s},
                {"measured_at", p.measured_at},
                {"source", p.source},
                {"cache_path", p.cache_path},
                {"method", p.method}};
  j["attribution"] = c.attribution;
  j["dropped_records"] = c.dropped_records;
  j["totals"] = {{"flops", a.total_cost.flops},
                 {"bytes_read", a.total_cost.bytes_read},
                 {"bytes_written", a.total_cost.bytes_written},
                 {"node_ms", a.node_ms}};

  ojson modes = ojson::array();
  for (size_t i = 0; i < a.modes.size(); ++i) {
    const ModeSummary& s = a.modes[i];
    modes.push_back({{"name", s.name},
                     {"wall_ms", stats_json(s.wall)},
                     {"device_ms", s.device_ms},
                     {"busy_ms", s.busy_ms},
                     {"span_ms", s.span_ms},
                     {"idle_share", s.idle_share},
                     {"launches", s.launches},
                     {"copies", s.copies},
                     {"unattributed", s.unattributed},
                     {"samples_ms", c.modes[i].wall_ms}});
  }
  j["modes"] = modes;

  // Counters per node, where every record of the node was counted.
  std::map<int, std::pair<double, double>> node_dram;  // step -> (read, write)
  if (counters)
    for (const CounterRow& r : counters->rows)
      if (r.kernel >= 0) {
        auto& nd = node_dram[a.kernels[r.kernel].step];
        nd.first += r.dram_read_bytes;
        nd.second += r.dram_write_bytes;
      }

  ojson nodes = ojson::array();
  for (const NodeProfile& n : a.nodes) {
    const bool hc = n.cost.has_value();
    ojson e = {{"step", n.step},
               {"name", n.name},
               {"op_type", n.op_type},
               {"kind", n.kind},
               {"fused_from", n.fused_from},
               {"median_ms", n.median_ms},
               {"records", n.records_per_iteration},
               {"flops", num_or_null(hc ? n.cost->flops : 0, hc)},
               {"bytes_read", num_or_null(hc ? n.cost->bytes_read : 0, hc)},
               {"bytes_written", num_or_null(hc ? n.cost->bytes_written : 0, hc)},
               {"flops_per_s", n.flops_per_s},
               {"bytes_per_s", n.bytes_per_s},
               {"intensity", n.intensity},
               {"bound", n.bound.empty() ? ojson(nullptr) : ojson(n.bound)},
               {"peak", n.peak.empty() ? ojson(nullptr) : ojson(n.peak)},
               {"pct_of_peak", n.pct_of_peak},
               {"roofline_ms", n.roofline_ms},
               {"samples_ms", n.samples_ms}};
    if (auto it = node_dram.find(n.step); it != node_dram.end())
      e["dram_bytes"] = {{"read", it->second.first}, {"written", it->second.second}};
    nodes.push_back(std::move(e));
  }
  j["nodes"] = nodes;

  ojson kernels = ojson::array();
  for (size_t i = 0; i < a.kernels.size(); ++i) {
    const KernelProfile& k = a.kernels[i];
    ojson e = {{"index", i},
               {"name", k.name},
               {"kind", record_kind_name(k.kind)},
               {"node", k.step >= 0 ? ojson(node_of(a, k.step)) : ojson(nullptr)},
               {"step", k.step},
               {"ordinal", k.ordinal},
               {"median_ms", k.median_ms},
               {"samples_ms", k.samples_ms}};
    if (k.kind == RecordKind::Kernel) {
      e["grid"] = {k.grid[0], k.grid[1], k.grid[2]};
      e["block"] = {k.block[0], k.block[1], k.block[2]};
      e["registers"] = k.registers;
      e["static_smem"] = k.static_smem;
      e["dynamic_smem"] = k.dynamic_smem;
      e["occupancy"] = k.occupancy >= 0 ? ojson(k.occupancy) : ojson(nullptr);
    }
    if (k.kind == RecordKind::Memcpy || k.kind == RecordKind::Memset) e["bytes"] = k.bytes;
    kernels.push_back(std::move(e));
  }
  j["kernels"] = kernels;

  ojson ops = ojson::array();
  for (const OpTypeProfile& o : a.op_types)
    ops.push_back({{"op_type", o.op_type},
                   {"nodes", o.nodes},
                   {"ms", o.ms},
                   {"share", o.share},
                   {"flops", o.flops},
                   {"bytes", o.bytes}});
  j["op_types"] = ops;

  if (counters) {
    ojson cj = {{"metrics", counters->metrics}};
    if (!counters->error.empty()) cj["error"] = counters->error;
    ojson rows = ojson::array();
    for (const CounterRow& r : counters->rows) {
      ojson e = {{"kernel", r.kernel >= 0 ? ojson(r.kernel) : ojson(nullptr)},
                 {"name", r.name},
                 {"dram_read_bytes", r.dram_read_bytes},
                 {"dram_write_bytes", r.dram_write_bytes},
                 {"duration_ns", r.duration_ns},
                 {"sm_throughput_pct", r.sm_throughput_pct},
                 {"dram_throughput_pct", r.dram_throughput_pct},
                 {"tensor_pipe_pct", r.tensor_pipe_pct}};
      // The cost model's bytes beside the counters', for kernels that are their node's only one.
      if (r.kernel >= 0) {
        const KernelProfile& k = a.kernels[r.kernel];
        if (k.step >= 0 && a.nodes[k.step].records_per_iteration == 1 && a.nodes[k.step].cost) {
          const Cost& cost = *a.nodes[k.step].cost;
          e["model_bytes"] = cost.bytes_read + cost.bytes_written;
          double dram = r.dram_read_bytes + r.dram_write_bytes;
          e["dram_over_model"] = e["model_bytes"].get<double>() > 0 ? dram / e["model_bytes"].get<double>() : 0;
        }
      }
      rows.push_back(std::move(e));
    }
    cj["kernels"] = rows;
    j["counters"] = cj;
  }

  if (unfused) {
    auto row = [](const FusionRow& r) {
      return ojson{{"node", r.node},
                   {"op_type", r.op_type},
                   {"originals", r.originals},
                   {"kernels_before", r.kernels_before},
                   {"kernels_after", r.kernels_after},
                   {"bytes_before", r.bytes_before},
                   {"bytes_after", r.bytes_after},
                   {"ms_before", r.ms_before},
                   {"ms_after", r.ms_after},
                   {"ms_saved", r.ms_before - r.ms_after}};
    };
    ojson fj = {{"nodes_before", unfused->nodes_before},     {"nodes_after", unfused->nodes_after},
                {"kernels_before", unfused->kernels_before}, {"kernels_after", unfused->kernels_after},
                {"bytes_before", unfused->bytes_before},     {"bytes_after", unfused->bytes_after},
                {"ms_before", unfused->ms_before},           {"ms_after", unfused->ms_after},
                {"wall_ms_before", unfused->wall_before},    {"wall_ms_after", unfused->wall_after}};
    ojson rows = ojson::array();
    for (const FusionRow& r : unfused->fusions) rows.push_back(row(r));
    fj["fusions"] = rows;
    fj["removed"] = row(unfused->removed);
    j["compare_unfused"] = fj;
  }
  return j;
}

std::string chrome_trace(const ReportMeta& m, const Collected& c, const Analysis& a) {
  uint64_t t0 = UINT64_MAX;
  for (const Record& r : c.records)
    if (r.iteration >= 0) t0 = std::min(t0, r.start_ns);
  for (const HostRange& h : c.host_ranges) t0 = std::min(t0, h.start_ns);
  if (t0 == UINT64_MAX) t0 = 0;
  auto us = [t0](uint64_t ns) { return static_cast<double>(ns - std::min(ns, t0)) * 1e-3; };
  ojson ev = ojson::array();
  const bool gpu = c.device_kind == "cuda";
  auto meta_event = [&](const char* what, int pid, int tid, const std::string& name) {
    ojson e = {{"name", what}, {"ph", "M"}, {"pid", pid}, {"args", {{"name", name}}}};
    if (tid >= 0) e["tid"] = tid;
    ev.push_back(std::move(e));
  };
  const int kNodeTrack = 1000000, kHostTrack = 1000001;
  for (size_t mi = 0; mi < c.modes.size(); ++mi) {
    const int pid = static_cast<int>(mi) + 1;
    meta_event("process_name", pid, -1, (gpu ? m.device_name + " - " : std::string("CPU - ")) + c.modes[mi].name);
    meta_event("process_sort_index", pid, -1, std::to_string(mi));
    meta_event("thread_name", pid, kNodeTrack, "nodes (first to last record)");
    meta_event("thread_name", pid, kHostTrack, gpu ? "host: launches" : "host");
  }
  std::set<std::pair<int, uint32_t>> streams;
  // Node ranges per (mode, iteration, step).
  std::map<std::tuple<int, int, int>, std::pair<uint64_t, uint64_t>> ranges;
  for (const Record& r : c.records) {
    if (r.iteration < 0) continue;
    const int pid = r.mode + 1;
    if (gpu && streams.insert({pid, r.stream}).second)
      meta_event("thread_name", pid, static_cast<int>(r.stream), "stream " + std::to_string(r.stream));
    ojson args = {{"node", node_of(a, r.step)}, {"iteration", r.iteration}};
    if (r.kind == RecordKind::Kernel) {
      args["grid"] = std::to_string(r.grid[0]) + "," + std::to_string(r.grid[1]) + "," + std::to_string(r.grid[2]);
      args["block"] = std::to_string(r.block[0]) + "," + std::to_string(r.block[1]) + "," + std::to_string(r.block[2]);
      args["registers"] = r.registers;
    }
    if (r.bytes) args["bytes"] = r.bytes;
    if (gpu) {
      ev.push_back({{"name", r.name},
                    {"cat", record_kind_name(r.kind)},
                    {"ph", "X"},
                    {"ts", us(r.start_ns)},
                    {"dur", r.ms() * 1e3},
                    {"pid", pid},
                    {"tid", static_cast<int>(r.stream)},
                    {"args", args}});
    }
    if (r.step >= 0) {
      auto [it, fresh] = ranges.try_emplace({r.mode, r.iteration, r.step}, r.start_ns, r.end_ns);
      if (!fresh) {
        it->second.first = std::min(it->second.first, r.start_ns);
        it->second.second = std::max(it->second.second, r.end_ns);
      }
    }
  }
  for (const auto& [key, range] : ranges) {
    auto [mode, iter, step] = key;
    const NodeProfile& n = a.nodes[step];
    ev.push_back({{"name", n.name},
                  {"cat", "node"},
                  {"ph", "X"},
                  {"ts", us(range.first)},
                  {"dur", static_cast<double>(range.second - range.first) * 1e-3},
                  {"pid", mode + 1},
                  {"tid", kNodeTrack},
                  {"args", {{"op_type", n.op_type}, {"iteration", iter}}}});
  }
  for (const HostRange& h : c.host_ranges) {
    if (h.step < 0 || static_cast<size_t>(h.step) >= a.nodes.size()) continue;
    ev.push_back({{"name", a.nodes[h.step].name},
                  {"cat", "host"},
                  {"ph", "X"},
                  {"ts", us(h.start_ns)},
                  {"dur", static_cast<double>(h.end_ns - h.start_ns) * 1e-3},
                  {"pid", h.mode + 1},
                  {"tid", kHostTrack},
                  {"args", {{"iteration", h.iteration}}}});
  }
  ojson j = {{"traceEvents", ev},
             {"displayTimeUnit", "ns"},
             {"otherData",
              {{"model", m.model},
               {"device", m.device_name},
               {"precision", precision_name(m.precision)},
               {"generator", "fusec profile"}}}};
  return json_text(j) + "\n";
}

void print_summary(std::FILE* out, const ReportMeta& m, const Peaks& p, const Collected& c, const Analysis& a,
                   const CountersSection* counters, const UnfusedComparison* u, int top) {
  std::fprintf(out, "model           %s%s\n", m.model.c_str(), m.variant == "optimized" ? " (optimized)" : "");
  std::fprintf(out, "device          %s\n", m.device_name.c_str());
  std::fprintf(out, "precision       %s, batch %lld, %d iterations per mode after %d warm-up\n",
               precision_name(m.precision), static_cast<long long>(m.batch), a.iterations, m.warmup);
  std::string fl;
  for (const auto& [k, v] : p.flops_per_s) fl += (fl.empty() ? "" : ", ") + k + " " + rate(v, "FLOP/s");
  std::fprintf(out, "peaks           copy %s, GEMM %s\n", rate(p.bandwidth_bytes_per_s, "B/s").c_str(), fl.c_str());
  std::fprintf(out, "                %s %s%s%s\n", p.source.c_str(), p.measured_at.c_str(),
               p.cache_path.empty() ? "" : ", cached in ", p.cache_path.c_str());
  std::fprintf(out, "cost model      %s FLOPs, %s read, %s written per run\n", fmt("%.3g", a.total_cost.flops).c_str(),
               fmt("%.3g B", a.total_cost.bytes_read).c_str(), fmt("%.3g B", a.total_cost.bytes_written).c_str());
  if (c.dropped_records)
    std::fprintf(out, "warning: %zu activity records were dropped; figures are incomplete\n", c.dropped_records);

  std::fprintf(out, "\n%-12s %10s %10s %10s %10s %7s %9s %7s\n", "mode", "wall ms", "device ms", "busy ms", "span ms",
               "idle", "launches", "copies");
  for (const ModeSummary& s : a.modes)
    std::fprintf(out, "%-12s %10.4f %10.4f %10.4f %10.4f %6.1f%% %9d %7d%s\n", s.name.c_str(), s.wall.median_ms,
                 s.device_ms, s.busy_ms, s.span_ms, 100 * s.idle_share, s.launches, s.copies,
                 s.unattributed ? ("  (" + std::to_string(s.unattributed) + " unattributed)").c_str() : "");

  const std::string primary = a.modes.empty() ? "" : a.modes[0].name;
  std::vector<const NodeProfile*> nodes;
  for (const NodeProfile& n : a.nodes) nodes.push_back(&n);
  std::stable_sort(nodes.begin(), nodes.end(), [](auto* x, auto* y) { return x->median_ms > y->median_ms; });
  std::fprintf(out, "\ntop %d nodes by time (%s)\n", top, primary.c_str());
  // GPUs reach TFLOP/s, CPUs GFLOP/s: the unit that keeps the column readable.
  const bool tera = c.device_kind == "cuda";
  std::fprintf(out, "  %9s %6s  %-18s %10s %12s %8s %7s %4s  %s\n", "ms", "share", "op", "GB/s",
               tera ? "TFLOP/s" : "GFLOP/s", "bound", "%peak", "kern", "node");
  bool above_peak = false;
  for (int i = 0; i < top && i < static_cast<int>(nodes.size()); ++i) {
    const NodeProfile& n = *nodes[i];
    if (n.median_ms <= 0) break;
    const bool above = !n.bound.empty() && n.pct_of_peak > 100;
    above_peak |= above;
    std::fprintf(out, "  %9.4f %5.1f%%  %-18s %10s %12s %8s %7s %4d  %s\n", n.median_ms,
                 a.node_ms > 0 ? 100 * n.median_ms / a.node_ms : 0, shorten(n.op_type, 18).c_str(),
                 n.bytes_per_s > 0 ? fmt("%.1f", n.bytes_per_s / 1e9).c_str() : "-",
                 n.flops_per_s > 0 ? fmt("%.2f", n.flops_per_s / (tera ? 1e12 : 1e9)).c_str() : "-",
                 n.bound.empty() ? "-" : n.bound.c_str(),
                 n.bound.empty() ? "-" : (fmt("%.1f", n.pct_of_peak) + (above ? "*" : "")).c_str(),
                 n.records_per_iteration, shorten(n.name, 48).c_str());
  }
  if (above_peak)
    std::fprintf(out,
                 "  * above the measured peak: the cost model counts every input and output as memory traffic, and\n"
                 "    the cache served part of it (--counters measures the DRAM bytes)\n");
  std::fprintf(out, "\ntop %d op types by time\n", top);
  std::fprintf(out, "  %9s %6s %6s %10s %12s  %s\n", "ms", "share", "nodes", "GB/s", tera ? "TFLOP/s" : "GFLOP/s",
               "op");
  for (int i = 0; i < top && i < static_cast<int>(a.op_types.size()); ++i) {
    const OpTypeProfile& o = a.op_types[i];
    const double sec = o.ms * 1e-3;
    std::fprintf(out, "  %9.4f %5.1f%% %6d %10s %12s  %s\n", o.ms, 100 * o.share, o.nodes,
                 sec > 0 && o.bytes > 0 ? fmt("%.1f", o.bytes / sec / 1e9).c_str() : "-",
                 sec > 0 && o.flops > 0 ? fmt("%.2f", o.flops / sec / (tera ? 1e12 : 1e9)).c_str() : "-",
                 o.op_type.c_str());
  }
  if (c.device_kind == "cuda") {
    std::vector<const KernelProfile*> ks;
    for (const KernelProfile& k : a.kernels) ks.push_back(&k);
    std::stable_sort(ks.begin(), ks.end(), [](auto* x, auto* y) { return x->median_ms > y->median_ms; });
    std::fprintf(out, "\ntop %d kernels by time\n", top);
    std::fprintf(out, "  %9s %5s %5s  %-44s %s\n", "ms", "regs", "occ", "kernel", "node");
    for (int i = 0; i < top && i < static_cast<int>(ks.size()); ++i) {
      const KernelProfile& k = *ks[i];
      std::fprintf(out, "  %9.4f %5d %5s  %-44s %s\n", k.median_ms, k.registers,
                   k.occupancy >= 0 ? fmt("%.0f%%", 100 * k.occupancy).c_str() : "-", shorten(k.name, 44).c_str(),
                   shorten(node_of(a, k.step), 40).c_str());
    }
  }
  if (counters) {
    if (!counters->error.empty()) {
      std::fprintf(out, "\ncounters: %s\n", counters->error.c_str());
    } else {
      std::vector<const CounterRow*> rows;
      for (const CounterRow& r : counters->rows) rows.push_back(&r);
      std::stable_sort(rows.begin(), rows.end(), [](auto* x, auto* y) { return x->duration_ns > y->duration_ns; });
      std::fprintf(out, "\ncounters (kernel replay, one stream-mode run): top %d kernels\n", top);
      std::fprintf(out, "  %9s %11s %11s %11s %6s %6s %6s  %s\n", "us", "DRAM read", "DRAM write", "cost model", "SM%",
                   "DRAM%", "TC%", "node");
      for (int i = 0; i < top && i < static_cast<int>(rows.size()); ++i) {
        const CounterRow& r = *rows[i];
        std::string model = "-";
        if (r.kernel >= 0) {
          const KernelProfile& k = a.kernels[r.kernel];
          if (k.step >= 0 && a.nodes[k.step].records_per_iteration == 1 && a.nodes[k.step].cost)
            model = fmt("%.3g", a.nodes[k.step].cost->bytes_read + a.nodes[k.step].cost->bytes_written);
        }
        std::fprintf(out, "  %9.1f %11.3g %11.3g %11s %6.1f %6.1f %6.1f  %s\n", r.duration_ns * 1e-3, r.dram_read_bytes,
                     r.dram_write_bytes, model.c_str(), r.sm_throughput_pct, r.dram_throughput_pct, r.tensor_pipe_pct,
                     shorten(r.kernel >= 0 ? node_of(a, a.kernels[r.kernel].step) : r.name, 40).c_str());
      }
    }
  }
  if (u) {
    std::fprintf(out, "\nfusion (as given -> optimized, %s mode)\n", primary.c_str());
    std::fprintf(
        out,
        "  nodes %d -> %d, kernels/run %d -> %d, bytes %.3g -> %.3g, node time %.4f -> %.4f ms, wall %.4f -> %.4f ms\n",
        u->nodes_before, u->nodes_after, u->kernels_before, u->kernels_after, u->bytes_before, u->bytes_after,
        u->ms_before, u->ms_after, u->wall_before, u->wall_after);
    std::fprintf(out, "  %9s %9s %9s %7s %11s  %-16s %s\n", "ms before", "ms after", "saved", "kernels", "bytes saved",
                 "fused op", "node (replaced)");
    int shown = 0;
    for (const FusionRow& r : u->fusions) {
      if (shown++ >= top) break;
      std::fprintf(out, "  %9.4f %9.4f %9.4f %3d->%-3d %11.3g  %-16s %s (%zu)\n", r.ms_before, r.ms_after,
                   r.ms_before - r.ms_after, r.kernels_before, r.kernels_after, r.bytes_before - r.bytes_after,
                   shorten(r.op_type, 16).c_str(), shorten(r.node, 40).c_str(), r.originals.size());
    }
    if (!u->removed.originals.empty())
      std::fprintf(out, "  %9.4f %9.4f %9.4f %3d->%-3d %11.3g  %-16s %zu nodes folded or removed\n",
                   u->removed.ms_before, 0.0, u->removed.ms_before, u->removed.kernels_before, 0,
                   u->removed.bytes_before, "(removed)", u->removed.originals.size());
  }
}

}  // namespace fusec::profiler
