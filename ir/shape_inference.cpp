#include "ir/shape_inference.h"

#include <map>
#include <unordered_map>

#include "ir/dim_values.h"
#include "ir/error.h"
#include "ir/op_schema.h"
#include "ir/subgraph.h"

namespace fusec {

static std::string input_names(const Graph& g) {
  std::string s;
  for (auto* v : g.inputs) s += (s.empty() ? "" : ", ") + v->name;
  return s.empty() ? "(none)" : s;
}

void bind_input_shapes(Graph& g, const ShapeBindings& b) {
  std::map<std::string, int64_t> symbols;
  auto bind_symbol = [&](const std::string& sym, int64_t v, const std::string& why) {
    auto [it, fresh] = symbols.emplace(sym, v);
    if (!fresh && it->second != v)
      bad_input("dimension '" + sym + "' is bound to both " + std::to_string(it->second) + " and " + std::to_string(v) +
                " (" + why + ")");
  };
  for (const auto& [name, dims] : b.shapes) {
    Value* v = nullptr;
    for (auto* in : g.inputs)
      if (in->name == name) v = in;
    if (!v) bad_input("--shape: the model has no input '" + name + "'; its inputs are: " + input_names(g));
    if (v->type.shape && v->type.shape->size() != dims.size())
      bad_input("--shape " + name + ": the input has rank " + std::to_string(v->type.shape->size()) + " (" +
                shape_str(*v->type.shape) + "), not " + std::to_string(dims.size()));
    if (v->type.shape)
      for (size_t i = 0; i < dims.size(); ++i) {
        const Dim& d = (*v->type.shape)[i];
        if (d.is_static() && d.value != dims[i])
          bad_input("--shape " + name + ": dimension " + std::to_string(i) + " is fixed at " + std::to_string(d.value) +
                    " in the model, not " + std::to_string(dims[i]));
        if (!d.is_static() && !d.symbol.empty()) bind_symbol(d.symbol, dims[i], "--shape " + name);
      }
    v->type.shape = shape_of(dims);
  }
  if (b.batch) {
    int64_t n = *b.batch;
    if (n <= 0) bad_input("--batch must be positive, got " + std::to_string(n));
    std::string batch_symbol;
    bool any = false;
    for (auto* v : g.inputs) {
      if (!v->type.shape || v->type.shape->empty()) continue;
      const Dim& d = v->type.shape->front();
      if (d.is_static()) continue;
      if (!d.symbol.empty()) {
        if (!batch_symbol.empty() && batch_symbol != d.symbol)
          bad_input("--batch is ambiguous: inputs lead with different symbolic dims '" + batch_symbol + "' and '" +
                    d.symbol + "'; use --shape for each input instead");
        batch_symbol = d.symbol;
      }
      (*v->type.shape)[0] = Dim(n);
      any = true;
    }
    if (!batch_symbol.empty()) bind_symbol(batch_symbol, n, "--batch");
    if (!any) {
      // Every leading dim is static: accept --batch only if it agrees with them.
      for (auto* v : g.inputs)
        if (v->type.shape && !v->type.shape->empty() && (*v->type.shape)[0].value != n)
          bad_input("--batch " + std::to_string(n) + " contradicts input '" + v->name +
                    "', whose leading dimension is fixed at " + std::to_string((*v->type.shape)[0].value));
    }
  }
  // A bound symbol is bound everywhere it appears among the inputs.
  for (auto* v : g.inputs) {
    if (!v->type.shape) continue;
    for (auto& d : *v->type.shape)
      if (!d.is_static() && symbols.count(d.symbol)) d = Dim(symbols[d.symbol]);
  }
}

namespace {

// Combines what inference found with what the file declared: inferred static dims win, declared
// ones fill gaps; two different static sizes, or dtypes, are an error.
void merge_type(Value& v, const TypeInfo& inferred, const Node& n) {
  if (inferred.dtype != DType::Undefined) {
    if (v.type.dtype != DType::Undefined && v.type.dtype != inferred.dtype)
      bad_input_at("output '" + v.name + "' is declared " + dtype_name(v.type.dtype) + " but the op produces " +
                dtype_name(inferred.dtype), n.ref());
    v.type.dtype = inferred.dtype;
  }
  if (!inferred.shape) return;
  if (!v.type.shape || v.type.shape->size() != inferred.shape->size()) {
    v.type.shape = inferred.shape;  // a declared shape of another rank is simply wrong: ours wins
    return;
  }
  Shape merged = *inferred.shape;
  for (size_t i = 0; i < merged.size(); ++i) {
    const Dim& decl = (*v.type.shape)[i];
    if (merged[i].is_static()) {
      if (decl.is_static() && decl.value != merged[i].value)
        bad_input_at("output '" + v.name + "' is declared with shape " + shape_str(*v.type.shape) +
                  " but the op produces " + shape_str(merged), n.ref());
    } else if (decl.is_static() || (!decl.symbol.empty() && merged[i].symbol.empty())) {
      merged[i] = decl;
    }
  }
  v.type.shape = merged;
}

/// Infers one node's output types (and, for small all-known inputs, its output values).
void infer_node(Graph& g, Node& n, const NodeEvaluator& evaluate, const InferOptions& opts,
                std::unordered_map<const Value*, Tensor>& known,
                std::unordered_map<const Value*, std::vector<DimValue>>& partial) {
  const auto& reg = OpRegistry::global();
  auto value_of = [&](const Value* v) -> const Tensor* {
    if (!v) return nullptr;
    if (v->initializer) return v->initializer.get();
    auto it = known.find(v);
    return it == known.end() ? nullptr : &it->second;
  };
  int64_t opset = g.opset(n.domain);
  const OpSchema* schema = reg.find(n.domain, n.op_type, opset);
  if (!schema || !unsupported_reason(g, n).empty()) return;
  check_node_against_schema(n, *schema);
  std::vector<const TypeInfo*> types;
  std::vector<const Tensor*> values;
  bool all_known = true, types_known = true;
  for (Value* v : n.inputs) {
    // An input typed by nothing (it comes from an op fusec cannot run): leave this node's
    // outputs as declared; the backend reports the unsupported op itself.
    if (v && v->type.dtype == DType::Undefined) types_known = false;
    types.push_back(v ? &v->type : nullptr);
    values.push_back(value_of(v));
    if (v && !values.back()) all_known = false;
  }
  if (!types_known) return;
  InferContext ctx(n, *schema, opset, types, values);
  std::vector<const std::vector<DimValue>*> partials;
  for (Value* v : n.inputs) {
    auto it = v ? partial.find(v) : partial.end();
    partials.push_back(it == partial.end() ? nullptr : &it->second);
  }
  ctx.set_input_dims_values(std::move(partials));
  schema->infer(ctx);
  for (size_t i = 0; i < n.outputs.size(); ++i)
    if (n.outputs[i]) merge_type(*n.outputs[i], ctx.outputs[i], n);

  // What is known of a shape vector's elements when its value is not (dim_values.h); a vector
  // whose elements all turn out static is a known value from here on.
  if (Value* out = n.outputs.empty() ? nullptr : n.outputs[0]; out && !all_known) {
    if (auto d = infer_dims_value(ctx)) {
      bool all_static = true;
      for (const DimValue& x : *d) all_static = all_static && x.known();
      const auto& os = out->type.shape;
      const bool vector_or_scalar =
          os && (os->empty() ? d->size() == 1
                             : os->size() == 1 && (!(*os)[0].is_static() || (*os)[0].value == int64_t(d->size())));
      if (all_static && vector_or_scalar && out->type.dtype == DType::Int64) {
        std::vector<int64_t> v;
        for (const DimValue& x : *d) v.push_back(*x.value);
        const std::vector<int64_t> dims =
            os->empty() ? std::vector<int64_t>{} : std::vector<int64_t>{int64_t(v.size())};
        known[out] = Tensor::from_int64(v, dims);
      } else {
        partial[out] = std::move(*d);
      }
    }
  }

  // Value propagation: shape arithmetic becomes known, so Reshape & co. get static outputs.
  if (n.op_type == "Shape" || n.op_type == "Size") {
    const Value* in = n.inputs[0];
    if (evaluate && in->type.shape && is_static(*in->type.shape)) {
      Tensor fake = Tensor::view(in->type.dtype, static_dims(*in->type.shape), nullptr, nullptr);
      std::vector<const Tensor*> ins{&fake};
      known[n.outputs[0]] = evaluate(n, opset, ins)[0];
    }
    return;
  }
  bool small = true;
  for (Value* out : n.outputs) {
    if (!out) continue;
    if (!out->type.shape || !is_static(*out->type.shape) ||
        checked_numel(static_dims(*out->type.shape)) > opts.max_propagated_elements)
      small = false;
  }
  bool random = n.op_type.rfind("Random", 0) == 0 || n.op_type == "Bernoulli";
  // A body's work is not bounded by its outputs' size (a loop's trip count is data): never here.
  if (evaluate && all_known && small && !random && !has_subgraph(n) && !n.outputs.empty()) {
    auto outs = evaluate(n, opset, values);
    for (size_t i = 0; i < n.outputs.size(); ++i)
      if (n.outputs[i]) known[n.outputs[i]] = std::move(outs[i]);
  }
}

}  // namespace

void infer_shapes(Graph& g, const NodeEvaluator& evaluate, const InferOptions& opts) {
  g.topo_sort();
  std::unordered_map<const Value*, Tensor> known;  // values computed during inference
  std::unordered_map<const Value*, std::vector<DimValue>> partial;  // dim_values.h
  for (const auto& np : g.nodes())
    with_node_context([&] { return np->ref(); }, [&] { infer_node(g, *np, evaluate, opts, known, partial); });
}

std::vector<std::string> non_static_values(const Graph& g) {
  std::vector<std::string> out;
  auto check = [&](const Value* v) {
    if (!v->type.shape || !is_static(*v->type.shape)) out.push_back(v->name);
  };
  for (auto* v : g.inputs) check(v);
  for (const auto& n : g.nodes())
    for (auto* v : n->outputs)
      if (v) check(v);
  return out;
}

void require_bound_inputs(const Graph& g) {
  std::vector<std::string> inputs;
  for (auto* v : g.inputs)
    if (!v->type.shape || !is_static(*v->type.shape))
      inputs.push_back("'" + v->name + "' (" + (v->type.shape ? shape_str(*v->type.shape) : "unranked") + ")");
  if (!inputs.empty()) {
    std::string s;
    for (auto& i : inputs) s += (s.empty() ? "" : ", ") + i;
    bad_input("input shapes are not fully known: " + s + "; bind them with --batch N or --shape name:AxBxC");
  }
}

}  // namespace fusec
