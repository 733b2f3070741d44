#include "profiler/counters.h"

#include <algorithm>
#include <map>

namespace fusec::profiler {

CountersSection attribute_counters(const Collected& c, const Analysis& an, const std::vector<std::string>& metrics,
                                   const std::vector<KernelCounters>& kc) {
  CountersSection cs;
  cs.metrics = metrics;
  // The kernels of the first stream-mode iteration, in launch order, with their (step, ordinal).
  int stream_mode = -1;
  for (size_t m = 0; m < c.modes.size(); ++m)
    if (c.modes[m].name == "stream") stream_mode = static_cast<int>(m);
  std::vector<const Record*> recs;
  for (const auto& r : c.records)
    if (r.mode == stream_mode && r.iteration == 0) recs.push_back(&r);
  std::stable_sort(recs.begin(), recs.end(), [](auto* x, auto* y) { return x->start_ns < y->start_ns; });
  std::map<int, int> ordinal;
  std::vector<int> kernel_of;  // per launched kernel: index into an.kernels, -1 unknown
  for (const auto* r : recs) {
    int ord = ordinal[r->step]++;
    if (r->kind != RecordKind::Kernel) continue;
    int idx = -1;
    for (size_t k = 0; k < an.kernels.size(); ++k)
      if (an.kernels[k].step == r->step && an.kernels[k].ordinal == ord) idx = static_cast<int>(k);
    kernel_of.push_back(idx);
  }
  const bool aligned = stream_mode >= 0 && kernel_of.size() == kc.size();
  if (!aligned)
    cs.error = "the counter run launched " + std::to_string(kc.size()) + " kernels where the profiled run launched " +
               std::to_string(kernel_of.size()) + "; counters are listed without attribution";
  for (size_t i = 0; i < kc.size(); ++i) {
    CounterRow r;
    r.kernel = aligned ? kernel_of[i] : -1;
    r.name = kc[i].kernel;
    r.dram_read_bytes = kc[i].dram_read_bytes;
    r.dram_write_bytes = kc[i].dram_write_bytes;
    r.duration_ns = kc[i].duration_ns;
    r.sm_throughput_pct = kc[i].sm_throughput_pct;
    r.dram_throughput_pct = kc[i].dram_throughput_pct;
    r.tensor_pipe_pct = kc[i].tensor_pipe_pct;
    cs.rows.push_back(std::move(r));
  }
  if (aligned) cs.error.clear();
  return cs;
}

}  // namespace fusec::profiler
