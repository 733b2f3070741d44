#include "passes/verify.h"

#include <cmath>
#include <random>
#include <unordered_map>

#include "backend/cpu/cpu_backend.h"
#include "ir/error.h"
#include "ir/memory_limit.h"
#include "ir/half.h"

namespace fusec {

Tensor random_input(const Value& v, uint64_t seed, int64_t int_end) {
  if (!v.type.shape || !is_static(*v.type.shape))
    bad_input("input '" + v.name + "' has shape " + (v.type.shape ? shape_str(*v.type.shape) : "unknown") +
              "; bind it with --batch N or --shape " + v.name + ":AxBxC");
  const auto dims = static_dims(*v.type.shape);
  check_allocation(static_cast<size_t>(checked_nbytes(dims, v.type.dtype)),
                   "input '" + v.name + "' (" + shape_str(*v.type.shape) + ")");
  Tensor t(v.type.dtype, dims);
  std::mt19937_64 rng(seed ^ std::hash<std::string>{}(v.name));
  std::uniform_real_distribution<double> uni(-1.0, 1.0);
  std::uniform_int_distribution<int64_t> ints(0, std::max<int64_t>(int_end, 1) - 1);
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (t.dtype()) {
      case DType::Float32:
        t.data<float>()[i] = static_cast<float>(uni(rng));
        break;
      case DType::Float64:
        t.data<double>()[i] = uni(rng);
        break;
      case DType::Float16:
        t.data<uint16_t>()[i] = float_to_half(static_cast<float>(uni(rng)));
        break;
      case DType::BFloat16:
        t.data<uint16_t>()[i] = float_to_bf16(static_cast<float>(uni(rng)));
        break;
      case DType::Bool:
        t.data<uint8_t>()[i] = static_cast<uint8_t>(rng() & 1);
        break;
      case DType::Int8:
        t.data<int8_t>()[i] = static_cast<int8_t>(ints(rng));
        break;
      case DType::UInt8:
        t.data<uint8_t>()[i] = static_cast<uint8_t>(ints(rng));
        break;
      case DType::Int16:
        t.data<int16_t>()[i] = static_cast<int16_t>(ints(rng));
        break;
      case DType::Int32:
        t.data<int32_t>()[i] = static_cast<int32_t>(ints(rng));
        break;
      case DType::Int64:
        t.data<int64_t>()[i] = ints(rng);
        break;
      case DType::Undefined:
        bad_input("input '" + v.name + "' has no data type");
    }
  }
  return t;
}

void compare_outputs(const Tensor& got, const Tensor& want, const Tolerance& tol, OutputCheck& c) {
  if (got.dtype() != want.dtype() || got.dims() != want.dims()) {
    c.ok = false;
    c.problem = std::string("optimized output is ") + dtype_name(got.dtype()) + "[" + dims_str(got.dims()) +
                "], original " + dtype_name(want.dtype()) + "[" + dims_str(want.dims()) + "]";
    return;
  }
  c.elements += want.numel();
  // The absolute bound never falls below a tenth of rtol of the output's largest finite magnitude.
  // float32 rounding in a deep computation leaves noise that scales with the values it came from,
  // and an element near zero of a large output carries its neighbours' noise: RAFT-small's flow
  // (magnitudes near 5, three refinement steps through GridSample) differed by 1.5e-5 at elements
  // near zero after fusion, 3e-6 of its scale. At the default tolerances (rtol 1e-4, atol 1e-5)
  // outputs of magnitude up to 1 keep atol as it is.
  double scale = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double b = want.as_double(i);
    if (std::isfinite(b)) scale = std::max(scale, std::fabs(b));
  }
  const double floor = std::max(tol.atol, tol.rtol / 10 * scale);
  for (int64_t i = 0; i < want.numel(); ++i) {
    double a = got.as_double(i), b = want.as_double(i);
    if (std::isfinite(b)) ++c.finite_original;
    if (std::isnan(a) || std::isnan(b)) {
      if (std::isnan(a) != std::isnan(b)) c.ok = false;
      continue;
    }
    if (std::isinf(a) || std::isinf(b)) {
      if (a != b) c.ok = false;
      continue;
    }
    double d = std::fabs(a - b);
    c.max_abs = std::max(c.max_abs, d);
    c.max_ref = std::max(c.max_ref, std::fabs(b));
    if (d > floor + tol.rtol * std::fabs(b)) c.ok = false;
  }
  // Normalised by the output's scale: per-element ratios explode on values near zero.
  c.max_rel = c.max_ref > 0 ? c.max_abs / c.max_ref : 0;
}

bool mask_input(const Value& v) {
  if (!is_integer(v.type.dtype)) return false;
  std::vector<const Value*> work = {&v};
  bool cast = false;
  for (size_t at = 0; at < work.size(); ++at) {
    const Value* x = work[at];
    if (x->is_graph_output || work.size() > 256) return false;
    for (const Node* c : x->consumers) {
      if (!c->domain.empty() || c->inputs.empty() || c->input(0) != x) return false;
      for (size_t i = 1; i < c->inputs.size(); ++i)
        if (c->input(i) == x) return false;                         // also a shape, an index, a bound
      if (c->op_type == "Shape" || c->op_type == "Size") continue;  // reads no value
      if (c->op_type == "Cast") {
        if (!is_float(dtype_from_onnx(static_cast<int32_t>(c->attr_int("to", 0))))) return false;
        cast = true;
        continue;
      }
      static const char* kViews[] = {"Unsqueeze", "Squeeze",   "Reshape",  "Expand",
                                     "Slice",     "Transpose", "Identity", "Flatten"};
      bool view = false;
      for (const char* op : kViews) view |= c->op_type == op;
      if (!view || c->outputs.size() != 1 || !c->outputs[0]) return false;
      work.push_back(c->outputs[0]);
    }
  }
  return cast;
}

std::vector<Tensor> random_inputs(const Graph& g, uint64_t seed, int64_t int_end) {
  std::vector<Tensor> in;
  for (const Value* v : g.inputs) in.push_back(random_input(*v, seed, mask_input(*v) ? 2 : int_end));
  return in;
}

bool has_integer_input(const Graph& g) {
  for (const Value* v : g.inputs)
    if (is_integer(v->type.dtype)) return true;
  return false;
}

namespace {

OutputCheck named_check(const std::string& name) {
  OutputCheck c;
  c.name = name;
  return c;
}

}  // namespace

VerifyResult verify_equivalence(const Graph& original, const Graph& optimized, int runs, uint64_t seed,
                                const Tolerance& tol) {
  if (original.inputs.size() != optimized.inputs.size() || original.outputs.size() != optimized.outputs.size())
    internal_error("optimization changed the model's inputs or outputs");
  cpu::CpuBackend backend;
  auto a = backend.compile(original);
  auto b = backend.compile(optimized);
  // `refused` gets the original model's own error where it rejects the inputs drawn (BadInput):
  // random integers can be out of range for the model itself (OPT's positions are a running sum of
  // its attention_mask, past its position table at values up to 63). An error of the optimized
  // model alone is not caught: that would be the optimization's fault.
  auto check = [&](int64_t int_end, std::string& refused) {
    VerifyResult r;
    r.runs = runs;
    r.binary_ints = int_end == 2;
    for (const Value* v : original.outputs) r.outputs.push_back(named_check(v->name));
    for (int k = 0; k < runs; ++k) {
      auto in = random_inputs(original, seed + static_cast<uint64_t>(k), int_end);
      std::vector<Tensor> want;
      try {
        want = a->run(in);
      } catch (const Error& e) {
        if (e.kind() != ErrorKind::BadInput || !has_integer_input(original)) throw;
        refused = e.what();
        return r;
      }
      auto got = b->run(in);
      for (size_t i = 0; i < want.size(); ++i) compare_outputs(got[i], want[i], tol, r.outputs[i]);
    }
    return r;
  };
  std::string refused;
  VerifyResult r = check(64, refused);
  for (const Value* v : original.inputs)
    if (mask_input(*v)) r.mask_inputs.push_back(v->name);
  // An output that compared nothing, or inputs the original model refuses, with integer inputs:
  // try them as 0/1 (masks, small ids), once.
  bool none = !refused.empty();
  for (const auto& o : r.outputs) none |= o.nothing_compared();
  if (none && has_integer_input(original)) {
    std::string refused_binary;
    VerifyResult again = check(2, refused_binary);
    bool better = refused_binary.empty();
    for (const auto& o : again.outputs) better &= !o.nothing_compared();
    if (better) {
      again.mask_inputs = std::move(r.mask_inputs);
      r = std::move(again);
      refused.clear();
    } else if (!refused.empty()) {
      for (auto& o : r.outputs) {
        o.ok = false;
        o.problem = "not compared: the original model refuses the random inputs (" + refused + ")" +
                    (refused_binary.empty() ? "" : " and 0/1 ones (" + refused_binary + ")") +
                    "; --no-check writes the model unverified";
      }
    }
  }
  // NaN matching NaN is right element by element, but an output that is NaN or infinite everywhere
  // compared nothing: a mask computed as (1 - m) * finfo.min from an integer input overflows on the
  // random values in [0, 64), and the original model itself gives NaN.
  for (auto& o : r.outputs)
    if (o.ok && o.nothing_compared()) {
      o.ok = false;
      o.problem =
          "nothing compared: the original model gives no finite value on the random inputs (e.g. a mask "
          "computed from an integer input overflows on random values); --no-check writes the model unverified";
    }
  for (const auto& o : r.outputs) r.ok &= o.ok;
  return r;
}

LayerCheck check_layers(const Graph& original, const Graph& optimized, uint64_t seed, const Tolerance& tol) {
  // Expose every node output of both graphs as a graph output.
  auto expose = [](const Graph& g) {
    auto c = g.clone();
    std::vector<Value*> outs;
    for (const auto& n : c->nodes())
      for (Value* v : n->outputs)
        if (v && !v->is_graph_output) {
          v->is_graph_output = true;
          c->outputs.push_back(v);
        }
    return c;
  };
  auto a = expose(original), b = expose(optimized);
  cpu::CpuBackend backend;
  auto in = random_inputs(original, seed);
  auto ra = backend.compile(*a)->run(in);
  auto rb = backend.compile(*b)->run(in);
  std::unordered_map<std::string, const Tensor*> orig_values;
  for (size_t i = 0; i < a->outputs.size(); ++i) orig_values[a->outputs[i]->name] = &ra[i];
  std::unordered_map<const Value*, size_t> index_b;
  for (size_t i = 0; i < b->outputs.size(); ++i) index_b[b->outputs[i]] = i;
  LayerCheck lc;
  for (const auto& n : b->nodes()) {
    for (Value* v : n->outputs) {
      if (!v) continue;
      auto it = orig_values.find(v->name);
      if (it == orig_values.end()) continue;
      OutputCheck c = named_check(v->name);
      compare_outputs(rb[index_b[v]], *it->second, tol, c);
      ++lc.compared;
      if (!c.ok) {
        lc.ok = false;
        lc.node = n->name;
        lc.op_type = n->op_type;
        lc.value = v->name;
        lc.detail = c;
        return lc;
      }
    }
  }
  return lc;
}

}  // namespace fusec
