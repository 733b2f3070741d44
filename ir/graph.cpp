#include "ir/graph.h"

#include <algorithm>
#include <unordered_set>

#include "ir/error.h"
#include "ir/op_key.h"

namespace fusec {

// ---- Node ----

const Attribute* Node::find_attr(const std::string& n) const {
  for (const auto& a : attrs)
    if (a.name == n) return &a.attr;
  return nullptr;
}

void Node::set_attr(const std::string& n, AttrValue v) {
  for (auto& a : attrs)
    if (a.name == n) {
      a.attr.value = std::move(v);
      return;
    }
  attrs.push_back({n, Attribute{std::move(v), {}, {}}});
}

namespace {
template <typename T>
const T* get_typed(const Node& node, const std::string& n, const char* want) {
  const Attribute* a = node.find_attr(n);
  if (!a) return nullptr;
  const T* v = std::get_if<T>(&a->value);
  if (!v) bad_input_at("attribute '" + n + "' should be " + want + " but is " + attr_kind_name(a->value), node.ref());
  return v;
}
}  // namespace

int64_t Node::attr_int(const std::string& n, int64_t def) const {
  const int64_t* v = get_typed<int64_t>(*this, n, "int");
  return v ? *v : def;
}
float Node::attr_float(const std::string& n, float def) const {
  const Attribute* a = find_attr(n);
  if (a)
    if (auto* i = std::get_if<int64_t>(&a->value)) return static_cast<float>(*i);  // lenient
  const float* v = get_typed<float>(*this, n, "float");
  return v ? *v : def;
}
std::string Node::attr_string(const std::string& n, const std::string& def) const {
  const std::string* v = get_typed<std::string>(*this, n, "string");
  return v ? *v : def;
}
std::vector<int64_t> Node::attr_ints(const std::string& n, std::vector<int64_t> def) const {
  const auto* v = get_typed<std::vector<int64_t>>(*this, n, "ints");
  return v ? *v : def;
}
std::vector<float> Node::attr_floats(const std::string& n, std::vector<float> def) const {
  const auto* v = get_typed<std::vector<float>>(*this, n, "floats");
  return v ? *v : def;
}
const Tensor* Node::attr_tensor(const std::string& n) const { return get_typed<Tensor>(*this, n, "tensor"); }
size_t Node::num_present_inputs() const {
  size_t c = 0;
  for (auto* v : inputs) c += v != nullptr;
  return c;
}
std::string Node::ref() const { return node_ref(name, op_type); }

// ---- Graph ----

int64_t Graph::opset(const std::string& domain) const {
  const std::string d = canonical_domain(domain);
  auto it = opsets.find(d);
  if (it == opsets.end() && d.empty()) it = opsets.find("ai.onnx");
  return it == opsets.end() ? 0 : it->second;
}

Value* Graph::find_value(const std::string& n) const {
  auto it = by_name_.find(n);
  return it == by_name_.end() ? nullptr : it->second;
}

Value* Graph::add_named_value(const std::string& n) {
  if (by_name_.count(n)) bad_input("duplicate value name '" + n + "'");
  values_.push_back(std::make_unique<Value>());
  Value* v = values_.back().get();
  v->name = n;
  by_name_[n] = v;
  return v;
}

Value* Graph::add_value(const std::string& stem) {
  std::string n = stem.empty() ? "v" : stem;
  while (by_name_.count(n)) n = stem + "_" + std::to_string(next_id_++);
  return add_named_value(n);
}

Value* Graph::add_initializer(const std::string& n, Tensor t) {
  Value* v = add_value(n);
  v->type.dtype = t.dtype();
  v->type.shape = shape_of(t.dims());
  v->initializer = std::make_shared<const Tensor>(std::move(t));
  return v;
}

std::vector<Value*> Graph::initializers() const {
  std::vector<Value*> out;
  for (const auto& v : values_)
    if (v->is_initializer()) out.push_back(v.get());
  return out;
}

std::vector<Value*> Graph::values() const {
  std::vector<Value*> out;
  for (const auto& v : values_) out.push_back(v.get());
  return out;
}

std::string Graph::unique_node_name(const std::string& stem) {
  std::string s = stem.empty() ? "node" : stem;
  int& count = node_names_[s];
  if (count++ == 0) return s;
  for (;;) {
    std::string cand = s + "_" + std::to_string(count++);
    if (!node_names_.count(cand)) {
      node_names_[cand] = 1;
      return cand;
    }
  }
}

Node* Graph::add_node(const std::string& op_type, std::vector<Value*> ins, std::vector<Value*> outs,
                      const std::string& name, const std::string& domain) {
  nodes_.push_back(std::make_unique<Node>());
  Node* n = nodes_.back().get();
  n->op_type = op_type;
  n->domain = domain;
  if (name.empty()) {
    n->name = unique_node_name(op_type);
  } else {
    n->name = name;
    node_names_[name]++;
  }
  n->inputs = std::move(ins);
  n->outputs = std::move(outs);
  for (auto* v : n->inputs)
    if (v) v->consumers.push_back(n);
  for (size_t i = 0; i < n->outputs.size(); ++i) {
    Value* v = n->outputs[i];
    if (!v) continue;
    if (v->producer)
      bad_input_at("value '" + v->name + "' is produced twice: by '" + v->producer->name + "' and", n->ref());
    if (v->is_graph_input) bad_input_at("graph input '" + v->name + "' is also produced by", n->ref());
    if (v->is_initializer()) bad_input_at("initializer '" + v->name + "' is also produced by", n->ref());
    v->producer = n;
    v->producer_output = static_cast<int>(i);
  }
  return n;
}

static void erase_one(std::vector<Node*>& v, Node* n) {
  auto it = std::find(v.begin(), v.end(), n);
  if (it != v.end()) v.erase(it);
}

void Graph::set_input(Node* n, size_t i, Value* v) {
  if (i >= n->inputs.size()) n->inputs.resize(i + 1, nullptr);
  if (n->inputs[i]) erase_one(n->inputs[i]->consumers, n);
  n->inputs[i] = v;
  if (v) v->consumers.push_back(n);
}

void Graph::set_output(Node* n, size_t i, Value* v) {
  if (i >= n->outputs.size()) n->outputs.resize(i + 1, nullptr);
  if (Value* old = n->outputs[i]; old && old != v && old->producer == n) {
    old->producer = nullptr;
    old->producer_output = -1;
  }
  if (v && v->producer)
    for (auto*& o : v->producer->outputs)
      if (o == v) o = nullptr;
  n->outputs[i] = v;
  if (v) {
    v->producer = n;
    v->producer_output = static_cast<int>(i);
  }
}

void Graph::remove_node(Node* n) {
  for (auto* v : n->inputs)
    if (v) erase_one(v->consumers, n);
  for (auto* v : n->outputs)
    if (v && v->producer == n) {
      v->producer = nullptr;
      v->producer_output = -1;
    }
  auto it = std::find_if(nodes_.begin(), nodes_.end(), [&](auto& p) { return p.get() == n; });
  if (it != nodes_.end()) nodes_.erase(it);
}

void Graph::replace_all_uses(Value* from, Value* to) {
  if (from == to) return;
  for (auto& n : nodes_)
    for (auto*& in : n->inputs)
      if (in == from) {
        in = to;
        to->consumers.push_back(n.get());
      }
  from->consumers.clear();
  for (auto*& o : outputs)
    if (o == from) {
      o = to;
      to->is_graph_output = true;
      from->is_graph_output = false;
    }
}

void Graph::remove_unused_values() {
  std::vector<std::unique_ptr<Value>> keep;
  for (auto& v : values_) {
    bool used = v->producer || !v->consumers.empty() || v->is_graph_input || v->is_graph_output;
    if (used) {
      keep.push_back(std::move(v));
    } else {
      by_name_.erase(v->name);
    }
  }
  values_ = std::move(keep);
}

std::vector<Node*> Graph::node_list() const {
  std::vector<Node*> out;
  out.reserve(nodes_.size());
  for (auto& n : nodes_) out.push_back(n.get());
  return out;
}

void Graph::topo_sort() {
  // Kahn's algorithm keyed on current position, so an already ordered graph keeps its order.
  std::unordered_map<const Node*, size_t> pos;
  for (size_t i = 0; i < nodes_.size(); ++i) pos[nodes_[i].get()] = i;
  std::vector<int> pending(nodes_.size(), 0);
  for (size_t i = 0; i < nodes_.size(); ++i)
    for (auto* v : nodes_[i]->inputs)
      if (v && v->producer && pos.count(v->producer)) ++pending[i];
  std::vector<size_t> ready;
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (pending[i] == 0) ready.push_back(i);
  std::vector<size_t> order;
  order.reserve(nodes_.size());
  // A min-heap on the original index keeps the order stable.
  auto cmp = [](size_t a, size_t b) { return a > b; };
  std::make_heap(ready.begin(), ready.end(), cmp);
  while (!ready.empty()) {
    std::pop_heap(ready.begin(), ready.end(), cmp);
    size_t i = ready.back();
    ready.pop_back();
    order.push_back(i);
    for (auto* out : nodes_[i]->outputs) {
      if (!out) continue;
      for (Node* c : out->consumers) {
        size_t j = pos[c];
        if (--pending[j] == 0) {
          ready.push_back(j);
          std::push_heap(ready.begin(), ready.end(), cmp);
        }
      }
    }
  }
  if (order.size() != nodes_.size()) {
    for (size_t i = 0; i < nodes_.size(); ++i)
      if (pending[i] > 0) bad_input_at("the graph has a cycle through", nodes_[i]->ref());
  }
  std::vector<std::unique_ptr<Node>> sorted;
  sorted.reserve(nodes_.size());
  for (size_t i : order) sorted.push_back(std::move(nodes_[i]));
  nodes_ = std::move(sorted);
}

std::unique_ptr<Graph> Graph::clone() const {
  auto g = std::make_unique<Graph>();
  g->name = name;
  g->doc_string = doc_string;
  g->meta = meta;
  g->opsets = opsets;
  g->next_id_ = next_id_;
  g->node_names_ = node_names_;
  std::unordered_map<const Value*, Value*> vmap;
  for (const auto& v : values_) {
    Value* c = g->add_named_value(v->name);
    c->type = v->type;
    c->initializer = v->initializer;
    c->is_graph_input = v->is_graph_input;
    c->is_graph_output = v->is_graph_output;
    c->initializer_listed_as_input = v->initializer_listed_as_input;
    c->in_value_info = v->in_value_info;
    c->doc_string = v->doc_string;
    vmap[v.get()] = c;
  }
  auto map = [&](Value* v) { return v ? vmap.at(v) : nullptr; };
  for (const auto& n : nodes_) {
    std::vector<Value*> ins, outs;
    for (auto* v : n->inputs) ins.push_back(map(v));
    for (auto* v : n->outputs) outs.push_back(map(v));
    g->nodes_.push_back(std::make_unique<Node>());
    Node* c = g->nodes_.back().get();
    c->name = n->name;
    c->op_type = n->op_type;
    c->domain = n->domain;
    c->attrs = n->attrs;
    c->doc_string = n->doc_string;
    c->fused_from = n->fused_from;
    c->inputs = ins;
    c->outputs = outs;
    for (auto* v : ins)
      if (v) v->consumers.push_back(c);
    for (size_t i = 0; i < outs.size(); ++i)
      if (outs[i]) {
        outs[i]->producer = c;
        outs[i]->producer_output = static_cast<int>(i);
      }
  }
  for (auto* v : inputs) g->inputs.push_back(map(v));
  for (auto* v : outputs) g->outputs.push_back(map(v));
  return g;
}

// ---- comparison and validation ----

static std::string type_str(const TypeInfo& t) {
  return std::string(dtype_name(t.dtype)) + "[" + (t.shape ? shape_str(*t.shape) : "unranked") + "]";
}

std::string graph_difference(const Graph& a, const Graph& b) {
  if (a.name != b.name) return "graph name '" + a.name + "' vs '" + b.name + "'";
  if (a.opsets != b.opsets) return "opset imports differ";
  if (a.meta.ir_version != b.meta.ir_version || a.meta.producer_name != b.meta.producer_name ||
      a.meta.producer_version != b.meta.producer_version || a.meta.props != b.meta.props ||
      a.meta.model_version != b.meta.model_version || a.meta.domain != b.meta.domain ||
      a.meta.doc_string != b.meta.doc_string)
    return "model metadata differs";
  auto names = [](const std::vector<Value*>& vs) {
    std::vector<std::string> out;
    for (auto* v : vs) out.push_back(v ? v->name : "");
    return out;
  };
  if (names(a.inputs) != names(b.inputs)) return "graph inputs differ";
  if (names(a.outputs) != names(b.outputs)) return "graph outputs differ";
  for (auto* v : a.inputs) {
    Value* w = b.find_value(v->name);
    if (type_str(v->type) != type_str(w->type)) return "type of input '" + v->name + "' differs";
  }
  for (auto* v : a.outputs) {
    Value* w = b.find_value(v->name);
    if (type_str(v->type) != type_str(w->type)) return "type of output '" + v->name + "' differs";
  }
  auto ia = a.initializers(), ib = b.initializers();
  if (ia.size() != ib.size()) return "initializer count differs";
  for (auto* v : ia) {
    Value* w = b.find_value(v->name);
    if (!w || !w->is_initializer()) return "initializer '" + v->name + "' missing";
    if (!v->initializer->bytes_equal(*w->initializer)) return "initializer '" + v->name + "' data differs";
  }
  if (a.nodes().size() != b.nodes().size()) return "node count differs";
  for (size_t i = 0; i < a.nodes().size(); ++i) {
    const Node& x = *a.nodes()[i];
    const Node& y = *b.nodes()[i];
    if (x.name != y.name || x.op_type != y.op_type || x.domain != y.domain)
      return "node " + std::to_string(i) + " differs" + x.ref();
    if (names(x.inputs) != names(y.inputs) || names(x.outputs) != names(y.outputs))
      return "node edges differ" + x.ref();
    if (x.attrs.size() != y.attrs.size()) return "attribute count differs" + x.ref();
    for (size_t k = 0; k < x.attrs.size(); ++k)
      if (x.attrs[k].name != y.attrs[k].name || !attr_equal(x.attrs[k].attr.value, y.attrs[k].attr.value))
        return "attribute '" + x.attrs[k].name + "' differs" + x.ref();
  }
  return "";
}

void validate_graph(Graph& g) {
  std::unordered_set<std::string> node_names;
  for (const auto& n : g.nodes()) {
    for (size_t i = 0; i < n->inputs.size(); ++i) {
      Value* v = n->inputs[i];
      if (v && !v->producer && !v->is_graph_input && !v->is_initializer())
        bad_input_at("input '" + v->name + "' is not produced by any node, graph input or initializer", n->ref());
    }
  }
  g.topo_sort();
  std::unordered_set<std::string> out_names;
  for (auto* v : g.outputs) {
    if (!v->producer && !v->is_graph_input && !v->is_initializer())
      bad_input("graph output '" + v->name + "' is not produced by any node");
    if (!out_names.insert(v->name).second) bad_input("graph output '" + v->name + "' is listed twice");
  }
}

}  // namespace fusec
