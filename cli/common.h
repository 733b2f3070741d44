// Options and steps shared by the subcommands.
#pragma once
#include <CLI/CLI.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "importer/onnx_import.h"
#include "importer/output_file.h"
#include "ir/graph.h"
#include "ir/json_text.h"
#include "cli/shape_flag.h"
#include "passes/infer_shapes.h"
#include "passes/verify.h"
#include "project/numbers.h"

namespace fusec::cli {

/// Adds the numeric option `name`, parsed and checked against `rule` (project/numbers.h) as it
/// is read: a value that is not a finite number in range is one line, "fusec: error: --rtol must
/// be a number greater than 0 (got 'nan')", exit 2. Every numeric flag is added through these.
CLI::Option* add_number(CLI::App& app, const std::string& name, double& into, const NumberRule& rule,
                        const std::string& help);
CLI::Option* add_number(CLI::App& app, const std::string& name, std::optional<double>& into, const NumberRule& rule,
                        const std::string& help);
CLI::Option* add_number(CLI::App& app, const std::string& name, int& into, const NumberRule& rule,
                        const std::string& help);
CLI::Option* add_number(CLI::App& app, const std::string& name, std::optional<int>& into, const NumberRule& rule,
                        const std::string& help);
CLI::Option* add_number(CLI::App& app, const std::string& name, std::optional<int64_t>& into, const NumberRule& rule,
                        const std::string& help);
CLI::Option* add_number(CLI::App& app, const std::string& name, uint64_t& into, const NumberRule& rule,
                        const std::string& help);

/// The options of every subcommand that loads a model: --batch and --shape, as trtexec spells
/// them, and the limits on what a model may ask for (--allow-newer-opset, --max-memory).
struct ModelOptions {
  std::optional<int64_t> batch;
  std::vector<std::string> shapes;
  bool allow_newer_opset = false;
  std::string max_memory;  // empty: the machine's available memory
  void add_to(CLI::App& app);
  ShapeBindings bindings() const;
  /// How to import: the version guard, and its warning printed as one "fusec: warning:" line.
  ImportOptions import_options() const;
};
using ShapeOptions = ModelOptions;  // the name the subcommands were written with

/// Sets the memory limit, imports, binds shapes, infers: what every subcommand does first.
std::unique_ptr<Graph> load_model(const std::string& path, const ModelOptions& opts);

/// Writes text to `path` through the one writer (importer/output_file.h: a temporary renamed into
/// place, a device or `-` written in place), or fails with BadInput naming it. Commands claim their
/// output paths up front with claim_output(path, "--flag").
void write_text_file(const std::string& path, const std::string& text);

/// "fusec: warning: <what>" on stderr, as one line (control characters escaped, ir/escape.h).
void print_warning(const std::string& what);

bool stdout_is_tty();
std::string human_bytes(double bytes);
std::string human_count(double n);

// One registration function per subcommand file.
void add_inspect(CLI::App& app, std::function<int()>& action);
void add_run(CLI::App& app, std::function<int()>& action);
void add_bench(CLI::App& app, std::function<int()>& action);
void add_optimize(CLI::App& app, std::function<int()>& action);
void add_compare(CLI::App& app, std::function<int()>& action);
void add_check(CLI::App& app, std::function<int()>& action);
void add_profile(CLI::App& app, std::function<int()>& action);

}  // namespace fusec::cli
