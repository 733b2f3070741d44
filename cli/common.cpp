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

Tensor random_input(const Value& v, uint64_t seed) {
  if (!v.type.shape || !is_static(*v.type.shape))
    bad_input("input '" + v.name + "' has shape " + (v.type.shape ? shape_str(*v.type.shape) : "unknown") +
              "; bind it with --batch N or --shape " + v.name + ":AxBxC");
  Tensor t(v.type.dtype, static_dims(*v.type.shape));
  // Mix the input's name into the seed so inputs of the same shape differ.
  std::mt19937_64 rng(seed ^ std::hash<std::string>{}(v.name));
  std::uniform_real_distribution<double> uni(-1.0, 1.0);
  std::uniform_int_distribution<int64_t> ints(0, 63);
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (t.dtype()) {
      case DType::Float32: t.data<float>()[i] = static_cast<float>(uni(rng)); break;
      case DType::Float64: t.data<double>()[i] = uni(rng); break;
      case DType::Float16: t.data<uint16_t>()[i] = float_to_half(static_cast<float>(uni(rng))); break;
      case DType::BFloat16: t.data<uint16_t>()[i] = float_to_bf16(static_cast<float>(uni(rng))); break;
      case DType::Bool: t.data<uint8_t>()[i] = static_cast<uint8_t>(rng() & 1); break;
      case DType::Int8: t.data<int8_t>()[i] = static_cast<int8_t>(ints(rng)); break;
      case DType::UInt8: t.data<uint8_t>()[i] = static_cast<uint8_t>(ints(rng)); break;
      case DType::Int16: t.data<int16_t>()[i] = static_cast<int16_t>(ints(rng)); break;
      case DType::Int32: t.data<int32_t>()[i] = static_cast<int32_t>(ints(rng)); break;
      case DType::Int64: t.data<int64_t>()[i] = ints(rng); break;
      case DType::Undefined: bad_input("input '" + v.name + "' has no data type");
    }
  }
  return t;
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
