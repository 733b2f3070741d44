#include "profiler/compare.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_set>

#include "importer/input_file.h"
#include "ir/error.h"
#include "ir/escape.h"
#include "ir/json_text.h"
#include "profiler/compare_detail.h"

namespace fusec::compare {

namespace fs = std::filesystem;
using detail::Report;

nlohmann::json read_report(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) bad_input("report '" + path + "' does not exist");
  if (fs::is_directory(path, ec)) bad_input("report '" + path + "' is a directory, not a file");
  const std::string text = read_input_file(path, kNoFileLimit, "", {"a report this command reads"});
  return parse_json(text, "report '" + path + "'");
}

namespace {

using MatchFn = void (*)(const Report&, const Report&, Comparison&);

/// The report kinds compare reads. A new kind: a matcher in compare_<kind>.cpp and one line here.
struct KindEntry {
  const char* family;
  int oldest, newest;  // schema versions this fusec reads
  MatchFn match;
};
const KindEntry kKinds[] = {
    {"fusec.bench", 2, 2, detail::match_bench},
    {"fusec.optimize", 1, 1, detail::match_optimize},
    {"fusec.profile", 1, 1, detail::match_profile},
};

struct SchemaId {
  std::string family;
  int version = 0;
};

/// "fusec.bench/2" → {"fusec.bench", 2}; BadInput naming the file for anything else.
SchemaId parse_schema(const nlohmann::json& j, const std::string& path) {
  if (!j.is_object() || !j.contains("schema") || !j["schema"].is_string())
    bad_input("'" + path + "' has no \"schema\" field: not a fusec report (compare reads " + known_schemas() + ")");
  std::string s = j["schema"].get<std::string>();
  size_t slash = s.rfind('/');
  SchemaId id;
  id.family = s.substr(0, slash);
  bool numeric =
      slash != std::string::npos && slash + 1 < s.size() && s.size() - slash <= 6 &&
      std::all_of(s.begin() + static_cast<long>(slash) + 1, s.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
  if (!numeric) bad_input("'" + path + "' has schema '" + s + "', not of the form fusec.<kind>/<version>");
  id.version = std::stoi(s.substr(slash + 1));
  return id;
}

const KindEntry& find_kind(const SchemaId& id, const std::string& path, const std::string& schema) {
  for (const auto& k : kKinds) {
    if (id.family != k.family) continue;
    std::string newest = std::string(k.family) + "/" + std::to_string(k.newest);
    if (id.version > k.newest)
      bad_input("'" + path + "' is a " + schema + " report, newer than this fusec reads (" + newest +
                "): upgrade fusec, or write both reports with this version");
    if (id.version < k.oldest)
      bad_input("'" + path + "' is a " + schema + " report, older than this fusec reads (" + newest +
                "): write it again with this version");
    return k;
  }
  bad_input("'" + path + "' is a '" + schema + "' report; compare reads " + known_schemas());
}

std::string fmt(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (std::fabs(b) >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  return fmt(u == 0 ? "%.0f" : "%.2f", b) + " " + units[u];
}

std::string percent(double frac) {
  if (!std::isfinite(frac)) return frac > 0 ? "+inf%" : "-inf%";
  return fmt(std::fabs(frac) >= 1 ? "%+.0f%%" : "%+.1f%%", frac * 100);
}

std::string value_text(const Row& r, const std::optional<double>& v, const std::optional<double>& spread) {
  if (!v) return "-";
  switch (r.kind) {
    case Kind::Timing: {
      std::string s = *v >= 1000 ? fmt("%.0f ms", *v) : fmt("%#.4g ms", *v);
      if (spread) s += " ±" + fmt(*spread >= 0.095 ? "%.0f%%" : "%.1f%%", *spread * 100);
      return s;
    }
    case Kind::Count:
    case Kind::Info:
      return fmt("%.0f", *v);
    case Kind::Bytes:
      return human_bytes(*v);
    case Kind::Error:
      return fmt("%.2e", *v);
    case Kind::Flag:
      return *v != 0 ? "ok" : "FAILED";
  }
  return "-";
}

/// benchstat's convention: a timing's delta is "~" unless the difference is significant.
std::string delta_text(const Row& r, const Thresholds& t) {
  if (!r.base || !r.next) return "";
  if (r.kind == Kind::Timing) {
    if (!r.p_value) return "";
    return *r.p_value >= t.alpha / r.multiplicity ? "~" : percent(r.delta);
  }
  if (*r.base == *r.next) return "~";
  if (r.kind == Kind::Flag) return "";
  if (r.kind == Kind::Count || r.kind == Kind::Info) {
    std::string abs = fmt("%+.0f", *r.next - *r.base);
    return *r.base != 0 ? abs + " (" + percent(r.delta) + ")" : abs;
  }
  return *r.base != 0 ? percent(r.delta) : "";
}

std::string p_text(const Row& r) {
  if (!r.p_value) return "";
  return *r.p_value < 0.001 ? "<0.001" : fmt("%.3f", *r.p_value);
}

const char* verdict_text(Verdict v) {
  switch (v) {
    case Verdict::Same:
      return "~";
    case Verdict::Better:
      return "improved";
    case Verdict::Worse:
      return "REGRESSION";
  }
  return "~";
}

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::Timing:
      return "timing";
    case Kind::Count:
      return "count";
    case Kind::Bytes:
      return "bytes";
    case Kind::Error:
      return "error";
    case Kind::Flag:
      return "flag";
    case Kind::Info:
      return "info";
  }
  return "count";
}

/// Exact quantities (lower is better): worse beyond base * (1 + t), better below base / (1 + t).
Verdict exact_verdict(double base, double next, double t) {
  if (next > base * (1 + t) && next > base) return Verdict::Worse;
  if (next * (1 + t) < base) return Verdict::Better;
  return Verdict::Same;
}

void evaluate_row(Row& r, const Thresholds& t, bool timings_comparable) {
  r.verdict = Verdict::Same;
  r.delta = 0;
  r.p_value.reset();
  if (!r.base || !r.next) {
    if (r.note.empty()) r.note = r.base ? "only in base" : "only in new";
    return;
  }
  double b = *r.base, n = *r.next;
  if (b != 0)
    r.delta = n / b - 1;
  else if (n != 0)
    r.delta = n > 0 ? INFINITY : -INFINITY;
  switch (r.kind) {
    case Kind::Timing: {
      if (!timings_comparable) {
        r.note = "not compared: another machine";
        return;
      }
      if (r.base_samples.size() < 2 || r.next_samples.size() < 2) {
        r.note = "too few samples to test";
        return;
      }
      double alpha = t.alpha / std::max(1, r.multiplicity);
      TimingComparison tc = compare_timings(r.base_samples, r.next_samples, alpha, t.timing);
      r.base = tc.base.median;
      r.next = tc.next.median;
      r.delta = tc.ratio - 1;
      r.p_value = tc.test.p_value;
      if (tc.base.median > 0)
        r.base_spread = std::max(tc.base.hi - tc.base.median, tc.base.median - tc.base.lo) / tc.base.median;
      if (tc.next.median > 0)
        r.next_spread = std::max(tc.next.hi - tc.next.median, tc.next.median - tc.next.lo) / tc.next.median;
      r.verdict = tc.verdict;
      if (r.verdict != Verdict::Same && std::fabs(tc.next.median - tc.base.median) < t.share * r.run_ms) {
        r.verdict = Verdict::Same;
        r.note = "below " + fmt("%g", t.share * 100) + "% of the run";
        return;
      }
      if (tc.test.p_value < alpha && tc.verdict == Verdict::Same)
        r.note = "significant, below the " + fmt("%g", t.timing * 100) + "% threshold";
      else if (mann_whitney_min_p(r.base_samples.size(), r.next_samples.size()) >= alpha)
        r.note = "too few samples to reach p < " + fmt("%g", alpha);
      return;
    }
    case Kind::Count:
      r.verdict = exact_verdict(b, n, t.count);
      return;
    case Kind::Bytes:
      r.verdict = exact_verdict(b, n, t.memory);
      return;
    case Kind::Error:
      r.verdict = exact_verdict(std::max(b, r.floor), std::max(n, r.floor), t.error);
      return;
    case Kind::Flag:
      if (b != 0 && n == 0) r.verdict = Verdict::Worse;
      if (b == 0 && n != 0) r.verdict = Verdict::Better;
      return;
    case Kind::Info:
      return;
  }
}

std::string threshold_summary(const Thresholds& t) {
  return "timing: p < " + fmt("%g", t.alpha) + " and > " + fmt("%g", t.timing * 100) +
         "%; counts: " + (t.count == 0 ? std::string("any increase") : "> " + fmt("%g", t.count * 100) + "%") +
         "; memory: > " + fmt("%g", t.memory * 100) + "%; error: > " + fmt("%g", 1 + t.error) + "x";
  // (node and kernel timings: also Bonferroni-corrected and at least t.share of the run; see Row)
}

std::string summary_line(const Comparison& c) {
  std::string s = std::to_string(c.regressions) + (c.regressions == 1 ? " regression" : " regressions") + ", " +
                  std::to_string(c.improvements) + (c.improvements == 1 ? " improvement" : " improvements");
  return s;
}

/// Columns are padded by characters on screen, not bytes ("±" is two bytes of UTF-8).
size_t display_width(const std::string& s) {
  size_t w = 0;
  for (unsigned char ch : s) w += (ch & 0xC0) != 0x80;
  return w;
}

bool shown(const Row& r, bool changed_only) {
  if (r.kind == Kind::Info) return r.base != r.next;  // context only where it changed
  return !changed_only || r.headline || r.verdict != Verdict::Same;
}

}  // namespace

double parse_percent(const std::string& text, const std::string& what) {
  std::string t = text;
  while (!t.empty() && t.back() == ' ') t.pop_back();
  bool pct = !t.empty() && t.back() == '%';
  if (pct) t.pop_back();
  double v = 0;
  size_t used = 0;
  try {
    v = std::stod(t, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != t.size() || !std::isfinite(v) || v < 0 || (!pct && v != 0))
    bad_input(what + " '" + text + "': write a percentage, e.g. 5%");
  return v / 100;
}

std::string known_schemas() {
  std::string s;
  for (const auto& k : kKinds) s += (s.empty() ? "" : ", ") + std::string(k.family) + "/" + std::to_string(k.newest);
  return s;
}

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::Same:
      return "same";
    case Verdict::Better:
      return "better";
    case Verdict::Worse:
      return "worse";
  }
  return "same";
}

Comparison compare_reports(const nlohmann::json& base, const std::string& base_path, const nlohmann::json& next,
                           const std::string& next_path, const Thresholds& t, bool allow_different) {
  SchemaId bid = parse_schema(base, base_path), nid = parse_schema(next, next_path);
  std::string bs = base["schema"].get<std::string>(), ns = next["schema"].get<std::string>();
  const KindEntry& bk = find_kind(bid, base_path, bs);
  const KindEntry& nk = find_kind(nid, next_path, ns);
  if (&bk != &nk)
    bad_input("'" + base_path + "' is a " + bk.family + " report and '" + next_path + "' a " + nk.family +
              " report: compare two reports of one kind");
  Comparison c;
  c.family = bk.family;
  c.base_path = base_path;
  c.next_path = next_path;
  c.base_schema = bs;
  c.next_schema = ns;
  c.thresholds = t;
  bk.match(Report{base, base_path, bs}, Report{next, next_path, ns}, c);
  if (!c.differences.empty() && !allow_different) {
    std::string what;
    for (const auto& d : c.differences)
      what += (what.empty() ? "" : "; ") + d.field + " '" + d.base + "' vs '" + d.next + "'";
    bad_input("'" + base_path + "' and '" + next_path + "' are not comparable: " + what +
              " (compare like with like, or pass --allow-different)");
  }
  evaluate(c);
  return c;
}

Comparison compare_files(const std::string& base_path, const std::string& next_path, const Thresholds& t,
                         bool allow_different) {
  nlohmann::json base = read_report(base_path);
  nlohmann::json next = read_report(next_path);
  return compare_reports(base, base_path, next, next_path, t, allow_different);
}

void evaluate(Comparison& c) {
  c.regressions = c.improvements = 0;
  for (Row& r : c.rows) {
    evaluate_row(r, c.thresholds, c.timings_comparable);
    c.regressions += r.verdict == Verdict::Worse;
    c.improvements += r.verdict == Verdict::Better;
  }
  if (!c.drift_note.empty()) std::erase(c.notes, c.drift_note);
  c.drift_note.clear();
  // Two runs seconds apart on a shared machine can differ by half (docs/ci.md, "Machine drift"). A
  // control that moved is the evidence: say so beside the verdicts it taints, without changing
  // them (a slower backend slows the control too, and that is real).
  for (const Row& r : c.rows) {
    if (!r.control || r.kind != Kind::Timing || r.verdict == Verdict::Same) continue;
    c.drift_note = r.group + " ran the same graph in both reports, yet its " + r.metric + " moved " + percent(r.delta) +
                   " (p " + (p_text(r) == "<0.001" ? "< 0.001" : "= " + p_text(r)) +
                   "): the machine ran at another speed between the two runs, and the other timing verdicts carry "
                   "that drift";
    c.notes.push_back(c.drift_note);
    break;
  }
}

namespace {

/// A table's rows as cells: the leading label columns, then metric, base, new, delta, p, verdict, note.
using Cells = std::vector<std::vector<std::string>>;

/// The rows of one comparison, each prefixed with `lead` (labels printed once, then blank).
void append_rows(Cells& cells, std::vector<std::string> lead, const Comparison& c, bool changed_only, bool markdown) {
  // A short table keeps the detail rows (nodes, kernels) whose median moved most.
  std::vector<const Row*> details;
  for (const Row& r : c.rows)
    if (r.detail && shown(r, changed_only)) details.push_back(&r);
  size_t hidden = 0;
  if (changed_only && details.size() > kDetailRows) {
    std::stable_sort(details.begin(), details.end(),
                     [](const Row* a, const Row* b) { return std::fabs(a->delta) > std::fabs(b->delta); });
    hidden = details.size() - kDetailRows;
    details.resize(kDetailRows);
  }
  const std::unordered_set<const Row*> kept(details.begin(), details.end());  // a lookup per row, not a search
  std::string last_group;
  bool first = true;
  for (const Row& r : c.rows) {
    if (!shown(r, changed_only)) continue;
    if (r.detail && !kept.count(&r)) continue;
    std::vector<std::string> row = lead;
    if (first)
      first = false;
    else
      for (auto& l : row) l.clear();
    row.push_back(r.group == last_group ? "" : r.group);
    last_group = r.group;
    std::string verdict = r.kind == Kind::Info ? "" : verdict_text(r.verdict);
    if (markdown) {
      verdict = r.verdict == Verdict::Worse    ? "**regression**"
                : r.verdict == Verdict::Better ? "improved"
                : r.kind == Kind::Info         ? ""
                                               : "~";
      if (!r.note.empty()) verdict += verdict.empty() ? r.note : " (" + r.note + ")";
    }
    for (auto& cell :
         std::vector<std::string>{r.metric, value_text(r, r.base, r.base_spread), value_text(r, r.next, r.next_spread),
                                  delta_text(r, c.thresholds), p_text(r), verdict})
      row.push_back(std::move(cell));
    if (!markdown) row.push_back(r.note);
    cells.push_back(std::move(row));
  }
  if (hidden) {
    std::vector<std::string> row(lead.size(), "");
    if (first) row = lead;
    row.push_back("(" + std::to_string(hidden) + " more nodes/kernels changed: fusec compare BASE NEW lists all)");
    cells.push_back(std::move(row));
  }
}

/// Cells as aligned text; each on one line (names from a model may hold newlines, ir/escape.h).
std::string render_text(const Cells& raw) {
  Cells cells = raw;
  for (auto& row : cells)
    for (auto& cell : row) cell = one_line(cell);
  std::vector<size_t> w;
  for (const auto& row : cells) {
    w.resize(std::max(w.size(), row.size()), 0);
    for (size_t i = 0; i < row.size(); ++i) w[i] = std::max(w[i], display_width(row[i]));
  }
  std::string out;
  for (const auto& row : cells) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(w[i] - display_width(row[i]) + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

/// Cells as a Markdown table. Every cell is escaped text (ir/escape.h: names may hold HTML, pipes,
/// newlines) except the last column, the verdict, which is fusec's own markup ("**regression**").
std::string render_markdown(const Cells& cells, size_t right_from, size_t right_to) {
  std::string out;
  for (size_t r = 0; r < cells.size(); ++r) {
    out += "|";
    for (size_t i = 0; i < cells[r].size(); ++i) {
      out += ' ';
      out += i + 1 < cells[r].size() ? markdown_text(cells[r][i]) : cells[r][i];
      out += " |";
    }
    out += "\n";
    if (r == 0) {
      out += "|";
      for (size_t i = 0; i < cells[0].size(); ++i) out += i >= right_from && i < right_to ? " ---: |" : " --- |";
      out += "\n";
    }
  }
  return out;
}

const std::vector<std::string> kValueHeader = {"metric", "base", "new", "delta", "p", "verdict"};

}  // namespace

std::string format_text(const Comparison& c, bool changed_only) {
  std::ostringstream o;
  o << "base  " << one_line(c.base_path) << "  (" << one_line(c.base_schema) << ")\n";
  o << "new   " << one_line(c.next_path) << "  (" << one_line(c.next_schema) << ")\n";
  if (!c.label.empty()) o << "      " << one_line(c.label) << "\n";
  for (const auto& d : c.differences)
    o << "note: " << d.field << " differs (--allow-different): '" << one_line(d.base) << "' vs '" << one_line(d.next)
      << "'\n";
  for (const auto& n : c.notes) o << "note: " << one_line(n) << "\n";
  o << "\n";
  Cells cells{{""}};
  cells[0].insert(cells[0].end(), kValueHeader.begin(), kValueHeader.end());
  append_rows(cells, {}, c, changed_only, false);
  o << render_text(cells);
  o << "\n" << summary_line(c) << " (" << threshold_summary(c.thresholds) << ")\n";
  return o.str();
}

std::vector<std::vector<std::string>> table_cells(const Comparison& c, bool changed_only) {
  Cells cells{{"group"}};
  cells[0].insert(cells[0].end(), kValueHeader.begin(), kValueHeader.end());
  cells[0].push_back("note");
  append_rows(cells, {}, c, changed_only, false);
  return cells;
}

std::string summary_text(const Comparison& c) { return summary_line(c) + " (" + threshold_summary(c.thresholds) + ")"; }

std::string format_markdown(const Comparison& c, bool changed_only) {
  std::ostringstream o;
  o << "**fusec compare: "
    << (c.regressions
            ? summary_line(c)
            : "no regression" + (c.improvements ? ", " + std::to_string(c.improvements) + " improved" : std::string()))
    << "**";
  // Echoed names and paths as escaped text, never in code spans: a backtick in a name would end one.
  if (!c.label.empty()) o << " (" << markdown_text(c.label) << ")";
  o << "\n\nbase " << markdown_text(c.base_path) << ", new " << markdown_text(c.next_path) << "\n\n";
  for (const auto& d : c.differences)
    o << "> " << markdown_text(d.field) << " differs: '" << markdown_text(d.base) << "' vs '" << markdown_text(d.next)
      << "'\n";
  for (const auto& n : c.notes) o << "> " << markdown_text(n) << "\n";
  if (!c.differences.empty() || !c.notes.empty()) o << "\n";
  Cells cells{{""}};
  cells[0].insert(cells[0].end(), kValueHeader.begin(), kValueHeader.end());
  append_rows(cells, {}, c, changed_only, true);
  o << render_markdown(cells, 2, 6) << "\n" << threshold_summary(c.thresholds) << "\n";
  return o.str();
}

std::string format_sections_text(const std::vector<Section>& sections, bool changed_only) {
  Cells cells{{"model", "report", ""}};
  cells[0].insert(cells[0].end(), kValueHeader.begin(), kValueHeader.end());
  std::string last_model;
  for (const auto& s : sections) {
    append_rows(cells, {s.model == last_model ? "" : s.model, s.report}, *s.comparison, changed_only, false);
    last_model = s.model;
  }
  return render_text(cells);
}

std::string format_sections_markdown(const std::vector<Section>& sections, bool changed_only) {
  Cells cells{{"model", "report", ""}};
  cells[0].insert(cells[0].end(), kValueHeader.begin(), kValueHeader.end());
  std::string last_model;
  for (const auto& s : sections) {
    append_rows(cells, {s.model == last_model ? "" : s.model, s.report}, *s.comparison, changed_only, true);
    last_model = s.model;
  }
  return render_markdown(cells, 4, 8);
}

nlohmann::ordered_json to_json(const Comparison& c) {
  nlohmann::ordered_json j;
  j["schema"] = "fusec.compare/1";
  j["kind"] = c.family;
  j["base"] = {{"path", c.base_path}, {"schema", c.base_schema}};
  j["new"] = {{"path", c.next_path}, {"schema", c.next_schema}};
  j["label"] = c.label;
  j["thresholds"] = {{"timing", c.thresholds.timing}, {"alpha", c.thresholds.alpha}, {"memory", c.thresholds.memory},
                     {"count", c.thresholds.count},   {"error", c.thresholds.error}, {"share", c.thresholds.share}};
  j["differences"] = nlohmann::ordered_json::array();
  for (const auto& d : c.differences)
    j["differences"].push_back({{"field", d.field}, {"base", d.base}, {"new", d.next}});
  j["notes"] = c.notes;
  j["regressions"] = c.regressions;
  j["improvements"] = c.improvements;
  j["rows"] = nlohmann::ordered_json::array();
  auto opt = [](const std::optional<double>& v) {
    return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
  };
  for (const Row& r : c.rows) {
    nlohmann::ordered_json jr;
    jr["group"] = r.group;
    jr["metric"] = r.metric;
    jr["kind"] = kind_name(r.kind);
    jr["base"] = opt(r.base);
    jr["new"] = opt(r.next);
    jr["delta"] =
        r.base && r.next && std::isfinite(r.delta) ? nlohmann::ordered_json(r.delta) : nlohmann::ordered_json(nullptr);
    jr["p_value"] = opt(r.p_value);
    if (r.kind == Kind::Timing) {
      jr["base_samples"] = r.base_samples.size();
      jr["new_samples"] = r.next_samples.size();
    }
    jr["verdict"] = verdict_name(r.verdict);
    jr["note"] = r.note;
    j["rows"].push_back(jr);
  }
  return j;
}

}  // namespace fusec::compare
