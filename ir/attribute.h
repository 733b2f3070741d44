#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "ir/tensor.h"

namespace fusec {

/// A subgraph attribute (If/Loop/Scan bodies). fusec does not run subgraphs; it keeps the
/// serialized GraphProto so an import -> export round trip is exact and `inspect` can list them.
struct OpaqueGraph {
  std::string serialized;
};

/// A sparse-tensor or type-proto attribute we cannot interpret; kept verbatim like OpaqueGraph.
struct OpaqueAttr {
  int32_t onnx_type = 0;
  std::string serialized;
};

using AttrValue =
    std::variant<float, int64_t, std::string, Tensor, OpaqueGraph, std::vector<float>, std::vector<int64_t>,
                 std::vector<std::string>, std::vector<Tensor>, std::vector<OpaqueGraph>, OpaqueAttr>;

struct Attribute {
  AttrValue value;
  std::string doc_string;
  std::string ref_attr_name;  // function attribute references, kept for round trip
};

const char* attr_kind_name(const AttrValue& v);
bool attr_equal(const AttrValue& a, const AttrValue& b);

}  // namespace fusec
