#include "backend/float32_island.h"

#include <string_view>
#include <vector>

namespace fusec {

namespace {

bool is_float32(const Value* v) { return v && v->type.dtype == DType::Float32; }

// O(1) work per output element and no weights of their own: each output is as exact in float32
// as the inputs it reads, so the island extends through them.
bool moves_or_combines(const Node& n) {
  if (n.domain == "ai.fusec") return n.op_type == "FusedElementwise";
  if (!n.domain.empty() && n.domain != "ai.onnx") return false;
  static constexpr std::string_view kOps[] = {
      // elementwise
      "Add", "Sub", "Mul", "Div", "Neg", "Abs", "Reciprocal", "Sqrt", "Pow", "Min", "Max", "Sum", "Mean", "Mod",
      "Floor", "Ceil", "Round", "Clip", "Where", "Sign", "Exp", "Log", "Sin", "Cos", "Tan", "Relu", "Identity", "Cast",
      "CastLike",
      // movement and index arithmetic
      "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Concat", "Slice", "Split", "Expand", "Tile", "Gather",
      "GatherElements", "GatherND", "Pad", "Range", "CumSum", "AffineGrid"};
  for (std::string_view op : kOps)
    if (n.op_type == op) return true;
  if (n.op_type == "MatMul") {  // an outer product only
    const Value* a = n.input(0);
    if (!a || !a->type.shape || a->type.shape->empty()) return false;
    const Dim& k = a->type.shape->back();
    return k.is_static() && k.value == 1;
  }
  return false;
}

}  // namespace

bool reads_absolute_value(const Node& n, size_t i) {
  if (!n.domain.empty() && n.domain != "ai.onnx") return false;
  const std::string& op = n.op_type;
  if (op == "Sin" || op == "Cos" || op == "Tan") return i == 0;
  if (op == "GridSample" || op == "RoiAlign") return i == 1;
  if (op == "Cast" || op == "CastLike")
    return i == 0 && !n.outputs.empty() && n.outputs[0] && is_integer(n.outputs[0]->type.dtype);
  return false;
}

DType Float32Island::storage(Precision p, const Value& v) const {
  return values.count(&v) ? v.type.dtype : storage_dtype(p, v.type.dtype);
}

Float32Island float32_island(const Graph& g, Precision p) {
  Float32Island island;
  if (p == Precision::FP32) return island;
  std::unordered_set<const Value*> wanted;  // read for its absolute value, or by an island node
  std::vector<const Value*> work;
  auto want = [&](const Value* v) {
    if (is_float32(v) && wanted.insert(v).second) work.push_back(v);
  };
  for (const auto& n : g.nodes())
    for (size_t i = 0; i < n->inputs.size(); ++i)
      if (reads_absolute_value(*n, i)) want(n->inputs[i]);
  while (!work.empty()) {
    const Value* v = work.back();
    work.pop_back();
    const Node* producer = v->producer;
    if (!producer) {
      island.values.insert(v);  // a graph input or a constant: stored float32 as given
      continue;
    }
    if (!moves_or_combines(*producer) || !island.nodes.insert(producer).second) continue;
    for (const Value* in : producer->inputs) want(in);
  }
  for (const Node* n : island.nodes)
    for (const Value* out : n->outputs)
      if (is_float32(out)) island.values.insert(out);
  return island;
}

}  // namespace fusec
