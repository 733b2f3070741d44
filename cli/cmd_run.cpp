// fusec run: execute a model once on given or seeded random inputs and write its outputs.
#include <cstdio>
#include <map>
#include <filesystem>

#include "backend/cpu/cpu_backend.h"
#include "cli/common.h"
#include "cli/random_inputs.h"
#include "cli/device_options.h"
#include "importer/npy.h"
#include "importer/tensor_proto.h"
#include "ir/error.h"

namespace fusec::cli {

namespace fs = std::filesystem;

namespace {

struct RunArgs {
  std::string model, inputs_dir, output_dir, format = "pb";
  std::vector<std::string> inputs;
  uint64_t seed = 0;
  ShapeOptions shapes;
  DeviceOptions device;
};

std::string input_names(const Graph& g) {
  std::string s;
  for (auto* v : g.inputs) s += (s.empty() ? "" : ", ") + v->name;
  return s;
}

fs::path output_path(const RunArgs& a, size_t k) {
  return fs::path(a.output_dir) / ("output_" + std::to_string(k) + "." + a.format);
}

int run(RunArgs& a) {
  ResolvedDevice dev = resolve_device(a.device);
  if (a.format != "pb" && a.format != "npy") bad_input("--format must be pb or npy, not '" + a.format + "'");
  {
    std::error_code ec;
    fs::create_directories(a.output_dir, ec);
    if (ec || !fs::is_directory(a.output_dir))
      bad_input("cannot create output folder '" + a.output_dir + "': " + (ec ? ec.message() : "not a directory"));
  }
  // Given input files fix the shapes: bind them before inference unless the user gave --shape.
  std::map<std::string, Tensor> given;
  auto g = load_model(a.model, a.shapes);
  for (size_t k = 0; k < g->outputs.size(); ++k)
    claim_output(output_path(a, k).string(), "output_" + std::to_string(k), /*user_named=*/false);
  for (const auto& spec : a.inputs) {
    auto eq = spec.find('=');
    if (eq == std::string::npos || eq == 0) bad_input("--input '" + spec + "' must look like NAME=FILE");
    std::string name = spec.substr(0, eq);
    bool known = false;
    for (auto* v : g->inputs) known |= v->name == name;
    if (!known) bad_input("--input: the model has no input '" + name + "'; its inputs are: " + input_names(*g));
    given[name] = read_tensor_file(spec.substr(eq + 1));
  }
  if (!a.inputs_dir.empty()) {
    for (size_t k = 0; k < g->inputs.size(); ++k) {
      fs::path p = fs::path(a.inputs_dir) / ("input_" + std::to_string(k) + ".pb");
      if (!fs::exists(p)) p = fs::path(a.inputs_dir) / ("input_" + std::to_string(k) + ".npy");
      if (!fs::exists(p))
        bad_input("--inputs: '" + a.inputs_dir + "' has no input_" + std::to_string(k) + ".pb for input '" +
                  g->inputs[k]->name + "'");
      if (!given.count(g->inputs[k]->name)) given[g->inputs[k]->name] = read_tensor_file(p);
    }
  }
  if (!given.empty()) {
    // Re-bind with the files' shapes (where --shape did not already say) so every intermediate
    // shape is known; a file that contradicts the model is reported by the backend's input check.
    ShapeOptions bound = a.shapes;
    for (auto* v : g->inputs) {
      if (!given.count(v->name) || given[v->name].rank() == 0) continue;
      bool named = false;
      for (const auto& s : a.shapes.shapes) named |= parse_shape_flag(s).first == v->name;
      if (named || (v->type.shape && is_static(*v->type.shape))) continue;
      std::string dims;
      for (int64_t d : given[v->name].dims()) dims += (dims.empty() ? "" : "x") + std::to_string(d);
      bound.shapes.push_back(v->name + ":" + dims);
    }
    bound.batch.reset();  // the files fix the batch
    if (bound.shapes.size() != a.shapes.shapes.size()) {
      try {
        g = load_model(a.model, bound);
      } catch (const Error& e) {
        throw Error(e.kind(), std::string("the shapes of the --input/--inputs files do not fit together: ") + e.what(),
                    e.cause());
      }
    }
  }
  auto backend = make_backend(a.device, dev);
  backend->check_memory(*g);  // before random inputs are made
  auto exe = backend->compile(*g);
  std::vector<Tensor> outputs;
  random_inputs_that_run(
      *g, a.seed, [&](const std::vector<Tensor>& in) { outputs = exe->run(in); }, given);
  std::printf("device %s, precision %s%s\n", dev.description.c_str(), precision_name(dev.precision),
              dev.why.empty() ? "" : (" [" + dev.why + "]").c_str());
  if (std::string placed = placement_summary(*exe); !placed.empty()) std::printf("placement %s\n", placed.c_str());
  for (size_t k = 0; k < outputs.size(); ++k) {
    fs::path p = output_path(a, k);
    // Names fusec makes in the user's folder: a symlink there is replaced, never written through.
    const OutputOptions opts{"output_" + std::to_string(k), /*user_named=*/false, /*cache=*/false};
    if (a.format == "npy")
      write_npy(outputs[k], p, opts);
    else
      write_tensor_pb(outputs[k], g->outputs[k]->name, p, opts);
    std::printf("%-30s %-9s %-20s -> %s\n", g->outputs[k]->name.c_str(), dtype_name(outputs[k].dtype()),
                dims_str(outputs[k].dims()).c_str(), p.string().c_str());
  }
  return 0;
}

}  // namespace

void add_run(CLI::App& app, std::function<int()>& action) {
  auto args = std::make_shared<RunArgs>();
  auto* sub = app.add_subcommand("run", "Execute a model once and write its outputs");
  sub->add_option("model", args->model, "ONNX model file")->required();
  sub->add_option("--input", args->inputs, "NAME=FILE (.npy or TensorProto .pb), repeatable");
  sub->add_option("--inputs", args->inputs_dir, "Folder with input_K.pb files in graph-input order");
  add_number(*sub, "--seed", args->seed, rules::kSeed, "Seed for random inputs (default 0)");
  sub->add_option("--output-dir", args->output_dir, "Where to write output_K.pb / output_K.npy")->required();
  sub->add_option("--format", args->format, "pb (TensorProto, default) or npy");
  args->shapes.add_to(*sub);
  args->device.add_to(*sub);
  sub->callback([args, &action] { action = [args] { return run(*args); }; });
}

}  // namespace fusec::cli
