// Builds small graphs in code, for tests and passes: inputs, initializers, nodes, outputs.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ir/graph.h"

namespace fusec {

class GraphBuilder {
 public:
  /// `opset` is the ai.onnx version the graph imports.
  explicit GraphBuilder(int64_t opset = 17);

  Value* input(const std::string& name, DType dtype, Shape shape);
  Value* initializer(const std::string& name, Tensor t);
  /// Adds a node with one output and returns that output.
  Value* node(const std::string& op_type, std::vector<Value*> inputs, std::vector<NamedAttribute> attrs = {},
              const std::string& name = "");
  /// Adds a node with `n_outputs` outputs.
  std::vector<Value*> node_n(const std::string& op_type, std::vector<Value*> inputs, size_t n_outputs,
                             std::vector<NamedAttribute> attrs = {}, const std::string& name = "",
                             const std::string& domain = "");
  void output(Value* v);
  Graph& graph() { return *g_; }
  /// Validates and hands over the graph (the builder is empty afterwards).
  std::unique_ptr<Graph> build();

 private:
  std::unique_ptr<Graph> g_;
};

/// Attribute shorthands for GraphBuilder: attr("axis", int64_t{1}), attr("perm", std::vector<int64_t>{...}).
inline NamedAttribute attr(std::string name, AttrValue v) { return {std::move(name), Attribute{std::move(v), {}, {}}}; }

}  // namespace fusec
