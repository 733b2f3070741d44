// NumPy .npy files (format 1.0-3.0, little-endian, C order), the other input/output format users
// expect besides TensorProto .pb.
#pragma once
#include <filesystem>

#include "importer/output_file.h"
#include "ir/tensor.h"

namespace fusec {

/// Reads a .npy file (importer/input_file.h): its declared shape is checked against the bytes the
/// file holds before the tensor is allocated.
Tensor read_npy(const std::filesystem::path& file);
void write_npy(const Tensor& t, const std::filesystem::path& file, const OutputOptions& opts = {});

/// Reads .npy or TensorProto .pb by extension (.npy; anything else is tried as .pb).
Tensor read_tensor_file(const std::filesystem::path& file);

}  // namespace fusec
