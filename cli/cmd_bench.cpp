// fusec bench: latency and throughput of repeated runs, with the planner's peak memory.
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/parallel.h"
#include "cli/common.h"
#include "ir/error.h"
#include "profiler/stats.h"
#ifdef FUSEC_HAVE_CUDA
#include "backend/cuda/device_info.h"
#endif

namespace fusec::cli {

namespace {

struct BenchArgs {
  std::string model, json_path;
  int warmup = 3;
  std::optional<int> iterations;
  std::optional<double> duration;
  uint64_t seed = 0;
  bool quiet = false;
  ShapeOptions shapes;
};

int bench(const BenchArgs& a) {
  if (a.iterations && a.duration) bad_input("give --iterations or --duration, not both");
  if (a.iterations && *a.iterations <= 0) bad_input("--iterations must be positive");
  if (a.duration && *a.duration <= 0) bad_input("--duration must be positive");
  if (a.warmup < 0) bad_input("--warmup must not be negative");
  auto g = load_model(a.model, a.shapes);
  cpu::CpuBackend backend;
  auto bad = backend.unsupported(*g);
  if (!bad.empty()) bad_input(describe_unsupported(bad));
  require_static_shapes(*g);
  std::vector<Tensor> inputs;
  for (auto* v : g->inputs) inputs.push_back(random_input(*v, a.seed));
  auto exe = backend.compile(*g);
  using clock = std::chrono::steady_clock;
  bool progress = !a.quiet && stdout_is_tty();
  for (int i = 0; i < a.warmup; ++i) exe->run(inputs);
  std::vector<double> samples;
  int max_iters = a.iterations.value_or(1 << 30);
  double max_s = a.duration.value_or(a.iterations ? 1e30 : 10.0);
  int min_iters = a.iterations ? *a.iterations : 10;
  auto start = clock::now();
  while (static_cast<int>(samples.size()) < max_iters) {
    auto t0 = clock::now();
    exe->run(inputs);
    auto t1 = clock::now();
    samples.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    double elapsed = std::chrono::duration<double>(t1 - start).count();
    if (progress) std::fprintf(stderr, "\r  %zu iterations, %.1f s", samples.size(), elapsed);
    if (!a.iterations && elapsed >= max_s && static_cast<int>(samples.size()) >= min_iters) break;
  }
  if (progress) std::fprintf(stderr, "\r%40s\r", "");
  LatencyStats st = compute_latency_stats(samples);
  int64_t batch = 1;
  if (!g->inputs.empty() && g->inputs[0]->type.shape && !g->inputs[0]->type.shape->empty())
    batch = (*g->inputs[0]->type.shape)[0].value;
  double throughput = st.mean_ms > 0 ? 1000.0 * static_cast<double>(batch) / st.mean_ms : 0;
  MemoryStats mem = exe->memory();

  std::printf("model        %s\n", a.model.c_str());
  std::printf("backend      %s (%d threads)\n", exe->backend_name().c_str(), cpu::num_threads());
#ifdef FUSEC_HAVE_CUDA
  {
    std::string why;
    auto devices = cuda::list_devices(&why);
    if (!devices.empty())
      std::printf("gpu          %s (sm_%d%d) found; this version benchmarks on the CPU backend only\n",
                  devices[0].name.c_str(), devices[0].sm_major, devices[0].sm_minor);
  }
#endif
  std::printf("iterations   %d (after %d warm-up)\n", st.samples, a.warmup);
  std::printf("latency ms   min %.3f  mean %.3f  median %.3f  p90 %.3f  p95 %.3f  p99 %.3f  max %.3f\n",
              st.min_ms, st.mean_ms, st.median_ms, st.p90_ms, st.p95_ms, st.p99_ms, st.max_ms);
  std::printf("throughput   %.2f samples/s (batch %lld)\n", throughput, static_cast<long long>(batch));
  std::printf("cv           %.1f%%%s\n", st.cv * 100,
              st.cv > kHighCv ? "  warning: timings vary a lot; close other work or raise --iterations" : "");
  std::printf("memory       activations %s (%s), weights %s\n", human_bytes(static_cast<double>(mem.peak_activation_bytes)).c_str(),
              mem.planned ? "planned" : "observed peak", human_bytes(static_cast<double>(mem.weight_bytes)).c_str());
  if (!a.json_path.empty()) {
    nlohmann::ordered_json j;
    j["schema"] = "fusec.bench/1";
    j["model"] = a.model;
    j["backend"] = exe->backend_name();
    j["threads"] = cpu::num_threads();
    j["batch"] = batch;
    j["warmup"] = a.warmup;
    j["iterations"] = st.samples;
    j["latency_ms"] = {{"min", st.min_ms}, {"mean", st.mean_ms}, {"median", st.median_ms}, {"p90", st.p90_ms},
                       {"p95", st.p95_ms}, {"p99", st.p99_ms}, {"max", st.max_ms}, {"stddev", st.stddev_ms}};
    j["cv"] = st.cv;
    j["high_variance"] = st.cv > kHighCv;
    j["throughput_per_s"] = throughput;
    j["memory"] = {{"peak_activation_bytes", mem.peak_activation_bytes}, {"weight_bytes", mem.weight_bytes},
                   {"planned", mem.planned}};
    write_text_file(a.json_path, j.dump(2) + "\n");
  }
  return 0;
}

}  // namespace

void add_bench(CLI::App& app, std::function<int()>& action) {
  auto args = std::make_shared<BenchArgs>();
  auto* sub = app.add_subcommand("bench", "Latency and throughput (CPU backend; CUDA joins later)");
  sub->add_option("model", args->model, "ONNX model file")->required();
  args->shapes.add_to(*sub);
  sub->add_option("--warmup", args->warmup, "Warm-up runs, not timed (default 3)");
  sub->add_option("--iterations", args->iterations, "Timed runs");
  sub->add_option("--duration", args->duration, "Time budget in seconds (default 10 s, at least 10 runs)");
  sub->add_option("--seed", args->seed, "Seed for the random inputs");
  sub->add_option("--json", args->json_path, "Write results as JSON (schema fusec.bench/1)");
  sub->add_flag("--quiet", args->quiet, "No progress output");
  sub->callback([args, &action] { action = [args] { return bench(*args); }; });
}

}  // namespace fusec::cli
