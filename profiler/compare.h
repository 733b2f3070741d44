// fusec compare: two reports of one kind (bench, optimize, profile) → one row per compared
// quantity, each with a verdict. The CI gate of `fusec compare` and `fusec check`.
//
//   read + check schema ─▶ kind's matcher (identity fields, rows) ─▶ verdicts ─▶ text / markdown / JSON
//
// Timings (per-iteration samples) need a significant Mann–Whitney U test AND a median ratio above
// the threshold to count (profiler/significance.h); counts, bytes, accuracy and flags are exact,
// each against its own threshold. A report kind is one matcher in compare_<kind>.cpp, listed in
// compare.cpp's table of kinds.
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "profiler/significance.h"

namespace fusec::compare {

/// What makes a change count. Fractions (0.05 = 5%).
struct Thresholds {
  double timing = 0.05;  // median latency ratio, on top of significance
  double alpha = 0.01;   // significance level of the Mann–Whitney U test
  double memory = 0.01;  // bytes (activation arena, weights, workspace, model file)
  double count = 0.0;    // nodes, kernels, launches, op counts: any increase
  double error = 1.0;    // verification max error may grow by this fraction (1.0: may double)
  double share = 0.01;   // a node's or kernel's change must also be this share of the run's latency
};

enum class Kind {
  Timing,  // per-iteration samples, milliseconds; lower is better
  Count,   // integer; lower is better
  Bytes,   // lower is better
  Error,   // max abs/rel error of a verification; lower is better, below `floor` is noise
  Flag,    // 1 ok / 0 failed; a 1 -> 0 is a regression
  Info,    // shown for context (a pass's rewrites), never a verdict
};

/// One compared quantity: "optimized / latency", "node conv1 / time", "verification / ok".
struct Row {
  std::string group;   // variant, node, kernel or "graph" / "verification"
  std::string metric;  // "latency", "nodes", "activations", "max rel error"
  Kind kind = Kind::Count;
  std::optional<double> base, next;                // absent on one side: only in the other report (no verdict)
  std::vector<double> base_samples, next_samples;  // Timing
  double floor = 0;                                // Error: values at or below this are equivalent
  bool headline = true;                            // shown by `fusec check` even when unchanged
  bool detail = false;   // one of many (a profile's nodes and kernels): a short table shows the largest few
  double run_ms = 0;     // Timing of a node/kernel: the run's median; a change must be Thresholds::share of it
  int multiplicity = 1;  // Timing: tests of its kind (every node of a profile); the row is
                         // tested at alpha / multiplicity (Bonferroni), so 100 nodes do not cry wolf once each
  // Timing of work that is the same in both reports (bench's as-given model, same graph): when it
  // moves, the machine ran at another speed between the two runs, and evaluate() says so in a note.
  bool control = false;
  // Filled by evaluate():
  Verdict verdict = Verdict::Same;
  double delta = 0;                                // next / base - 1 (0 when not computable)
  std::optional<double> p_value;                   // Timing
  std::optional<double> base_spread, next_spread;  // Timing: half-width of the 95% median interval / median
  std::string note;                                // "only in base", "too few samples for p < 0.01", ...
};

/// A configuration field that differs between the two reports (model, device, precision, batch...).
struct Difference {
  std::string field, base, next;
};

struct Comparison {
  std::string family;  // "fusec.bench"
  std::string base_path, next_path;
  std::string base_schema, next_schema;
  std::string label;                    // "mlp_small.onnx · cpu (2 threads) · fp32 · batch 4"
  std::vector<Difference> differences;  // allowed by --allow-different (otherwise an error)
  std::vector<std::string> notes;       // what else differs and explains the rows (a skipped pass)
  std::string drift_note;               // the one of `notes` evaluate() derived from a moved control row
  std::vector<Row> rows;
  Thresholds thresholds;
  /// False when the reports come from different machines (fusec check against another CPU's
  /// baselines): timing rows are shown without a verdict, the exact rows still count.
  bool timings_comparable = true;
  int regressions = 0, improvements = 0;
};

/// "5%" → 0.05 ("0" is 0). Anything else is BadInput naming `what` (a flag or a project-file key).
double parse_percent(const std::string& text, const std::string& what);

/// Report families compare knows, newest versions: "fusec.bench/2, fusec.optimize/1, ...".
std::string known_schemas();

/// A report file as JSON; BadInput naming the file when it is missing, unreadable or not JSON.
nlohmann::json read_report(const std::string& path);

/// Reads both files, checks their schemas (same family, a version this fusec reads), matches them
/// and applies the thresholds. Throws BadInput naming the file for a missing/unreadable/non-JSON
/// file, an unknown or newer schema, a missing field, reports of different kinds, and, unless
/// `allow_different`, reports of different models, devices, precisions or batch sizes.
Comparison compare_files(const std::string& base_path, const std::string& next_path, const Thresholds& t,
                         bool allow_different);

/// The same for parsed reports (`*_path` only name them in messages).
Comparison compare_reports(const nlohmann::json& base, const std::string& base_path, const nlohmann::json& next,
                           const std::string& next_path, const Thresholds& t, bool allow_different);

/// Sets each row's verdict, delta, p-value and note; counts regressions and improvements; notes a
/// control row (Row::control) whose timing moved. Safe to call again after changing thresholds or
/// `timings_comparable`: the drift note is derived afresh.
void evaluate(Comparison& c);

/// One comparison of a multi-model table (fusec check): its model and report kind.
struct Section {
  std::string model, report;
  const Comparison* comparison = nullptr;
};

/// Human table (benchstat-like): group, metric, base, new, delta, p, verdict. `changed_only`
/// keeps headline rows and rows that are not "~", and of the detail rows the kDetailRows with the
/// largest change (one more line counts the rest).
std::string format_text(const Comparison& c, bool changed_only = false);
constexpr int kDetailRows = 5;
/// The same as a GitHub/GitLab markdown table with a one-line summary, for a pull request.
std::string format_markdown(const Comparison& c, bool changed_only = false);
/// Several comparisons as one table with model and report columns (fusec check).
std::string format_sections_text(const std::vector<Section>& sections, bool changed_only);
std::string format_sections_markdown(const std::vector<Section>& sections, bool changed_only);
/// The text table as cells, header first (group, metric, base, new, delta, p, verdict, note), with the
/// summary line ("1 regression, 0 improvements (timing: ...)") last: for other renderers (HTML).
std::vector<std::vector<std::string>> table_cells(const Comparison& c, bool changed_only = false);
std::string summary_text(const Comparison& c);
/// Verdicts as JSON (schema fusec.compare/1, docs/schemas/compare.schema.json).
nlohmann::ordered_json to_json(const Comparison& c);

const char* verdict_name(Verdict v);  // "same", "better", "worse"

}  // namespace fusec::compare
