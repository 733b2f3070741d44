#include "ir/subgraph.h"

namespace fusec {

size_t captured_input_count(const Node& n) {
  // Every subgraph of a node captures the same list (the importer takes the union over them).
  for (const auto& a : n.attrs)
    if (auto* g = std::get_if<SubGraph>(&a.attr.value)) return g->captured.size();
  return 0;
}

size_t declared_input_count(const Node& n) { return n.inputs.size() - captured_input_count(n); }

const SubGraph* subgraph_attr(const Node& n, const std::string& name) {
  const Attribute* a = n.find_attr(name);
  return a ? std::get_if<SubGraph>(&a->value) : nullptr;
}

bool has_subgraph(const Node& n) {
  for (const auto& a : n.attrs)
    if (std::holds_alternative<SubGraph>(a.attr.value) || std::holds_alternative<std::vector<SubGraph>>(a.attr.value))
      return true;
  return false;
}

}  // namespace fusec
