// ONNX ModelProto -> fusec IR. Imports faithfully (every node, attribute and tensor) without
// judging whether fusec can run it; backends and `inspect` ask that separately.
#pragma once
#include <filesystem>
#include <memory>
#include <string>

#include "ir/graph.h"

namespace fusec {

/// Reads and imports a .onnx file. Throws BadInput naming the file (and node) on malformed input.
std::unique_ptr<Graph> import_onnx_file(const std::filesystem::path& file);
/// Imports serialized ModelProto bytes; external data is resolved against `model_dir`.
std::unique_ptr<Graph> import_onnx_bytes(const std::string& bytes, const std::filesystem::path& model_dir,
                                         const std::string& display_name);

}  // namespace fusec
