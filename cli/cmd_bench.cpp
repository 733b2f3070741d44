// fusec bench: latency and throughput of repeated runs on the CPU or the GPU, of the model as given
// and after the fusion pipeline, in the same process (the A/B a user needs to trust a speedup).
//
// How each variant is timed is profiler/timing.h's; this file parses the flags, makes the
// variants and inputs, and prints.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "backend/cpu/parallel.h"
#include "cli/common.h"
#include "cli/random_inputs.h"
#include "cli/device_options.h"
#include "cli/project_args.h"
#include "ir/error.h"
#include "passes/pipeline.h"
#include "profiler/host_info.h"
#include "profiler/stats.h"
#include "profiler/timing.h"
#include "project/project_file.h"
#include "backend/gpu_plugin.h"

namespace fusec::cli {

namespace fs = std::filesystem;

namespace {

struct BenchArgs {
  std::string model, json_path;
  int warmup = 3;
  std::optional<int> iterations;
  std::optional<double> duration;
  uint64_t seed = 0;
  bool quiet = false, no_compare = false, include_copies = false;
  std::vector<std::string> passes, skip;  // the optimized variant's pipeline (optimize's --passes/--skip)
  ShapeOptions shapes;
  DeviceOptions device;
};

struct Variant {
  std::string name;  // "as_given" / "optimized"
  std::unique_ptr<Graph> graph;
  int rewrites = 0;
  // results
  std::vector<double> samples;
  LatencyStats stats;
  double build_ms = 0;   // compile + first run
  double import_ms = 0;  // loading the model (both variants load it once)
  double passes_ms = 0;  // the fusion pipeline (optimized variant)
  MemoryStats mem;
  size_t workspace_bytes = 0, io_bytes = 0, device_in_use_bytes = 0;
  bool device_memory = false;
  std::string placement, graph_status;
  std::vector<std::string> cpu_nodes;
  std::vector<DeviceDecision> decisions;  // where the device kept a node's parts over its fused kernel
};

double host_ms(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

void measure(const BenchArgs& a, const ResolvedDevice& dev, Variant& v, const std::vector<Tensor>& inputs) {
  auto backend = make_backend(a.device, dev);
  auto bad = backend->unsupported(*v.graph);
  if (!bad.empty()) fusec::unsupported(describe_unsupported(bad));
  size_t used_before = dev.cuda ? gpu_plugin()->device_used_bytes() : 0;
  auto t0 = std::chrono::steady_clock::now();
  auto exe = backend->compile(*v.graph);
  exe->run(inputs);  // the first run plans (shapes from the inputs) and warms every library up
  v.build_ms = host_ms(t0);
  v.placement = placement_summary(*exe);
  v.decisions = device_decisions(*exe);
  profiler::TimingSettings ts;
  ts.warmup = a.warmup;
  ts.rule.iterations = a.iterations;
  ts.rule.duration = a.duration;
  if (!a.quiet && stdout_is_tty()) ts.rule.progress_label = v.name;
  ts.include_copies = a.include_copies;
  profiler::TimedRuns t = profiler::time_runs(*exe, inputs, ts);
  v.samples = std::move(t.samples_ms);
  v.mem = t.memory;
  if (t.gpu) {
    v.cpu_nodes = std::move(t.cpu_nodes);
    v.graph_status = t.graph_status;
    v.workspace_bytes = t.device_memory.workspace_bytes;
    v.io_bytes = t.device_memory.io_bytes;
    const size_t used_after = gpu_plugin()->device_used_bytes();
    v.device_in_use_bytes = used_after > used_before ? used_after - used_before : 0;
    v.device_memory = true;
  }
  v.stats = compute_latency_stats(v.samples);
}

std::string fmt(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

void row(const std::string& label, const std::vector<std::string>& cells) {
  std::printf("%-16s", label.c_str());
  for (const auto& c : cells) std::printf("  %-24s", c.c_str());
  std::printf("\n");
}

nlohmann::ordered_json variant_json(const Variant& v, int64_t batch) {
  const LatencyStats& st = v.stats;
  nlohmann::ordered_json j;
  j["name"] = v.name;
  j["nodes"] = v.graph->nodes().size();
  if (v.name == "optimized") j["rewrites"] = v.rewrites;
  j["build_ms"] = v.build_ms;
  // The engine build a user waits for: import -> passes -> plan (with kernel tuning) -> first run.
  j["engine_build_ms"] = v.import_ms + v.passes_ms + v.build_ms;
  j["import_ms"] = v.import_ms;
  j["passes_ms"] = v.passes_ms;
  j["iterations"] = st.samples;
  j["latency_ms"] = {{"min", st.min_ms}, {"mean", st.mean_ms}, {"median", st.median_ms}, {"p90", st.p90_ms},
                     {"p95", st.p95_ms}, {"p99", st.p99_ms},   {"max", st.max_ms},       {"stddev", st.stddev_ms}};
  j["cv"] = st.cv;
  j["high_variance"] = st.cv > kHighCv;
  j["throughput_per_s"] = st.mean_ms > 0 ? 1000.0 * static_cast<double>(batch) / st.mean_ms : 0;
  nlohmann::ordered_json m = {{"peak_activation_bytes", v.mem.peak_activation_bytes},
                              {"weight_bytes", v.mem.weight_bytes},
                              {"planned", v.mem.planned}};
  if (!v.device_memory) m["packed_weight_bytes"] = v.mem.packed_weight_bytes;
  if (v.device_memory) {
    m["workspace_bytes"] = v.workspace_bytes;
    m["io_bytes"] = v.io_bytes;
    m["device_in_use_bytes"] = v.device_in_use_bytes;
  }
  j["memory"] = m;
  if (!v.graph_status.empty()) j["cuda_graph"] = v.graph_status;
  if (v.device_memory) {
    j["device_decisions"] = nlohmann::ordered_json::array();
    for (const auto& d : v.decisions)
      j["device_decisions"].push_back({{"node", d.node}, {"op_type", d.op_type}, {"decision", d.decision}});
  }
  j["cpu_nodes"] = v.cpu_nodes;
  j["samples_ms"] = v.samples;
  return j;
}

int bench(const BenchArgs& a) {
  if (a.iterations && a.duration) bad_input("give --iterations or --duration, not both");
  if (a.iterations && *a.iterations <= 0) bad_input("--iterations must be positive");
  if (a.duration && *a.duration <= 0) bad_input("--duration must be positive");
  if (a.warmup < 0) bad_input("--warmup must not be negative");
  if (!a.passes.empty() && !a.skip.empty()) bad_input("give --passes or --skip, not both");
  if (a.no_compare && (!a.passes.empty() || !a.skip.empty()))
    bad_input("--passes/--skip choose the optimized variant's passes; --no-compare runs none");
  ResolvedDevice dev = resolve_device(a.device);
  if (a.include_copies && !dev.cuda) bad_input("--include-copies applies to --device cuda only");

  std::vector<Variant> variants;
  variants.emplace_back();
  variants[0].name = "as_given";
  claim_output(a.json_path, "--json");
  const auto t_import = std::chrono::steady_clock::now();
  variants[0].graph = load_model(a.model, a.shapes);
  variants[0].import_ms = host_ms(t_import);
  {
    // Ops fusec cannot run at all are the first thing to report (before unbound shapes they cause).
    auto bad = make_backend(a.device, dev)->unsupported(*variants[0].graph);
    if (!bad.empty()) fusec::unsupported(describe_unsupported(bad));
  }
  require_bound_inputs(*variants[0].graph);
  // Before the inputs are made: at a batch of millions, making them alone takes minutes.
  make_backend(a.device, dev)->check_memory(*variants[0].graph);
  if (!a.no_compare) {
    Variant opt;
    opt.name = "optimized";
    opt.import_ms = variants[0].import_ms;
    const auto t_passes = std::chrono::steady_clock::now();
    opt.graph = variants[0].graph->clone();
    PipelineOptions po;
    po.only = a.passes;
    po.skip = a.skip;
    OptimizeResult r = optimize_graph(*opt.graph, po);
    opt.passes_ms = host_ms(t_passes);
    for (const auto& p : r.per_pass) opt.rewrites += p.rewrites;
    variants.push_back(std::move(opt));
  }
  const Graph& g = *variants[0].graph;
  const std::vector<Tensor> inputs =
      random_inputs_that_run(g, a.seed, [&](const std::vector<Tensor>& in) { measure(a, dev, variants[0], in); });
  for (size_t i = 1; i < variants.size(); ++i) measure(a, dev, variants[i], inputs);

  int64_t batch = 1;
  if (!g.inputs.empty() && g.inputs[0]->type.shape && !g.inputs[0]->type.shape->empty())
    batch = (*g.inputs[0]->type.shape)[0].value;

  std::printf("model           %s\n", a.model.c_str());
  std::printf("device          %s%s\n", dev.description.c_str(),
              dev.why.empty() ? "" : ("  [" + dev.why + "]").c_str());
  std::printf("precision       %s\n", precision_name(dev.precision));
  if (dev.cuda)
    std::printf(
        "timing          %s, %d warm-up\n",
        a.include_copies ? "host clock, including host<->device copies" : "CUDA events, inputs resident on the GPU",
        a.warmup);
  else
    std::printf("timing          host clock, %d warm-up\n", a.warmup);
  std::printf("batch           %lld\n\n", static_cast<long long>(batch));
  std::vector<std::string> c;
  auto cells = [&](auto f) {
    c.clear();
    for (const Variant& v : variants) c.push_back(f(v));
    return c;
  };
  row("", cells([](const Variant& v) {
        return v.name == "as_given" ? std::string("as given") : std::string("optimized");
      }));
  row("nodes", cells([](const Variant& v) { return std::to_string(v.graph->nodes().size()); }));
  row("iterations", cells([](const Variant& v) { return std::to_string(v.stats.samples); }));
  row("median ms", cells([](const Variant& v) { return fmt("%.4f", v.stats.median_ms); }));
  row("mean ms", cells([](const Variant& v) { return fmt("%.4f", v.stats.mean_ms); }));
  row("min / max ms",
      cells([](const Variant& v) { return fmt("%.4f", v.stats.min_ms) + " / " + fmt("%.4f", v.stats.max_ms); }));
  row("p90/p95/p99 ms", cells([](const Variant& v) {
        return fmt("%.4f", v.stats.p90_ms) + "/" + fmt("%.4f", v.stats.p95_ms) + "/" + fmt("%.4f", v.stats.p99_ms);
      }));
  row("throughput /s", cells([batch](const Variant& v) {
        return fmt("%.1f", v.stats.mean_ms > 0 ? 1000.0 * static_cast<double>(batch) / v.stats.mean_ms : 0);
      }));
  row("cv", cells([](const Variant& v) {
        return fmt("%.1f%%", v.stats.cv * 100) + (v.stats.cv > kHighCv ? " (high)" : "");
      }));
  row("activations", cells([](const Variant& v) {
        return human_bytes(static_cast<double>(v.mem.peak_activation_bytes)) + (v.mem.planned ? "" : " (observed)");
      }));
  row("weights", cells([](const Variant& v) { return human_bytes(static_cast<double>(v.mem.weight_bytes)); }));
  if (!dev.cuda)
    row("packed weights",
        cells([](const Variant& v) { return human_bytes(static_cast<double>(v.mem.packed_weight_bytes)); }));
  if (dev.cuda) {
    row("workspace", cells([](const Variant& v) { return human_bytes(static_cast<double>(v.workspace_bytes)); }));
    row("device in use",
        cells([](const Variant& v) { return human_bytes(static_cast<double>(v.device_in_use_bytes)); }));
    row("cuda graph", cells([](const Variant& v) { return v.graph_status.substr(0, 24); }));
    row("nodes on CPU", cells([](const Variant& v) { return std::to_string(v.cpu_nodes.size()); }));
  }
  row("build ms", cells([](const Variant& v) { return fmt("%.1f", v.build_ms); }));
  row("engine build ms", cells([](const Variant& v) { return fmt("%.1f", v.import_ms + v.passes_ms + v.build_ms); }));
  double speedup = 0;
  if (variants.size() == 2 && variants[1].stats.median_ms > 0) {
    speedup = variants[0].stats.median_ms / variants[1].stats.median_ms;
    std::printf("\nspeedup         %.2fx (median latency, as given / optimized)\n", speedup);
  }
  for (const Variant& v : variants) {
    if (v.stats.cv > kHighCv)
      std::printf("warning: %s timings vary a lot (cv %.1f%%); close other work or raise --iterations\n",
                  v.name.c_str(), v.stats.cv * 100);
    if (!v.cpu_nodes.empty()) std::printf("%s: %s\n", v.name.c_str(), v.placement.c_str());
    // The engine build timed these nodes' fused kernel against its parts on this GPU and kept the
    // parts; the ONNX file still holds the fused node (the choice is the device's, not the file's).
    if (!v.decisions.empty()) {
      constexpr size_t kShown = 8;
      std::printf("%s: %zu node(s) run as their parts, kept over their fused kernel by this GPU's timing:\n", v.name.c_str(),
                  v.decisions.size());
      for (size_t i = 0; i < v.decisions.size() && i < kShown; ++i)
        std::printf("  %s '%s': %s\n", v.decisions[i].op_type.c_str(), v.decisions[i].node.c_str(),
                    v.decisions[i].decision.c_str());
      if (v.decisions.size() > kShown)
        std::printf("  ... and %zu more (--json lists every one)\n", v.decisions.size() - kShown);
    }
    if (dev.cuda && v.graph_status != "on" && v.graph_status.find("--cuda-graph") == std::string::npos)
      std::printf("%s: CUDA graph %s\n", v.name.c_str(), v.graph_status.c_str());
  }

  if (!a.json_path.empty()) {
    nlohmann::ordered_json j;
    j["schema"] = "fusec.bench/2";
    j["model"] = a.model;
    j["device"] = dev.cuda ? "cuda" : "cpu";
    j["device_name"] = dev.description;
    if (!dev.cuda) j["threads"] = cpu::num_threads();
    j["cpu_model"] = host_cpu_model();
    j["precision"] = precision_name(dev.precision);
    j["batch"] = batch;
    j["warmup"] = a.warmup;
    j["timing"] = dev.cuda ? (a.include_copies ? "host_clock_with_copies" : "cuda_events") : "host_clock";
    if (!a.no_compare) j["pipeline"] = {{"passes", a.passes}, {"skip", a.skip}};
    j["variants"] = nlohmann::ordered_json::array();
    for (const Variant& v : variants) j["variants"].push_back(variant_json(v, batch));
    if (speedup > 0)
      j["speedup_median"] = speedup;
    else
      j["speedup_median"] = nullptr;
    write_text_file(a.json_path, json_text(j, 2) + "\n");
  }
  return 0;
}

/// `fusec bench` without a model: every model of ./fusec.toml, run as the project says (its batch,
/// shapes, device, precision, iterations and passes) except where a flag says otherwise.
int bench_project(const BenchArgs& a, const CLI::App& sub) {
  auto file = project::find_project();
  if (!file) bad_input(project::no_model_message("bench"));
  project::Project p = project::load_project(*file);
  auto given = [&](const char* flag) { return sub.count(flag) > 0; };
  for (size_t i = 0; i < p.models.size(); ++i) {
    const project::ModelConfig& m = p.models[i];
    BenchArgs b = a;
    b.model = m.path;
    apply_project_model(m, sub, b.shapes, b.device);
    if (!given("--iterations") && !given("--duration")) b.iterations = m.iterations;
    if (!given("--warmup")) b.warmup = m.warmup;
    if (!given("--passes") && !given("--skip") && !a.no_compare) {
      b.passes = m.passes;
      b.skip = m.skip;
    }
    // One report per model: out.json -> out.<name>.json when the project has several.
    b.json_path = per_model_path(a.json_path, m.name, p.models.size());
    std::printf("%s== %s (%s)\n", i ? "\n" : "", m.name.c_str(), m.path.c_str());
    std::fflush(stdout);
    bench(b);
    if (!b.json_path.empty() && p.models.size() > 1) std::printf("report: %s\n", b.json_path.c_str());
  }
  return 0;
}

}  // namespace

void add_bench(CLI::App& app, std::function<int()>& action) {
  auto args = std::make_shared<BenchArgs>();
  auto* sub = app.add_subcommand("bench", "Latency and throughput, as given vs optimized, on the GPU or the CPU");
  sub->add_option("model", args->model, "ONNX model file (default: every model of ./fusec.toml)");
  args->shapes.add_to(*sub);
  args->device.add_to(*sub);
  add_number(*sub, "--warmup", args->warmup, rules::kWarmup, "Warm-up runs, not timed (default 3)");
  add_number(*sub, "--iterations", args->iterations, rules::kRuns, "Timed runs per variant");
  add_number(*sub, "--duration", args->duration, rules::kDuration,
             "Time budget per variant in seconds (default 5 s, at least 10 runs)");
  add_number(*sub, "--seed", args->seed, rules::kSeed, "Seed for the random inputs");
  sub->add_flag("--no-compare", args->no_compare, "Benchmark only the model as given (no optimized run)");
  sub->add_option("--passes", args->passes, "Optimized variant: run only these passes (comma-separated)")
      ->delimiter(',');
  sub->add_option("--skip", args->skip, "Optimized variant: skip these passes (comma-separated)")->delimiter(',');
  sub->add_flag("--include-copies", args->include_copies, "GPU: time host->device->host copies too");
  sub->add_option("--json", args->json_path, "Write results as JSON (schema fusec.bench/2)");
  sub->add_flag("--quiet", args->quiet, "No progress output");
  sub->callback([args, sub, &action] {
    action = [args, sub] { return args->model.empty() ? bench_project(*args, *sub) : bench(*args); };
  });
}

}  // namespace fusec::cli
