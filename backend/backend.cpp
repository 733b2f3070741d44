#include "backend/backend.h"

namespace fusec {

std::string describe_unsupported(const std::vector<UnsupportedNode>& nodes) {
  std::string s = std::to_string(nodes.size()) + " node" + (nodes.size() == 1 ? "" : "s") +
                  " cannot be run: ";
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (i) s += "; ";
    const auto& n = nodes[i];
    s += "node '" + n.node + "', op " + (n.domain.empty() ? "" : n.domain + ".") + n.op_type + " (" +
         n.reason + ")";
  }
  return s;
}

}  // namespace fusec
