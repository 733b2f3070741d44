// What `bench` and `profile` take from a fusec.toml model when no model is given: the flags the user
// did not type fall back to the project's values.
#pragma once
#include <CLI/CLI.hpp>

#include <string>

#include "cli/common.h"
#include "cli/device_options.h"
#include "project/project_file.h"

namespace fusec::cli {

/// Shapes (--batch/--shape), --device, --gpu and --precision from `m`, where `sub` did not get them.
void apply_project_model(const project::ModelConfig& m, const CLI::App& sub, ModelOptions& shapes,
                         DeviceOptions& device);

/// FILE -> FILE's stem + "." + name + extension when a project has several models ("" stays "").
std::string per_model_path(const std::string& path, const std::string& name, size_t models);

}  // namespace fusec::cli
