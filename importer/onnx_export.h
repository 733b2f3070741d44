// fusec IR -> ONNX ModelProto.
#pragma once
#include <filesystem>
#include <string>

#include "ir/graph.h"

namespace fusec {

struct ExportOptions {
  /// Write initializers of at least `external_threshold` bytes to `<model file name>.data` beside
  /// the model. Forced on when the model would pass protobuf's 2 GB limit.
  bool external_data = false;
  size_t external_threshold = 1024;
};

/// Serialized ModelProto (all tensors inline). Throws BadInput if it would exceed 2 GB.
std::string export_onnx_bytes(const Graph& g);
/// Writes the model (and its external data file, if any tensor went there), each through a temporary
/// file renamed into place, streaming tensor data rather than copying it into a protobuf. Unchanged
/// memory-mapped weights are copied file to file. Returns true if an external data file was written.
bool export_onnx_file(const Graph& g, const std::filesystem::path& file, const ExportOptions& opts = {});

}  // namespace fusec
