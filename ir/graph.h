#pragma once
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ir/attribute.h"
#include "ir/shape.h"
#include "ir/tensor.h"

namespace fusec {

struct Node;

/// A named edge. Its producer is a node output, a graph input, or nothing (an initializer).
struct Value {
  std::string name;
  TypeInfo type;
  Node* producer = nullptr;
  int producer_output = -1;
  std::vector<Node*> consumers;  // one entry per use, so a node using it twice appears twice
  /// Initializer data (is_initializer) — never a value computed by inference.
  std::shared_ptr<const Tensor> initializer;
  bool is_graph_input = false;
  bool is_graph_output = false;
  bool initializer_listed_as_input = false;  // IR < 4 style: initializer also in graph.input
  bool in_value_info = false;                // had a value_info entry (kept for export)
  std::string doc_string;

  bool is_initializer() const { return initializer != nullptr; }
};

struct NamedAttribute {
  std::string name;
  Attribute attr;
};

struct Node {
  std::string name, op_type, domain;  // domain "" is ai.onnx
  std::vector<Value*> inputs;         // nullptr: optional input left out ("")
  std::vector<Value*> outputs;        // nullptr: optional output left out
  std::vector<NamedAttribute> attrs;  // in file order, so export reproduces it
  std::string doc_string;
  /// Names of the user's original nodes this node replaced (fusion), for profiler attribution.
  std::vector<std::string> fused_from;

  const Attribute* find_attr(const std::string& n) const;
  bool has_attr(const std::string& n) const { return find_attr(n) != nullptr; }
  void set_attr(const std::string& n, AttrValue v);
  int64_t attr_int(const std::string& n, int64_t def) const;
  float attr_float(const std::string& n, float def) const;
  std::string attr_string(const std::string& n, const std::string& def) const;
  std::vector<int64_t> attr_ints(const std::string& n, std::vector<int64_t> def = {}) const;
  std::vector<float> attr_floats(const std::string& n, std::vector<float> def = {}) const;
  const Tensor* attr_tensor(const std::string& n) const;
  /// Input i if present, else nullptr (handles both "left out" and "beyond the list").
  Value* input(size_t i) const { return i < inputs.size() ? inputs[i] : nullptr; }
  size_t num_present_inputs() const;
  /// " (node 'name', op Type)" for error messages.
  std::string ref() const;
};

struct ModelMeta {
  int64_t ir_version = 8;
  std::string producer_name, producer_version, domain, doc_string;
  int64_t model_version = 0;
  std::vector<std::pair<std::string, std::string>> props;
  bool external_data = false;  // the file kept some tensors in external data (optimize does too)
  int64_t external_bytes = 0;  // how many bytes of tensor data those external files held
};

/// A model's main graph plus what the ONNX file says about it. Owns its Values and Nodes.
class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  /// Deep copy (nodes, values, shared initializer data).
  std::unique_ptr<Graph> clone() const;

  std::string name, doc_string;
  ModelMeta meta;
  std::map<std::string, int64_t> opsets;  // domain -> imported version; "" is ai.onnx
  std::vector<Value*> inputs, outputs;

  /// Opset version imported for a domain ("ai.onnx" and "" are the same), 0 if not imported.
  int64_t opset(const std::string& domain) const;

  Value* find_value(const std::string& name) const;
  /// New value with a unique name; `name` is a preferred stem.
  Value* add_value(const std::string& name);
  /// New value with exactly this name; BadInput if it exists.
  Value* add_named_value(const std::string& name);
  Value* add_initializer(const std::string& name, Tensor t);
  std::vector<Value*> initializers() const;  // in creation order
  std::vector<Value*> values() const;

  /// Appends a node and wires producers/consumers. Inputs may contain nullptr.
  Node* add_node(const std::string& op_type, std::vector<Value*> inputs, std::vector<Value*> outputs,
                 const std::string& name = "", const std::string& domain = "");
  void set_input(Node* n, size_t i, Value* v);
  /// n's output i is now v: the value it wrote there loses its producer, and v leaves the node
  /// that wrote it before (that node's output slot is then empty).
  void set_output(Node* n, size_t i, Value* v);
  /// Removes a node (its outputs keep existing but lose their producer).
  void remove_node(Node* n);
  /// Every use of `from` (node inputs and graph outputs) now reads `to`.
  void replace_all_uses(Value* from, Value* to);
  /// Drops values that nothing produces, consumes or lists (after passes remove nodes).
  void remove_unused_values();

  const std::vector<std::unique_ptr<Node>>& nodes() const { return nodes_; }
  std::vector<Node*> node_list() const;
  /// Reorders nodes topologically (stable for nodes already in order). BadInput naming a node
  /// on a cycle if there is one.
  void topo_sort();
  std::string unique_node_name(const std::string& stem);

 private:
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<std::unique_ptr<Value>> values_;
  std::unordered_map<std::string, Value*> by_name_;
  std::unordered_map<std::string, int> node_names_;
  int64_t next_id_ = 0;
};

/// Structural, bit-exact comparison (nodes in order, attributes, value types, initializer bytes,
/// metadata); returns an empty string when equal, else the first difference.
std::string graph_difference(const Graph& a, const Graph& b);

/// Checks the graph is well formed: every input defined, no cycles, outputs produced, names
/// unique. Throws BadInput naming the node.
void validate_graph(Graph& g);

}  // namespace fusec
