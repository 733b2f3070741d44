#include "cli/project_args.h"

#include <filesystem>

namespace fusec::cli {

void apply_project_model(const project::ModelConfig& m, const CLI::App& sub, ModelOptions& shapes,
                         DeviceOptions& device) {
  auto given = [&](const char* flag) { return sub.count(flag) > 0; };
  if (!given("--batch") && !given("--shape")) {
    shapes.batch = m.batch;
    shapes.shapes = m.shapes;
  }
  if (!given("--device")) device.device = m.device;
  if (!given("--gpu")) device.gpu = m.gpu;
  if (!given("--precision")) device.precision = m.precision;
}

std::string per_model_path(const std::string& path, const std::string& name, size_t models) {
  if (path.empty() || models <= 1) return path;
  std::filesystem::path f(path);
  return (f.parent_path() / (f.stem().string() + "." + name + f.extension().string())).string();
}

}  // namespace fusec::cli
