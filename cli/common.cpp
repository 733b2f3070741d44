#include "cli/common.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>

#include "importer/onnx_import.h"
#include "ir/error.h"
#include "ir/half.h"

namespace fusec::cli {

void ShapeOptions::add_to(CLI::App& app) {
  app.add_option("--batch", batch, "Bind the symbolic leading dim of every input to N");
  app.add_option("--shape", shapes, "Set an input's shape, e.g. input:16x3x224x224 (repeatable)")
      ->take_all()
      ->allow_extra_args(false);
}

ShapeBindings ShapeOptions::bindings() const {
  ShapeBindings b;
  b.batch = batch;
  for (const auto& s : shapes) b.shapes.push_back(parse_shape_flag(s));
  return b;
}

std::unique_ptr<Graph> load_model(const std::string& path, const ShapeOptions& shapes) {
  auto g = import_onnx_file(path);
  bind_input_shapes(*g, shapes.bindings());
  infer_shapes(*g);
  return g;
}

void write_text_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  if (!out) bad_input("cannot write '" + path + "'");
  out << text;
  if (!out) bad_input("failed writing '" + path + "'");
}

bool stdout_is_tty() { return isatty(fileno(stdout)) != 0; }

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) { b /= 1024; ++u; }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", b, units[u]);
  return buf;
}

std::string human_count(double n) {
  const char* units[] = {"", "K", "M", "G", "T", "P"};
  int u = 0;
  while (std::fabs(n) >= 1000 && u < 5) { n /= 1000; ++u; }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f%s" : "%.2f%s", n, units[u]);
  return buf;
}

}  // namespace fusec::cli
