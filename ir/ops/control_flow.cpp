// If and Loop (every opset through 21): ops whose work is a graph (ir/subgraph.h). Inference infers
// the body from the node's input types; the CPU kernels (backend/cpu/kernels/control_flow.cpp) run
// the bodies on the reference backend and hand back whatever they produced, so a branch or an
// iteration may produce any shape (Writes::Itself: the executor does not size their outputs).
#include <optional>

#include "ir/error.h"
#include "ir/op_schema.h"
#include "ir/ops/all_ops.h"
#include "ir/shape_inference.h"
#include "ir/subgraph.h"

namespace fusec {

namespace {

/// The body's output types given its inputs' (the op's own, then the captured values). An input
/// whose type is unknown keeps what the body declares; the body's inference errors are the node's.
std::vector<TypeInfo> body_output_types(const InferContext& c, const Graph& body, const std::vector<TypeInfo>& inputs) {
  auto b = body.clone();
  for (size_t i = 0; i < b->inputs.size() && i < inputs.size(); ++i)
    if (inputs[i].dtype != DType::Undefined) b->inputs[i]->type = inputs[i];
  try {
    infer_shapes(*b, {});
  } catch (const Error& e) {
    if (e.cause() == ErrorCause::Unsupported) c.unsupported(std::string("in its body: ") + e.what());
    c.fail(std::string("in its body: ") + e.what());
  }
  std::vector<TypeInfo> out;
  for (const Value* v : b->outputs) out.push_back(v->type);
  return out;
}

/// What two types have in common: the dtype (which must agree where both are known) and, where
/// the ranks agree, the dims that agree.
TypeInfo merge(const InferContext& c, const TypeInfo& a, const TypeInfo& b, const std::string& what) {
  if (a.dtype != DType::Undefined && b.dtype != DType::Undefined && a.dtype != b.dtype)
    c.fail(what + " is " + dtype_name(a.dtype) + " one way and " + dtype_name(b.dtype) + " the other");
  TypeInfo m;
  m.dtype = a.dtype != DType::Undefined ? a.dtype : b.dtype;
  if (a.shape && b.shape && a.shape->size() == b.shape->size()) {
    Shape s(a.shape->size());
    for (size_t i = 0; i < s.size(); ++i)
      if ((*a.shape)[i] == (*b.shape)[i]) s[i] = (*a.shape)[i];
    m.shape = std::move(s);
  }
  return m;
}

/// The captured values' types: the node's inputs after the declared ones.
std::vector<TypeInfo> captured_types(const InferContext& c) {
  std::vector<TypeInfo> t;
  for (size_t i = declared_input_count(c.node()); i < c.num_inputs(); ++i)
    t.push_back(c.has_input(i) ? c.input_type(i) : TypeInfo{});
  return t;
}

const Graph& body_of(const InferContext& c, const std::string& attr) {
  const SubGraph* sg = subgraph_attr(c.node(), attr);
  if (!sg || !sg->body) c.unsupported("its " + attr + " was not imported" + (sg ? ": " + sg->why_not : ""));
  return *sg->body;
}

void infer_if(InferContext& c) {
  const std::vector<TypeInfo> caps = captured_types(c);
  const Graph& then_b = body_of(c, "then_branch");
  const Graph& else_b = body_of(c, "else_branch");
  for (const Graph* b : {&then_b, &else_b}) {
    if (b->inputs.size() != caps.size())
      c.fail("a branch declares " + std::to_string(b->inputs.size() - caps.size()) +
             " inputs; If's branches take none");
    if (b->outputs.size() != c.num_outputs())
      c.fail("a branch has " + std::to_string(b->outputs.size()) + " outputs, the node " +
             std::to_string(c.num_outputs()));
  }
  // A known condition (a constant, or any input at run time) picks one branch.
  if (const Tensor* cond = c.input_value(0); cond && cond->numel() == 1) {
    const auto t = body_output_types(c, cond->as_double(0) != 0 ? then_b : else_b, caps);
    for (size_t i = 0; i < t.size(); ++i) c.set_output(i, t[i].dtype, t[i].shape);
    return;
  }
  const auto t = body_output_types(c, then_b, caps), e = body_output_types(c, else_b, caps);
  for (size_t i = 0; i < t.size(); ++i) {
    const TypeInfo m = merge(c, t[i], e[i], "output " + std::to_string(i));
    c.set_output(i, m.dtype, m.shape);
  }
}

/// Whether the body's condition output is its condition input, or a constant true: then only the
/// trip count ends the loop.
bool condition_stays_true(const Graph& body) {
  const Value* out = body.outputs[0];
  if (out == body.inputs[1]) return true;
  if (out->producer && out->producer->op_type == "Identity" && out->producer->input(0) == body.inputs[1]) return true;
  return out->is_initializer() && out->initializer->numel() == 1 && out->initializer->as_double(0) != 0;
}

void infer_loop(InferContext& c) {
  const Graph& body = body_of(c, "body");
  const size_t declared = declared_input_count(c.node());
  const size_t carried = declared < 2 ? 0 : declared - 2;
  const size_t captured = c.num_inputs() - declared;
  if (body.inputs.size() != 2 + carried + captured || body.outputs.size() < 1 + carried)
    c.fail("its body takes " + std::to_string(body.inputs.size() - captured) + " inputs and gives " +
           std::to_string(body.outputs.size()) + " outputs, where " + std::to_string(carried) +
           " loop-carried values need " + std::to_string(2 + carried) + " and at least " + std::to_string(1 + carried));
  const size_t scans = body.outputs.size() - 1 - carried;
  if (c.num_outputs() != carried + scans)
    c.fail("it has " + std::to_string(c.num_outputs()) + " outputs; its body makes " + std::to_string(carried) +
           " loop-carried values and " + std::to_string(scans) + " scan outputs");
  std::vector<TypeInfo> in = {{DType::Int64, Shape{}}, {DType::Bool, Shape{}}};
  for (size_t i = 0; i < carried; ++i) in.push_back(c.has_input(2 + i) ? c.input_type(2 + i) : TypeInfo{});
  for (const TypeInfo& t : captured_types(c)) in.push_back(t);
  const auto out = body_output_types(c, body, in);
  for (size_t i = 0; i < carried; ++i) {
    const TypeInfo m = merge(c, in[2 + i], out[1 + i], "loop-carried value " + std::to_string(i));
    c.set_output(i, m.dtype, m.shape);
  }
  // Scan outputs stack one slice per iteration: as many as the trip count, when only it ends the
  // loop and it is known.
  Dim trips;
  const Tensor* m = c.has_input(0) ? c.input_value(0) : nullptr;
  const Tensor* cond = c.has_input(1) ? c.input_value(1) : nullptr;
  if (m && m->numel() == 1 && (!c.has_input(1) || (cond && cond->numel() == 1 && cond->as_double(0) != 0)) &&
      condition_stays_true(body))
    trips = Dim(std::max<int64_t>(0, m->as_int64(0)));
  for (size_t k = 0; k < scans; ++k) {
    const TypeInfo& t = out[1 + carried + k];
    std::optional<Shape> s;
    if (t.shape) {
      s = Shape{trips};
      s->insert(s->end(), t.shape->begin(), t.shape->end());
    }
    c.set_output(carried + k, t.dtype, s);
  }
}

}  // namespace

void register_control_flow_schemas(OpRegistry& r) {
  r.add("If")
      .since(1)
      .io(1, 1, 1, 1 << 20)
      .required_attr("then_branch", AttrKind::Graph)
      .required_attr("else_branch", AttrKind::Graph)
      .set_infer(infer_if)
      .set_cost(cost_data_movement);
  // M and cond may each be left out ("").
  r.add("Loop")
      .since(1)
      .io(0, 1 << 20, 1, 1 << 20)
      .required_attr("body", AttrKind::Graph)
      .set_infer(infer_loop)
      .set_cost(cost_data_movement);
}

}  // namespace fusec
