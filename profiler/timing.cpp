#include "profiler/timing.h"

#include <chrono>
#include <cstdio>

namespace fusec::profiler {

namespace {

using Clock = std::chrono::steady_clock;

double host_ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

}  // namespace

std::vector<double> sample_ms(const SampleRule& rule, const std::function<double()>& once) {
  const bool progress = !rule.progress_label.empty();
  std::vector<double> samples;
  const int max_iters = rule.iterations.value_or(1 << 30);
  const double max_s = rule.duration.value_or(rule.iterations ? 1e30 : 5.0);
  const int min_iters = rule.iterations ? *rule.iterations : 10;
  const auto start = Clock::now();
  while (static_cast<int>(samples.size()) < max_iters) {
    samples.push_back(once());
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    if (progress && samples.size() % 16 == 0)
      std::fprintf(stderr, "\r  %s: %zu iterations, %.1f s", rule.progress_label.c_str(), samples.size(), elapsed);
    if (!rule.iterations && elapsed >= max_s && static_cast<int>(samples.size()) >= min_iters) break;
  }
  if (progress) std::fprintf(stderr, "\r%60s\r", "");
  return samples;
}

TimedRuns time_runs(Executable& exe, const std::vector<Tensor>& inputs, const TimingSettings& s) {
  TimedRuns r;
  auto host_run = [&] {
    const auto t = Clock::now();
    exe.run(inputs);
    return host_ms_since(t);
  };
  if (auto* ge = dynamic_cast<GpuExecutable*>(&exe)) {
    r.gpu = true;
    for (const auto& p : ge->placement())
      if (!p.on_gpu && !p.folded) r.cpu_nodes.push_back(p.node);
    ge->upload_inputs(inputs);
    for (int i = 0; i < s.warmup; ++i) ge->launch();
    ge->synchronize();
    r.graph_status = ge->graph_status();
    if (s.include_copies)
      r.samples_ms = sample_ms(s.rule, host_run);
    else
      r.samples_ms = sample_ms(s.rule, [&] { return ge->timed_launch_ms(); });
    r.device_memory = ge->device_memory();
    r.memory.peak_activation_bytes = r.device_memory.arena_bytes;
    r.memory.weight_bytes = r.device_memory.weight_bytes;
    r.memory.planned = true;
    return r;
  }
  for (int i = 0; i < s.warmup; ++i) exe.run(inputs);
  r.samples_ms = sample_ms(s.rule, host_run);
  r.memory = exe.memory();
  return r;
}

}  // namespace fusec::profiler
