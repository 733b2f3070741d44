#include "profiler/compare.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "ir/error.h"
#include "profiler/compare_detail.h"

namespace fusec::compare {

namespace fs = std::filesystem;
using detail::Report;

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

nlohmann::json read_report(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) bad_input("report '" + path + "' does not exist");
  if (fs::is_directory(path, ec)) bad_input("report '" + path + "' is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) bad_input("cannot open report '" + path + "'");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) bad_input("cannot read report '" + path + "'");
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    bad_input("report '" + path + "' is not JSON (byte " + std::to_string(e.byte) + ")");
  }
}

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
  bool numeric = slash != std::string::npos && slash + 1 < s.size() && s.size() - slash <= 6 &&
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
  while (std::fabs(b) >= 1024 && u < 4) { b /= 1024; ++u; }
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
    case Kind::Info: return fmt("%.0f", *v);
    case Kind::Bytes: return human_bytes(*v);
    case Kind::Error: return fmt("%.2e", *v);
    case Kind::Flag: return *v != 0 ? "ok" : "FAILED";
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
    case Verdict::Same: return "~";
    case Verdict::Better: return "improved";
    case Verdict::Worse: return "REGRESSION";
  }
  return "~";
}

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::Timing: return "timing";
    case Kind::Count: return "count";
    case Kind::Bytes: return "bytes";
    case Kind::Error: return "error";
    case Kind::Flag: return "flag";
    case Kind::Info: return "info";
  }
  return "count";
}

/// Exact quantities (lower is better): worse beyond base * (1 + t), better below base / (1 + t).
Verdict exact_verdict(double base, double next, double t) {
  if (next > base * (1 + t) && next > base) return Verdict::Worse;
  if (next * (1 + t) < base) return Verdict::Better;
  return Verdict::Same;
}

void evaluate_row(Row& r, const Thresholds& t) {
  r.verdict = Verdict::Same;
  r.delta = 0;
  r.p_value.reset();
  if (!r.base || !r.next) {
    if (r.note.empty()) r.note = r.base ? "only in base" : "only in new";
    return;
  }
  double b = *r.base, n = *r.next;
  if (b != 0) r.delta = n / b - 1;
  else if (n != 0) r.delta = n > 0 ? INFINITY : -INFINITY;
  switch (r.kind) {
    case Kind::Timing: {
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
      if (tc.base.median > 0) r.base_spread = std::max(tc.base.hi - tc.base.median, tc.base.median - tc.base.lo) / tc.base.median;
      if (tc.next.median > 0) r.next_spread = std::max(tc.next.hi - tc.next.median, tc.next.median - tc.next.lo) / tc.next.median;
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
    case Kind::Count: r.verdict = exact_verdict(b, n, t.count); return;
    case Kind::Bytes: r.verdict = exact_verdict(b, n, t.memory); return;
    case Kind::Error: r.verdict = exact_verdict(std::max(b, r.floor), std::max(n, r.floor), t.error); return;
    case Kind::Flag:
      if (b != 0 && n == 0) r.verdict = Verdict::Worse;
      if (b == 0 && n != 0) r.verdict = Verdict::Better;
      return;
    case Kind::Info: return;
  }
}

std::string threshold_summary(const Thresholds& t) {
  return "timing: p < " + fmt("%g", t.alpha) + " and > " + fmt("%g", t.timing * 100) + "%; counts: " +
         (t.count == 0 ? std::string("any increase") : "> " + fmt("%g", t.count * 100) + "%") + "; memory: > " +
         fmt("%g", t.memory * 100) + "%; error: > " + fmt("%g", 1 + t.error) + "x";
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
    case Verdict::Same: return "same";
    case Verdict::Better: return "better";
    case Verdict::Worse: return "worse";
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
    evaluate_row(r, c.thresholds);
    c.regressions += r.verdict == Verdict::Worse;
    c.improvements += r.verdict == Verdict::Better;
  }
}

std::string format_text(const Comparison& c, bool changed_only) {
  std::ostringstream o;
  o << "base  " << c.base_path << "  (" << c.base_schema << ")\n";
  o << "new   " << c.next_path << "  (" << c.next_schema << ")\n";
  if (!c.label.empty()) o << "      " << c.label << "\n";
  for (const auto& d : c.differences)
    o << "note: " << d.field << " differs (--allow-different): '" << d.base << "' vs '" << d.next << "'\n";
  for (const auto& n : c.notes) o << "note: " << n << "\n";
  o << "\n";
  std::vector<std::array<std::string, 8>> cells;
  cells.push_back({"", "metric", "base", "new", "delta", "p", "verdict", ""});
  std::string last_group;
  for (const Row& r : c.rows) {
    if (!shown(r, changed_only)) continue;
    std::string group = r.group == last_group ? "" : r.group;
    last_group = r.group;
    cells.push_back({group, r.metric, value_text(r, r.base, r.base_spread), value_text(r, r.next, r.next_spread),
                     delta_text(r, c.thresholds), p_text(r), r.kind == Kind::Info ? "" : verdict_text(r.verdict), r.note});
  }
  std::array<size_t, 8> w{};
  for (const auto& row : cells)
    for (size_t i = 0; i < row.size(); ++i) w[i] = std::max(w[i], display_width(row[i]));
  for (const auto& row : cells) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      std::string cell = row[i];
      if (i + 1 < row.size()) cell += std::string(w[i] - display_width(cell), ' ');
      line += cell + (i + 1 < row.size() ? "  " : "");
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    o << line << "\n";
  }
  o << "\n" << summary_line(c) << " (" << threshold_summary(c.thresholds) << ")\n";
  return o.str();
}

std::string format_markdown(const Comparison& c, bool changed_only) {
  auto esc = [](std::string s) {
    std::string out;
    for (char ch : s) out += ch == '|' ? std::string("\\|") : std::string(1, ch);
    return out;
  };
  std::ostringstream o;
  o << "**fusec compare: " << (c.regressions ? summary_line(c) : "no regression" +
                                                  (c.improvements ? ", " + std::to_string(c.improvements) + " improved" : std::string()))
    << "**";
  if (!c.label.empty()) o << " (" << esc(c.label) << ")";
  o << "\n\nbase `" << c.base_path << "`, new `" << c.next_path << "`\n\n";
  for (const auto& d : c.differences)
    o << "> " << esc(d.field) << " differs: `" << esc(d.base) << "` vs `" << esc(d.next) << "`\n";
  for (const auto& n : c.notes) o << "> " << esc(n) << "\n";
  if (!c.differences.empty() || !c.notes.empty()) o << "\n";
  o << "| | metric | base | new | delta | p | verdict |\n| --- | --- | ---: | ---: | ---: | ---: | --- |\n";
  std::string last_group;
  for (const Row& r : c.rows) {
    if (!shown(r, changed_only)) continue;
    std::string group = r.group == last_group ? "" : r.group;
    last_group = r.group;
    std::string verdict = r.verdict == Verdict::Worse    ? "**regression**"
                          : r.verdict == Verdict::Better ? "improved"
                          : r.kind == Kind::Info         ? ""
                                                         : "~";
    if (!r.note.empty()) verdict += verdict.empty() ? r.note : " (" + r.note + ")";
    o << "| " << esc(group) << " | " << esc(r.metric) << " | " << esc(value_text(r, r.base, r.base_spread)) << " | "
      << esc(value_text(r, r.next, r.next_spread)) << " | " << esc(delta_text(r, c.thresholds)) << " | " << p_text(r) << " | "
      << esc(verdict) << " |\n";
  }
  o << "\n" << threshold_summary(c.thresholds) << "\n";
  return o.str();
}

nlohmann::ordered_json to_json(const Comparison& c) {
  nlohmann::ordered_json j;
  j["schema"] = "fusec.compare/1";
  j["kind"] = c.family;
  j["base"] = {{"path", c.base_path}, {"schema", c.base_schema}};
  j["new"] = {{"path", c.next_path}, {"schema", c.next_schema}};
  j["label"] = c.label;
  j["thresholds"] = {{"timing", c.thresholds.timing}, {"alpha", c.thresholds.alpha}, {"memory", c.thresholds.memory},
                     {"count", c.thresholds.count}, {"error", c.thresholds.error}, {"share", c.thresholds.share}};
  j["differences"] = nlohmann::ordered_json::array();
  for (const auto& d : c.differences) j["differences"].push_back({{"field", d.field}, {"base", d.base}, {"new", d.next}});
  j["notes"] = c.notes;
  j["regressions"] = c.regressions;
  j["improvements"] = c.improvements;
  j["rows"] = nlohmann::ordered_json::array();
  auto opt = [](const std::optional<double>& v) { return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr); };
  for (const Row& r : c.rows) {
    nlohmann::ordered_json jr;
    jr["group"] = r.group;
    jr["metric"] = r.metric;
    jr["kind"] = kind_name(r.kind);
    jr["base"] = opt(r.base);
    jr["new"] = opt(r.next);
    jr["delta"] = r.base && r.next && std::isfinite(r.delta) ? nlohmann::ordered_json(r.delta) : nlohmann::ordered_json(nullptr);
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
