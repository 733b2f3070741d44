#include "ir/op_schema.h"

#include "ir/error.h"
#include "ir/ops/all_ops.h"
#include "ir/subgraph.h"

namespace fusec {

// ---- NodeAttrs ----

const AttrValue* NodeAttrs::lookup(const std::string& name, AttrKind kind) const {
  const Attribute* a = node_.find_attr(name);
  if (a) {
    // Exporters write ints where floats are meant (alpha=1); accept that one widening.
    if (kind == AttrKind::Float && std::holds_alternative<int64_t>(a->value)) return &a->value;
    if (a->value.index() != static_cast<size_t>(kind))
      fail("attribute '" + name + "' has kind " + attr_kind_name(a->value));
    return &a->value;
  }
  const AttrSpec* spec = schema_.find_attr(name);
  if (!spec) internal_error("op " + schema_.op_type + " reads undeclared attribute '" + name + "'");
  if (spec->default_value) return &*spec->default_value;
  fail("missing attribute '" + name + "'");
}

int64_t NodeAttrs::attr_int(const std::string& n) const { return std::get<int64_t>(*lookup(n, AttrKind::Int)); }
float NodeAttrs::attr_float(const std::string& n) const {
  const AttrValue* v = lookup(n, AttrKind::Float);
  if (auto* i = std::get_if<int64_t>(v)) return static_cast<float>(*i);
  return std::get<float>(*v);
}
std::string NodeAttrs::attr_string(const std::string& n) const {
  return std::get<std::string>(*lookup(n, AttrKind::String));
}
std::vector<int64_t> NodeAttrs::attr_ints(const std::string& n) const {
  return std::get<std::vector<int64_t>>(*lookup(n, AttrKind::Ints));
}
std::vector<float> NodeAttrs::attr_floats(const std::string& n) const {
  return std::get<std::vector<float>>(*lookup(n, AttrKind::Floats));
}
const Tensor* NodeAttrs::attr_tensor(const std::string& n) const {
  return &std::get<Tensor>(*lookup(n, AttrKind::Tensor));
}
void NodeAttrs::fail(const std::string& what) const { bad_input_at(what, node_.ref()); }
void NodeAttrs::unsupported(const std::string& what) const {
  bad_input_at(what, node_.ref(), ErrorCause::Unsupported);
}

// ---- InferContext ----

InferContext::InferContext(const Node& node, const OpSchema& schema, int64_t opset,
                           std::vector<const TypeInfo*> input_types, std::vector<const Tensor*> input_values)
    : NodeAttrs(node, schema),
      outputs(node.outputs.size()),
      opset_(opset),
      input_types_(std::move(input_types)),
      input_values_(std::move(input_values)) {}

const TypeInfo& InferContext::input_type(size_t i) const {
  if (!has_input(i)) fail("input " + std::to_string(i) + " is required");
  return *input_types_[i];
}

const Tensor* InferContext::input_value(size_t i) const {
  return i < input_values_.size() ? input_values_[i] : nullptr;
}

size_t InferContext::input_rank(size_t i) const {
  const auto& s = input_shape(i);
  if (!s) fail("the rank of input " + std::to_string(i) + " is unknown");
  return s->size();
}

void InferContext::set_output(size_t i, DType dtype, std::optional<Shape> shape) {
  if (i >= outputs.size()) return;  // optional output left out
  outputs[i].dtype = dtype;
  outputs[i].shape = std::move(shape);
}

void InferContext::require_dtype(size_t i, std::initializer_list<DType> allowed) const {
  DType t = input_dtype(i);
  for (DType a : allowed)
    if (a == t) return;
  unsupported(std::string("input ") + std::to_string(i) + " has unsupported type " + dtype_name(t));
}

void InferContext::require_float(size_t i) const {
  if (!is_float(input_dtype(i)))
    fail(std::string("input ") + std::to_string(i) + " must be a float type, not " + dtype_name(input_dtype(i)));
}

// ---- CostContext ----

static double numel_of(const std::vector<int64_t>& d) {
  double n = 1;
  for (auto x : d) n *= static_cast<double>(x);
  return n;
}
double CostContext::in_numel(size_t i) const { return has_input(i) ? numel_of(in_dims[i]) : 0; }
double CostContext::out_numel(size_t i) const { return i < out_dims.size() ? numel_of(out_dims[i]) : 0; }
double CostContext::in_bytes(size_t i) const { return has_input(i) ? in_numel(i) * dtype_size(in_dtypes[i]) : 0; }
double CostContext::out_bytes(size_t i) const {
  return i < out_dims.size() ? out_numel(i) * dtype_size(out_dtypes[i]) : 0;
}
double CostContext::all_in_bytes() const {
  double b = 0;
  for (size_t i = 0; i < in_dims.size(); ++i) b += in_bytes(i);
  return b;
}
double CostContext::all_out_bytes() const {
  double b = 0;
  for (size_t i = 0; i < out_dims.size(); ++i) b += out_bytes(i);
  return b;
}

Cost cost_elementwise(const CostContext& c, double flops_per_element) {
  return {c.out_numel(0) * flops_per_element, c.all_in_bytes(), c.all_out_bytes()};
}
Cost cost_data_movement(const CostContext& c) { return {0, c.all_in_bytes(), c.all_out_bytes()}; }
Cost cost_free(const CostContext&) { return {}; }

// ---- OpSchema / OpRegistry ----

const AttrSpec* OpSchema::find_attr(const std::string& name) const {
  for (const auto& a : attrs)
    if (a.name == name) return &a;
  return nullptr;
}

int64_t min_ir_version_for_opset(int64_t opset) {
  // onnx.helper.VERSION_TABLE of the pinned onnx release: the first IR version of each ai.onnx opset
  // (tests/models/check_ir_versions.py checks this against the installed onnx).
  static constexpr std::pair<int64_t, int64_t> kFirstIr[] = {{9, 4},   {10, 5},  {11, 6},  {12, 7},  {15, 8}, {19, 9},
                                                             {21, 10}, {23, 11}, {24, 12}, {25, 13}, {28, 14}};
  int64_t ir = 3;
  for (const auto& [first_opset, version] : kFirstIr)
    if (opset >= first_opset) ir = version;
  return ir;
}

int64_t newest_supported_opset(const std::string& domain) {
  const std::string d = canonical_domain(domain);
  if (d.empty()) return kNewestOnnxOpset;
  if (d == "ai.fusec") return kNewestFusecOpset;
  return 0;
}

OpSchema& OpRegistry::add(const std::string& op_type, const std::string& domain) {
  auto& list = schemas_[{canonical_domain(domain), op_type}];
  list.emplace_back();
  list.back().op_type = op_type;
  list.back().domain = canonical_domain(domain);
  return list.back();
}

const OpSchema* OpRegistry::find(const std::string& domain, const std::string& op_type, int64_t opset) const {
  auto it = schemas_.find({canonical_domain(domain), op_type});
  if (it == schemas_.end()) return nullptr;
  for (const auto& s : it->second)
    if (opset >= s.min_opset && opset <= s.max_opset) return &s;
  return nullptr;
}

bool OpRegistry::knows(const std::string& domain, const std::string& op_type) const {
  return schemas_.count({canonical_domain(domain), op_type}) > 0;
}

std::vector<const OpSchema*> OpRegistry::all() const {
  std::vector<const OpSchema*> out;
  for (const auto& [k, list] : schemas_)
    for (const auto& s : list) out.push_back(&s);
  return out;
}

const OpRegistry& OpRegistry::global() {
  static const OpRegistry reg = [] {
    OpRegistry r;
    register_all_op_schemas(r);
    return r;
  }();
  return reg;
}

void check_node_against_schema(const Node& node, const OpSchema& s) {
  // Trailing left-out inputs do not count, nor the outer values a subgraph reads.
  int n_in = static_cast<int>(declared_input_count(node));
  while (n_in > 0 && !node.inputs[n_in - 1]) --n_in;
  if (n_in < s.min_inputs || n_in > s.max_inputs)
    bad_input_at("expected " + std::to_string(s.min_inputs) +
              (s.max_inputs != s.min_inputs ? ".." + std::to_string(s.max_inputs) : "") + " inputs, got " +
              std::to_string(n_in), node.ref());
  for (int i = 0; i < s.min_inputs && i < n_in; ++i)
    if (!node.inputs[i]) bad_input_at("required input " + std::to_string(i) + " is empty", node.ref());
  int n_out = static_cast<int>(node.outputs.size());
  if (n_out < s.min_outputs || n_out > s.max_outputs)
    bad_input_at("expected " + std::to_string(s.min_outputs) + ".." + std::to_string(s.max_outputs) + " outputs, got " +
              std::to_string(n_out), node.ref());
  for (const auto& a : node.attrs) {
    const AttrSpec* spec = s.find_attr(a.name);
    if (!spec) bad_input_at("unknown attribute '" + a.name + "'", node.ref());
    bool widened = spec->kind == AttrKind::Float && std::holds_alternative<int64_t>(a.attr.value);
    if (a.attr.value.index() != static_cast<size_t>(spec->kind) && !widened)
      bad_input_at("attribute '" + a.name + "' has kind " + attr_kind_name(a.attr.value), node.ref());
  }
  for (const auto& spec : s.attrs)
    if (spec.required && !node.has_attr(spec.name))
      bad_input_at("missing required attribute '" + spec.name + "'", node.ref());
}

std::string unsupported_reason(const Graph& g, const Node& n) {
  const bool control_flow = n.domain.empty() && (n.op_type == "If" || n.op_type == "Loop");
  for (const auto& a : n.attrs) {
    if (a.attr.value.index() == static_cast<size_t>(AttrKind::Graphs) ||
        (!control_flow && a.attr.value.index() == static_cast<size_t>(AttrKind::Graph)))
      return "ops with subgraphs other than If and Loop are not supported";
    const auto* sg = std::get_if<SubGraph>(&a.attr.value);
    if (!sg) continue;
    if (!sg->body) return sg->why_not.empty() ? "its " + a.name + " was not imported" : sg->why_not;
    for (const auto& inner : sg->body->nodes())
      if (std::string why = unsupported_reason(*sg->body, *inner); !why.empty())
        return "its " + a.name + " has node '" + inner->name + "' (op " + inner->op_type + "): " + why;
  }
  const auto& reg = OpRegistry::global();
  int64_t opset = g.opset(n.domain);
  if (opset == 0) return "domain '" + n.domain + "' is not imported by the model";
  if (reg.find(n.domain, n.op_type, opset)) return "";
  if (reg.knows(n.domain, n.op_type)) return "opset " + std::to_string(opset) + " of this op is not supported";
  return "unsupported op";
}

// ---- shape helpers ----

Shape broadcast_shapes(const Shape& a, const Shape& b, const NodeAttrs& where) {
  size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    const Dim* x = i < r - a.size() ? nullptr : &a[i - (r - a.size())];
    const Dim* y = i < r - b.size() ? nullptr : &b[i - (r - b.size())];
    if (!x) {
      out[i] = *y;
      continue;
    }
    if (!y) {
      out[i] = *x;
      continue;
    }
    if (x->is_static() && y->is_static()) {
      if (x->value == y->value || y->value == 1)
        out[i] = *x;
      else if (x->value == 1)
        out[i] = *y;
      else
        where.fail("cannot broadcast shapes " + shape_str(a) + " and " + shape_str(b));
    } else if (x->is_static() && x->value == 1) {
      out[i] = *y;
    } else if (y->is_static() && y->value == 1) {
      out[i] = *x;
    } else if (x->is_static()) {
      out[i] = *x;  // the symbolic side must be equal (or 1, which the static one then wins)
    } else if (y->is_static()) {
      out[i] = *y;
    } else if (*x == *y) {
      out[i] = *x;
    } else {
      out[i] = Dim();  // two different symbols: unknown until bound
    }
  }
  return out;
}

int64_t normalize_axis(int64_t axis, int64_t rank, const NodeAttrs& where) {
  if (axis < -rank || axis >= rank)
    where.fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return axis < 0 ? axis + rank : axis;
}

std::optional<Shape> broadcast_all_inputs(const InferContext& ctx) {
  std::optional<Shape> out;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) continue;
    const auto& s = ctx.input_shape(i);
    if (!s) return std::nullopt;
    out = out ? broadcast_shapes(*out, *s, ctx) : *s;
  }
  return out;
}

}  // namespace fusec
