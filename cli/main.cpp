// fusec: one binary, one subcommand per file in cli/. Errors become one "fusec: error:" line and
// the documented exit code (0 ok, 1 internal, 2 bad input or usage, 3 check failed).
#include <cstdio>
#include <exception>
#include <functional>

#include "cli/common.h"
#include "ir/error.h"

int main(int argc, char** argv) {
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
      std::fprintf(stderr, "fusec: error: '%s' is not a fusec subcommand (see fusec --help)\n", argv[1]);
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
    std::fprintf(stderr, "fusec: error: %s (see fusec --help)\n", e.what());
    return 2;
  }
  try {
    return action ? action() : 2;
  } catch (const fusec::Error& e) {
    std::fprintf(stderr, "fusec: error: %s\n", e.what());
    return e.exit_code();
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "fusec: error: out of memory\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fusec: error: internal: %s\n", e.what());
    return 1;
  }
}
