// fusec check: the project's regression gate. For every model of fusec.toml: optimize (which
// verifies the result against the original), bench and profile, each compared with its baseline
// (<baselines>/<name>.<kind>.json); one table; exit 3 on any regression. --update-baselines
// records the new reports as the baselines instead.
//
// Each step runs as its own `fusec` process, with exactly the arguments a user would type (they
// are printed on failure): the reports are those of the documented commands, a crash or an
// out-of-memory in one model is reported as that model's failure, and no global state (the memory
// limit, CUDA contexts) leaks from one model into the next.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>

#include "cli/common.h"
#include "cli/compare_options.h"
#include "cli/device_options.h"
#include "importer/input_file.h"
#include "importer/signal_cleanup.h"
#include "ir/error.h"
#include "ir/escape.h"
#include "profiler/compare.h"
#include "profiler/report_schema.h"
#include "project/project_file.h"

extern char** environ;

namespace fusec::cli {

namespace fs = std::filesystem;

namespace {

struct CheckArgs {
  std::string project, reports, markdown, json;
  std::vector<std::string> only;  // --model NAME
  ThresholdOptions thresholds;
  bool update = false, quiet = false, all_rows = false;
};

/// The fusec binary itself, to run each step as the command a user would type.
std::string self_exe() {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/exe", ec);
  if (ec) internal_error("cannot find the fusec executable (/proc/self/exe): " + ec.message());
  return p.string();
}

std::string quoted(const std::vector<std::string>& args) {
  std::string s = "fusec";
  for (const auto& a : args) s += " " + (a.find_first_of(" '\"") == std::string::npos ? a : "'" + a + "'");
  return s;
}

/// A step's report or log, bounded like every file fusec reads (importer/input_file.h).
std::string read_text(const fs::path& p) { return read_input_file(p, kNoFileLimit, "", {"a step's report", true}); }

struct StepResult {
  int code = 0;
  std::string stderr_text;
  double seconds = 0;
};

/// Runs `fusec args...` in `cwd`, its stdout and stderr into `log` + ".out" / ".err".
StepResult run_step(const std::vector<std::string>& args, const fs::path& cwd, const fs::path& log) {
  static const std::string exe = self_exe();
  std::vector<std::string> argv_s = {exe};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::string err = log.string() + ".err", dir = cwd.string();
  // The logs go through the one writer like every output (never through a link in the folder).
  OutputFile out_log(log.string() + ".out", {"a step's log", /*user_named=*/false, /*cache=*/false});
  OutputFile err_log(err, {"a step's log", /*user_named=*/false, /*cache=*/false});
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out_log.fd(), 1);
  posix_spawn_file_actions_adddup2(&fa, err_log.fd(), 2);
  posix_spawn_file_actions_addchdir_np(&fa, dir.c_str());
  auto t0 = std::chrono::steady_clock::now();
  pid_t pid = 0;
  int rc = 0;
  {
    // A signal stops the step (and its temporaries) before the reports folder goes: none may come
    // between the start and the registration.
    TerminationSignalsHeld held;
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setsigmask(&attr, &held.previous());
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
    rc = posix_spawn(&pid, exe.c_str(), &fa, &attr, argv.data(), environ);
    posix_spawnattr_destroy(&attr);
    if (rc == 0) set_signal_child(pid);
  }
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) internal_error("cannot start " + exe + ": " + std::strerror(rc));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) internal_error("waitpid failed: " + std::string(std::strerror(errno)));
  set_signal_child(0);
  out_log.commit();
  err_log.commit();
  StepResult r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  r.stderr_text = read_text(err);
  return r;
}

/// The last "fusec: error:" line of a step's stderr, without the prefix (or its last line).
std::string error_line(const std::string& text) {
  std::string last, line;
  std::istringstream in(text);
  while (std::getline(in, line)) {
    if (line.rfind("fusec: error: ", 0) == 0)
      last = line.substr(14);
    else if (last.empty() && !line.empty())
      last = line;
  }
  return last.empty() ? "(no message)" : last;
}

/// A temporary folder for the new reports, removed at exit (and on SIGINT, SIGTERM, SIGHUP) unless
/// the user named one (--reports).
struct ReportsDir {
  fs::path path;
  bool remove = false;
  std::unique_ptr<TempPathGuard> on_signal;
  explicit ReportsDir(const std::string& given) {
    if (!given.empty()) {
      path = fs::absolute(given);
      std::error_code ec;
      fs::create_directories(path, ec);
      if (ec || !fs::is_directory(path)) bad_input("--reports: cannot create folder '" + given + "'");
      return;
    }
    std::error_code ec;
    const fs::path tmp_dir = fs::temp_directory_path(ec);
    if (ec) bad_input("no folder for temporary files (TMPDIR): " + ec.message());
    std::string tmpl = (tmp_dir / "fusec_check_XXXXXX").string();
    if (!mkdtemp(tmpl.data())) bad_input("cannot create a temporary folder in " + tmp_dir.string());
    path = tmpl;
    on_signal = std::make_unique<TempPathGuard>(tmpl, TempPathGuard::Kind::Folder);
    remove = true;
  }
  ~ReportsDir() {
    std::error_code ec;
    if (remove) fs::remove_all(path, ec);
  }
};

/// The report kinds check runs, in order, and what each is called in file names and the table.
struct Kind {
  const char* name;  // "optimize", "bench", "profile"
};
const Kind kKinds[] = {{"optimize"}, {"bench"}, {"profile"}};

struct ModelRun {
  const project::ModelConfig* m;
  std::string device;  // the resolved device's description
  fs::path baseline_dir;
  std::map<std::string, fs::path> reports;  // kind -> new report
  std::vector<std::string> skipped;         // kinds not run, with why
};

std::vector<std::string> shape_args(const project::ModelConfig& m) {
  std::vector<std::string> a;
  if (m.batch) a.insert(a.end(), {"--batch", std::to_string(*m.batch)});
  for (const auto& s : m.shapes) a.insert(a.end(), {"--shape", s});
  return a;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
  return s;
}

std::vector<std::string> pipeline_args(const project::ModelConfig& m) {
  if (!m.passes.empty()) return {"--passes", join(m.passes)};
  if (!m.skip.empty()) return {"--skip", join(m.skip)};
  return {};
}

std::vector<std::string> device_args(const project::ModelConfig& m) {
  return {"--device", m.device, "--gpu", std::to_string(m.gpu), "--precision", m.precision};
}

/// The model argument as written in fusec.toml (steps run in the project's folder), as "./-h"
/// when it starts with '-': a model file named like a flag must never be read as one.
std::string model_arg(const project::Project& p, const project::ModelConfig& m) {
  std::string rel = fs::relative(m.path, p.dir).string();
  if (rel.empty()) rel = m.path;
  return rel[0] == '-' ? "./" + rel : rel;
}

/// Runs optimize, bench and profile for one model into `dir`. BadInput (or the step's own exit
/// code) when a step fails for a reason other than a failed check.
void run_model(const project::Project& p, ModelRun& run, const fs::path& dir, bool quiet) {
  const project::ModelConfig& m = *run.m;
  std::string model = model_arg(p, m);
  auto file = [&](const std::string& what) { return (dir / (m.name + "." + what)).string(); };
  std::vector<std::pair<std::string, std::vector<std::string>>> steps;
  std::vector<std::string> opt = {"optimize", model, "-o", file("opt.onnx"), "--report", file("optimize.json")};
  for (auto v : {shape_args(m), pipeline_args(m)}) opt.insert(opt.end(), v.begin(), v.end());
  if (m.portable) opt.push_back("--portable");
  // Exactly as fusec.toml says: std::to_string's six decimals turned rtol = 4e-7 into 0.
  if (m.rtol) opt.insert(opt.end(), {"--rtol", exact_number_text(*m.rtol)});
  if (m.atol) opt.insert(opt.end(), {"--atol", exact_number_text(*m.atol)});
  steps.push_back({"optimize", opt});
  std::vector<std::string> bench = {"bench",
                                    model,
                                    "--json",
                                    file("bench.json"),
                                    "--quiet",
                                    "--iterations",
                                    std::to_string(m.iterations),
                                    "--warmup",
                                    std::to_string(m.warmup)};
  for (auto v : {shape_args(m), device_args(m), pipeline_args(m)}) bench.insert(bench.end(), v.begin(), v.end());
  steps.push_back({"bench", bench});
  if (m.profile) {
    // The model optimize wrote (the project's passes), profiled as given: per node and kernel.
    std::vector<std::string> prof = {"profile",
                                     file("opt.onnx"),
                                     "--as-given",
                                     "--report",
                                     file("profile.json"),
                                     "--iterations",
                                     std::to_string(m.profile_iterations),
                                     "--warmup",
                                     std::to_string(m.warmup)};
    for (auto v : {shape_args(m), device_args(m)}) prof.insert(prof.end(), v.begin(), v.end());
    steps.push_back({"profile", prof});
  }

  std::string progress = m.name + ":";
  for (auto& [kind, args] : steps) {
    if (kind == "profile" && !fs::exists(file("opt.onnx"))) {
      run.skipped.push_back("profile (optimize wrote no model)");
      continue;
    }
    StepResult r = run_step(args, p.dir, dir / (m.name + "." + kind));
    std::istringstream warnings(r.stderr_text);
    for (std::string line; std::getline(warnings, line);)
      if (line.rfind("fusec: warning: ", 0) == 0) print_warning(m.name + " " + kind + ": " + line.substr(16));
    // optimize exits 3 when verification fails: its report says so, and the comparison flags it.
    bool check_failed = r.code == 3 && kind == "optimize" && fs::exists(file("optimize.json"));
    if (r.code != 0 && !check_failed) {
      std::string msg = m.name + ": `" + quoted(args) + "` (in " + p.dir + ") failed: " + error_line(r.stderr_text);
      if (r.code == 2) bad_input(msg);
      internal_error(msg + " (exit " + std::to_string(r.code) + ")");
    }
    // A step that succeeded but left no report (it printed help, say) is never a report to compare.
    std::error_code ec;
    if (!fs::is_regular_file(file(kind + ".json"), ec) || fs::file_size(file(kind + ".json"), ec) == 0)
      internal_error(m.name + ": `" + quoted(args) + "` (in " + p.dir + ") exited " + std::to_string(r.code) +
                     " but wrote no report " + file(kind + ".json"));
    run.reports[kind] = file(kind + ".json");
    char t[32];
    std::snprintf(t, sizeof t, " (%.2f s)", r.seconds);
    progress += " " + kind + (check_failed ? " FAILED VERIFICATION" : "") + t;
  }
  if (!quiet) std::printf("%s\n", progress.c_str());
  std::fflush(stdout);
}

fs::path baseline_file(const ModelRun& r, const std::string& kind) {
  return r.baseline_dir / (r.m->name + "." + kind + ".json");
}

/// The project's models (or those --model names), each with its device and baseline folder.
std::vector<ModelRun> select_models(const project::Project& p, const std::vector<std::string>& only) {
  for (const auto& name : only) {
    bool found = false;
    for (const auto& m : p.models) found |= m.name == name;
    if (!found) {
      std::string names;
      for (const auto& m : p.models) names += (names.empty() ? "" : ", ") + m.name;
      bad_input("--model " + name + ": " + p.file + " has no such model (it has " + names + ")");
    }
  }
  std::vector<ModelRun> runs;
  for (const auto& m : p.models) {
    if (!only.empty() && std::find(only.begin(), only.end(), m.name) == only.end()) continue;
    DeviceOptions d;
    d.device = m.device;
    d.gpu = m.gpu;
    d.precision = m.precision;
    std::string device = resolve_device(d).description;
    runs.push_back(ModelRun{&m, device, project::baseline_dir(p, device), {}, {}});
  }
  return runs;
}

/// `p` absolute, with symlinks resolved as far as it exists and no trailing separator.
fs::path resolved(const fs::path& p) {
  std::error_code ec;
  fs::path a = fs::absolute(p, ec);
  if (ec) a = p;
  fs::path c = fs::weakly_canonical(a, ec);
  if (ec) c = a.lexically_normal();
  return c.has_filename() ? c : c.parent_path();
}

/// True when `inner` is `outer` or a folder inside it.
bool within(const fs::path& inner, const fs::path& outer) {
  fs::path i = resolved(inner), o = resolved(outer);
  return std::mismatch(o.begin(), o.end(), i.begin(), i.end()).first == o.end();
}

/// --reports must be apart from every baseline folder: were it the folder (or hold it, or lie in
/// it), the new reports would replace the baselines and each be compared with itself.
void refuse_reports_in_baselines(const std::string& reports, const std::vector<ModelRun>& runs) {
  if (reports.empty()) return;
  for (const auto& r : runs) {
    const char* how = within(reports, r.baseline_dir)   ? (within(r.baseline_dir, reports) ? "is" : "is inside")
                      : within(r.baseline_dir, reports) ? "holds"
                                                        : nullptr;
    if (how)
      bad_input("--reports " + reports + " " + how + " the baseline folder " + r.baseline_dir.string() +
                ": the new reports would replace the baselines they are compared with; keep them in another folder");
  }
}

/// Every baseline must be there before anything runs (a typo in the folder is not a half hour of benches).
void require_baselines(const project::Project& p, const std::vector<ModelRun>& runs) {
  std::vector<std::string> missing;
  for (const auto& r : runs)
    for (const auto& k : kKinds) {
      if (std::string(k.name) == "profile" && !r.m->profile) continue;
      if (!fs::exists(baseline_file(r, k.name))) missing.push_back(baseline_file(r, k.name).string());
    }
  if (!missing.empty())
    bad_input("no baseline " + missing.front() +
              (missing.size() > 1 ? " (and " + std::to_string(missing.size() - 1) + " more)" : "") +
              ": record them on this machine with `fusec check --update-baselines` (baselines are kept per device: " +
              p.baselines + ")");
}

/// A new report's text, checked before it becomes a baseline (every later CI run is judged
/// against it): not empty, JSON, of the kind its step writes, valid against that kind's schema
/// (docs/schemas/, built in), and for optimize a verified model. A step's report that is not is
/// a bug in fusec (Internal); a failed verification is CheckFailed.
std::string checked_report(const ModelRun& r, const std::string& kind, const fs::path& report) {
  std::string text = read_text(report);
  std::string what = r.m->name + ": the new " + kind + " report " + report.string();
  if (text.empty()) internal_error(what + " is empty; no baseline recorded");
  std::string why;
  std::optional<nlohmann::json> j = try_parse_json(text, &why);
  if (!j) internal_error(what + " " + why + "; no baseline recorded");
  std::string id =
      j->is_object() && j->contains("schema") && (*j)["schema"].is_string() ? (*j)["schema"].get<std::string>() : "";
  const nlohmann::json* schema = profiler::builtin_schema(id);
  if (!schema || id.rfind("fusec." + kind + "/", 0) != 0)
    internal_error(what + " has schema '" + id + "', not a fusec." + kind +
                   " schema fusec knows; no baseline recorded");
  std::vector<std::string> errors = profiler::schema_errors(*j, *schema);
  if (!errors.empty()) {
    std::string list;
    for (const auto& e : errors) list += (list.empty() ? "" : "; ") + e;
    internal_error(what + " does not match its schema " + id + " (docs/schemas/" + kind + ".schema.json): " + list +
                   "; no baseline recorded");
  }
  if (kind == "optimize" && (*j)["verification"].value("ok", true) == false)
    throw Error(ErrorKind::CheckFailed,
                r.m->name + ": the optimized model fails verification; no baseline recorded for it");
  return text;
}

/// Every report checked first, then written: a bad one leaves every baseline as it was.
void record_baselines(const project::Project& p, const std::vector<ModelRun>& runs) {
  std::vector<std::pair<fs::path, std::string>> baselines;
  for (const auto& r : runs)
    for (const auto& [kind, report] : r.reports)
      baselines.push_back({baseline_file(r, kind), checked_report(r, kind, report)});
  int written = 0;
  for (const auto& [file, text] : baselines) {
    std::error_code ec;
    fs::create_directories(file.parent_path(), ec);
    if (ec) bad_input("cannot create the baseline folder '" + file.parent_path().string() + "': " + ec.message());
    write_text_file(file.string(), text);
    ++written;
  }
  std::printf("recorded %d baseline%s in %s\n", written, written == 1 ? "" : "s",
              runs.empty() ? p.baselines.c_str() : runs[0].baseline_dir.c_str());
}

/// Fields whose difference means the baseline was recorded for another configuration (stale).
bool config_field(const std::string& f) { return f != "device_name" && f != "cpu_model"; }

struct Outcome {
  std::vector<std::unique_ptr<compare::Comparison>> comparisons;
  std::vector<compare::Section> sections;  // point into `comparisons`
  std::vector<std::string> notes;
  int regressions = 0;
  std::vector<std::pair<std::string, std::vector<std::string>>> regressed;  // model -> "kind group metric"
};

/// Each new report against its baseline. A baseline of another configuration is stale (BadInput);
/// one from another machine gates everything but timings, with a note.
Outcome compare_with_baselines(const std::vector<ModelRun>& runs, const ThresholdOptions& flags) {
  Outcome o;
  for (const auto& r : runs) {
    compare::Thresholds t = flags.resolve(r.m->thresholds);
    for (const auto& k : kKinds) {
      auto it = r.reports.find(k.name);
      if (it == r.reports.end()) continue;
      std::string base = baseline_file(r, k.name).string();
      auto c = std::make_unique<compare::Comparison>(
          compare::compare_files(base, it->second.string(), t, /*allow_different=*/true));
      for (const auto& d : c->differences) {
        if (config_field(d.field))
          bad_input("baseline " + base + " was recorded with " + d.field + " '" + d.base + "', the project now runs '" +
                    d.next + "': record new baselines with `fusec check --update-baselines`");
        if (c->timings_comparable)
          o.notes.push_back(r.m->name + " " + k.name +
                            ": timings not compared: the baseline comes from another machine (" + d.field + " '" +
                            d.base + "', this one '" + d.next + "'); keep one baseline folder per machine");
        c->timings_comparable = false;
      }
      if (!c->timings_comparable) compare::evaluate(*c);
      for (const auto& n : c->notes) o.notes.push_back(r.m->name + " " + k.name + ": " + n);
      for (const auto& row : c->rows) {
        if (row.verdict != Verdict::Worse) continue;
        if (o.regressed.empty() || o.regressed.back().first != r.m->name) o.regressed.push_back({r.m->name, {}});
        o.regressed.back().second.push_back(std::string(k.name) + " " + row.group + " " + row.metric);
      }
      o.regressions += c->regressions;
      o.sections.push_back({r.m->name, k.name, c.get()});
      o.comparisons.push_back(std::move(c));
    }
    for (const auto& s : r.skipped) o.notes.push_back(r.m->name + ": not run: " + s);
  }
  return o;
}

void write_check_json(const std::string& path, const project::Project& p, const std::vector<ModelRun>& runs,
                      const Outcome& o) {
  nlohmann::ordered_json j;
  j["schema"] = "fusec.check/1";
  j["project"] = p.file;
  j["regressions"] = o.regressions;
  j["notes"] = o.notes;
  j["models"] = nlohmann::ordered_json::array();
  for (const auto& r : runs) {
    nlohmann::ordered_json mj = {{"name", r.m->name}, {"device", r.device}, {"baselines", r.baseline_dir.string()}};
    mj["reports"] = nlohmann::ordered_json::object();
    for (const auto& s : o.sections)
      if (s.model == r.m->name) mj["reports"][s.report] = compare::to_json(*s.comparison);
    j["models"].push_back(mj);
  }
  write_text_file(path, json_text(j, 2) + "\n");
}

int check(const CheckArgs& a) {
  std::string file = a.project;
  if (file.empty()) {
    auto found = project::find_project();
    if (!found)
      bad_input("no " + std::string(project::kProjectFileName) + " in " + fs::current_path().string() +
                ": run fusec check in the folder of a project file, or name one with --project (see docs/ci.md)");
    file = *found;
  }
  claim_output(a.markdown, "--markdown");
  claim_output(a.json, "--json");
  project::Project p = project::load_project(file);
  std::vector<ModelRun> runs = select_models(p, a.only);
  refuse_reports_in_baselines(a.reports, runs);
  if (!a.update) require_baselines(p, runs);

  ReportsDir dir(a.reports);
  for (auto& r : runs) run_model(p, r, dir.path, a.quiet);
  if (a.update) {
    record_baselines(p, runs);
    return 0;
  }

  Outcome o = compare_with_baselines(runs, a.thresholds);
  std::printf("\n%s", compare::format_sections_text(o.sections, !a.all_rows).c_str());
  for (const auto& n : o.notes) std::printf("note: %s\n", one_line(n).c_str());
  std::string verdict = o.regressions == 0
                            ? "no regression"
                            : std::to_string(o.regressions) + (o.regressions == 1 ? " regression" : " regressions");
  std::printf("\nfusec check: %zu model%s against %s: %s\n", runs.size(), runs.size() == 1 ? "" : "s",
              runs.empty() ? p.baselines.c_str() : runs[0].baseline_dir.c_str(), verdict.c_str());
  std::fflush(stdout);
  if (!a.markdown.empty()) {
    std::string md = "**fusec check: " + verdict + "** (" + std::to_string(runs.size()) + " models)\n\n" +
                     compare::format_sections_markdown(o.sections, !a.all_rows);
    if (!o.notes.empty()) md += "\n";
    for (const auto& n : o.notes) md += "> " + markdown_text(n) + "\n";
    write_text_file(a.markdown, md);
  }
  if (!a.json.empty()) write_check_json(a.json, p, runs, o);
  if (o.regressions > 0) {
    // One line: per model its first three regressions ("mlp_small: optimize graph nodes, ... (+5 more)").
    std::string what;
    for (const auto& [model, items] : o.regressed) {
      what += (what.empty() ? "" : "; ") + model + ": ";
      for (size_t i = 0; i < items.size() && i < 3; ++i) what += (i ? ", " : "") + items[i];
      if (items.size() > 3) what += " (+" + std::to_string(items.size() - 3) + " more)";
    }
    throw Error(ErrorKind::CheckFailed, verdict + " in " + std::to_string(o.regressed.size()) +
                                            (o.regressed.size() == 1 ? " model: " : " models: ") + what);
  }
  return 0;
}

}  // namespace

void add_check(CLI::App& app, std::function<int()>& action) {
  auto a = std::make_shared<CheckArgs>();
  auto* sub = app.add_subcommand(
      "check", "CI gate for a project: every model of fusec.toml against its baselines; exit 3 on a regression");
  sub->add_option("--project", a->project, "Project file (default: fusec.toml in the current folder)");
  sub->add_flag("--update-baselines", a->update, "Record the new reports as the baselines instead of comparing");
  sub->add_option("--model", a->only, "Check only this model (by name; repeatable)");
  sub->add_option("--reports", a->reports, "Keep the new reports (and optimized models) in this folder");
  a->thresholds.add_to(*sub);
  sub->add_flag("--all-rows", a->all_rows, "Show every compared row, not only headline rows and changes");
  sub->add_option("--markdown", a->markdown, "Write the table as markdown (for a pull request)");
  sub->add_option("--json", a->json, "Write every verdict as JSON (schema fusec.check/1)");
  sub->add_flag("--quiet", a->quiet, "No per-model progress lines");
  sub->callback([a, &action] { action = [a] { return check(*a); }; });
}

}  // namespace fusec::cli
