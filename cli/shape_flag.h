// The --shape flag's text.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace fusec {

/// Parses trtexec's "name:16x3x224x224" (the name may itself contain ':'; the last one splits).
std::pair<std::string, std::vector<int64_t>> parse_shape_flag(const std::string& flag);

}  // namespace fusec
