#include "backend/host_tail.h"

#include <string>
#include <unordered_map>
#include <vector>

namespace fusec {

TailSplit find_host_tail(const Graph& g) {
  TailSplit t;
  t.in_tail.assign(g.nodes().size(), false);
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const Node& n = *g.nodes()[i];
    bool in = false;
    for (Value* v : n.inputs) in = in || (v && v->producer && t.has(v->producer));
    for (Value* v : n.outputs) {
      const bool used = v && (v->is_graph_output || !v->consumers.empty());
      if (!used || (v->type.dtype != DType::Undefined && v->type.shape && is_static(*v->type.shape))) continue;
      if (t.why.empty()) t.why = "the shape of '" + v->name + "' depends on its data" + n.ref();
      in = true;
    }
    if (!in) continue;
    t.in_tail[i] = true;
    t.nodes.insert(&n);
  }
  return t;
}

TailGraph make_tail_graph(const Graph& g, const std::vector<bool>& in_tail) {
  TailGraph t;
  t.graph = std::make_unique<Graph>();
  Graph& tg = *t.graph;
  tg.name = g.name + " (host tail)";
  tg.meta = g.meta;
  tg.opsets = g.opsets;
  std::unordered_map<const Value*, Value*> mapped;
  auto read = [&](Value* v) -> Value* {
    if (auto it = mapped.find(v); it != mapped.end()) return it->second;
    Value* c = tg.add_named_value(v->name);
    c->type = v->type;
    mapped[v] = c;
    if (v->is_initializer()) {
      c->initializer = v->initializer;
    } else {
      c->is_graph_input = true;
      tg.inputs.push_back(c);
      t.reads.push_back(v);
    }
    return c;
  };
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    if (!in_tail[i]) continue;
    const Node& n = *g.nodes()[i];
    std::vector<Value*> ins, outs;
    for (Value* v : n.inputs) ins.push_back(v ? read(v) : nullptr);
    for (Value* v : n.outputs) {
      if (!v) {
        outs.push_back(nullptr);
        continue;
      }
      Value* c = tg.add_named_value(v->name);
      c->type.dtype = v->type.dtype;  // the shapes are the CPU reference's to find, run by run
      mapped[v] = c;
      outs.push_back(c);
    }
    Node* c = tg.add_node(n.op_type, ins, outs, n.name, n.domain);
    c->attrs = n.attrs;
    c->doc_string = n.doc_string;
    c->fused_from = n.fused_from;
  }
  t.output_of.assign(g.outputs.size(), -1);
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    Value* v = g.outputs[i];
    if (!v->producer) continue;
    auto it = mapped.find(v);
    // Only a value the tail computes: one it merely reads comes from the GPU part.
    if (it == mapped.end() || it->second->is_graph_input || it->second->is_initializer()) continue;
    it->second->is_graph_output = true;
    t.output_of[i] = static_cast<int>(tg.outputs.size());
    tg.outputs.push_back(it->second);
  }
  return t;
}

std::unique_ptr<Graph> graph_before_tail(const Graph& g, const std::vector<bool>& in_tail, const TailGraph& tail) {
  auto before = g.clone();
  std::vector<Node*> drop;
  for (size_t i = 0; i < g.nodes().size(); ++i)
    if (in_tail[i]) drop.push_back(before->nodes()[i].get());
  for (Node* n : drop) before->remove_node(n);
  before->remove_unused_values();
  std::vector<std::string> names;
  for (size_t i = 0; i < g.outputs.size(); ++i)
    if (tail.output_of[i] < 0) names.push_back(g.outputs[i]->name);
  for (Value* v : tail.reads)
    if (!v->is_graph_input) names.push_back(v->name);
  before->outputs.clear();
  for (Value* v : before->values()) v->is_graph_output = false;
  for (const std::string& n : names) {
    Value* v = before->find_value(n);
    v->is_graph_output = true;
    before->outputs.push_back(v);
  }
  return before;
}

}  // namespace fusec
