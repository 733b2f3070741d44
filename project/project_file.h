// fusec.toml: a project's models, how to run each (shapes, device, precision, passes), the
// thresholds of the regression gate, and the folder of baselines `fusec check` compares against.
//
//   baselines = "baselines/{device}"   # {device}: "cpu" or the GPU's name, e.g. nvidia-h100-80gb-hbm3
//   [defaults]    device, precision, batch, shapes, iterations, warmup, profile, profile_iterations,
//                 passes, skip, portable, rtol, atol
//   [thresholds]  latency, alpha, memory, count, error, node   (fusec compare's flags)
//   [[model]]     path (required), name, and any [defaults] key; [model.thresholds] overrides
//
// Every key is checked: a misspelt one is an error naming the file and line, not a silent default.
// docs/ci.md describes the file; examples/ci/fusec.toml is a complete one.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "profiler/compare.h"

namespace fusec::project {

constexpr const char* kProjectFileName = "fusec.toml";

/// How to run and gate one model. Paths are resolved against the project file's folder.
struct ModelConfig {
  std::string name;  // baseline files are <name>.<kind>.json; default: the model file's stem
  std::string path;
  std::optional<int64_t> batch;
  std::vector<std::string> shapes;  // trtexec syntax, "input:16x3x224x224"
  std::string device = "auto";      // auto | cpu | cuda
  int gpu = 0;
  std::string precision = "fp32";
  int iterations = 200, warmup = 5;       // bench (warmup: profile too)
  int profile_iterations = 50;            // profile: its report keeps every node's samples
  bool profile = true;                    // gate on fusec profile too
  std::vector<std::string> passes, skip;  // the fusion pipeline (optimize --passes / --skip)
  bool portable = false;
  std::optional<double> rtol, atol;  // optimize's verification tolerances
  compare::Thresholds thresholds;
};

struct Project {
  std::string file;       // the fusec.toml read
  std::string dir;        // its folder
  std::string baselines;  // the folder pattern, resolved against `dir`; may hold "{device}"
  std::vector<ModelConfig> models;
};

/// Reads and validates a project file. BadInput naming the file (and line) for a TOML syntax
/// error, an unknown key, a value of the wrong type, a model without a path or a model file that
/// does not exist, two models with one name, or no models at all.
Project load_project(const std::string& file);

/// "fusec.toml" in `dir` when it exists (the current folder by default).
std::optional<std::string> find_project(const std::string& dir = ".");

/// What a user must be told when a command needs a model and there is neither a model argument
/// nor a project file: the sentence after "fusec: error: ".
std::string no_model_message(const std::string& subcommand);

/// The baseline folder for a device: `baselines` with "{device}" replaced by device_slug(...).
std::string baseline_dir(const Project& p, const std::string& device_description);

/// "cpu" for the CPU; the GPU's name in lower case with dashes for a CUDA device
/// ("cuda:0 NVIDIA H100 80GB HBM3 (sm_90)" -> "nvidia-h100-80gb-hbm3"): one folder per GPU model.
std::string device_slug(const std::string& device_description);

}  // namespace fusec::project
