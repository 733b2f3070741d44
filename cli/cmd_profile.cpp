// fusec profile: where the time goes, node by node and kernel by kernel, against the device's
// measured peaks. GPU: CUPTI activity records in CUDA-graph replay and in separate launches
// (profiler/cuda/); CPU: the host clock around each node. Same report either way.
//
// The model is profiled as fusec runs it, after the fusion pipeline (--as-given: unchanged);
// --compare-unfused profiles both in one process and says what each fusion saved.
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
#include "profiler/collect.h"
#include "profiler/html_report.h"
#include "profiler/peaks.h"
#include "profiler/report.h"
#include "project/project_file.h"
#include "backend/gpu_plugin.h"
#include "profiler/counters.h"

namespace fusec::cli {

namespace {

struct ProfileArgs {
  std::string model, report_path, trace_path, html_path;
  int iterations = 20, warmup = 3, top = 10;
  uint64_t seed = 0;
  bool counters = false, compare_unfused = false, as_given = false, remeasure_peaks = false, no_stream = false;
  std::vector<std::string> passes, skip;  // the optimized variant's pipeline
  ShapeOptions shapes;
  DeviceOptions device;
};

/// One profiled graph; the executable stays alive because the collected steps point into it.
struct Variant {
  std::string name;
  std::unique_ptr<Graph> graph;
  std::unique_ptr<Executable> exe;
  profiler::Collected collected;
  profiler::Analysis analysis;
  std::string cuda_graph;
};

void profile_variant(const ProfileArgs& a, const ResolvedDevice& dev, Variant& v, const std::vector<Tensor>& inputs,
                     const profiler::Peaks& peaks) {
  auto backend = make_backend(a.device, dev);
  auto bad = backend->unsupported(*v.graph);
  if (!bad.empty()) fusec::unsupported(describe_unsupported(bad));
  v.exe = backend->compile(*v.graph);
  DType storage = DType::Undefined;
  if (auto* ge = dynamic_cast<GpuExecutable*>(v.exe.get())) {
    GpuRunSettings s;
    s.warmup = a.warmup;
    s.iterations = a.iterations;
    s.graph = a.device.cuda_graph != "off";
    s.stream = !a.no_stream || !s.graph;
    v.collected = gpu_plugin()->profile(*ge, inputs, s);
    v.cuda_graph = ge->graph_status();
    storage = storage_dtype(dev.precision, DType::Float32);
  }
  if (!dev.cuda) v.collected = profiler::profile_cpu(*v.exe, inputs, {a.warmup, a.iterations});
  v.analysis = profiler::analyze(v.collected, peaks, dev.precision, storage);
}

/// Counters from one more stream-mode run, matched to the analysis' kernels by launch order.
profiler::CountersSection collect_counters(Variant& v, int gpu) {
  GpuPlugin* plugin = gpu_plugin();
  std::vector<profiler::KernelCounters> kc;
  try {
    kc = plugin->collect_counters(dynamic_cast<GpuExecutable&>(*v.exe), gpu);
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::Internal) throw;
    profiler::CountersSection cs;
    cs.metrics = plugin->counter_metric_names();
    cs.error = e.what();
    return cs;
  }
  return profiler::attribute_counters(v.collected, v.analysis, plugin->counter_metric_names(), kc);
}

int profile(const ProfileArgs& a) {
  if (a.iterations <= 0) bad_input("--iterations must be positive");
  if (a.warmup < 0) bad_input("--warmup must not be negative");
  if (a.top <= 0) bad_input("--top must be positive");
  ResolvedDevice dev = resolve_device(a.device);
  if (a.counters && !dev.cuda) bad_input("--counters needs --device cuda (hardware counters are read through CUPTI)");
  if (!a.passes.empty() && !a.skip.empty()) bad_input("give --passes or --skip, not both");
  if (a.as_given && (!a.passes.empty() || !a.skip.empty()))
    bad_input("--passes/--skip choose the optimized model's passes; --as-given runs none");

  std::vector<Variant> variants;
  claim_output(a.report_path, "--report");
  claim_output(a.html_path, "--html");
  claim_output(a.trace_path, "--trace");
  auto given = load_model(a.model, a.shapes);
  {
    auto bad = make_backend(a.device, dev)->unsupported(*given);
    if (!bad.empty()) fusec::unsupported(describe_unsupported(bad));
  }
  require_bound_inputs(*given);
  make_backend(a.device, dev)->check_memory(*given);  // before the inputs are made
  if (a.compare_unfused || a.as_given) {
    Variant v;
    v.name = "as_given";
    v.graph = given->clone();
    variants.push_back(std::move(v));
  }
  if (!a.as_given) {
    Variant v;
    v.name = "optimized";
    v.graph = given->clone();
    PipelineOptions po;
    po.only = a.passes;
    po.skip = a.skip;
    optimize_graph(*v.graph, po);
    variants.push_back(std::move(v));
  }

  std::string warning;
  profiler::Peaks peaks;
  profiler::ReportMeta meta;
  meta.model = a.model;
  meta.device_kind = dev.cuda ? "cuda" : "cpu";
  meta.device_name = dev.description;
  meta.precision = dev.precision;
  meta.warmup = a.warmup;
  meta.created = profiler::iso_now();
  meta.build["fusec"] = FUSEC_VERSION;
  meta.build["compiler"] = __VERSION__;
  if (!given->inputs.empty() && given->inputs[0]->type.shape && !given->inputs[0]->type.shape->empty())
    meta.batch = (*given->inputs[0]->type.shape)[0].value;
  if (dev.cuda) {
    GpuPlugin* plugin = gpu_plugin();
    const int gpu = a.device.gpu;
    peaks = profiler::cached_or_measured(
        plugin->peaks_key(gpu), a.remeasure_peaks, [&] { return plugin->measure_peaks(gpu); }, &warning);
    const GpuDevice d = plugin->devices().at(static_cast<size_t>(gpu));
    meta.device_index = gpu;
    meta.sm = d.sm_major * 10 + d.sm_minor;
    meta.multiprocessors = d.multiprocessors;
    meta.device_memory_bytes = d.memory_bytes;
    for (const auto& [k, val] : plugin->versions()) meta.build[k] = val;
  }
  if (!dev.cuda) {
    meta.threads = cpu::num_threads();
    peaks = profiler::cached_or_measured(profiler::cpu_device_key(), a.remeasure_peaks, profiler::measure_cpu_peaks,
                                         &warning);
  }
  if (!warning.empty()) print_warning(warning);

  const std::vector<Tensor> inputs = random_inputs_that_run(
      *given, a.seed, [&](const std::vector<Tensor>& in) { profile_variant(a, dev, variants[0], in, peaks); });
  for (size_t i = 1; i < variants.size(); ++i) profile_variant(a, dev, variants[i], inputs, peaks);
  Variant& main = variants.back();
  meta.variant = main.name;
  meta.cuda_graph = main.cuda_graph;

  std::optional<profiler::CountersSection> counters;
  if (a.counters) counters = collect_counters(main, a.device.gpu);
  std::optional<profiler::UnfusedComparison> unfused;
  if (a.compare_unfused) unfused = profiler::compare_unfused(variants.front().analysis, main.analysis);

  profiler::print_summary(stdout, meta, peaks, main.collected, main.analysis, counters ? &*counters : nullptr,
                          unfused ? &*unfused : nullptr, a.top);
  if (dev.cuda && main.cuda_graph != "on" && a.device.cuda_graph != "off")
    std::printf("note: CUDA graph %s; only separate launches were profiled\n", main.cuda_graph.c_str());
  if (!a.report_path.empty() || !a.html_path.empty()) {
    auto j = profiler::report_json(meta, peaks, main.collected, main.analysis, counters ? &*counters : nullptr,
                                   unfused ? &*unfused : nullptr);
    if (!a.report_path.empty()) {
      write_text_file(a.report_path, json_text(j, 2) + "\n");
      std::printf("\nreport: %s\n", a.report_path.c_str());
    }
    if (!a.html_path.empty()) {  // drawn from the JSON report, as `fusec compare --html` draws two
      auto timeline = profiler::measured_timeline(main.collected, main.analysis);
      write_text_file(a.html_path, profiler::profile_html(nlohmann::json::parse(json_text(j)), &timeline));
      std::printf("%shtml:   %s\n", a.report_path.empty() ? "\n" : "", a.html_path.c_str());
    }
  }
  if (!a.trace_path.empty()) {
    write_text_file(a.trace_path, profiler::chrome_trace(meta, main.collected, main.analysis));
    std::printf("trace:  %s (open in https://ui.perfetto.dev or chrome://tracing)\n", a.trace_path.c_str());
  }
  return 0;
}

/// `fusec profile` without a model: every model of ./fusec.toml, as the project says (batch,
/// shapes, device, precision, passes), except where a flag says otherwise; --report/--trace/--html
/// FILE become FILE.<name>.json (.html) per model when the project has several.
int profile_project(const ProfileArgs& a, const CLI::App& sub) {
  auto file = project::find_project();
  if (!file) bad_input(project::no_model_message("profile"));
  project::Project p = project::load_project(*file);
  auto given = [&](const char* flag) { return sub.count(flag) > 0; };
  for (size_t i = 0; i < p.models.size(); ++i) {
    const project::ModelConfig& m = p.models[i];
    ProfileArgs b = a;
    b.model = m.path;
    apply_project_model(m, sub, b.shapes, b.device);
    if (!given("--iterations")) b.iterations = m.profile_iterations;
    if (!given("--warmup")) b.warmup = m.warmup;
    if (!given("--passes") && !given("--skip") && !a.as_given) {
      b.passes = m.passes;
      b.skip = m.skip;
    }
    b.report_path = per_model_path(a.report_path, m.name, p.models.size());
    b.trace_path = per_model_path(a.trace_path, m.name, p.models.size());
    b.html_path = per_model_path(a.html_path, m.name, p.models.size());
    std::printf("%s== %s (%s)\n", i ? "\n" : "", m.name.c_str(), m.path.c_str());
    std::fflush(stdout);
    profile(b);
  }
  return 0;
}

}  // namespace

void add_profile(CLI::App& app, std::function<int()>& action) {
  auto args = std::make_shared<ProfileArgs>();
  auto* sub =
      app.add_subcommand("profile", "Per-node and per-kernel time, bytes, FLOPs and % of the device's measured peaks");
  sub->add_option("model", args->model, "ONNX model file (default: every model of ./fusec.toml)");
  args->shapes.add_to(*sub);
  args->device.add_to(*sub);
  add_number(*sub, "--iterations", args->iterations, rules::kRuns, "Profiled runs per mode (default 20)");
  add_number(*sub, "--warmup", args->warmup, rules::kWarmup, "Untimed runs first (default 3)");
  sub->add_option("--report", args->report_path, "Write the report as JSON (schema fusec.profile/1)");
  sub->add_option("--html", args->html_path, "Write a self-contained HTML page: roofline, timeline, sortable tables");
  sub->add_option("--trace", args->trace_path, "Write a Chrome trace (ui.perfetto.dev, chrome://tracing)");
  sub->add_flag("--counters", args->counters,
                "GPU: hardware counters per kernel (DRAM bytes, SM and tensor-pipe %) by kernel replay");
  sub->add_flag("--compare-unfused", args->compare_unfused,
                "Profile the model as given too and report what each fusion saved");
  sub->add_flag("--as-given", args->as_given, "Profile the model without the fusion pipeline");
  sub->add_option("--passes", args->passes, "Run only these passes (comma-separated)")->delimiter(',');
  sub->add_option("--skip", args->skip, "Skip these passes (comma-separated)")->delimiter(',');
  sub->add_flag("--no-stream", args->no_stream, "GPU: profile only CUDA-graph replay, not separate launches too");
  sub->add_flag("--remeasure-peaks", args->remeasure_peaks,
                "Measure the device's peaks again instead of using the cached ones");
  add_number(*sub, "--top", args->top, rules::kRuns, "Rows in each summary table (default 10)");
  add_number(*sub, "--seed", args->seed, rules::kSeed, "Seed for the random inputs");
  sub->callback([args, sub, &action] {
    action = [args, sub] {
      if (args->as_given && args->compare_unfused) bad_input("--as-given and --compare-unfused exclude each other");
      return args->model.empty() ? profile_project(*args, *sub) : profile(*args);
    };
  });
}

}  // namespace fusec::cli
