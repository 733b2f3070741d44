// One node over constant inputs, with its outputs inferred from every input's value: what the
// tests of a kernel's contract with the executor (test_writes_every.cpp, test_self_sizing.cpp) run
// the kernel against.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/kernel.h"
#include "test_util.h"

namespace fusec::test {

struct NodeCase {
  std::string op;
  std::vector<Tensor> inputs;  // an empty Tensor (DType::Undefined) leaves that input out
  std::vector<NamedAttribute> attrs = {};
  size_t outputs = 1;
  std::string domain = "";
  int64_t opset = 17;
};

struct InferredNode {
  std::unique_ptr<Graph> graph;
  const Node* node = nullptr;
  const OpSchema* schema = nullptr;  // null (with a test failure added) when the op has none
  int64_t opset = 0;
  std::vector<const Tensor*> values;  // the inputs, null where left out
  std::vector<TypeInfo> outputs;      // as inference gives them
};

/// The case's graph (inputs as initializers) and its node's outputs as inference gives them.
inline InferredNode infer_node(const NodeCase& c) {
  InferredNode r;
  GraphBuilder b(c.opset);
  std::vector<Value*> ins;
  for (size_t i = 0; i < c.inputs.size(); ++i)
    ins.push_back(c.inputs[i].dtype() == DType::Undefined ? nullptr
                                                          : b.initializer("in" + std::to_string(i), c.inputs[i]));
  for (Value* v : b.node_n(c.op, ins, c.outputs, c.attrs, "node", c.domain)) b.output(v);
  r.graph = b.build();
  r.node = r.graph->nodes().front().get();
  r.opset = r.graph->opset(r.node->domain);
  r.schema = OpRegistry::global().find(r.node->domain, r.node->op_type, r.opset);
  if (!r.schema) {
    ADD_FAILURE() << "no schema for " << c.op;
    return r;
  }
  std::vector<TypeInfo> types(c.inputs.size());
  std::vector<const TypeInfo*> type_ptrs;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const bool given = c.inputs[i].dtype() != DType::Undefined;
    r.values.push_back(given ? &c.inputs[i] : nullptr);
    types[i] = {c.inputs[i].dtype(), shape_of(c.inputs[i].dims())};
    type_ptrs.push_back(given ? &types[i] : nullptr);
  }
  InferContext ictx(*r.node, *r.schema, r.opset, type_ptrs, r.values);
  r.schema->infer(ictx);
  r.outputs = ictx.outputs;
  return r;
}

}  // namespace fusec::test
