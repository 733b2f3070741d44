#include "project/project_file.h"

#include <toml++/toml.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "importer/input_file.h"
#include "ir/error.h"
#include "project/numbers.h"

namespace fusec::project {

namespace fs = std::filesystem;

namespace {

/// Where a value came from, for messages: "examples/ci/fusec.toml:12".
struct Where {
  const std::string& file;
  std::string at(const toml::node& n) const {
    const auto& b = n.source().begin;
    return b.line ? file + ":" + std::to_string(b.line) : file;
  }
  [[noreturn]] void fail(const toml::node& n, const std::string& what) const { bad_input(at(n) + ": " + what); }
};

std::string str(const Where& w, const toml::node& v, const std::string& key) {
  if (!v.is_string()) w.fail(v, key + " must be a string");
  return *v.value<std::string>();
}

/// A number checked by the rule its flag has (project/numbers.h), so fusec.toml and the command
/// line accept the same values: "fusec.toml:7: rtol must be a number greater than 0 (got nan)".
double number(const Where& w, const toml::node& v, const std::string& key, const NumberRule& rule) {
  if (rule.integer ? !v.is_integer() : !v.is_number()) w.fail(v, key + " must be " + describe(rule));
  double x = rule.integer ? static_cast<double>(*v.value<int64_t>()) : *v.value<double>();
  try {
    check_number(x, key, rule);
  } catch (const Error& e) {
    w.fail(v, e.what());
  }
  return x;
}

bool boolean(const Where& w, const toml::node& v, const std::string& key) {
  if (!v.is_boolean()) w.fail(v, key + " must be true or false");
  return *v.value<bool>();
}

std::vector<std::string> strings(const Where& w, const toml::node& v, const std::string& key) {
  const toml::array* a = v.as_array();
  if (!a) w.fail(v, key + " must be an array of strings, e.g. [\"a\", \"b\"]");
  std::vector<std::string> out;
  for (const auto& x : *a) out.push_back(str(w, x, key + "[]"));
  return out;
}

[[noreturn]] void unknown_key(const Where& w, const toml::node& v, const std::string& key, const std::string& section,
                              const std::vector<std::string>& known) {
  std::string list;
  for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
  w.fail(v, "unknown key '" + key + "' in " + section + " (known: " + list + ")");
}

const std::vector<std::string> kThresholdKeys = {"latency", "alpha", "memory", "count", "error", "node"};

void apply_thresholds(const Where& w, const toml::table& t, compare::Thresholds& th, const std::string& section) {
  for (const auto& [k, v] : t) {
    std::string key(k.str());
    if (key == "alpha") {
      th.alpha = number(w, v, key, rules::kAlpha);
      continue;
    }
    double* dst = key == "latency"  ? &th.timing
                  : key == "memory" ? &th.memory
                  : key == "count"  ? &th.count
                  : key == "error"  ? &th.error
                  : key == "node"   ? &th.share
                                    : nullptr;
    if (!dst) unknown_key(w, v, key, section, kThresholdKeys);
    if (!v.is_string()) w.fail(v, key + " must be a percentage in quotes, e.g. " + key + " = \"5%\"");
    *dst = compare::parse_percent(*v.value<std::string>(), w.at(v) + ": " + key);
  }
}

const std::vector<std::string> kModelKeys = {
    "device", "gpu",  "precision", "batch", "shapes", "iterations", "warmup", "profile", "profile_iterations",
    "passes", "skip", "portable",  "rtol",  "atol"};

/// A key [defaults] and [[model]] share; false when `key` is not one.
bool apply_model_key(const Where& w, const std::string& key, const toml::node& v, ModelConfig& m) {
  if (key == "device") {
    m.device = str(w, v, key);
    if (m.device != "auto" && m.device != "cpu" && m.device != "cuda") w.fail(v, "device must be auto, cpu or cuda");
  } else if (key == "gpu") {
    m.gpu = static_cast<int>(number(w, v, key, rules::kGpu));
  } else if (key == "precision") {
    m.precision = str(w, v, key);
    static const std::set<std::string> ok = {"fp32", "tf32", "fp16", "bf16"};
    if (!ok.count(m.precision)) w.fail(v, "precision must be fp32, tf32, fp16 or bf16");
  } else if (key == "batch") {
    number(w, v, key, rules::kBatch);
    m.batch = *v.value<int64_t>();  // exactly: a double rounds past 2^53
  } else if (key == "shapes") {
    m.shapes = strings(w, v, key);
  } else if (key == "iterations") {
    m.iterations = static_cast<int>(number(w, v, key, rules::kRuns));
  } else if (key == "warmup") {
    m.warmup = static_cast<int>(number(w, v, key, rules::kWarmup));
  } else if (key == "profile_iterations") {
    m.profile_iterations = static_cast<int>(number(w, v, key, rules::kRuns));
  } else if (key == "profile") {
    m.profile = boolean(w, v, key);
  } else if (key == "passes") {
    m.passes = strings(w, v, key);
  } else if (key == "skip") {
    m.skip = strings(w, v, key);
  } else if (key == "portable") {
    m.portable = boolean(w, v, key);
  } else if (key == "rtol") {
    m.rtol = number(w, v, key, rules::kTolerance);
  } else if (key == "atol") {
    m.atol = number(w, v, key, rules::kTolerance);
  } else {
    return false;
  }
  return true;
}

bool safe_name(const std::string& s) {
  return !s.empty() && s[0] != '.' && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  });
}

}  // namespace

Project load_project(const std::string& file) {
  std::error_code ec;
  if (!fs::exists(file, ec)) bad_input("project file '" + file + "' does not exist");
  if (fs::is_directory(file, ec)) bad_input("project file '" + file + "' is a directory");
  // Through the one reader: a FIFO or /dev/zero named as the project cannot make fusec read forever.
  const std::string text =
      read_input_file(file, uint64_t{64} << 20, "64 MiB, more than any project file needs", {"the project file"});
  toml::table root;
  try {
    root = toml::parse(text, file);
  } catch (const toml::parse_error& e) {
    bad_input(file + ":" + std::to_string(e.source().begin.line) + ": not valid TOML: " + std::string(e.description()));
  }
  Where w{file};
  Project p;
  p.file = file;
  p.dir = fs::path(file).parent_path().string();
  if (p.dir.empty()) p.dir = ".";

  ModelConfig defaults;
  const toml::node* baselines = nullptr;
  const toml::array* models = nullptr;
  for (const auto& [k, v] : root) {
    std::string key(k.str());
    if (key == "baselines") {
      baselines = &v;
    } else if (key == "defaults") {
      const toml::table* t = v.as_table();
      if (!t) w.fail(v, "[defaults] must be a table");
      for (const auto& [dk, dv] : *t)
        if (!apply_model_key(w, std::string(dk.str()), dv, defaults))
          unknown_key(w, dv, std::string(dk.str()), "[defaults]", kModelKeys);
    } else if (key == "thresholds") {
      const toml::table* t = v.as_table();
      if (!t) w.fail(v, "[thresholds] must be a table");
      apply_thresholds(w, *t, defaults.thresholds, "[thresholds]");
    } else if (key == "model") {
      models = v.as_array();
      if (!models || !models->is_array_of_tables()) w.fail(v, "models are [[model]] tables, one per model");
    } else {
      unknown_key(w, v, key, "the top level", {"baselines", "defaults", "thresholds", "model"});
    }
  }
  if (!baselines) bad_input(file + ": no 'baselines' folder (e.g. baselines = \"baselines/{device}\")");
  p.baselines = (fs::path(p.dir) / str(w, *baselines, "baselines")).lexically_normal().string();
  if (!models || models->empty()) bad_input(file + ": no models (add a [[model]] table with a path)");

  std::set<std::string> names;
  for (const auto& node : *models) {
    const toml::table& t = *node.as_table();
    ModelConfig m = defaults;
    const toml::node* path = nullptr;
    const toml::node* name = nullptr;
    for (const auto& [k, v] : t) {
      std::string key(k.str());
      if (key == "path")
        path = &v;
      else if (key == "name")
        name = &v;
      else if (key == "thresholds") {
        const toml::table* th = v.as_table();
        if (!th) w.fail(v, "[model.thresholds] must be a table");
        apply_thresholds(w, *th, m.thresholds, "[model.thresholds]");
      } else if (!apply_model_key(w, key, v, m)) {
        std::vector<std::string> known = {"path", "name", "thresholds"};
        known.insert(known.end(), kModelKeys.begin(), kModelKeys.end());
        unknown_key(w, v, key, "[[model]]", known);
      }
    }
    if (!path) w.fail(node, "a [[model]] without a path");
    std::string rel = str(w, *path, "path");
    fs::path full = fs::path(rel).is_absolute() ? fs::path(rel) : (fs::path(p.dir) / rel).lexically_normal();
    if (!fs::is_regular_file(full, ec))
      w.fail(*path, "model '" + rel + "' does not exist (looked for " + full.string() + ")");
    m.path = full.string();
    m.name = name ? str(w, *name, "name") : full.stem().string();
    if (!safe_name(m.name))
      w.fail(name ? *name : *path,
             "model name '" + m.name + "' must be letters, digits, '.', '_' or '-' (it names the baseline files)");
    if (!names.insert(m.name).second)
      w.fail(name ? *name : *path, "two models are named '" + m.name + "' (give one a different name = \"...\")");
    if (!m.passes.empty() && !m.skip.empty()) w.fail(node, "model '" + m.name + "': give passes or skip, not both");
    p.models.push_back(std::move(m));
  }
  return p;
}

std::optional<std::string> find_project(const std::string& dir) {
  fs::path f = fs::path(dir) / kProjectFileName;
  std::error_code ec;
  if (fs::is_regular_file(f, ec)) return dir == "." ? std::string(kProjectFileName) : f.string();
  return std::nullopt;
}

std::string no_model_message(const std::string& subcommand) {
  std::error_code ec;
  std::string cwd = fs::current_path(ec).string();
  return "no model given, and no " + std::string(kProjectFileName) + " in " + (cwd.empty() ? "this folder" : cwd) +
         ": run `fusec " + subcommand + " MODEL.onnx`, or run it in a folder whose " + kProjectFileName +
         " lists the models ([[model]] path = \"model.onnx\"; see docs/ci.md)";
}

std::string device_slug(const std::string& d) {
  if (d.rfind("cuda", 0) != 0) return "cpu";
  std::string name = d;
  if (size_t sp = name.find(' '); sp != std::string::npos) name = name.substr(sp + 1);            // "cuda:0 "
  if (size_t paren = name.rfind(" ("); paren != std::string::npos) name = name.substr(0, paren);  // " (sm_90)"
  std::string slug;
  for (char c : name) {
    if (std::isalnum(static_cast<unsigned char>(c)))
      slug += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    else if (!slug.empty() && slug.back() != '-')
      slug += '-';
  }
  while (!slug.empty() && slug.back() == '-') slug.pop_back();
  return slug.empty() ? "cuda" : slug;
}

std::string baseline_dir(const Project& p, const std::string& device_description) {
  std::string dir = p.baselines;
  const std::string key = "{device}";
  for (size_t pos; (pos = dir.find(key)) != std::string::npos;)
    dir.replace(pos, key.size(), device_slug(device_description));
  return dir;
}

}  // namespace fusec::project
