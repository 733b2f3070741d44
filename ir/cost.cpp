#include "ir/cost.h"

#include "ir/error.h"

namespace fusec {

std::optional<Cost> node_cost(const Graph& g, const Node& n, DType float32_storage) {
  const OpSchema* s = OpRegistry::global().find(n.domain, n.op_type, g.opset(n.domain));
  if (!s || !s->cost) return std::nullopt;
  // Cost functions read the inputs and outputs their schema requires; a node inference skipped (a
  // subgraph attribute, too few inputs) has no cost, not an out-of-range read.
  if (!unsupported_reason(g, n).empty()) return std::nullopt;
  try {
    check_node_against_schema(n, *s);
  } catch (const Error&) {
    return std::nullopt;
  }
  auto stored = [&](DType t) {
    return t == DType::Float32 && float32_storage != DType::Undefined ? float32_storage : t;
  };
  std::vector<std::vector<int64_t>> in_dims, out_dims;
  std::vector<DType> in_types, out_types;
  for (const Value* v : n.inputs) {
    if (!v) {
      in_dims.emplace_back();
      in_types.push_back(DType::Undefined);
      continue;
    }
    if (!v->type.shape || !is_static(*v->type.shape)) return std::nullopt;
    in_dims.push_back(static_dims(*v->type.shape));
    in_types.push_back(stored(v->type.dtype));
  }
  for (const Value* v : n.outputs) {
    if (!v) {
      out_dims.emplace_back();
      out_types.push_back(DType::Undefined);
      continue;
    }
    if (!v->type.shape || !is_static(*v->type.shape)) return std::nullopt;
    out_dims.push_back(static_dims(*v->type.shape));
    out_types.push_back(stored(v->type.dtype));
  }
  CostContext c{n, in_dims, in_types, out_dims, out_types};
  return s->cost(c);
}

GraphCost graph_cost(const Graph& g) {
  GraphCost gc;
  for (const auto& n : g.nodes()) {
    if (auto c = node_cost(g, *n)) {
      gc.total.flops += c->flops;
      gc.total.bytes_read += c->bytes_read;
      gc.total.bytes_written += c->bytes_written;
      ++gc.nodes_costed;
    } else {
      ++gc.nodes_unknown;
    }
  }
  return gc;
}

}  // namespace fusec
