// Subcommands whose capability is not built yet: listed, documented, and honest about it.
#include <cstdio>

#include "cli/common.h"

namespace fusec::cli {

void add_not_built(CLI::App& app, std::function<int()>& action) {
  struct Pending { const char* name; const char* what; };
  static const Pending pending[] = {
      {"profile", "per-kernel time, bytes, FLOPs and utilization"},
  };
  for (const auto& p : pending) {
    auto* sub = app.add_subcommand(p.name, std::string(p.what) + " [not built yet: exits 2]");
    sub->allow_extras();
    const char* name = p.name;
    sub->callback([&action, name] {
      action = [name] {
        std::fprintf(stderr, "fusec: error: '%s' is not built yet in this version of fusec\n", name);
        return 2;
      };
    });
  }
}

}  // namespace fusec::cli
