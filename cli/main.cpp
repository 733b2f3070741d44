// fusec: one binary, one subcommand per file in cli/. Errors become one "fusec: error:" line and
// the documented exit code (0 ok, 1 internal, 2 bad input or usage, 3 check failed). Messages echo
// what the user gave (paths, names, values): print_error escapes its control characters, so a
// newline in a value can neither split the line nor forge a second "fusec: error:" line.
#include <cstdio>
#include <exception>
#include <filesystem>
#include <functional>

#include "cli/common.h"
#include "importer/file_claims.h"
#include "importer/scratch_weights.h"
#include "ir/error.h"
#include "ir/escape.h"
#include "ir/memory_limit.h"

namespace {

void print_error(const std::string& what) { std::fprintf(stderr, "fusec: error: %s\n", fusec::one_line(what).c_str()); }

}  // namespace

int main(int argc, char** argv) {
  fusec::keep_freed_memory_for_reuse();
  CLI::App app{"fusec: optimizer, runtime and profiler for ONNX models"};
  app.set_version_flag("--version", std::string("fusec ") + FUSEC_VERSION);
  app.require_subcommand(1);
  std::function<int()> action;
  fusec::cli::add_inspect(app, action);
  fusec::cli::add_run(app, action);
  fusec::cli::add_optimize(app, action);
  fusec::cli::add_bench(app, action);
  fusec::cli::add_profile(app, action);
  fusec::cli::add_compare(app, action);
  fusec::cli::add_check(app, action);
  if (argc > 1 && argv[1][0] != '-') {
    bool known = false;
    for (const auto* sub : app.get_subcommands({})) known |= sub->get_name() == argv[1];
    if (!known) {
      print_error("'" + std::string(argv[1]) + "' is not a fusec subcommand (see fusec --help)");
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    print_error(std::string(e.what()) + " (see fusec --help)");
    return 2;
  } catch (const fusec::Error& e) {  // a flag's value, checked as it is parsed (cli/common.h add_number)
    print_error(e.what());
    return e.exit_code();
  }
  // What this command reads and writes: no output may land on an input or on another output.
  fusec::CommandFiles files;
  try {
    // Weights the passes derive stay out of memory (optimize moves them beside its output).
    fusec::use_scratch_weights({}, fusec::cli::print_warning);
    return action ? action() : 2;
  } catch (const fusec::Error& e) {
    print_error(e.what());
    return e.exit_code();
  } catch (const std::filesystem::filesystem_error& e) {
    // A path the user gave that the system refuses (a name too long, a symlink loop, no permission).
    print_error(e.path1().empty() ? e.code().message() : "'" + e.path1().string() + "': " + e.code().message());
    return 2;
  } catch (const std::bad_alloc&) {
    print_error("out of memory");
    return 2;
  } catch (const std::exception& e) {
    print_error(std::string("internal: ") + e.what());
    return 1;
  }
}
