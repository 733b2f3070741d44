// TensorProto <-> Tensor, including external data, and the .pb test-data file format.
#pragma once
#include <filesystem>
#include <string>

#include "importer/mapped_file.h"
#include "importer/output_file.h"
#include "ir/tensor.h"

namespace onnx {
class TensorProto;
}

namespace fusec {

/// Converts a TensorProto. `model_dir` resolves external data; `what` names the tensor in errors
/// (e.g. "initializer 'w'"). Throws BadInput on unsupported dtype, size mismatch, bad location, or
/// data past the memory limit; every size is checked before anything is allocated. External data
/// becomes a view into its memory-mapped file (through `maps`, shared by one import) when its
/// offset suits the element type, else it is read once.
Tensor tensor_from_proto(const onnx::TensorProto& p, const std::filesystem::path& model_dir, const std::string& what,
                         MappedFiles* maps = nullptr);
/// Same, but inline raw data is moved out of `p` into the tensor instead of copied.
Tensor tensor_from_proto(onnx::TensorProto&& p, const std::filesystem::path& model_dir, const std::string& what,
                         MappedFiles* maps = nullptr);

/// Fills a TensorProto with name, dtype, dims and raw_data.
void tensor_to_proto(const Tensor& t, const std::string& name, onnx::TensorProto* p);

/// Reads/writes a serialized TensorProto file (test_data_set_N/input_K.pb).
Tensor read_tensor_pb(const std::filesystem::path& file);
void write_tensor_pb(const Tensor& t, const std::string& name, const std::filesystem::path& file,
                     const OutputOptions& opts = {});

/// Resolves an external-data location against the model folder, refusing absolute paths, '..'
/// escapes and symlinks that lead outside it.
std::filesystem::path resolve_external_location(const std::filesystem::path& model_dir, const std::string& location,
                                                const std::string& what);

}  // namespace fusec
