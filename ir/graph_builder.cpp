#include "ir/graph_builder.h"

namespace fusec {

GraphBuilder::GraphBuilder(int64_t opset) : g_(std::make_unique<Graph>()) {
  g_->opsets[""] = opset;
  g_->name = "test";
}

Value* GraphBuilder::input(const std::string& name, DType dtype, Shape shape) {
  Value* v = g_->add_named_value(name);
  v->type = {dtype, std::move(shape)};
  v->is_graph_input = true;
  g_->inputs.push_back(v);
  return v;
}

Value* GraphBuilder::initializer(const std::string& name, Tensor t) { return g_->add_initializer(name, std::move(t)); }

Value* GraphBuilder::node(const std::string& op_type, std::vector<Value*> inputs, std::vector<NamedAttribute> attrs,
                          const std::string& name) {
  return node_n(op_type, std::move(inputs), 1, std::move(attrs), name)[0];
}

std::vector<Value*> GraphBuilder::node_n(const std::string& op_type, std::vector<Value*> inputs, size_t n_outputs,
                                         std::vector<NamedAttribute> attrs, const std::string& name,
                                         const std::string& domain) {
  std::string node_name = name.empty() ? g_->unique_node_name(op_type) : name;
  std::vector<Value*> outs;
  for (size_t i = 0; i < n_outputs; ++i)
    outs.push_back(g_->add_value(node_name + (n_outputs == 1 ? "_out" : "_out" + std::to_string(i))));
  Node* n = g_->add_node(op_type, std::move(inputs), outs, node_name, domain);
  n->attrs = std::move(attrs);
  if (!domain.empty() && !g_->opsets.count(domain)) g_->opsets[domain] = 1;
  return outs;
}

void GraphBuilder::output(Value* v) {
  v->is_graph_output = true;
  g_->outputs.push_back(v);
}

std::unique_ptr<Graph> GraphBuilder::build() {
  validate_graph(*g_);
  auto out = std::move(g_);
  g_ = std::make_unique<Graph>();
  return out;
}

}  // namespace fusec
