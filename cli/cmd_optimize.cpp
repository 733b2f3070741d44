// fusec optimize: run the pass pipeline, verify the result numerically on the CPU reference, and
// write a valid ONNX model; print what changed (onnxsim-style table) and, with --explain, why.
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "cli/device_options.h"
#include "cli/graph_pictures.h"
#include "importer/onnx_export.h"
#include "importer/onnx_import.h"
#include "importer/scratch_weights.h"
#include "ir/error.h"
#include "passes/pipeline.h"
#include "passes/verify.h"

namespace fusec::cli {

namespace fs = std::filesystem;

namespace {

struct OptimizeArgs {
  std::string model, output, report, dot, svg;
  ShapeOptions shapes;
  std::vector<std::string> passes, skip;
  bool portable = false, explain = false, no_check = false, check_layers = false, external_data = false;
  int check = 3;
  double rtol = 1e-4, atol = 1e-5;
  uint64_t seed = 0;
  double fold_cap_mib = 64;
  DeviceOptions device;  // --explain --device cuda: the engine build's decisions on this GPU
};

std::vector<std::string> split_list(const std::vector<std::string>& in) {
  std::vector<std::string> out;
  for (const auto& s : in) {
    size_t pos = 0;
    while (pos <= s.size()) {
      size_t c = s.find(',', pos);
      std::string part = s.substr(pos, c == std::string::npos ? std::string::npos : c - pos);
      if (!part.empty()) out.push_back(part);
      if (c == std::string::npos) break;
      pos = c + 1;
    }
  }
  return out;
}

std::map<std::string, int> histogram(const Graph& g) {
  std::map<std::string, int> h;
  for (const auto& n : g.nodes()) h[(n->domain.empty() ? "" : n->domain + ".") + n->op_type]++;
  return h;
}

/// A copy with every still-symbolic input dim set to `value`, for verification of unbound models.
std::unique_ptr<Graph> bound_for_check(const Graph& g, int64_t value, bool* rebound) {
  auto c = g.clone();
  *rebound = false;
  for (Value* v : c->inputs) {
    if (!v->type.shape) bad_input("input '" + v->name + "' has unknown rank; give --shape to verify, or --no-check");
    for (Dim& d : *v->type.shape)
      if (!d.is_static()) {
        d = Dim(value);
        *rebound = true;
      }
  }
  if (*rebound) infer_shapes(*c);
  return c;
}

/// What the engine build for this GPU keeps as parts over the fused kernels of `g` (bound shapes
/// only): the optimized model built as bench builds it, then run once (the plan is made then).
std::vector<DeviceDecision> engine_decisions(const Graph& g, const DeviceOptions& o, const ResolvedDevice& dev) {
  auto backend = make_backend(o, dev);
  auto bad = backend->unsupported(g);
  if (!bad.empty()) fusec::unsupported(describe_unsupported(bad));
  backend->check_memory(g);
  std::vector<Tensor> inputs;
  for (const Value* v : g.inputs) inputs.push_back(random_input(*v, 0));
  auto exe = backend->compile(g);
  exe->run(inputs);
  return device_decisions(*exe);
}

int optimize(const OptimizeArgs& a) {
  if (a.check < 0) bad_input("--check must be >= 0");
  // The engine's decisions are the device's, not the file's: asked for with --explain only, on a
  // GPU named explicitly, at shapes the user bound.
  const bool engine = a.device.device != "cpu";
  std::optional<ResolvedDevice> dev;
  if (!engine && (a.device.precision != "fp32" || a.device.gpu != 0))
    bad_input("--precision and --gpu choose the engine of --explain --device cuda; without it optimize builds none");
  if (engine) {
    if (!a.explain)
      bad_input("--device " + a.device.device +
                " applies to --explain (the device's decisions); the file optimize writes is device-independent");
    dev = resolve_device(a.device);
    if (!dev->cuda)
      bad_input("--explain --device " + a.device.device + ": no GPU to build the engine on" +
                (dev->why.empty() ? "" : " (" + dev->why + ")"));
  }
  if (!a.passes.empty() && !a.skip.empty()) bad_input("give --passes or --skip, not both");
  if (a.fold_cap_mib <= 0) bad_input("--fold-cap-mb must be positive");
  check_picture_flags(a.dot, a.svg);
  std::string out_path = a.output;
  if (out_path.empty()) {
    fs::path p(a.model);
    out_path = (p.parent_path() / (p.stem().string() + ".opt.onnx")).string();
  }
  claim_output(out_path, "-o");
  claim_output(a.report, "--report");
  // Derived weights beside the output, where their bytes go: the same filesystem, so the writer's
  // copy can be a reflink, and no copy of them in a temporary folder that may be memory (tmpfs).
  // (Not for `-`, a descriptor, a device or a FIFO: the temporary folder main() chose.)
  std::error_code ec;
  if (is_regular_output(out_path) || (out_path != "-" && !fs::exists(fs::symlink_status(out_path, ec))))
    use_scratch_weights(fs::absolute(out_path).parent_path(), print_warning);
  auto original = load_model(a.model, a.shapes);
  if (a.external_data || original->meta.external_data)
    claim_output(out_path + ".data", "the output model's external data");

  auto optimized = original->clone();
  PipelineOptions po;
  po.pass.portable = a.portable;
  po.pass.fold_size_cap = static_cast<int64_t>(a.fold_cap_mib * 1024 * 1024);
  po.only = split_list(a.passes);
  po.skip = split_list(a.skip);
  OptimizeResult res = optimize_graph(*optimized, po);
  if (a.portable)
    for (const auto& n : optimized->nodes())
      if (!n->domain.empty()) internal_error("--portable left a non-standard node" + n->ref());
  // Pictures first: they help most when verification fails below.
  write_graph_pictures(*original, *optimized, a.dot, a.svg);
  bool uses_fusec = false;
  for (const auto& n : optimized->nodes()) uses_fusec |= n->domain == "ai.fusec";
  if (!uses_fusec) optimized->opsets.erase("ai.fusec");

  // Verification on the CPU reference.
  Tolerance tol{a.rtol, a.atol};
  VerifyResult ver;
  bool rebound = false;
  LayerCheck layers;
  int check_runs = a.no_check ? 0 : a.check;
  if (check_runs > 0 || a.check_layers) {
    auto orig_c = bound_for_check(*original, 2, &rebound);
    auto opt_c = bound_for_check(*optimized, 2, &rebound);
    if (check_runs > 0) ver = verify_equivalence(*orig_c, *opt_c, check_runs, a.seed, tol);
    if (a.check_layers) layers = check_layers(*orig_c, *opt_c, a.seed, tol);
  }

  // Write the model (only a verified one).
  bool written = false, external = false;
  if (ver.ok && layers.ok) {
    ExportOptions eo;
    eo.external_data = a.external_data || original->meta.external_data;
    external = export_onnx_file(*optimized, out_path, eo);
    ImportOptions reload = a.shapes.import_options();
    reload.warn = nullptr;                  // the input's versions, already reported
    reload.external_data_contents = false;  // structure and references; the bytes were just written
    if (is_regular_output(out_path)) import_onnx_file(out_path, reload);  // what we wrote must load back
    written = true;
  }

  // Report.
  auto before = histogram(*original), after = histogram(*optimized);
  std::map<std::string, std::pair<int, int>> rows;
  for (auto& [op, n] : before) rows[op].first = n;
  for (auto& [op, n] : after) rows[op].second = n;
  // A pipe, a device or stdout has no size: its bytes are not counted.
  auto size_of = [](const std::string& f) {
    std::error_code ec;
    const uintmax_t n = is_regular_output(f) ? fs::file_size(f, ec) : 0;
    return ec ? 0.0 : static_cast<double>(n);
  };
  double size_before = size_of(a.model) + static_cast<double>(original->meta.external_bytes);
  double size_after = written ? size_of(out_path) : 0;
  if (written && external) size_after += size_of(out_path + ".data");

  std::printf("%-34s %8s %8s\n", "op type", "before", "after");
  std::printf("%s\n", std::string(52, '-').c_str());
  for (auto& [op, c] : rows)
    std::printf("%-34s %8d %8d%s\n", op.c_str(), c.first, c.second, c.first != c.second ? "  *" : "");
  std::printf("%s\n", std::string(52, '-').c_str());
  std::printf("%-34s %8zu %8zu\n", "nodes", original->nodes().size(), optimized->nodes().size());
  std::printf("%-34s %8s %8s\n", "model size", human_bytes(size_before).c_str(),
              written ? human_bytes(size_after).c_str() : "-");
  std::printf("\npasses (%d sweep%s to a fixed point)\n", res.iterations, res.iterations == 1 ? "" : "s");
  for (const auto& p : res.per_pass) std::printf("  %-24s %5d rewrites %9.2f ms\n", p.name.c_str(), p.rewrites, p.ms);
  if (check_runs > 0) {
    std::printf(
        "\nverification: %d seeded random input set%s on the CPU reference%s%s (rtol %g, atol %g)\n", ver.runs,
        ver.runs == 1 ? "" : "s", rebound ? ", symbolic dims set to 2" : "",
        ver.binary_ints ? ", integer inputs 0/1 (in [0, 64) the original refused them or gave no finite output)" : "",
        a.rtol, a.atol);
    if (!ver.binary_ints && !ver.mask_inputs.empty()) {
      std::string names;
      for (const auto& n : ver.mask_inputs) names += (names.empty() ? "'" : ", '") + n + "'";
      std::printf("  (0/1 for %s: read only as a float value, a mask)\n", names.c_str());
    }
    for (const auto& o : ver.outputs)
      std::printf("  %-30s max abs %.3e  max rel %.3e  %s%s\n", o.name.c_str(), o.max_abs, o.max_rel,
                  o.ok                   ? "ok"
                  : o.nothing_compared() ? "NOT VERIFIED"
                                         : "MISMATCH",
                  o.problem.empty() ? "" : (" (" + o.problem + ")").c_str());
  } else {
    std::printf("\nverification: skipped (--no-check)\n");
  }
  if (a.check_layers)
    std::printf("layer check: %zu shared values compared, %s\n", layers.compared,
                layers.ok ? "all within tolerance"
                          : ("first divergence at node '" + layers.node + "' (" + layers.op_type + "), value '" +
                             layers.value + "': max abs " + std::to_string(layers.detail.max_abs))
                                .c_str());
  if (a.explain) {
    std::printf("\nrewrites (%zu)\n", res.rewrites.size());
    for (const auto& r : res.rewrites) std::printf("  [%s] %s\n", r.pass.c_str(), r.what.c_str());
    std::printf("near-misses (%zu)\n", res.near_misses.size());
    for (const auto& m : res.near_misses)
      std::printf("  [%s] %s: %s\n", m.pass.c_str(), m.what.c_str(), m.reason.c_str());
  }
  std::optional<std::vector<DeviceDecision>> decisions;
  if (engine && written) {
    bool open = false;
    for (const Value* v : optimized->inputs) open = open || !v->type.shape || !is_static(*v->type.shape);
    if (open) {
      std::printf(
          "device decisions: not made: the model's input shapes are open; bind them (--batch, --shape) "
          "for the engine build\n");
    } else {
      decisions = engine_decisions(*optimized, a.device, *dev);
      std::printf("device decisions on %s (%s): %zu node(s) run as their parts, kept over their fused kernel by the timing\n",
                  dev->description.c_str(), precision_name(dev->precision), decisions->size());
      for (const auto& d : *decisions)
        std::printf("  %s '%s': %s\n", d.op_type.c_str(), d.node.c_str(), d.decision.c_str());
    }
  }
  if (written) std::printf("\nwrote %s%s\n", out_path.c_str(), external ? " (+ external data)" : "");

  if (!a.report.empty()) {
    nlohmann::ordered_json j;
    j["schema"] = "fusec.optimize/1";
    j["model"] = a.model;
    j["output"] = written ? nlohmann::ordered_json(out_path) : nlohmann::ordered_json(nullptr);
    j["portable"] = a.portable;
    for (auto& [op, c] : rows) j["ops"][op] = {{"before", c.first}, {"after", c.second}};
    j["nodes"] = {{"before", original->nodes().size()}, {"after", optimized->nodes().size()}};
    j["model_bytes"] = {{"before", size_before},
                        {"after", written ? nlohmann::ordered_json(size_after) : nlohmann::ordered_json(nullptr)}};
    j["iterations"] = res.iterations;
    j["passes"] = nlohmann::ordered_json::array();
    for (const auto& p : res.per_pass)
      j["passes"].push_back({{"name", p.name}, {"rewrites", p.rewrites}, {"ms", p.ms}});
    j["rewrites"] = nlohmann::ordered_json::array();
    for (const auto& r : res.rewrites)
      j["rewrites"].push_back({{"pass", r.pass}, {"what", r.what}, {"replaced", r.replaced}, {"result", r.result}});
    j["near_misses"] = nlohmann::ordered_json::array();
    for (const auto& m : res.near_misses)
      j["near_misses"].push_back({{"pass", m.pass}, {"what", m.what}, {"reason", m.reason}});
    if (decisions) {
      j["device_decisions"] = nlohmann::ordered_json::array();
      for (const auto& d : *decisions)
        j["device_decisions"].push_back({{"node", d.node}, {"op_type", d.op_type}, {"decision", d.decision}});
    }
    nlohmann::ordered_json v;
    v["runs"] = ver.runs;
    v["rtol"] = a.rtol;
    v["atol"] = a.atol;
    v["symbolic_dims_bound_to"] = rebound ? nlohmann::ordered_json(2) : nlohmann::ordered_json(nullptr);
    v["ok"] = ver.ok;
    v["integer_inputs"] = ver.binary_ints ? "0/1" : "[0, 64)";
    v["mask_inputs"] = ver.mask_inputs;
    v["outputs"] = nlohmann::ordered_json::array();
    for (const auto& o : ver.outputs)
      v["outputs"].push_back({{"name", o.name},
                              {"max_abs", o.max_abs},
                              {"max_rel", o.max_rel},
                              {"ok", o.ok},
                              {"finite_elements", o.finite_original},
                              {"elements", o.elements}});
    j["verification"] = v;
    if (a.check_layers)
      j["layer_check"] = {{"ok", layers.ok},
                          {"compared", layers.compared},
                          {"first_divergent_node", layers.node},
                          {"op_type", layers.op_type},
                          {"value", layers.value}};
    write_text_file(a.report, json_text(j, 2) + "\n");
  }

  if (!ver.ok) {
    std::string names;
    for (const auto& o : ver.outputs)
      if (!o.ok) names += (names.empty() ? "'" : ", '") + o.name + "'";
    throw Error(ErrorKind::CheckFailed, "the optimized model differs from the original beyond tolerance at output(s) " +
                                            names + "; nothing was written (see --check-layers)");
  }
  if (!layers.ok)
    throw Error(ErrorKind::CheckFailed, "layer check: node '" + layers.node + "' (" + layers.op_type +
                                            ") diverges at value '" + layers.value + "'; nothing was written");
  return 0;
}

}  // namespace

void add_optimize(CLI::App& app, std::function<int()>& action) {
  auto a = std::make_shared<OptimizeArgs>();
  auto* sub = app.add_subcommand("optimize", "Fuse and fold a model, verify it, write a valid ONNX file");
  sub->add_option("model", a->model, "ONNX model file")->required();
  sub->add_option("-o,--output", a->output, "Output path (default: MODEL.opt.onnx beside the input)");
  a->shapes.add_to(*sub);
  sub->add_option("--passes", a->passes, "Run only these passes (comma-separated)");
  sub->add_option("--skip", a->skip, "Skip these passes (comma-separated)");
  sub->add_flag("--portable", a->portable, "Write standard ONNX ops only (no ai.fusec domain)");
  sub->add_flag("--explain", a->explain, "List every rewrite and every near-miss with its reason");
  a->device.device = "cpu";
  sub->add_option("--device", a->device.device,
                  "With --explain, cuda: also build the GPU engine for the optimized model at the bound shapes and "
                  "name the nodes whose parts the device kept over their slower fused kernel (default cpu: no engine; "
                  "the file written is the same either way)");
  add_number(*sub, "--gpu", a->device.gpu, rules::kGpu, "GPU index for --device cuda (default 0)");
  sub->add_option("--precision", a->device.precision,
                  "The engine's precision for --device cuda: fp32 (default), tf32, fp16 or bf16");
  sub->add_option("--report", a->report, "Write the report as JSON (schema fusec.optimize/1)");
  sub->add_option("--dot", a->dot, "Write the graph before and after as Graphviz DOT: before.dot,after.dot");
  sub->add_option("--svg", a->svg, "Render them with Graphviz's dot (when installed): before.svg,after.svg");
  add_number(*sub, "--check", a->check, rules::kWarmup, "Verify on N seeded random input sets (default 3)");
  sub->add_flag("--no-check", a->no_check, "Skip numerical verification");
  sub->add_flag("--check-layers", a->check_layers, "Compare every shared intermediate; name the first divergent node");
  add_number(*sub, "--rtol", a->rtol, rules::kTolerance, "Relative tolerance (default 1e-4)");
  add_number(*sub, "--atol", a->atol, rules::kTolerance, "Absolute tolerance (default 1e-5)");
  add_number(*sub, "--seed", a->seed, rules::kSeed, "Seed for verification inputs");
  add_number(*sub, "--fold-cap-mb", a->fold_cap_mib, rules::kFoldCapMib,
             "Largest tensor constant folding may create, MiB (default 64)");
  sub->add_flag("--external-data", a->external_data,
                "Write tensors >= 1 KiB to MODEL.data beside the model (the default when the input has external data)");
  sub->callback([a, &action] { action = [a] { return optimize(*a); }; });
}

}  // namespace fusec::cli
