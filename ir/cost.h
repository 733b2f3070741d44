#pragma once
#include <optional>

#include "ir/graph.h"
#include "ir/op_schema.h"

namespace fusec {

/// The node's cost at its current (static) shapes, or nullopt if some shape is not static or the
/// op has no schema. `float32_storage`, when set, is the type float32 tensors are stored in where
/// the node runs (fp16 on a GPU at --precision fp16): bytes are counted at that size.
std::optional<Cost> node_cost(const Graph& g, const Node& n, DType float32_storage = DType::Undefined);

struct GraphCost {
  Cost total;
  size_t nodes_costed = 0, nodes_unknown = 0;
};
GraphCost graph_cost(const Graph& g);

}  // namespace fusec
