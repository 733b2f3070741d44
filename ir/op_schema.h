// The op schema registry: one entry per op (and per opset range where an op's signature or
// defaults changed), declaring what it accepts, how its output types follow from its inputs, and
// what it costs. Backends register kernels separately, keyed by (domain, op_type).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ir/attribute.h"
#include "ir/dim_values.h"
#include "ir/graph.h"
#include "ir/op_key.h"
#include "ir/shape.h"

namespace fusec {

/// Attribute kinds, in the order of AttrValue's alternatives.
enum class AttrKind : size_t { Float = 0, Int, String, Tensor, Graph, Floats, Ints, Strings, Tensors, Graphs, Opaque };

struct AttrSpec {
  std::string name;
  AttrKind kind;
  std::optional<AttrValue> default_value;  // nullopt: required (if `required`) or simply absent
  bool required = false;
};

/// What one node costs at given shapes. The profiler divides measured time by these, so each op
/// states the work it really does, not a generic guess.
struct Cost {
  double flops = 0;          // multiply-adds count as 2
  double bytes_read = 0;     // every input read once (weights included)
  double bytes_written = 0;  // every output written once
};

struct OpSchema;

/// Attribute access with the schema's defaults and type checks; errors name the node.
class NodeAttrs {
 public:
  NodeAttrs(const Node& node, const OpSchema& schema) : node_(node), schema_(schema) {}
  const Node& node() const { return node_; }
  const OpSchema& schema() const { return schema_; }
  bool has_attr(const std::string& name) const { return node_.has_attr(name); }
  int64_t attr_int(const std::string& name) const;
  float attr_float(const std::string& name) const;
  std::string attr_string(const std::string& name) const;
  std::vector<int64_t> attr_ints(const std::string& name) const;
  std::vector<float> attr_floats(const std::string& name) const;
  const Tensor* attr_tensor(const std::string& name) const;
  /// BadInput with " (node 'name', op Type)" appended.
  [[noreturn]] void fail(const std::string& what) const;
  /// fail() for valid ONNX that fusec does not implement (ErrorCause::Unsupported).
  [[noreturn]] void unsupported(const std::string& what) const;

 private:
  const AttrValue* lookup(const std::string& name, AttrKind kind) const;
  const Node& node_;
  const OpSchema& schema_;
};

/// Input types (and, where known, input values) of one node; inference fills the outputs.
/// At import, values are known for constants; at run time the CPU backend passes every input's
/// value, so the same function yields the exact output shapes.
class InferContext : public NodeAttrs {
 public:
  InferContext(const Node& node, const OpSchema& schema, int64_t opset, std::vector<const TypeInfo*> input_types,
               std::vector<const Tensor*> input_values);
  int64_t opset() const { return opset_; }
  size_t num_inputs() const { return input_types_.size(); }
  bool has_input(size_t i) const { return i < input_types_.size() && input_types_[i]; }
  const TypeInfo& input_type(size_t i) const;
  DType input_dtype(size_t i) const { return input_type(i).dtype; }
  /// Shape of input i, or nullopt if its rank is unknown.
  const std::optional<Shape>& input_shape(size_t i) const { return input_type(i).shape; }
  /// The input's value if known (constant at import, always at run time), else nullptr.
  const Tensor* input_value(size_t i) const;
  /// Rank of input i; fails if unknown (use when the op cannot proceed without it).
  size_t input_rank(size_t i) const;
  /// What is known of a small integer input's elements when its value is not (ir/dim_values.h):
  /// per element a known integer, a named symbol (a symbolic dim of some tensor's shape) or
  /// nothing; nullptr when nothing is known of any. A shape-like input such as Reshape's target built from
  /// Shape -> Gather -> Concat over an open batch reads [batch, 128, -1, 64].
  const std::vector<DimValue>* input_dims_value(size_t i) const {
    return i < input_dims_values_.size() ? input_dims_values_[i] : nullptr;
  }
  void set_input_dims_values(std::vector<const std::vector<DimValue>*> v) { input_dims_values_ = std::move(v); }

  size_t num_outputs() const { return outputs.size(); }
  void set_output(size_t i, DType dtype, std::optional<Shape> shape);
  /// Same type and shape as input `from`.
  void propagate(size_t from, size_t to = 0) { set_output(to, input_dtype(from), input_shape(from)); }
  /// Requires input i's dtype to be one of `allowed`.
  void require_dtype(size_t i, std::initializer_list<DType> allowed) const;
  void require_float(size_t i) const;

  std::vector<TypeInfo> outputs;

 private:
  int64_t opset_;
  std::vector<const TypeInfo*> input_types_;
  std::vector<const Tensor*> input_values_;
  std::vector<const std::vector<DimValue>*> input_dims_values_;
};

/// Static input/output types of a node whose shapes are all known.
struct CostContext {
  const Node& node;
  const std::vector<std::vector<int64_t>>& in_dims;
  const std::vector<DType>& in_dtypes;
  const std::vector<std::vector<int64_t>>& out_dims;
  const std::vector<DType>& out_dtypes;
  bool has_input(size_t i) const { return i < in_dims.size() && in_dtypes[i] != DType::Undefined; }
  double in_bytes(size_t i) const;
  double out_bytes(size_t i) const;
  double in_numel(size_t i) const;
  double out_numel(size_t i) const;
  double all_in_bytes() const;
  double all_out_bytes() const;
};

using InferFn = std::function<void(InferContext&)>;
using CostFn = std::function<Cost(const CostContext&)>;

struct OpSchema {
  std::string domain;  // canonical (ir/op_key.h): "" is ai.onnx
  std::string op_type;
  int64_t min_opset = 1;
  int64_t max_opset = 1000;  // inclusive
  int min_inputs = 0, max_inputs = 0, min_outputs = 1, max_outputs = 1;
  std::vector<AttrSpec> attrs;
  InferFn infer;
  CostFn cost;
  std::string doc;

  const AttrSpec* find_attr(const std::string& name) const;

  // Fluent declaration: reg.add("Relu").since(6).io(1, 1, 1, 1).infer(...).cost(...)
  OpSchema& since(int64_t lo, int64_t hi = 1000) {
    min_opset = lo;
    max_opset = hi;
    return *this;
  }
  OpSchema& io(int in_lo, int in_hi, int out_lo = 1, int out_hi = 1) {
    min_inputs = in_lo;
    max_inputs = in_hi;
    min_outputs = out_lo;
    max_outputs = out_hi;
    return *this;
  }
  OpSchema& attr(std::string name, AttrKind kind, std::optional<AttrValue> def = std::nullopt) {
    attrs.push_back({std::move(name), kind, std::move(def), false});
    return *this;
  }
  OpSchema& required_attr(std::string name, AttrKind kind) {
    attrs.push_back({std::move(name), kind, std::nullopt, true});
    return *this;
  }
  OpSchema& set_infer(InferFn f) {
    infer = std::move(f);
    return *this;
  }
  OpSchema& set_cost(CostFn f) {
    cost = std::move(f);
    return *this;
  }
  OpSchema& set_doc(std::string d) {
    doc = std::move(d);
    return *this;
  }
};

/// The newest ai.onnx opset fusec implements: the schemas follow the operator definitions of
/// onnx 1.23 (requirements.txt), whose newest opset is 28. Raise it only after checking every op
/// that changed in the newer opsets. A model importing a newer opset is refused by default.
constexpr int64_t kNewestOnnxOpset = 28;
/// The lowest IR version a model importing ai.onnx opset `opset` may declare (onnx's version table).
/// A pass that raises a model's opset raises its IR version to at least this.
int64_t min_ir_version_for_opset(int64_t opset);
/// The newest version of fusec's own domain, ai.fusec (docs/ops.md).
constexpr int64_t kNewestFusecOpset = 1;

/// The newest opset fusec implements for a domain ("" and "ai.onnx" are the same); 0 for a domain
/// it has no ops in (its nodes are reported as unsupported ops instead).
int64_t newest_supported_opset(const std::string& domain);

class OpRegistry {
 public:
  /// The registry with every op fusec knows (built once, on first use).
  static const OpRegistry& global();

  OpSchema& add(const std::string& op_type, const std::string& domain = "");
  /// The schema for this op at the model's opset for its domain, or nullptr.
  const OpSchema* find(const std::string& domain, const std::string& op_type, int64_t opset) const;
  /// Any schema for the op, regardless of opset (for "known op, unsupported version" messages).
  bool knows(const std::string& domain, const std::string& op_type) const;
  /// Every schema, ordered by (canonical domain, op_type), then as added (one per opset range).
  std::vector<const OpSchema*> all() const;

 private:
  std::map<std::pair<std::string, std::string>, std::vector<OpSchema>> schemas_;
};

/// Checks a node against its schema: input/output counts, attribute kinds, required attributes.
void check_node_against_schema(const Node& node, const OpSchema& schema);

/// Why a node cannot be run, or "" if it can (schema exists for its opset and it has no subgraph).
std::string unsupported_reason(const Graph& g, const Node& n);

// ---- helpers shared by op families ----

/// ONNX multidirectional broadcasting of two shapes; fails naming the node on a static mismatch.
Shape broadcast_shapes(const Shape& a, const Shape& b, const NodeAttrs& where);
/// Axis in [-rank, rank) -> [0, rank); fails naming the node otherwise.
int64_t normalize_axis(int64_t axis, int64_t rank, const NodeAttrs& where);
/// Output shape of an elementwise op over all present inputs (nullopt if any rank is unknown).
std::optional<Shape> broadcast_all_inputs(const InferContext& ctx);

Cost cost_elementwise(const CostContext& c, double flops_per_element);
/// Ops that only move data (Transpose, Concat, Gather...): no flops.
Cost cost_data_movement(const CostContext& c);
/// Ops that only change metadata (Reshape, Squeeze, Shape...): nothing moves on a real backend.
Cost cost_free(const CostContext& c);

}  // namespace fusec
