#include "backend/float32_island.h"

#include <cmath>
#include <string_view>
#include <unordered_map>
#include <utility>
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

bool is_onnx(const Node& n) { return n.domain.empty() || n.domain == "ai.onnx"; }

// v's data when it is a constant (an initializer or a Constant node's value), else nullptr.
const Tensor* constant_tensor(const Value* v) {
  return !v                                                  ? nullptr
         : v->is_initializer()                               ? v->initializer.get()
         : v->producer && v->producer->op_type == "Constant" ? v->producer->attr_tensor("value")
                                                             : nullptr;
}

// The constant scalar input i of n, or NaN.
double constant_scalar(const Node& n, size_t i) {
  const Tensor* t = constant_tensor(n.input(i));
  return t && t->numel() == 1 ? t->as_double(0) : std::nan("");
}

// x·x or x², element by element: a value whose range is the square of its input's.
bool squares(const Node& n) {
  if (!is_onnx(n) || n.outputs.size() != 1 || !is_float32(n.outputs[0])) return false;
  if (n.op_type == "Pow") return constant_scalar(n, 1) == 2.0;
  return n.op_type == "Mul" && n.inputs.size() == 2 && n.inputs[0] && n.inputs[0] == n.inputs[1];
}

// The arithmetic a statistic takes between its square and its root: sums, epsilon, scale and, in a
// one-pass variance, the squared mean it subtracts.
bool carries_statistic(const Node& n) {
  if (!is_onnx(n)) return false;
  static constexpr std::string_view kOps[] = {"ReduceMean", "ReduceSum", "ReduceSumSquare", "Add", "Sub", "Mul", "Div",
                                              "Max",        "Min"};
  for (std::string_view op : kOps)
    if (n.op_type == op) return true;
  return false;
}

bool takes_root(const Node& n) {
  if (!is_onnx(n)) return false;
  if (n.op_type == "Sqrt") return true;
  const double e = n.op_type == "Pow" ? constant_scalar(n, 1) : std::nan("");
  return std::fabs(e) <= 0.5;  // false for NaN
}

// A statistic of squares, from the square to its root (a norm's mean of squares, a variance, an L2
// norm): past about 256 an activation's square overflows fp16 (65504), and the row's statistic
// becomes inf. The island holds every node on a path from a square to a root through the
// statistic's arithmetic; a path that reaches no root (GELU's cube) is not one. The square's input
// is an activation in range, so this part does not extend back from it.
void add_statistics_of_squares(const Graph& g, Float32Island& island) {
  // A norm's path is 3 to 6 nodes long (square, sum, [squared mean, difference,] epsilon, root);
  // the bound keeps a square that meets a residual stream from reaching a later norm's root.
  constexpr int kMaxSteps = 8;
  std::unordered_set<const Node*> reached;
  std::vector<std::pair<const Node*, int>> work;
  for (const auto& n : g.nodes())
    if (squares(*n) || (is_onnx(*n) && n->op_type == "ReduceSumSquare")) {
      reached.insert(n.get());
      work.push_back({n.get(), 0});
    }
  std::vector<const Node*> roots;
  while (!work.empty()) {
    const auto [n, steps] = work.back();
    work.pop_back();
    if (takes_root(*n)) {  // back in an activation's range
      roots.push_back(n);
      continue;
    }
    if (steps == kMaxSteps) continue;
    for (const Value* out : n->outputs) {
      if (!is_float32(out)) continue;
      for (const Node* c : out->consumers)
        if ((carries_statistic(*c) || takes_root(*c)) && reached.insert(c).second) work.push_back({c, steps + 1});
    }
  }
  std::unordered_set<const Node*> kept(roots.begin(), roots.end());
  std::vector<const Node*> back = roots;
  while (!back.empty()) {
    const Node* n = back.back();
    back.pop_back();
    for (const Value* in : n->inputs)
      if (in && in->producer && reached.count(in->producer) && kept.insert(in->producer).second)
        back.push_back(in->producer);
  }
  island.nodes.insert(kept.begin(), kept.end());
}

// What a position stays a position through: its sum with another value (an offset, a flow), a
// difference with a non-position, a scaling by a constant, a sign change, and data movement.
bool carries_position(const Node& n) {
  if (!is_onnx(n) || n.outputs.size() < 1) return false;
  static constexpr std::string_view kOps[] = {"Add",     "Sub",       "Neg",       "Identity", "Reshape", "Flatten",
                                              "Squeeze", "Unsqueeze", "Transpose", "Concat",   "Slice",   "Split",
                                              "Expand",  "Tile",      "Gather",    "Cast"};
  for (std::string_view op : kOps)
    if (n.op_type == op) return true;
  if (n.op_type == "Mul" || n.op_type == "Div") return !std::isnan(constant_scalar(n, 1));
  return false;
}

// The difference of two positions, computed from float32 operands: where the island's coordinates
// are carried forward past their last sampling (RAFT's final coordinates, from which the flow it
// returns is coords - grid), a difference of positions cancels their leading digits, and fp16's
// step at the positions' size (1/16 px at 128) becomes the flow's error. The island takes every
// node that carries a position forward to such a difference, within 8 steps, and the difference
// itself (its operands read in float32); a difference is small and leaves the island there.
void add_differences_of_positions(const Graph& g, Float32Island& island) {
  constexpr int kMaxSteps = 8;
  const std::unordered_set<const Value*> positions = island.values;
  std::unordered_map<const Value*, const Node*> carried;  // a position's carry forward -> its node
  std::vector<std::pair<const Value*, int>> work;
  for (const Value* v : positions) work.push_back({v, 0});
  auto is_position = [&](const Value* v) { return positions.count(v) || carried.count(v); };
  std::vector<const Node*> differences;
  std::unordered_set<const Node*> seen;
  while (!work.empty()) {
    const auto [v, steps] = work.back();
    work.pop_back();
    for (const Node* c : v->consumers) {
      if (island.nodes.count(c) || !carries_position(*c) || steps == kMaxSteps) continue;
      if (c->op_type == "Add" || c->op_type == "Sub") {
        const Value* other = c->input(c->input(0) == v ? 1 : 0);
        const Tensor* grid = constant_tensor(other);
        const bool cancels = other && is_float32(other) && (is_position(other) || (grid && grid->numel() > 1));
        if (cancels) {
          if (seen.insert(c).second) differences.push_back(c);
          continue;
        }
      }
      for (const Value* out : c->outputs)
        if (is_float32(out) && !is_position(out)) {
          carried[out] = c;
          work.push_back({out, steps + 1});
        }
    }
  }
  std::vector<const Value*> back;
  for (const Node* d : differences) {
    island.nodes.insert(d);
    for (const Value* in : d->inputs) back.push_back(in);
  }
  while (!back.empty()) {
    const Value* v = back.back();
    back.pop_back();
    auto it = carried.find(v);
    if (it == carried.end() || !island.nodes.insert(it->second).second) continue;
    for (const Value* out : it->second->outputs)
      if (is_float32(out)) island.values.insert(out);
    for (const Value* in : it->second->inputs) back.push_back(in);
  }
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
  add_differences_of_positions(g, island);
  island.positions = island.values;  // before the differences' outputs and the statistics join
  if (p != Precision::TF32) add_statistics_of_squares(g, island);  // tf32 stores float32: no overflow
  for (const Node* n : island.nodes)
    for (const Value* out : n->outputs)
      if (is_float32(out)) island.values.insert(out);
  return island;
}

namespace {

// A conv or matmul with a fused residual and nothing after it: Y = Conv(X) + Z, MatMul(A) + b + Z.
bool is_plain_residual_sum(const Node& n) {
  if (n.domain != "ai.fusec" || (n.op_type != "FusedConv" && n.op_type != "FusedMatMul")) return false;
  return n.input(3) && n.outputs.size() == 1 && n.outputs[0] && n.attr_string("activation", "").empty();
}

// Y = product + Z becomes product -> Add(product, Z) -> Y: the product keeps Y's type and shape.
void split_residual(Graph& g, Node* n) {
  Value* y = n->outputs[0];
  Value* z = n->inputs[3];
  Value* product = g.add_value(y->name + "_product");
  product->type = y->type;
  g.set_output(n, 0, product);
  g.set_input(n, 3, nullptr);
  n->inputs.resize(3);
  const bool has_bias = n->input(2) != nullptr;
  if (n->op_type == "FusedConv" || !has_bias) {  // nothing fused is left: the model's own op
    n->op_type = n->op_type == "FusedConv" ? "Conv" : "MatMul";
    n->domain.clear();
    std::erase_if(n->attrs, [](const NamedAttribute& a) { return a.name.rfind("activation", 0) == 0; });
    if (n->op_type == "MatMul") n->inputs.resize(2);
  }
  g.add_node("Add", {product, z}, {y}, g.unique_node_name(n->name + "_residual"));
}

}  // namespace

size_t split_position_sums(Graph& g, Precision p) {
  if (p == Precision::FP32) return 0;
  size_t split = 0;
  for (bool changed = true; changed;) {  // a split sum can make the next conv's residual a position
    changed = false;
    const Float32Island island = float32_island(g, p);
    for (Node* n : g.node_list()) {
      if (!is_plain_residual_sum(*n)) continue;
      // A position's sum: its residual is one, or a reader takes its output for one. A statistic
      // of squares does not count: the square reads an activation in range.
      bool wanted = island.positions.count(n->inputs[3]) > 0;
      for (const Node* c : n->outputs[0]->consumers) {
        for (size_t i = 0; i < c->inputs.size(); ++i)
          wanted = wanted || (c->inputs[i] == n->outputs[0] && reads_absolute_value(*c, i));
        if (island.nodes.count(c))
          for (const Value* out : c->outputs) wanted = wanted || island.positions.count(out) > 0;
      }
      if (!wanted) continue;
      split_residual(g, n);
      ++split;
      changed = true;
    }
  }
  if (split) g.topo_sort();
  return split;
}

}  // namespace fusec
