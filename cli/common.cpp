#include "cli/common.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <set>
#include <type_traits>

#include "importer/onnx_import.h"
#include "ir/error.h"
#include "ir/escape.h"
#include "ir/half.h"
#include "ir/memory_limit.h"

namespace fusec::cli {

namespace {

template <class T>
T parsed(const std::string& text, const std::string& flag, const NumberRule& rule) {
  if constexpr (std::is_same_v<T, double>)
    return parse_number(text, flag, rule);
  else if constexpr (std::is_same_v<T, uint64_t>)
    return parse_unsigned(text, flag, rule);
  else
    return static_cast<T>(parse_integer(text, flag, rule));  // rules keep ints within int's range
}

template <class T, class Into>
CLI::Option* add_checked(CLI::App& app, const std::string& name, Into& into, const NumberRule& rule,
                         const std::string& help) {
  return app
      .add_option_function<std::string>(
          name, [&into, name, rule](const std::string& text) { into = parsed<T>(text, name, rule); }, help)
      ->type_name(rule.integer ? "INT" : "NUMBER");
}

}  // namespace

CLI::Option* add_number(CLI::App& app, const std::string& name, double& into, const NumberRule& rule,
                        const std::string& help) {
  return add_checked<double>(app, name, into, rule, help);
}
CLI::Option* add_number(CLI::App& app, const std::string& name, std::optional<double>& into, const NumberRule& rule,
                        const std::string& help) {
  return add_checked<double>(app, name, into, rule, help);
}
CLI::Option* add_number(CLI::App& app, const std::string& name, int& into, const NumberRule& rule,
                        const std::string& help) {
  return add_checked<int>(app, name, into, rule, help);
}
CLI::Option* add_number(CLI::App& app, const std::string& name, std::optional<int>& into, const NumberRule& rule,
                        const std::string& help) {
  return add_checked<int>(app, name, into, rule, help);
}
CLI::Option* add_number(CLI::App& app, const std::string& name, std::optional<int64_t>& into, const NumberRule& rule,
                        const std::string& help) {
  return add_checked<int64_t>(app, name, into, rule, help);
}
CLI::Option* add_number(CLI::App& app, const std::string& name, uint64_t& into, const NumberRule& rule,
                        const std::string& help) {
  return add_checked<uint64_t>(app, name, into, rule, help);
}

void ModelOptions::add_to(CLI::App& app) {
  add_number(app, "--batch", batch, rules::kBatch, "Bind the symbolic leading dim of every input to N");
  app.add_option("--shape", shapes, "Set an input's shape, e.g. input:16x3x224x224 (repeatable)")
      ->take_all()
      ->allow_extra_args(false);
  app.add_flag("--allow-newer-opset", allow_newer_opset,
               "Load a model whose opset or IR version is newer than fusec supports (with a warning)");
  app.add_option("--max-memory", max_memory,
                 "Largest total of tensor memory fusec may allocate, e.g. 8G (default: available memory)");
}

ShapeBindings ModelOptions::bindings() const {
  ShapeBindings b;
  b.batch = batch;
  for (const auto& s : shapes) b.shapes.push_back(parse_shape_flag(s));
  return b;
}

ImportOptions ModelOptions::import_options() const {
  ImportOptions o;
  o.allow_newer_versions = allow_newer_opset;
  // Once per message: a subcommand may load the model again (run re-binds shapes, optimize
  // re-reads what it wrote).
  o.warn = [](const std::string& msg) {
    static std::set<std::string> printed;
    if (printed.insert(msg).second) print_warning(msg);
  };
  return o;
}

std::unique_ptr<Graph> load_model(const std::string& path, const ModelOptions& opts) {
  if (!opts.max_memory.empty()) host_memory().set_limit(parse_byte_size(opts.max_memory, "--max-memory"));
  auto g = import_onnx_file(path, opts.import_options());
  bind_input_shapes(*g, opts.bindings());
  infer_shapes(*g);
  return g;
}

void write_text_file(const std::string& path, const std::string& text) { write_output_file(path, text); }

void print_warning(const std::string& what) { std::fprintf(stderr, "fusec: warning: %s\n", one_line(what).c_str()); }

bool stdout_is_tty() { return isatty(fileno(stdout)) != 0; }

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", b, units[u]);
  return buf;
}

std::string human_count(double n) {
  const char* units[] = {"", "K", "M", "G", "T", "P"};
  int u = 0;
  while (std::fabs(n) >= 1000 && u < 5) {
    n /= 1000;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f%s" : "%.2f%s", n, units[u]);
  return buf;
}

}  // namespace fusec::cli
