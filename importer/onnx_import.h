// ONNX ModelProto -> fusec IR. Imports faithfully (every node, attribute and tensor) without
// judging whether fusec can run it; backends and `inspect` ask that separately.
#pragma once
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "ir/graph.h"

namespace fusec {

struct ImportOptions {
  /// Load a model whose opset (ai.onnx, ai.fusec) is newer than fusec implements, or whose IR
  /// version is newer than the onnx release fusec's protobuf classes come from: each such version is
  /// reported through `warn` instead of refused. Ops are then read with the newest definitions
  /// fusec has, which may not be what the newer opset means.
  bool allow_newer_versions = false;
  std::function<void(const std::string&)> warn;
  /// false: check every external-data reference (file, offset, length) but leave those tensors
  /// without data (nothing mapped or read). For checks that need only the model's structure, such
  /// as optimize re-reading what it wrote; such a graph must not be run or exported.
  bool external_data_contents = true;
};

/// Reads and imports a .onnx file. Throws BadInput naming the file (and node) on malformed input.
std::unique_ptr<Graph> import_onnx_file(const std::filesystem::path& file, const ImportOptions& opts = {});
/// Imports serialized ModelProto bytes; external data is resolved against `model_dir`.
std::unique_ptr<Graph> import_onnx_bytes(const std::string& bytes, const std::filesystem::path& model_dir,
                                         const std::string& display_name, const ImportOptions& opts = {});

/// The newest IR version fusec reads: the one defined by the onnx-ml.proto of the onnx release that
/// requirements.txt pins (its protobuf classes are generated from that file at build time).
int64_t newest_supported_ir_version();

}  // namespace fusec
