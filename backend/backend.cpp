#include "backend/backend.h"

#include "ir/error.h"

namespace fusec {

std::string describe_unsupported(const std::vector<UnsupportedNode>& nodes) {
  std::string s = std::to_string(nodes.size()) + " node" + (nodes.size() == 1 ? "" : "s") + " cannot be run: ";
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (i) s += "; ";
    const auto& n = nodes[i];
    s += "node '" + n.node + "', op " + (n.domain.empty() ? "" : n.domain + ".") + n.op_type + " (" + n.reason + ")";
  }
  return s;
}

void check_input_tensor(const Value& v, const Tensor& t) {
  if (t.dtype() != v.type.dtype)
    bad_input("input '" + v.name + "' must be " + dtype_name(v.type.dtype) + ", got " + dtype_name(t.dtype()));
  if (!v.type.shape) return;
  const Shape& s = *v.type.shape;
  bool ok = s.size() == t.rank();
  for (size_t i = 0; ok && i < s.size(); ++i)
    if (s[i].is_static() && s[i].value != t.dim(i)) ok = false;
  if (!ok)
    bad_input("input '" + v.name + "' has shape " + dims_str(t.dims()) + " but the model expects " + shape_str(s));
}

}  // namespace fusec
