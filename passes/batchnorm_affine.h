#pragma once
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace fusec {

/// y = x·scale[c] + shift[c] along the channel (Conv) or feature (Gemm) axis.
struct ChannelAffine {
  std::vector<double> scale, shift;
  bool scale_is_one() const {
    return std::all_of(scale.begin(), scale.end(), [](double s) { return s == 1.0; });
  }
  bool shift_is_zero() const {
    return std::all_of(shift.begin(), shift.end(), [](double s) { return s == 0.0; });
  }
};

/// Every value is finite.
bool all_finite(const std::vector<double>& v);

/// A tensor of type `dt` (float32/64, float16, bfloat16) and `dims` holding `v`, each rounded once.
Tensor tensor_from(DType dt, std::vector<int64_t> dims, const std::vector<double>& v);

/// BatchNormalization `bn` (inference: constant scale, B, mean and var of `channels` entries, its
/// statistics outputs unused) as y = x·s + t per channel, or nullopt with `why`.
std::optional<ChannelAffine> batchnorm_affine(const Graph& g, const Node* bn, int64_t channels, std::string* why);

}  // namespace fusec
