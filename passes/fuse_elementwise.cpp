// fuse_elementwise: a connected region of elementwise float ops -> one ai.fusec FusedElementwise.
//
//    x[N,C]  b[C]                                  x[N,C]  b[C]
//       \    /                                        \    /
//        Add 'a'    0.5                          FusedElementwise 'e'
//        |   \      /                     =>             |        r0 = add i0 i1
//        |    Mul 'b'                                    y        r1 = mul r0 0.5
//        |     |                                                  r2 = erf r1
//        |    Erf 'c'   1                                         r3 = add r2 1
//        |     |       /                                          r4 = mul r0 r3
//        |    Add 'd'-'
//         \    /
//          Mul 'e'
//           |
//           y
//
//   y[n] = f(x[n], b[n mod C])  with f the region's expression, evaluated per broadcast element in
//   float32: one read of each input and one write of y instead of a round trip per op.
//
// A region is ≥ 2 connected ops from the opcode set (Add Sub Mul Div Pow Max Min Sum Mean Neg Abs
// Exp Log Sqrt Reciprocal Erf Tanh Sigmoid Relu LeakyRelu Clip HardSigmoid HardSwish Softplus Floor
// Ceil Gelu, and BatchNormalization in inference, which joins as x·s + t with s and t per channel:
// DenseNet's pre-activation BN -> ReLU after each concat, which no conv before it can take in), of
// one float type (float32/16, bfloat16), each producing the region's output shape.
// Every intermediate is read only inside the region and is not a graph output, so the region has
// one output: its last node's, whose name and Value the fused node takes. Regions grow backwards
// from each sink, so they are maximal. Scalar constants become program literals (unless one is
// needed for the output's rank); other constants stay inputs. Nodes whose inputs are all constant
// are left to constant folding. The pass runs last: it mops up what the specific fusions left.
#include "passes/fuse_elementwise.h"

#include <algorithm>
#include <cfloat>
#include <functional>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "ir/error.h"
#include "ir/op_schema.h"
#include "ir/ops/elementwise_program.h"
#include "passes/batchnorm_affine.h"
#include "passes/pattern.h"
#include "passes/rewrite.h"

namespace fusec {

namespace {

const char* kPass = "fuse_elementwise";
/// Regions stop growing here, so a program stays well below kEwMaxInstructions.
constexpr size_t kMaxRegionNodes = 256;

bool fusable_dtype(DType t) { return t == DType::Float32 || t == DType::Float16 || t == DType::BFloat16; }

const std::map<std::string, EwOp>& binary_ops() {
  static const std::map<std::string, EwOp> m = {
      {"Add", EwOp::Add}, {"Sub", EwOp::Sub}, {"Mul", EwOp::Mul}, {"Div", EwOp::Div}, {"Pow", EwOp::Pow}};
  return m;
}
// Variadic ops fold left over their inputs, as their kernels do (Mean then divides by the count).
const std::map<std::string, EwOp>& variadic_ops() {
  static const std::map<std::string, EwOp> m = {
      {"Max", EwOp::Max}, {"Min", EwOp::Min}, {"Sum", EwOp::Add}, {"Mean", EwOp::Add}};
  return m;
}
const std::map<std::string, EwOp>& unary_ops() {
  static const std::map<std::string, EwOp> m = {{"Neg", EwOp::Neg},           {"Abs", EwOp::Abs},
                                                {"Exp", EwOp::Exp},           {"Log", EwOp::Log},
                                                {"Sqrt", EwOp::Sqrt},         {"Reciprocal", EwOp::Reciprocal},
                                                {"Erf", EwOp::Erf},           {"Tanh", EwOp::Tanh},
                                                {"Sigmoid", EwOp::Sigmoid},   {"Relu", EwOp::Relu},
                                                {"Softplus", EwOp::Softplus}, {"Floor", EwOp::Floor},
                                                {"Ceil", EwOp::Ceil},         {"HardSwish", EwOp::HardSwish}};
  return m;
}

/// Op type in the opcode set (ai.onnx, or ai.fusec Gelu)?
bool in_opcode_set(const Node* n) {
  if (n->domain == "ai.fusec") return n->op_type == "Gelu";
  if (!n->domain.empty()) return false;
  const std::string& op = n->op_type;
  return op == "BatchNormalization" || binary_ops().count(op) || variadic_ops().count(op) || unary_ops().count(op) ||
         op == "LeakyRelu" || op == "HardSigmoid" || op == "Clip" || op == "Gelu";
}

/// Inputs that are operands of the elementwise expression (and broadcast); Clip's bounds and
/// BatchNormalization's statistics are parameters instead.
bool is_data_input(const Node* n, size_t i) {
  return !((n->op_type == "Clip" || n->op_type == "BatchNormalization") && i > 0);
}

bool is_batchnorm(const Node* n) { return n->op_type == "BatchNormalization" && n->domain.empty(); }

/// A BatchNormalization region member as y = x·s + t: its channel axis 1 is static and its
/// statistics are constants of one entry per channel.
std::optional<ChannelAffine> batchnorm_member(const Graph& g, const Node* n) {
  const Value* x = n->input(0);
  if (!x || !x->type.shape || x->type.shape->size() < 2 || !(*x->type.shape)[1].is_static()) return std::nullopt;
  std::string why;
  return batchnorm_affine(g, n, (*x->type.shape)[1].value, &why);
}

bool is_scalar_constant(const Value* v) {
  const Tensor* t = constant_of(v);
  return t && t->numel() == 1 && (is_float(t->dtype()) || is_integer(t->dtype()));
}

/// Every dim static or named: two values of that shape really are the same shape.
bool well_known_shape(const Value* v) {
  if (!v->type.shape) return false;
  for (const Dim& d : *v->type.shape)
    if (!d.is_static() && d.symbol.empty()) return false;
  return true;
}

enum class Fit { No, WrongType, Yes };

/// Can `n` join a region? WrongType (with `why`) for an op of the set on data FusedElementwise
/// does not compute; No for everything else (another op, a legacy form, a non-constant Clip bound...).
Fit fit(const Graph& g, const Node* n, std::string* why = nullptr) {
  if (!in_opcode_set(n)) return Fit::No;
  if (n->has_attr("broadcast") || n->has_attr("consumed_inputs")) return Fit::No;  // pre-opset-7 forms
  if (!unsupported_reason(g, *n).empty()) return Fit::No;
  if (n->outputs.empty() || !n->outputs[0] || !well_known_shape(n->outputs[0])) return Fit::No;
  for (size_t i = 1; i < n->outputs.size(); ++i)
    if (n->outputs[i] && use_count(n->outputs[i]) > 0) return Fit::No;
  const DType t = n->outputs[0]->type.dtype;
  if (!fusable_dtype(t)) {
    if (why)
      *why = std::string("its data type is ") + dtype_name(t) +
             "; FusedElementwise computes float32, float16 and bfloat16 only";
    return Fit::WrongType;
  }
  if (variadic_ops().count(n->op_type) && n->inputs.size() < 2) return Fit::No;
  // Its statistics outputs are dropped: only an inference BN whose other outputs nobody reads.
  if (is_batchnorm(n)) {
    const Value* x = n->input(0);
    return x && x->type.dtype == t && !x->is_initializer() && batchnorm_member(g, n) ? Fit::Yes : Fit::No;
  }
  // Half types round every instruction, as one op per node does; the Sum (> 2 inputs) and Mean
  // kernels round once at the end instead, so those are left unfused to keep results identical.
  if (t != DType::Float32 && (n->op_type == "Mean" || (n->op_type == "Sum" && n->inputs.size() > 2))) return Fit::No;
  if (n->op_type == "Gelu") {
    std::string a = n->attr_string("approximate", "none");
    if (a != "none" && a != "tanh") return Fit::No;
  }
  bool any_variable = false;
  for (size_t i = 0; i < n->inputs.size(); ++i) {
    const Value* v = n->inputs[i];
    if (!v) {
      if (is_data_input(n, i)) return Fit::No;
      continue;
    }
    if (!v->type.shape) return Fit::No;
    const bool pow_exponent = n->op_type == "Pow" && i == 1;
    if (!is_data_input(n, i) || (pow_exponent && v->type.dtype != t)) {
      if (!is_scalar_constant(v)) return Fit::No;  // parameters and mixed-type exponents: literals only
    } else if (v->type.dtype != t) {
      return Fit::No;
    }
    any_variable |= !v->is_initializer();
  }
  return any_variable ? Fit::Yes : Fit::No;
}

/// ONNX broadcast of two shapes, or nullopt when it is not decidable statically.
std::optional<Shape> broadcast(const Shape& a, const Shape& b) {
  const size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    Dim x = i < r - a.size() ? Dim(1) : a[i - (r - a.size())];
    Dim y = i < r - b.size() ? Dim(1) : b[i - (r - b.size())];
    if (x == y)
      out[i] = x;
    else if (x.is_static() && x.value == 1)
      out[i] = y;
    else if (y.is_static() && y.value == 1)
      out[i] = x;
    else
      return std::nullopt;
  }
  return out;
}

struct Region {
  Node* root = nullptr;
  std::vector<Node*> nodes;  // topological order, root last
};

/// The root plus every producer that joined it, in topological order (producers first).
std::vector<Node*> topological(Node* root, const std::unordered_set<Node*>& members) {
  std::vector<Node*> order;
  std::unordered_set<Node*> seen;
  std::function<void(Node*)> visit = [&](Node* n) {
    if (!seen.insert(n).second) return;
    for (Value* v : n->inputs)
      if (v && v->producer && members.count(v->producer)) visit(v->producer);
    order.push_back(n);
  };
  visit(root);
  return order;
}

/// Where `v` (an input of a region member) is read outside the region, or "" if nowhere.
std::string outside_reader(const Value* v, const std::unordered_set<Node*>& members) {
  if (v->is_graph_output) return "its output '" + v->name + "' is a graph output";
  for (Node* c : v->consumers)
    if (!members.count(c)) return "its output '" + v->name + "' is also read by " + describe(c) + " outside the region";
  return "";
}

std::vector<Region> find_regions(Rewriter& r) {
  const Graph& g = r.graph();
  std::vector<Region> regions;
  std::unordered_set<Node*> assigned;
  std::unordered_map<Node*, Fit> fits;
  auto fit_of = [&](Node* n) {
    auto it = fits.find(n);
    if (it != fits.end()) return it->second;
    return fits[n] = fit(g, n);
  };
  std::unordered_set<const Node*> reported;  // one split near-miss per op and sweep
  std::vector<Node*> nodes = g.node_list();
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    Node* root = *it;
    if (assigned.count(root) || fit_of(root) != Fit::Yes) continue;
    const Value* out = root->outputs[0];
    std::unordered_set<Node*> members = {root};
    std::vector<Node*> work = {root};
    // A producer joins once every reader of its output is in the region; re-checked each time a
    // node joins, so a diamond's shared producer joins when its last reader does.
    while (!work.empty() && members.size() < kMaxRegionNodes) {
      Node* m = work.back();
      work.pop_back();
      for (Value* v : m->inputs) {
        Node* p = v ? v->producer : nullptr;
        if (!p || members.count(p) || assigned.count(p) || fit_of(p) != Fit::Yes) continue;
        if (!(p->outputs[0]->type.shape == out->type.shape) || p->outputs[0]->type.dtype != out->type.dtype) continue;
        if (!outside_reader(v, members).empty()) continue;
        members.insert(p);
        work.push_back(p);
        if (members.size() >= kMaxRegionNodes) break;
      }
    }
    Region region{root, topological(root, members)};
    for (Node* m : region.nodes) assigned.insert(m);
    // Near-misses: a producer that would have joined but for a reader outside the region.
    if (!r.opts().portable) {
      for (Node* m : region.nodes)
        for (Value* v : m->inputs) {
          Node* p = v ? v->producer : nullptr;
          if (!p || members.count(p) || assigned.count(p) || fit_of(p) != Fit::Yes) continue;
          if (!(p->outputs[0]->type.shape == out->type.shape) || p->outputs[0]->type.dtype != out->type.dtype) continue;
          std::string why = outside_reader(v, members);
          if (why.empty() || !reported.insert(p).second) continue;
          r.near_miss(describe(p) + " not fused into the elementwise region ending at " + describe(root),
                      why + " (a fused region has one output)");
        }
    }
    // The same near-miss once the region it missed is a FusedElementwise (later sweeps), so the
    // fixed-point sweep that --explain reports still says why this op stands alone.
    if (!r.opts().portable)
      for (Node* c : out->consumers)
        if (c->op_type == "FusedElementwise" && c->domain == "ai.fusec" && c->outputs[0] &&
            c->outputs[0]->type.shape == out->type.shape && c->outputs[0]->type.dtype == out->type.dtype) {
          std::string why = outside_reader(out, {c});
          if (!why.empty() && reported.insert(root).second)
            r.near_miss(describe(root) + " not fused into FusedElementwise '" + c->name + "'",
                        why + " (a fused region has one output)");
          break;
        }
    regions.push_back(std::move(region));
  }
  // Near-misses: ops of the set on a type FusedElementwise does not compute, next to another one.
  for (Node* n : nodes) {
    std::string why;
    if (fit(g, n, &why) != Fit::WrongType) continue;
    bool neighbour = false;
    for (Value* v : n->inputs) neighbour |= v && v->producer && in_opcode_set(v->producer);
    for (Value* v : n->outputs)
      if (v)
        for (Node* c : v->consumers) neighbour |= in_opcode_set(c);
    if (neighbour) r.near_miss(describe(n) + " not fused with its elementwise neighbours", why);
  }
  return regions;
}

/// Appends instructions; returns the register holding the last result.
class Emitter {
 public:
  EwOperand emit(EwOp op, std::initializer_list<EwOperand> args) {
    EwInstr ins{op, {}};
    size_t a = 0;
    for (const EwOperand& o : args) ins.args[a++] = o;
    code.push_back(ins);
    return EwOperand::reg(static_cast<int32_t>(code.size() - 1));
  }
  std::vector<EwInstr> code;
};

float scalar_of(const Value* v) { return static_cast<float>(constant_of(v)->as_double(0)); }

/// The instructions computing node `n`, its data operands given by `operand(i)`.
EwOperand translate(const Node* n, const std::function<EwOperand(size_t)>& operand, Emitter& e) {
  const std::string& op = n->op_type;
  auto lit = [](double v) { return EwOperand::literal(static_cast<float>(v)); };
  if (auto it = binary_ops().find(op); it != binary_ops().end()) return e.emit(it->second, {operand(0), operand(1)});
  if (auto it = variadic_ops().find(op); it != variadic_ops().end()) {
    EwOperand acc = operand(0);
    for (size_t i = 1; i < n->inputs.size(); ++i) acc = e.emit(it->second, {acc, operand(i)});
    if (op == "Mean") acc = e.emit(EwOp::Div, {acc, lit(static_cast<double>(n->inputs.size()))});
    return acc;
  }
  if (auto it = unary_ops().find(op); it != unary_ops().end()) return e.emit(it->second, {operand(0)});
  if (op == "LeakyRelu") return e.emit(EwOp::LeakyRelu, {operand(0), lit(n->attr_float("alpha", 0.01f))});
  if (op == "HardSigmoid")
    return e.emit(EwOp::HardSigmoid, {operand(0), lit(n->attr_float("alpha", 0.2f)), lit(n->attr_float("beta", 0.5f))});
  if (op == "Gelu")
    return e.emit(n->attr_string("approximate", "none") == "tanh" ? EwOp::GeluTanh : EwOp::Gelu, {operand(0)});
  if (op == "Clip") {
    // Absent bounds are the float range, as the Clip kernel has them.
    float lo = n->attr_float("min", -FLT_MAX), hi = n->attr_float("max", FLT_MAX);
    if (const Value* v = n->input(1)) lo = scalar_of(v);
    if (const Value* v = n->input(2)) hi = scalar_of(v);
    return e.emit(EwOp::Clip, {operand(0), lit(lo), lit(hi)});
  }
  internal_error("fuse_elementwise: no translation for" + n->ref());
}

struct Fused {
  std::vector<Value*> inputs;                             // null where the next of `constants` is to be added
  std::vector<std::pair<std::string, Tensor>> constants;  // name stem and value
  ElementwiseProgram program;
};

/// The region's inputs and program, or nullopt with `why` set. A BatchNormalization member brings
/// its per-channel s and t as new constants shaped [C, 1, ...] against its output's rank.
std::optional<Fused> lower(const Graph& g, const Region& r, std::string* why) {
  std::unordered_set<const Node*> members(r.nodes.begin(), r.nodes.end());
  const Value* out = r.root->outputs[0];
  const Shape& out_shape = *out->type.shape;
  // External operands in order of first use: a value of the graph, or a new constant (v null: the
  // next of `constants`). Scalar constants start as literals.
  struct External {
    Value* v = nullptr;
    Shape shape;
    bool literal = false;
  };
  std::vector<External> external;
  std::vector<std::pair<std::string, Tensor>> constants;
  std::unordered_map<const Value*, size_t> external_of;
  std::unordered_map<const Node*, std::pair<size_t, size_t>> affine_of;  // BN -> (s, t) in external
  for (const Node* n : r.nodes) {
    for (size_t i = 0; i < n->inputs.size(); ++i) {
      Value* v = n->inputs[i];
      if (!v || !is_data_input(n, i) || (v->producer && members.count(v->producer)) || external_of.count(v)) continue;
      external_of[v] = external.size();
      external.push_back({v, *v->type.shape, is_scalar_constant(v)});
    }
    if (!is_batchnorm(n)) continue;
    const auto a = batchnorm_member(g, n);
    if (!a) internal_error("fuse_elementwise: BatchNormalization member without its affine map" + n->ref());
    std::vector<int64_t> dims(n->outputs[0]->type.shape->size() - 1, 1);
    dims[0] = static_cast<int64_t>(a->scale.size());
    const DType dt = n->outputs[0]->type.dtype;
    const std::string stem = n->name.empty() ? n->outputs[0]->name : n->name;
    affine_of[n] = {external.size(), external.size() + 1};
    for (const auto& [suffix, values] :
         {std::pair{".scale_folded", &a->scale}, std::pair{".shift_folded", &a->shift}}) {
      external.push_back({nullptr, shape_of(dims), false});
      constants.emplace_back(stem + suffix, tensor_from(dt, dims, *values));
    }
  }
  // The inputs alone must broadcast to the output's shape: a literal has no rank, so a scalar
  // constant that gives the output its rank (x[3] * c[1,1] is [1,3]) stays an input.
  auto input_shape = [&]() -> std::optional<Shape> {
    std::optional<Shape> s;
    for (const External& e : external)
      if (!e.literal) s = s ? broadcast(*s, e.shape) : std::optional<Shape>(e.shape);
    return s;
  };
  std::vector<External*> promotable;
  for (External& e : external)
    if (e.literal && e.v->type.dtype == out->type.dtype) promotable.push_back(&e);
  std::stable_sort(promotable.begin(), promotable.end(),
                   [](const External* a, const External* b) { return a->shape.size() > b->shape.size(); });
  for (size_t k = 0;; ++k) {
    auto s = input_shape();
    if (s && *s == out_shape) break;
    if (k == promotable.size()) {
      *why = "its inputs do not broadcast to its output shape " + shape_str(out_shape) + " without the region";
      return std::nullopt;
    }
    promotable[k]->literal = false;
  }

  Fused f;
  std::vector<EwOperand> operand(external.size());
  for (size_t k = 0; k < external.size(); ++k) {
    if (external[k].literal) {
      operand[k] = EwOperand::literal(scalar_of(external[k].v));
    } else {
      operand[k] = EwOperand::input(static_cast<int32_t>(f.inputs.size()));
      f.inputs.push_back(external[k].v);
    }
  }
  f.constants = std::move(constants);
  std::unordered_map<const Value*, EwOperand> operand_of;
  for (const auto& [v, k] : external_of) operand_of[v] = operand[k];
  Emitter e;
  for (const Node* n : r.nodes) {
    EwOperand result;
    if (is_batchnorm(n)) {
      const auto [s, t] = affine_of.at(n);
      result = e.emit(EwOp::Add, {e.emit(EwOp::Mul, {operand_of.at(n->inputs[0]), operand[s]}), operand[t]});
    } else {
      result = translate(
          n, [&](size_t i) { return operand_of.at(n->inputs[i]); }, e);
    }
    if (result.kind != EwOperand::Kind::Register)
      internal_error("fuse_elementwise: node without instructions" + n->ref());
    operand_of[n->outputs[0]] = result;
  }
  f.program.num_inputs = static_cast<int>(f.inputs.size());
  f.program.code = std::move(e.code);
  std::string error;
  if (!parse_elementwise_program(f.program.to_string(), f.program.num_inputs, &error))
    internal_error("fuse_elementwise wrote an invalid program for " + describe(r.root) + ": " + error);
  return f;
}

std::string region_summary(const Region& r) {
  std::string s;
  const size_t shown = 6;
  for (size_t i = 0; i < r.nodes.size() && i < shown; ++i) s += (i ? " + " : "") + describe(r.nodes[i]);
  if (r.nodes.size() > shown) s += " + " + std::to_string(r.nodes.size() - shown) + " more";
  return s;
}

}  // namespace

bool FuseElementwisePass::run(Graph& g, PassContext& ctx) {
  Rewriter r(g, ctx, kPass);
  std::vector<Region> regions = find_regions(r);
  for (const Region& region : regions) {
    if (region.nodes.size() < 2) continue;  // a lone op is already one kernel
    const std::string what =
        std::to_string(region.nodes.size()) + " elementwise ops ending at " + describe(region.root);
    if (ctx.opts.portable) {
      r.near_miss(what + " not fused", "--portable writes standard ops only");
      continue;
    }
    std::string why;
    std::optional<Fused> f = lower(g, region, &why);
    if (!f) {
      r.near_miss(what + " not fused", why);
      continue;
    }
    // Members that are themselves fusions pass on the user's original names (Replaced::origins).
    const std::string name = region.root->name, summary = region_summary(region);
    Value* out = region.root->outputs[0];
    Replaced gone = r.remove(region.nodes);
    auto constant = f->constants.begin();
    for (Value*& v : f->inputs)
      if (!v) {
        v = g.add_initializer(constant->first, std::move(constant->second));
        ++constant;
      }
    Node* fused = r.add("FusedElementwise", f->inputs, {out}, name, "ai.fusec", gone.origins);
    fused->set_attr("program", f->program.to_string());
    r.rewrote(summary + " -> FusedElementwise '" + name + "'", gone.names, name);
  }
  if (r.changed()) g.remove_unused_values();
  return r.changed();
}

}  // namespace fusec
