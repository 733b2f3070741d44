// NumPy .npy files (format 1.0-3.0, little-endian, C order), the other input/output format users
// expect besides TensorProto .pb.
#pragma once
#include <filesystem>

#include "ir/tensor.h"

namespace fusec {

Tensor read_npy(const std::filesystem::path& file);
void write_npy(const Tensor& t, const std::filesystem::path& file);

/// Reads .npy or TensorProto .pb by extension (.npy; anything else is tried as .pb).
Tensor read_tensor_file(const std::filesystem::path& file);

}  // namespace fusec
