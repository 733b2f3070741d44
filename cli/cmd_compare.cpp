// fusec compare BASE NEW: the CI gate over two reports of one kind (bench, profile, optimize). Prints a
// benchstat-like table; exit 0 when nothing regressed, 3 when something did, 2 on bad input.
#include <cstdio>

#include "cli/common.h"
#include "cli/compare_options.h"
#include "ir/error.h"
#include "profiler/compare.h"
#include "profiler/html_report.h"

namespace fusec::cli {

namespace {

struct CompareArgs {
  std::string base, next, markdown, json, html;
  ThresholdOptions thresholds;
  bool allow_different = false, changed_only = false;
};

int compare(const CompareArgs& a) {
  compare::Thresholds t = a.thresholds.resolve();
  claim_output(a.markdown, "--markdown");
  claim_output(a.json, "--json");
  claim_output(a.html, "--html");
  compare::Comparison c = compare::compare_files(a.base, a.next, t, a.allow_different);
  std::fputs(compare::format_text(c, a.changed_only).c_str(), stdout);
  if (!a.markdown.empty()) write_text_file(a.markdown, compare::format_markdown(c, a.changed_only));
  if (!a.json.empty()) write_text_file(a.json, json_text(compare::to_json(c), 2) + "\n");
  if (!a.html.empty()) {
    // compare_files has read and checked both files; read them again for the pictures.
    nlohmann::json base = compare::read_report(a.base), next = compare::read_report(a.next);
    write_text_file(a.html, profiler::compare_html(c, &base, &next));
  }
  std::fflush(stdout);
  if (c.regressions > 0) throw Error(ErrorKind::CheckFailed, regression_summary(c));
  return 0;
}

}  // namespace

void ThresholdOptions::add_to(CLI::App& app) {
  app.add_option("--threshold", timing, "Smallest latency change that counts, on top of significance (default 5%)");
  add_number(app, "--alpha", alpha, rules::kAlpha,
             "Significance level of the Mann-Whitney U test on timings (default 0.01)");
  app.add_option("--memory-threshold", memory, "Memory growth that counts as a regression (default 1%)");
  app.add_option("--count-threshold", count, "Growth of node, kernel and op counts that counts (default 0%: any)");
  app.add_option("--error-threshold", error,
                 "Growth of the verification's max error that counts (default 100%: doubling)");
  app.add_option("--node-threshold", share,
                 "Profiles: a node's or kernel's slowdown must also be this share of the run's latency (default 1%)");
}

compare::Thresholds ThresholdOptions::resolve(compare::Thresholds t) const {
  if (timing) t.timing = compare::parse_percent(*timing, "--threshold");
  if (memory) t.memory = compare::parse_percent(*memory, "--memory-threshold");
  if (count) t.count = compare::parse_percent(*count, "--count-threshold");
  if (error) t.error = compare::parse_percent(*error, "--error-threshold");
  if (share) t.share = compare::parse_percent(*share, "--node-threshold");
  if (alpha) {
    check_number(*alpha, "--alpha", rules::kAlpha);
    t.alpha = *alpha;
  }
  return t;
}

std::string regression_summary(const compare::Comparison& c) {
  std::string what;
  int listed = 0;
  for (const auto& r : c.rows) {
    if (r.verdict != Verdict::Worse) continue;
    if (++listed > 4) {
      what += ", ...";
      break;
    }
    what += (what.empty() ? "" : ", ") + r.group + " " + r.metric;
  }
  return std::to_string(c.regressions) + (c.regressions == 1 ? " regression" : " regressions") + " in " + c.next_path +
         " against " + c.base_path + ": " + what;
}

void add_compare(CLI::App& app, std::function<int()>& action) {
  auto a = std::make_shared<CompareArgs>();
  auto* sub =
      app.add_subcommand("compare", "CI gate: compare two bench, profile or optimize reports; exit 3 on a regression");
  sub->add_option("base", a->base,
                  "Baseline report (JSON from fusec bench --json, profile --report or optimize --report)")
      ->required();
  sub->add_option("new", a->next, "New report of the same kind")->required();
  a->thresholds.add_to(*sub);
  sub->add_flag("--allow-different", a->allow_different,
                "Compare reports of different models, devices, precisions or batch sizes (noted in the output)");
  sub->add_flag("--changed-only", a->changed_only, "Show only the headline rows and what changed");
  sub->add_option("--markdown", a->markdown, "Write the table as markdown (for a pull request)");
  sub->add_option("--html", a->html,
                  "Write a self-contained HTML page: the verdicts, and for profiles both rooflines in one chart");
  sub->add_option("--json", a->json, "Write the verdicts as JSON (schema fusec.compare/1)");
  sub->callback([a, &action] { action = [a] { return compare(*a); }; });
}

}  // namespace fusec::cli
