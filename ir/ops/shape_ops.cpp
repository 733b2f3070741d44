// Ops that reinterpret or describe a tensor's shape (Reshape, Flatten, Squeeze, Unsqueeze, Shape,
// Size, Identity, Dropout in inference) plus the small shape-preserving ops that build masks or
// scans over it (EyeLike, Trilu, CumSum, OneHot).
//
// Inference here is what makes exported models static: Shape -> Gather -> Concat -> Reshape chains
// are evaluated by the driver once their inputs are known, so each op takes the value of its
// shape-like input (c.input_value) whenever it is there, and otherwise says as much as it can
// (the rank, dims copied from the input) without guessing.
#include <algorithm>
#include <set>

#include "ir/dim_math.h"
#include "ir/dim_values.h"
#include "ir/op_schema.h"
#include "ir/ops/all_ops.h"

namespace fusec {

namespace {

/// Reads a shape-like int64 input (Reshape's shape, Squeeze's axes...): its values if known.
std::optional<std::vector<int64_t>> known_ints(const InferContext& c, size_t i) {
  const Tensor* v = c.input_value(i);
  if (!v) return std::nullopt;
  return v->to_int64_vector();
}

/// Length of a 1-D input whose value is unknown, if its shape says.
std::optional<int64_t> static_length(const InferContext& c, size_t i) {
  const auto& s = c.input_shape(i);
  if (!s || s->size() != 1 || !(*s)[0].is_static()) return std::nullopt;
  return (*s)[0].value;
}

void require_1d(const InferContext& c, size_t i, const char* what) {
  const auto& s = c.input_shape(i);
  if (s && s->size() != 1) c.fail(std::string(what) + " must be a 1-D tensor, got shape " + shape_str(*s));
}

/// Product of dims [b, e): static if all are, else the product of the open dims by name
/// (DimProduct: [N, 3, 4] flattened from 0 is "3·4·N" written "12·N"), unknown if one is unnamed.
Dim dim_product(const Shape& s, size_t b, size_t e, const NodeAttrs& where) {
  std::vector<int64_t> statics;
  for (size_t i = b; i < e; ++i)
    if (s[i].is_static()) statics.push_back(s[i].value);
  const int64_t p = dims::product(statics, where, "the flattened dims");
  if (p == 0) return Dim(0);
  DimProduct prod;
  for (size_t i = b; i < e; ++i) {
    auto f = product_of(s[i]);
    auto q = f ? times(prod, *f) : std::nullopt;
    if (!q) return Dim();
    prod = *q;
  }
  return dim_of(prod);
}

// ---- Reshape ----

void infer_reshape(InferContext& c) {
  c.require_dtype(1, {DType::Int64});
  require_1d(c, 1, "the shape input");
  const DType t = c.input_dtype(0);
  const bool allowzero = c.schema().find_attr("allowzero") && c.attr_int("allowzero") != 0;
  // The target's entries: its value, else what inference carried of its elements (a symbolic
  // entry is the input dim of that name, dim_values.h).
  std::vector<DimValue> want;
  if (auto known = known_ints(c, 1)) {
    for (int64_t v : *known) want.push_back(DimValue(v));
  } else if (const std::vector<DimValue>* d = c.input_dims_value(1)) {
    want = *d;
  } else {
    auto n = static_length(c, 1);
    c.set_output(0, t, n ? std::optional<Shape>(Shape(dims::rank(*n, c, "the shape input's length"))) : std::nullopt);
    return;
  }
  const auto& in = c.input_shape(0);
  Shape out(want.size());
  int64_t infer_at = -1;
  bool has_zero = false;
  std::vector<bool> copied(in ? in->size() : 0, false);  // input dims carried over by a 0
  // The target's entries as one product (DimProduct: a coefficient times open dims by name), and
  // whether an unnamed entry leaves it unknown.
  DimProduct out_prod;
  bool out_unknown = false;
  auto multiply = [&](DimProduct& into, const Dim& d, bool& unknown) {
    auto p = product_of(d);
    auto q = p ? times(into, *p) : std::nullopt;
    if (!q) {
      unknown = true;
      return;
    }
    into = *q;
  };
  for (size_t i = 0; i < want.size(); ++i) {
    if (!want[i].known()) {
      out[i] = want[i].named() ? Dim::sym(want[i].symbol) : Dim();
      multiply(out_prod, out[i], out_unknown);
      continue;
    }
    const int64_t v = *want[i].value;
    if (v == -1) {
      if (infer_at >= 0) c.fail("the shape has more than one -1");
      infer_at = static_cast<int64_t>(i);
    } else if (v == 0 && !allowzero) {
      if (!in) {
        out[i] = Dim();
        continue;
      }
      if (i >= in->size())
        c.fail("shape entry " + std::to_string(i) + " is 0 (copy the input dim) but the input has rank " +
               std::to_string(in->size()));
      out[i] = (*in)[i];
      copied[i] = true;
    } else if (v < 0) {
      c.fail("invalid shape entry " + std::to_string(v));
    } else {
      if (v == 0) has_zero = true;
      out[i] = Dim(v);
      (void)dims::product({out_prod.coef, v}, c, "the element count of the target shape");
      multiply(out_prod, out[i], out_unknown);
    }
  }
  if (allowzero && has_zero && infer_at >= 0) c.fail("with allowzero=1 the shape may not hold both 0 and -1");
  if (!in) {
    if (infer_at >= 0) out[infer_at] = Dim();
    c.set_output(0, t, out);
    return;
  }
  // Copied dims appear on both sides and cancel; the rest of the input is one product too, and a
  // named dim on both sides divides out ([N, S, 768] -> [N, S, 12, -1]: -1 is 64; [B, 12, S, D]
  // -> [-1, S, D]: -1 is 12·B).
  DimProduct in_prod;
  bool in_unknown = false;
  for (size_t i = 0; i < in->size(); ++i)
    if (!copied[i]) {
      if ((*in)[i].is_static())
        (void)dims::product({in_prod.coef, (*in)[i].value}, c, "the element count of the input");
      multiply(in_prod, (*in)[i], in_unknown);
    }
  const bool both_static = !in_unknown && !out_unknown && in_prod.names.empty() && out_prod.names.empty();
  auto target_str = [&] {  // as dims_str writes a known target
    std::string s;
    for (size_t i = 0; i < want.size(); ++i)
      s += (i ? "x" : "") + (want[i].known() ? std::to_string(*want[i].value) : want[i].named() ? want[i].symbol : "?");
    return s.empty() ? std::string("scalar") : s;
  };
  if (infer_at >= 0) {
    auto q = in_unknown || out_unknown ? std::nullopt : divided(in_prod, out_prod);
    // No binding helps when the target's names all divide out and its coefficient does not.
    const bool names_divide =
        !in_unknown && !out_unknown && divided(DimProduct{1, in_prod.names}, DimProduct{1, out_prod.names}).has_value();
    if (!q && names_divide) c.fail("cannot reshape " + shape_str(*in) + " to " + target_str());
    out[infer_at] = q ? dim_of(*q) : Dim();
  } else if (both_static && in_prod.coef != out_prod.coef) {
    c.fail("cannot reshape " + shape_str(*in) + " to " + target_str() + ": element counts differ");
  }
  c.set_output(0, t, out);
}

// ---- Flatten ----

void infer_flatten(InferContext& c) {
  const auto& in = c.input_shape(0);
  const DType t = c.input_dtype(0);
  if (!in) {
    c.set_output(0, t, Shape{Dim(), Dim()});
    return;
  }
  const int64_t r = static_cast<int64_t>(in->size());
  int64_t axis = c.attr_int("axis");
  if (axis < -r || axis > r) c.fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(r));
  if (axis < 0) axis += r;
  c.set_output(0, t, Shape{dim_product(*in, 0, axis, c), dim_product(*in, axis, in->size(), c)});
}

// ---- Squeeze / Unsqueeze ----

/// Axes of Squeeze/Unsqueeze: from the attribute before opset 13, from input 1 after.
struct Axes {
  bool present = false;                        // given at all (Squeeze may omit them)
  std::optional<std::vector<int64_t>> values;  // nullopt: given by an input whose value is unknown
  std::optional<int64_t> count;                // number of axes when known
};

Axes read_axes(const InferContext& c, bool from_input) {
  Axes a;
  if (!from_input) {
    a.present = c.has_attr("axes");
    if (a.present) a.values = c.attr_ints("axes");
  } else if (c.has_input(1)) {
    a.present = true;
    c.require_dtype(1, {DType::Int64});
    // A scalar is one axis: ONNX's own function bodies (AffineGrid's) write it, and onnxruntime
    // takes it.
    const auto& s = c.input_shape(1);
    if (s && s->size() > 1) c.fail("axes must be a scalar or a 1-D tensor, got shape " + shape_str(*s));
    a.values = known_ints(c, 1);
    if (!a.values) a.count = s && s->empty() ? std::optional<int64_t>(1) : static_length(c, 1);
  }
  if (a.values) a.count = static_cast<int64_t>(a.values->size());
  return a;
}

/// Normalizes axes against `rank`; fails on an out-of-range or repeated axis.
std::vector<int64_t> normalize_axes(const std::vector<int64_t>& axes, int64_t rank, const InferContext& c) {
  std::vector<int64_t> out;
  for (int64_t a : axes) {
    int64_t n = normalize_axis(a, rank, c);
    if (std::find(out.begin(), out.end(), n) != out.end()) c.fail("axis " + std::to_string(a) + " is repeated");
    out.push_back(n);
  }
  return out;
}

void infer_squeeze(InferContext& c, bool from_input) {
  const DType t = c.input_dtype(0);
  const auto& in = c.input_shape(0);
  Axes axes = read_axes(c, from_input);
  if (!in) {
    c.set_output(0, t, std::nullopt);
    return;
  }
  const int64_t r = static_cast<int64_t>(in->size());
  Shape out;
  if (!axes.present) {
    for (const Dim& d : *in) {
      if (!d.is_static()) {
        c.set_output(0, t, std::nullopt);
        return;
      }  // might be 1
      if (d.value != 1) out.push_back(d);
    }
  } else if (!axes.values) {
    if (!axes.count || *axes.count > r) {
      c.set_output(0, t, std::nullopt);
      return;
    }
    out.assign(static_cast<size_t>(r - *axes.count), Dim());
  } else {
    auto ax = normalize_axes(*axes.values, r, c);
    for (int64_t i = 0; i < r; ++i) {
      const Dim& d = (*in)[i];
      if (std::find(ax.begin(), ax.end(), i) == ax.end()) {
        out.push_back(d);
        continue;
      }
      if (d.is_static() && d.value != 1)
        c.fail("cannot squeeze axis " + std::to_string(i) + " of size " + std::to_string(d.value));
    }
  }
  c.set_output(0, t, out);
}

void infer_unsqueeze(InferContext& c, bool from_input) {
  const DType t = c.input_dtype(0);
  const auto& in = c.input_shape(0);
  Axes axes = read_axes(c, from_input);
  if (!axes.present) c.fail("axes are required");
  if (!in) {
    c.set_output(0, t, std::nullopt);
    return;
  }
  const int64_t r = static_cast<int64_t>(in->size());
  if (!axes.values) {
    if (!axes.count)
      c.set_output(0, t, std::nullopt);
    else
      c.set_output(0, t,
                   Shape(dims::rank(r + dims::rank(*axes.count, c, "the axes count"), c, "the output rank"), Dim()));
    return;
  }
  const int64_t out_rank = r + static_cast<int64_t>(axes.values->size());
  auto ax = normalize_axes(*axes.values, out_rank, c);
  Shape out;
  size_t next = 0;
  for (int64_t i = 0; i < out_rank; ++i) {
    if (std::find(ax.begin(), ax.end(), i) != ax.end())
      out.push_back(Dim(1));
    else
      out.push_back((*in)[next++]);
  }
  c.set_output(0, t, out);
}

// ---- Shape / Size ----

/// [start, end) of Shape's slice for an input of rank r (start/end attrs from opset 15).
std::pair<int64_t, int64_t> shape_slice(const NodeAttrs& c, int64_t r) {
  int64_t start = 0, end = r;
  if (c.schema().find_attr("start")) {
    start = c.attr_int("start");
    if (c.has_attr("end")) end = c.attr_int("end");
  }
  auto clamp = [r](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + r : v, 0, r); };
  start = clamp(start);
  end = clamp(end);
  return {start, std::max(start, end)};
}

void infer_shape(InferContext& c) {
  const auto& in = c.input_shape(0);
  if (!in) {
    c.set_output(0, DType::Int64, Shape{Dim()});
    return;
  }
  auto [b, e] = shape_slice(c, static_cast<int64_t>(in->size()));
  c.set_output(0, DType::Int64, Shape{Dim(e - b)});
}

// ---- Dropout ----

void infer_dropout(InferContext& c) {
  c.propagate(0);
  if (c.opset() >= 12) {
    if (c.has_input(1)) {
      c.require_float(1);
      if (const Tensor* r = c.input_value(1)) {
        if (r->numel() != 1) c.fail("ratio must be a scalar");
        double v = r->as_double(0);
        if (!(v >= 0 && v < 1)) c.fail("ratio " + std::to_string(v) + " is outside [0, 1)");
      }
    }
    if (c.has_input(2)) c.require_dtype(2, {DType::Bool});
    // Training with ratio > 0 masks at random: say so at import when the inputs are constants.
    const Tensor* training = c.has_input(2) ? c.input_value(2) : nullptr;
    const Tensor* ratio = c.has_input(1) ? c.input_value(1) : nullptr;
    if (training && training->numel() == 1 && training->as_int64(0) != 0 &&
        (c.has_input(1) ? ratio && ratio->numel() == 1 && ratio->as_double(0) != 0 : true))
      c.unsupported("Dropout in training mode (random masking) is not supported");
  }
  // The mask is bool from opset 10, the input's type before.
  c.set_output(1, c.opset() >= 10 ? DType::Bool : c.input_dtype(0), c.input_shape(0));
}

// ---- EyeLike / Trilu / CumSum / OneHot ----

void infer_eyelike(InferContext& c) {
  const auto& in = c.input_shape(0);
  if (in && in->size() != 2) c.fail("input must be 2-D, got shape " + shape_str(*in));
  DType t = c.input_dtype(0);
  if (c.has_attr("dtype")) {
    int64_t code = c.attr_int("dtype");
    t = dtype_from_onnx(static_cast<int32_t>(code));
    if (t == DType::Undefined) c.unsupported("dtype " + onnx_dtype_name(static_cast<int32_t>(code)) + " is not supported");
  }
  c.set_output(0, t, in ? *in : Shape{Dim(), Dim()});
}

void infer_trilu(InferContext& c) {
  const auto& in = c.input_shape(0);
  if (in && in->size() < 2) c.fail("input must have rank >= 2, got shape " + shape_str(*in));
  if (c.has_input(1)) {
    c.require_dtype(1, {DType::Int64});
    if (const Tensor* k = c.input_value(1); k && k->numel() != 1) c.fail("k must be a scalar");
  }
  c.propagate(0);
}

void infer_cumsum(InferContext& c) {
  c.require_dtype(0, {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int32, DType::Int64});
  c.require_dtype(1, {DType::Int32, DType::Int64});
  const auto& in = c.input_shape(0);
  if (const Tensor* a = c.input_value(1)) {
    if (a->numel() != 1) c.fail("axis must be a scalar");
    if (in) normalize_axis(a->as_int64(0), static_cast<int64_t>(in->size()), c);
  }
  c.propagate(0);
}

void infer_onehot(InferContext& c) {
  const auto& in = c.input_shape(0);
  const auto& vs = c.input_shape(2);
  if (vs && vs->size() != 1) c.fail("values must be a 1-D tensor [off, on]");
  if (vs && (*vs)[0].is_static() && (*vs)[0].value != 2) c.fail("values must hold exactly 2 elements");
  Dim depth;
  if (const Tensor* d = c.input_value(1)) {
    if (d->numel() != 1) c.fail("depth must be a scalar");
    double v = d->as_double(0);
    if (!(v >= 1)) c.fail("depth must be positive, got " + std::to_string(v));
    if (v > 1e15) c.fail("depth " + std::to_string(v) + " is too large");
    depth = Dim(static_cast<int64_t>(v));
  }
  if (!in) {
    c.set_output(0, c.input_dtype(2), std::nullopt);
    return;
  }
  const int64_t r = static_cast<int64_t>(in->size());
  int64_t axis = normalize_axis(c.attr_int("axis"), r + 1, c);
  Shape out = *in;
  out.insert(out.begin() + axis, depth);
  c.set_output(0, c.input_dtype(2), out);
}

}  // namespace

void register_shape_schemas(OpRegistry& r) {
  // Reshape-1..4 took the shape as an attribute; not supported.
  r.add("Reshape").since(5, 13).io(2, 2).set_infer(infer_reshape).set_cost(cost_free);
  r.add("Reshape")
      .since(14)
      .io(2, 2)
      .attr("allowzero", AttrKind::Int, AttrValue{int64_t{0}})
      .set_infer(infer_reshape)
      .set_cost(cost_free);

  r.add("Flatten")
      .since(1)
      .io(1, 1)
      .attr("axis", AttrKind::Int, AttrValue{int64_t{1}})
      .set_infer(infer_flatten)
      .set_cost(cost_free);

  r.add("Squeeze")
      .since(1, 12)
      .io(1, 1)
      .attr("axes", AttrKind::Ints)
      .set_infer([](InferContext& c) { infer_squeeze(c, false); })
      .set_cost(cost_free);
  r.add("Squeeze").since(13).io(1, 2).set_infer([](InferContext& c) { infer_squeeze(c, true); }).set_cost(cost_free);
  r.add("Unsqueeze")
      .since(1, 12)
      .io(1, 1)
      .required_attr("axes", AttrKind::Ints)
      .set_infer([](InferContext& c) { infer_unsqueeze(c, false); })
      .set_cost(cost_free);
  r.add("Unsqueeze")
      .since(13)
      .io(2, 2)
      .set_infer([](InferContext& c) { infer_unsqueeze(c, true); })
      .set_cost(cost_free);

  r.add("Shape").since(1, 14).io(1, 1).set_infer(infer_shape).set_cost(cost_free);
  r.add("Shape")
      .since(15)
      .io(1, 1)
      .attr("start", AttrKind::Int, AttrValue{int64_t{0}})
      .attr("end", AttrKind::Int)
      .set_infer(infer_shape)
      .set_cost(cost_free);
  r.add("Size")
      .since(1)
      .io(1, 1)
      .set_infer([](InferContext& c) { c.set_output(0, DType::Int64, Shape{}); })
      .set_cost(cost_free);

  r.add("Identity").since(1).io(1, 1).set_infer([](InferContext& c) { c.propagate(0); }).set_cost(cost_free);

  // Dropout runs as in inference (output = input, mask all true). Before opset 7 it had is_test,
  // which defaults to training mode: not supported. Opset 12 moved ratio to an input and added
  // training_mode; training with ratio > 0 is random and rejected by the kernel.
  r.add("Dropout")
      .since(7, 11)
      .io(1, 1, 1, 2)
      .attr("ratio", AttrKind::Float, AttrValue{0.5f})
      .set_infer(infer_dropout)
      .set_cost(cost_free);
  r.add("Dropout").since(12).io(1, 3, 1, 2).attr("seed", AttrKind::Int).set_infer(infer_dropout).set_cost(cost_free);

  r.add("EyeLike")
      .since(9)
      .io(1, 1)
      .attr("dtype", AttrKind::Int)
      .attr("k", AttrKind::Int, AttrValue{int64_t{0}})
      .set_infer(infer_eyelike)
      .set_cost([](const CostContext& c) {
        return Cost{0, 0, c.out_bytes(0)};
      });

  r.add("Trilu")
      .since(14)
      .io(1, 2)
      .attr("upper", AttrKind::Int, AttrValue{int64_t{1}})
      .set_infer(infer_trilu)
      .set_cost(cost_data_movement);

  // The scans: CumSum (11) and CumProd (26) take the same inputs and attributes.
  for (const auto& [op, since] : {std::pair<const char*, int64_t>{"CumSum", 11}, {"CumProd", 26}})
    r.add(op)
        .since(since)
        .io(2, 2)
        .attr("exclusive", AttrKind::Int, AttrValue{int64_t{0}})
        .attr("reverse", AttrKind::Int, AttrValue{int64_t{0}})
        .set_infer(infer_cumsum)
        .set_cost([](const CostContext& c) { return cost_elementwise(c, 1); });

  // Opset 11 documented negative indices (counted from the end); the kernel wraps them for 9 too,
  // as ONNX Runtime does. Indices outside [-depth, depth) give an all-off row.
  r.add("OneHot")
      .since(9)
      .io(3, 3)
      .attr("axis", AttrKind::Int, AttrValue{int64_t{-1}})
      .set_infer(infer_onehot)
      .set_cost(cost_data_movement);
}

}  // namespace fusec
