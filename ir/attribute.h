#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "ir/tensor.h"

namespace fusec {

class Graph;

/// A subgraph attribute (If's branches, Loop's body; Scan and the others are kept, not run).
/// `serialized` is the GraphProto as the file held it: export writes it back verbatim, so an
/// import -> export round trip is exact. For If and Loop, `body` is that graph imported, and
/// `captured` names the outer values it reads (ONNX's outer-scope references). Its node takes
/// those values as its last captured.size() inputs, in this order, after the ones the op declares,
/// so passes see them as uses; `body` has them as its last inputs, after the op's own.
struct SubGraph {
  std::string serialized;
  std::shared_ptr<const Graph> body;  // null where fusec does not run the op, or could not import it
  std::vector<std::string> captured;
  std::string why_not;  // why `body` is null for an If or Loop (an unsupported type inside), else ""
};

/// A sparse-tensor or type-proto attribute we cannot interpret; kept verbatim like SubGraph.
struct OpaqueAttr {
  int32_t onnx_type = 0;
  std::string serialized;
};

using AttrValue = std::variant<float, int64_t, std::string, Tensor, SubGraph, std::vector<float>, std::vector<int64_t>,
                               std::vector<std::string>, std::vector<Tensor>, std::vector<SubGraph>, OpaqueAttr>;

struct Attribute {
  AttrValue value;
  std::string doc_string;
  std::string ref_attr_name;  // function attribute references, kept for round trip
};

const char* attr_kind_name(const AttrValue& v);
bool attr_equal(const AttrValue& a, const AttrValue& b);

}  // namespace fusec
