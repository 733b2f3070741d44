#include "cli/shape_flag.h"

#include "ir/error.h"

namespace fusec {

std::pair<std::string, std::vector<int64_t>> parse_shape_flag(const std::string& flag) {
  auto colon = flag.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == flag.size())
    bad_input("--shape '" + flag + "' must look like name:16x3x224x224");
  std::string name = flag.substr(0, colon), dims = flag.substr(colon + 1);
  std::vector<int64_t> out;
  size_t pos = 0;
  while (pos <= dims.size()) {
    size_t x = dims.find('x', pos);
    std::string part = dims.substr(pos, x == std::string::npos ? std::string::npos : x - pos);
    if (part.empty() || part.find_first_not_of("0123456789") != std::string::npos || part.size() > 15)
      bad_input("--shape '" + flag + "': '" + part + "' is not a dimension");
    out.push_back(std::stoll(part));
    if (x == std::string::npos) break;
    pos = x + 1;
  }
  return {name, out};
}

}  // namespace fusec
