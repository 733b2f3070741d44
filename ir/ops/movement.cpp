// Data movement ops: Transpose, Concat, Split, Slice, Gather*, Scatter*, Expand, Tile, Pad,
// DepthToSpace, SpaceToDepth, Col2Im, TopK, Compress, ReverseSequence.
//
// Inference computes exact shapes whenever the shape-like inputs (starts, pads, repeats, k, ...)
// are known — always at run time — and partial shapes (right rank, unknown dims) otherwise.
#include <algorithm>
#include <climits>

#include "ir/dim_math.h"
#include "ir/op_schema.h"
#include "ir/ops/all_ops.h"
#include "ir/ops/movement_util.h"

namespace fusec {

namespace {

using movement::compute_slice;
using movement::full_pads;
using movement::split_sizes;

constexpr int kUnbounded = INT_MAX;

/// Value of input i when it is present and known (constant at import, always at run time).
const Tensor* known_value(const InferContext& c, size_t i) { return c.has_input(i) ? c.input_value(i) : nullptr; }

Shape unknown_shape(size_t rank) { return Shape(rank, Dim()); }

void require_index(const InferContext& c, size_t i) {
  if (c.has_input(i)) c.require_dtype(i, {DType::Int32, DType::Int64});
}

/// A known shape-like tensor must be 1-D (or a scalar where ONNX allows it).
std::vector<int64_t> ints_of(const InferContext& c, const Tensor& t, const char* what) {
  if (t.rank() > 1) c.fail(std::string(what) + " must be a 1-D tensor, got shape " + dims_str(t.dims()));
  return t.to_int64_vector();
}

/// Reads only what it gathers: indices plus the gathered elements (not the whole table).
Cost cost_gather(const CostContext& c) { return {0, c.in_bytes(1) + c.out_bytes(0), c.out_bytes(0)}; }

// ---------------------------------------------------------------- Transpose

void infer_transpose(InferContext& c) {
  const auto& s = c.input_shape(0);
  const bool has_perm = c.has_attr("perm");
  std::vector<int64_t> perm = has_perm ? c.attr_ints("perm") : std::vector<int64_t>{};
  if (!s) {
    c.set_output(0, c.input_dtype(0), has_perm ? std::optional<Shape>(unknown_shape(perm.size())) : std::nullopt);
    return;
  }
  const int64_t r = static_cast<int64_t>(s->size());
  if (!has_perm)
    for (int64_t i = r - 1; i >= 0; --i) perm.push_back(i);
  if (static_cast<int64_t>(perm.size()) != r)
    c.fail("perm has " + std::to_string(perm.size()) + " entries but the input has rank " + std::to_string(r));
  std::vector<bool> seen(r, false);
  Shape out(r);
  for (int64_t i = 0; i < r; ++i) {
    if (perm[i] < 0 || perm[i] >= r || seen[perm[i]])
      c.fail("perm is not a permutation of 0.." + std::to_string(r - 1));
    seen[perm[i]] = true;
    out[i] = (*s)[perm[i]];
  }
  c.set_output(0, c.input_dtype(0), out);
}

// ---------------------------------------------------------------- Concat

void infer_concat(InferContext& c) {
  const DType t = c.input_dtype(0);
  std::optional<Shape> out;
  bool axis_static = true;
  int64_t axis_sum = 0, ax = 0;
  for (size_t i = 0; i < c.num_inputs(); ++i) {
    if (!c.has_input(i)) c.fail("input " + std::to_string(i) + " is empty");
    if (c.input_dtype(i) != t)
      c.fail(std::string("inputs have different types: ") + dtype_name(t) + " and " + dtype_name(c.input_dtype(i)));
  }
  for (size_t i = 0; i < c.num_inputs(); ++i) {
    const auto& s = c.input_shape(i);
    if (!s) {
      axis_static = false;
      continue;
    }
    if (!out) {
      out = *s;
      ax = normalize_axis(c.attr_int("axis"), static_cast<int64_t>(s->size()), c);
    } else if (s->size() != out->size()) {
      c.fail("inputs have different ranks: " + shape_str(*out) + " and " + shape_str(*s));
    }
    for (size_t d = 0; d < s->size(); ++d) {
      if (static_cast<int64_t>(d) == ax) continue;
      const Dim& a = (*out)[d];
      const Dim& b = (*s)[d];
      if (a.is_static() && b.is_static() && a.value != b.value)
        c.fail("inputs have incompatible shapes " + shape_str(*out) + " and " + shape_str(*s) +
               " (all dims but the axis must match)");
      if (!a.is_static() && b.is_static()) (*out)[d] = b;
    }
    const Dim& d = (*s)[ax];
    if (d.is_static())
      axis_sum = dims::add(axis_sum, d.value, c, "the concatenated axis");
    else
      axis_static = false;
  }
  if (out) (*out)[ax] = axis_static ? Dim(axis_sum) : Dim();
  c.set_output(0, t, out);
}

// ---------------------------------------------------------------- Split

void infer_split(InferContext& c) {
  const DType t = c.input_dtype(0);
  const size_t n = c.num_outputs();
  const auto& s = c.input_shape(0);
  std::optional<std::vector<int64_t>> split;  // nullopt: not known yet
  bool explicit_split = false;
  if (c.opset() < 13) {
    explicit_split = c.has_attr("split");
    split = explicit_split ? c.attr_ints("split") : std::vector<int64_t>{};
  } else {
    require_index(c, 1);
    explicit_split = c.has_input(1);
    if (!explicit_split)
      split = std::vector<int64_t>{};
    else if (const Tensor* v = c.input_value(1))
      split = ints_of(c, *v, "split");
  }
  bool uneven = false;
  if (c.opset() >= 18 && c.has_attr("num_outputs")) {
    if (explicit_split) c.fail("'split' and 'num_outputs' cannot both be given");
    int64_t no = c.attr_int("num_outputs");
    if (no != static_cast<int64_t>(n))
      c.fail("num_outputs is " + std::to_string(no) + " but the node has " + std::to_string(n) + " outputs");
    uneven = true;
  }
  if (!s) {
    for (size_t i = 0; i < n; ++i) c.set_output(i, t, std::nullopt);
    return;
  }
  const int64_t ax = normalize_axis(c.attr_int("axis"), static_cast<int64_t>(s->size()), c);
  const Dim& d = (*s)[ax];
  std::vector<Dim> sizes(n, Dim());
  if (split && !split->empty()) {
    if (d.is_static()) {
      auto v = split_sizes(d.value, *split, n, uneven, c);
      for (size_t i = 0; i < n; ++i) sizes[i] = v[i];
    } else {
      if (split->size() != n)
        c.fail("split has " + std::to_string(split->size()) + " entries but the node has " + std::to_string(n) +
               " outputs");
      for (size_t i = 0; i < n; ++i) sizes[i] = (*split)[i];
    }
  } else if (split && d.is_static()) {
    auto v = split_sizes(d.value, {}, n, uneven, c);
    for (size_t i = 0; i < n; ++i) sizes[i] = v[i];
  }
  for (size_t i = 0; i < n; ++i) {
    Shape o = *s;
    o[ax] = sizes[i];
    c.set_output(i, t, o);
  }
}

// ---------------------------------------------------------------- Slice

void infer_slice(InferContext& c) {
  const DType t = c.input_dtype(0);
  const auto& s = c.input_shape(0);
  std::optional<std::vector<int64_t>> starts, ends, axes, steps;
  if (c.opset() < 10) {
    starts = c.attr_ints("starts");
    ends = c.attr_ints("ends");
    axes = c.has_attr("axes") ? c.attr_ints("axes") : std::vector<int64_t>{};
    steps = std::vector<int64_t>{};
  } else {
    for (size_t i = 1; i <= 4; ++i) require_index(c, i);
    if (const Tensor* v = known_value(c, 1)) starts = ints_of(c, *v, "starts");
    if (const Tensor* v = known_value(c, 2)) ends = ints_of(c, *v, "ends");
    if (!c.has_input(3))
      axes = std::vector<int64_t>{};
    else if (const Tensor* v = c.input_value(3))
      axes = ints_of(c, *v, "axes");
    if (!c.has_input(4))
      steps = std::vector<int64_t>{};
    else if (const Tensor* v = c.input_value(4))
      steps = ints_of(c, *v, "steps");
  }
  if (!s) {
    c.set_output(0, t, std::nullopt);
    return;
  }
  const int64_t r = static_cast<int64_t>(s->size());
  if (!starts || !ends || !axes || !steps) {
    Shape out = *s;
    if (axes && !axes->empty()) {
      for (int64_t a : *axes) out[normalize_axis(a, r, c)] = Dim();
    } else {
      out = unknown_shape(r);
    }
    c.set_output(0, t, out);
    return;
  }
  // Symbolic dims: compute with a stand-in, then forget the result on the axes that were sliced.
  std::vector<int64_t> dims(r);
  for (int64_t i = 0; i < r; ++i) dims[i] = (*s)[i].is_static() ? (*s)[i].value : 1;
  auto p = compute_slice(dims, *starts, *ends, *axes, *steps, c);
  std::vector<int64_t> ax = *axes;
  if (ax.empty())
    for (size_t i = 0; i < starts->size(); ++i) ax.push_back(static_cast<int64_t>(i));
  Shape out = *s;
  for (int64_t a : ax) {
    int64_t d = normalize_axis(a, r, c);
    out[d] = (*s)[d].is_static() ? Dim(p.out_dims[d]) : Dim();
  }
  c.set_output(0, t, out);
}

Cost cost_slice(const CostContext& c) {
  double small = 0;
  for (size_t i = 1; i < c.in_dims.size(); ++i) small += c.in_bytes(i);
  return {0, small + c.out_bytes(0), c.out_bytes(0)};
}

// ---------------------------------------------------------------- Gather family

void infer_gather(InferContext& c) {
  require_index(c, 1);
  const auto& s = c.input_shape(0);
  const auto& q = c.input_shape(1);
  if (!s || !q) {
    if (s) normalize_axis(c.attr_int("axis"), static_cast<int64_t>(s->size()), c);
    c.set_output(0, c.input_dtype(0), std::nullopt);
    return;
  }
  const int64_t ax = normalize_axis(c.attr_int("axis"), static_cast<int64_t>(s->size()), c);
  Shape out(s->begin(), s->begin() + ax);
  out.insert(out.end(), q->begin(), q->end());
  out.insert(out.end(), s->begin() + ax + 1, s->end());
  c.set_output(0, c.input_dtype(0), out);
}

void infer_gather_elements(InferContext& c) {
  require_index(c, 1);
  const auto& s = c.input_shape(0);
  const auto& q = c.input_shape(1);
  if (s) {
    normalize_axis(c.attr_int("axis"), static_cast<int64_t>(s->size()), c);
    if (q && q->size() != s->size())
      c.fail("indices must have the same rank as data (" + shape_str(*q) + " vs " + shape_str(*s) + ")");
  }
  c.set_output(0, c.input_dtype(0), q);
}

void infer_gather_nd(InferContext& c) {
  c.require_dtype(1, {DType::Int64});
  const int64_t b = c.opset() >= 12 ? c.attr_int("batch_dims") : 0;
  const auto& s = c.input_shape(0);
  const auto& q = c.input_shape(1);
  if (!s || !q) {
    c.set_output(0, c.input_dtype(0), std::nullopt);
    return;
  }
  const int64_t r = static_cast<int64_t>(s->size()), qr = static_cast<int64_t>(q->size());
  if (r < 1 || qr < 1) c.fail("data and indices must have rank >= 1");
  if (b < 0 || b >= std::min(r, qr)) c.fail("batch_dims " + std::to_string(b) + " must be less than both ranks");
  for (int64_t i = 0; i < b; ++i) {
    const Dim &x = (*s)[i], &y = (*q)[i];
    if (x.is_static() && y.is_static() && x.value != y.value)
      c.fail("the first batch_dims dims of data and indices differ: " + shape_str(*s) + " vs " + shape_str(*q));
  }
  const Dim& last = (*q)[qr - 1];
  if (!last.is_static()) {
    c.set_output(0, c.input_dtype(0), std::nullopt);
    return;
  }
  const int64_t k = last.value;
  if (k < 1 || k > r - b)
    c.fail("the last dim of indices (" + std::to_string(k) + ") must be in [1, rank(data) - batch_dims]");
  Shape out(q->begin(), q->end() - 1);
  out.insert(out.end(), s->begin() + b + k, s->end());
  c.set_output(0, c.input_dtype(0), out);
}

// ---------------------------------------------------------------- Scatter family

void check_reduction(const InferContext& c) {
  if (!c.has_attr("reduction")) return;
  std::string r = c.attr_string("reduction");
  if (r != "none" && r != "add" && r != "mul" && r != "max" && r != "min") c.fail("unknown reduction '" + r + "'");
  if ((r == "max" || r == "min") && c.opset() < 18) c.fail("reduction '" + r + "' needs opset 18");
}

void infer_scatter_elements(InferContext& c) {
  require_index(c, 1);
  check_reduction(c);
  if (c.input_dtype(2) != c.input_dtype(0)) c.fail("updates must have the same type as data");
  const auto& s = c.input_shape(0);
  const auto& q = c.input_shape(1);
  const auto& u = c.input_shape(2);
  if (s) {
    normalize_axis(c.attr_int("axis"), static_cast<int64_t>(s->size()), c);
    if (q && q->size() != s->size()) c.fail("indices must have the same rank as data");
  }
  if (q && u) {
    if (q->size() != u->size()) c.fail("indices and updates must have the same shape");
    for (size_t i = 0; i < q->size(); ++i)
      if ((*q)[i].is_static() && (*u)[i].is_static() && (*q)[i].value != (*u)[i].value)
        c.fail("indices and updates must have the same shape (" + shape_str(*q) + " vs " + shape_str(*u) + ")");
  }
  c.propagate(0);
}

void infer_scatter_nd(InferContext& c) {
  c.require_dtype(1, {DType::Int64});
  check_reduction(c);
  if (c.input_dtype(2) != c.input_dtype(0)) c.fail("updates must have the same type as data");
  const auto& s = c.input_shape(0);
  const auto& q = c.input_shape(1);
  const auto& u = c.input_shape(2);
  if (s && q && u && !q->empty() && (*q).back().is_static()) {
    const int64_t r = static_cast<int64_t>(s->size()), qr = static_cast<int64_t>(q->size());
    const int64_t k = q->back().value;
    if (k < 1 || k > r) c.fail("the last dim of indices must be in [1, rank(data)]");
    const int64_t want = qr - 1 + r - k;
    if (static_cast<int64_t>(u->size()) != want)
      c.fail("updates has shape " + shape_str(*u) + ", expected rank " + std::to_string(want));
  }
  c.propagate(0);
}

Cost cost_scatter(const CostContext& c) {
  std::string r = c.node.attr_string("reduction", "none");
  return {r == "none" ? 0.0 : c.in_numel(2), c.all_in_bytes(), c.all_out_bytes()};
}

// ---------------------------------------------------------------- Expand, Tile

void infer_expand(InferContext& c) {
  c.require_dtype(1, {DType::Int64});
  const auto& s = c.input_shape(0);
  const DType t = c.input_dtype(0);
  if (const Tensor* v = c.input_value(1)) {
    auto shape = ints_of(c, *v, "shape");
    for (int64_t d : shape)
      if (d < 0) c.fail("shape has a negative entry " + std::to_string(d));
    if (!s) {
      c.set_output(0, t, std::nullopt);
      return;
    }
    c.set_output(0, t, broadcast_shapes(*s, shape_of(shape), c));
    return;
  }
  if (const std::vector<DimValue>* d = c.input_dims_value(1); d && s) {
    // Some entries known or named (dim_values.h). An entry of 1 keeps the input's dim; an input
    // dim of 1 takes the entry; a named entry and an input dim of that name agree; an input dim
    // other than 1 survives whatever the entry (which must be 1 or it).
    const size_t r = std::max(d->size(), s->size());
    Shape out(r, Dim());
    for (size_t i = 0; i < r; ++i) {
      const Dim* in = i < s->size() ? &(*s)[s->size() - 1 - i] : nullptr;
      const DimValue* e = i < d->size() ? &(*d)[d->size() - 1 - i] : nullptr;
      Dim& o = out[r - 1 - i];
      if (e && e->known() && *e->value < 0) c.fail("shape has a negative entry " + std::to_string(*e->value));
      const Dim want = !e ? Dim(1) : e->known() ? Dim(*e->value) : e->named() ? Dim::sym(e->symbol) : Dim();
      if (!in) {
        o = want;
      } else if (want.is_static() && want.value == 1) {
        o = *in;
      } else if (in->is_static() && in->value == 1) {
        o = want;
      } else if (in->is_static()) {
        if (want.is_static() && want.value != in->value)
          c.fail("cannot expand " + shape_str(*s) + ": a dim of " + std::to_string(in->value) + " against " +
                 std::to_string(want.value));
        o = *in;
      } else if (want.is_static() || (!want.symbol.empty() && want.symbol == in->symbol)) {
        o = want;
      }
    }
    c.set_output(0, t, out);
    return;
  }
  const auto& ss = c.input_shape(1);
  if (!s || !ss || ss->size() != 1 || !(*ss)[0].is_static()) {
    c.set_output(0, t, std::nullopt);
    return;
  }
  const size_t n = dims::rank((*ss)[0].value, c, "the shape input's length");
  const size_t r = std::max(n, s->size());
  Shape out(r, Dim());
  // An input dim other than 1 survives broadcasting unchanged (the shape entry must be 1 or it).
  for (size_t i = 0; i < s->size(); ++i) {
    const Dim& d = (*s)[s->size() - 1 - i];
    if (d.is_static() && d.value != 1) out[r - 1 - i] = d;
  }
  c.set_output(0, t, out);
}

void infer_tile(InferContext& c) {
  c.require_dtype(1, {DType::Int64});
  const auto& s = c.input_shape(0);
  const DType t = c.input_dtype(0);
  if (!s) {
    c.set_output(0, t, std::nullopt);
    return;
  }
  const Tensor* v = c.input_value(1);
  if (!v) {
    c.set_output(0, t, unknown_shape(s->size()));
    return;
  }
  auto rep = ints_of(c, *v, "repeats");
  if (rep.size() != s->size())
    c.fail("repeats has " + std::to_string(rep.size()) + " entries but the input has rank " +
           std::to_string(s->size()));
  Shape out(s->size());
  for (size_t i = 0; i < rep.size(); ++i) {
    if (rep[i] < 0) c.fail("repeats must be non-negative");
    out[i] = rep[i] == 0 ? Dim(0) : dims::mul((*s)[i], rep[i], c, "output dim " + std::to_string(i));
  }
  c.set_output(0, t, out);
}

// ---------------------------------------------------------------- Pad

void infer_pad(InferContext& c) {
  const DType t = c.input_dtype(0);
  const std::string mode = c.attr_string("mode");
  if (mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap")
    c.fail("unknown mode '" + mode + "'");
  std::optional<std::vector<int64_t>> pads, axes;
  if (c.opset() < 11) {
    pads = c.attr_ints("pads");
    axes = std::vector<int64_t>{};
  } else {
    c.require_dtype(1, {DType::Int64});
    if (c.has_input(2) && c.input_dtype(2) != t) c.fail("constant_value must have the same type as data");
    require_index(c, 3);
    if (const Tensor* v = c.input_value(1)) pads = ints_of(c, *v, "pads");
    if (!c.has_input(3))
      axes = std::vector<int64_t>{};
    else if (const Tensor* v = c.input_value(3))
      axes = ints_of(c, *v, "axes");
  }
  const auto& s = c.input_shape(0);
  if (!s) {
    c.set_output(0, t, std::nullopt);
    return;
  }
  const int64_t r = static_cast<int64_t>(s->size());
  if (!pads || !axes) {
    c.set_output(0, t, unknown_shape(r));
    return;
  }
  auto p = full_pads(r, *pads, *axes, c);
  Shape out(r);
  for (int64_t i = 0; i < r; ++i) {
    const Dim& d = (*s)[i];
    if (p[i] == 0 && p[r + i] == 0) {
      out[i] = d;
      continue;
    }
    if (!d.is_static()) {
      out[i] = Dim();
      continue;
    }
    // A negative pad crops; it cannot crop more than the dim holds (the kernel reads input
    // coordinate o - pad_begin, which must stay a small number).
    if (p[i] < -d.value || p[r + i] < -d.value)
      c.fail("pads " + std::to_string(p[i]) + ", " + std::to_string(p[r + i]) + " crop more than dim " +
             std::to_string(i) + " holds (" + std::to_string(d.value) + ")");
    const std::string what = "output dim " + std::to_string(i);
    const int64_t o = dims::add(dims::add(d.value, p[i], c, what), p[r + i], c, what);
    if (o < 0) c.fail("pads make dim " + std::to_string(i) + " negative");
    if (mode != "constant" && d.value == 0 && (p[i] > 0 || p[r + i] > 0))
      c.fail("cannot pad an empty dim in mode '" + mode + "'");
    out[i] = o;
  }
  c.set_output(0, t, out);
}

// ---------------------------------------------------------------- Col2Im

/// Col2Im (opset 18, torch's nn.Fold): columns [N, C·∏block, L] summed back into an image
/// [N, C, image...], where L is the number of block positions the padded image holds. The image
/// and block shapes are inputs: the output's dims are known only when they are constants.
void infer_col2im(InferContext& c) {
  const DType t = c.input_dtype(0);
  const auto& s = c.input_shape(0);
  if (s && s->size() != 3) c.fail("input must be 3-D [N, C·prod(block_shape), L], got " + shape_str(*s));
  for (size_t i : {size_t{1}, size_t{2}}) {
    if (c.input_dtype(i) != DType::Int64)
      c.fail(std::string(i == 1 ? "image_shape" : "block_shape") + " must be int64");
    const auto& v = c.input_shape(i);
    if (v && v->size() != 1) c.fail(std::string(i == 1 ? "image_shape" : "block_shape") + " must be 1-D");
  }
  const Tensor* image = c.input_value(1);
  const Tensor* block = c.input_value(2);
  if (!image || !block) {
    const auto& v = c.input_shape(1);
    const bool known = v && (*v)[0].is_static();
    c.set_output(0, t,
                 known ? std::optional<Shape>(unknown_shape(2 + static_cast<size_t>((*v)[0].value))) : std::nullopt);
    return;
  }
  const int64_t n = image->numel();
  if (n < 1 || block->numel() != n) c.fail("image_shape and block_shape must have one length, at least 1");
  const auto attr_or = [&](const char* name, int64_t fill, int64_t len) {
    std::vector<int64_t> v = c.attr_ints(name);
    if (v.empty()) v.assign(static_cast<size_t>(len), fill);
    if (static_cast<int64_t>(v.size()) != len)
      c.fail(std::string(name) + " has " + std::to_string(v.size()) + " values, want " + std::to_string(len));
    return v;
  };
  const std::vector<int64_t> dil = attr_or("dilations", 1, n), pads = attr_or("pads", 0, 2 * n),
                             strides = attr_or("strides", 1, n);
  int64_t blocks = 1, positions = 1;
  for (int64_t d = 0; d < n; ++d) {
    const int64_t img = image->as_int64(d), k = block->as_int64(d);
    if (img < 1 || k < 1 || dil[d] < 1 || strides[d] < 1 || pads[d] < 0 || pads[d + n] < 0)
      c.fail("image_shape, block_shape, dilations and strides must be positive, pads non-negative");
    const int64_t span = dims::add(dims::mul(dil[d], k - 1, c, "dilated block"), 1, c, "dilated block");
    const int64_t padded = dims::add(img, dims::add(pads[d], pads[d + n], c, "pads"), c, "padded image");
    if (padded < span) c.fail("the block (" + std::to_string(span) + " with dilation) is larger than the padded image");
    blocks = dims::mul(blocks, k, c, "block size");
    positions = dims::mul(positions, (padded - span) / strides[d] + 1, c, "block positions");
  }
  Shape out = {s ? (*s)[0] : Dim(), Dim()};
  if (s && (*s)[1].is_static()) {
    if ((*s)[1].value % blocks)
      c.fail("input dim 1 (" + std::to_string((*s)[1].value) + ") is not a multiple of the block's " +
             std::to_string(blocks) + " values");
    out[1] = (*s)[1].value / blocks;
  }
  if (s && (*s)[2].is_static() && (*s)[2].value != positions)
    c.fail("input dim 2 (" + std::to_string((*s)[2].value) + ") is not the " + std::to_string(positions) +
           " block positions the padded image holds");
  for (int64_t d = 0; d < n; ++d) out.push_back(image->as_int64(d));
  c.set_output(0, t, out);
}

// ---------------------------------------------------------------- DepthToSpace, SpaceToDepth

void infer_depth_to_space(InferContext& c) {
  const DType t = c.input_dtype(0);
  const int64_t b = c.attr_int("blocksize");
  if (b <= 0) c.fail("blocksize must be positive");
  if (c.opset() >= 11) {
    std::string m = c.attr_string("mode");
    if (m != "DCR" && m != "CRD") c.fail("unknown mode '" + m + "'");
  }
  const auto& s = c.input_shape(0);
  if (!s) {
    c.set_output(0, t, unknown_shape(4));
    return;
  }
  if (s->size() != 4) c.fail("input must have rank 4, got " + shape_str(*s));
  const int64_t bb = dims::mul(b, b, c, "blocksize^2");
  Shape out = *s;
  const Dim& ch = (*s)[1];
  if (ch.is_static()) {
    if (ch.value % bb) c.fail("channels (" + std::to_string(ch.value) + ") must be divisible by blocksize^2");
    out[1] = ch.value / bb;
  } else {
    out[1] = Dim();
  }
  out[2] = dims::mul((*s)[2], b, c, "output height");
  out[3] = dims::mul((*s)[3], b, c, "output width");
  c.set_output(0, t, out);
}

void infer_space_to_depth(InferContext& c) {
  const DType t = c.input_dtype(0);
  const int64_t b = c.attr_int("blocksize");
  if (b <= 0) c.fail("blocksize must be positive");
  if (c.opset() >= 28) {
    std::string m = c.attr_string("mode");
    if (m != "DCR" && m != "CRD") c.fail("unknown mode '" + m + "'");
  }
  const auto& s = c.input_shape(0);
  if (!s) {
    c.set_output(0, t, unknown_shape(4));
    return;
  }
  if (s->size() != 4) c.fail("input must have rank 4, got " + shape_str(*s));
  Shape out = *s;
  out[1] = dims::mul((*s)[1], dims::mul(b, b, c, "blocksize^2"), c, "output channels");
  for (int i = 2; i < 4; ++i) {
    const Dim& d = (*s)[i];
    if (!d.is_static()) {
      out[i] = Dim();
      continue;
    }
    if (d.value % b) c.fail("spatial dims must be divisible by blocksize, got " + shape_str(*s));
    out[i] = d.value / b;
  }
  c.set_output(0, t, out);
}

// ---------------------------------------------------------------- TopK, Compress, ReverseSequence

void infer_topk(InferContext& c) {
  const DType t = c.input_dtype(0);
  std::optional<int64_t> k;
  if (c.opset() < 10) {
    k = c.attr_int("k");
  } else {
    c.require_dtype(1, {DType::Int64});
    if (const Tensor* v = c.input_value(1)) {
      if (v->numel() != 1) c.fail("k must have exactly one element, got shape " + dims_str(v->dims()));
      k = v->as_int64(0);
    }
  }
  if (k && *k < 0) c.fail("k must be non-negative, got " + std::to_string(*k));
  const auto& s = c.input_shape(0);
  if (!s) {
    c.set_output(0, t, std::nullopt);
    c.set_output(1, DType::Int64, std::nullopt);
    return;
  }
  const int64_t ax = normalize_axis(c.attr_int("axis"), static_cast<int64_t>(s->size()), c);
  Shape out = *s;
  if (k) {
    const Dim& d = (*s)[ax];
    if (d.is_static() && *k > d.value)
      c.fail("k (" + std::to_string(*k) + ") is larger than the axis length (" + std::to_string(d.value) + ")");
    out[ax] = *k;
  } else {
    out[ax] = Dim();
  }
  c.set_output(0, t, out);
  c.set_output(1, DType::Int64, out);
}

void infer_compress(InferContext& c) {
  c.require_dtype(1, {DType::Bool});
  const DType t = c.input_dtype(0);
  const auto& s = c.input_shape(0);
  const Tensor* cond = c.input_value(1);
  if (const auto& cs = c.input_shape(1); cs && cs->size() != 1) c.fail("condition must be 1-D, got " + shape_str(*cs));
  const bool has_axis = c.has_attr("axis");
  // Length of the axis the condition selects along (the flattened input without an axis).
  std::optional<int64_t> len;
  int64_t ax = 0;
  if (s) {
    if (has_axis) {
      ax = normalize_axis(c.attr_int("axis"), static_cast<int64_t>(s->size()), c);
      if ((*s)[ax].is_static()) len = (*s)[ax].value;
    } else if (is_static(*s)) {
      len = checked_numel(static_dims(*s));
    }
  }
  Dim count;
  if (cond) {
    int64_t n = 0;
    for (int64_t i = 0; i < cond->numel(); ++i) {
      if (!cond->as_int64(i)) continue;
      if (len && i >= *len)
        c.fail("condition selects index " + std::to_string(i) + " beyond the axis length " + std::to_string(*len));
      ++n;
    }
    count = n;
  }
  if (!has_axis) {
    c.set_output(0, t, Shape{count});
    return;
  }
  if (!s) {
    c.set_output(0, t, std::nullopt);
    return;
  }
  Shape out = *s;
  out[ax] = count;
  c.set_output(0, t, out);
}

void infer_reverse_sequence(InferContext& c) {
  c.require_dtype(1, {DType::Int64});
  const int64_t ba = c.attr_int("batch_axis"), ta = c.attr_int("time_axis");
  if ((ba != 0 && ba != 1) || (ta != 0 && ta != 1) || ba == ta)
    c.fail("batch_axis and time_axis must be 0 and 1 in some order");
  const auto& s = c.input_shape(0);
  if (s && s->size() < 2) c.fail("input must have rank >= 2");
  const auto& l = c.input_shape(1);
  if (l && l->size() != 1) c.fail("sequence_lens must be 1-D");
  if (s && l && (*s)[ba].is_static() && (*l)[0].is_static() && (*s)[ba].value != (*l)[0].value)
    c.fail("sequence_lens has " + std::to_string((*l)[0].value) + " entries but the batch has " +
           std::to_string((*s)[ba].value));
  c.propagate(0);
}

}  // namespace

void register_movement_schemas(OpRegistry& r) {
  r.add("Transpose")
      .since(1)
      .io(1, 1)
      .attr("perm", AttrKind::Ints)
      .set_infer(infer_transpose)
      .set_cost(cost_data_movement);

  r.add("Concat")
      .since(1, 3)
      .io(1, kUnbounded)
      .attr("axis", AttrKind::Int, AttrValue{int64_t{1}})
      .set_infer(infer_concat)
      .set_cost(cost_data_movement);
  r.add("Concat")
      .since(4)
      .io(1, kUnbounded)
      .required_attr("axis", AttrKind::Int)
      .set_infer(infer_concat)
      .set_cost(cost_data_movement);

  r.add("Split")
      .since(2, 12)
      .io(1, 1, 1, kUnbounded)
      .attr("axis", AttrKind::Int, AttrValue{int64_t{0}})
      .attr("split", AttrKind::Ints)
      .set_infer(infer_split)
      .set_cost(cost_data_movement);
  r.add("Split")
      .since(13, 17)
      .io(1, 2, 1, kUnbounded)
      .attr("axis", AttrKind::Int, AttrValue{int64_t{0}})
      .set_infer(infer_split)
      .set_cost(cost_data_movement);
  r.add("Split")
      .since(18)
      .io(1, 2, 1, kUnbounded)
      .attr("axis", AttrKind::Int, AttrValue{int64_t{0}})
      .attr("num_outputs", AttrKind::Int)
      .set_infer(infer_split)
      .set_cost(cost_data_movement);

  r.add("Slice")
      .since(1, 9)
      .io(1, 1)
      .required_attr("starts", AttrKind::Ints)
      .required_attr("ends", AttrKind::Ints)
      .attr("axes", AttrKind::Ints)
      .set_infer(infer_slice)
      .set_cost(cost_slice);
  r.add("Slice").since(10).io(3, 5).set_infer(infer_slice).set_cost(cost_slice);

  r.add("Gather")
      .since(1)
      .io(2, 2)
      .attr("axis", AttrKind::Int, AttrValue{int64_t{0}})
      .set_infer(infer_gather)
      .set_cost(cost_gather);
  r.add("GatherElements")
      .since(11)
      .io(2, 2)
      .attr("axis", AttrKind::Int, AttrValue{int64_t{0}})
      .set_infer(infer_gather_elements)
      .set_cost(cost_gather);
  r.add("GatherND").since(11, 11).io(2, 2).set_infer(infer_gather_nd).set_cost(cost_gather);
  r.add("GatherND")
      .since(12)
      .io(2, 2)
      .attr("batch_dims", AttrKind::Int, AttrValue{int64_t{0}})
      .set_infer(infer_gather_nd)
      .set_cost(cost_gather);

  // Scatter (opset 9-10) is ScatterElements without reduction under its old name.
  r.add("Scatter")
      .since(9, 10)
      .io(3, 3)
      .attr("axis", AttrKind::Int, AttrValue{int64_t{0}})
      .set_infer(infer_scatter_elements)
      .set_cost(cost_scatter);
  r.add("ScatterElements")
      .since(11, 15)
      .io(3, 3)
      .attr("axis", AttrKind::Int, AttrValue{int64_t{0}})
      .set_infer(infer_scatter_elements)
      .set_cost(cost_scatter);
  r.add("ScatterElements")
      .since(16)
      .io(3, 3)
      .attr("axis", AttrKind::Int, AttrValue{int64_t{0}})
      .attr("reduction", AttrKind::String, AttrValue{std::string("none")})
      .set_infer(infer_scatter_elements)
      .set_cost(cost_scatter);
  r.add("ScatterND").since(11, 15).io(3, 3).set_infer(infer_scatter_nd).set_cost(cost_scatter);
  r.add("ScatterND")
      .since(16)
      .io(3, 3)
      .attr("reduction", AttrKind::String, AttrValue{std::string("none")})
      .set_infer(infer_scatter_nd)
      .set_cost(cost_scatter);

  r.add("Expand").since(8).io(2, 2).set_infer(infer_expand).set_cost(cost_data_movement);
  r.add("Tile").since(6).io(2, 2).set_infer(infer_tile).set_cost(cost_data_movement);

  r.add("Pad")
      .since(2, 10)
      .io(1, 1)
      .attr("mode", AttrKind::String, AttrValue{std::string("constant")})
      .required_attr("pads", AttrKind::Ints)
      .attr("value", AttrKind::Float, AttrValue{0.0f})
      .set_infer(infer_pad)
      .set_cost(cost_data_movement);
  r.add("Pad")
      .since(11, 17)
      .io(2, 3)
      .attr("mode", AttrKind::String, AttrValue{std::string("constant")})
      .set_infer(infer_pad)
      .set_cost(cost_data_movement);
  r.add("Pad")
      .since(18)
      .io(2, 4)
      .attr("mode", AttrKind::String, AttrValue{std::string("constant")})
      .set_infer(infer_pad)
      .set_cost(cost_data_movement);

  r.add("Col2Im")
      .since(18)
      .io(3, 3)
      .attr("dilations", AttrKind::Ints, AttrValue{std::vector<int64_t>{}})
      .attr("pads", AttrKind::Ints, AttrValue{std::vector<int64_t>{}})
      .attr("strides", AttrKind::Ints, AttrValue{std::vector<int64_t>{}})
      .set_infer(infer_col2im)
      .set_cost(cost_data_movement);
  r.add("DepthToSpace")
      .since(1, 10)
      .io(1, 1)
      .required_attr("blocksize", AttrKind::Int)
      .set_infer(infer_depth_to_space)
      .set_cost(cost_data_movement);
  r.add("DepthToSpace")
      .since(11)
      .io(1, 1)
      .required_attr("blocksize", AttrKind::Int)
      .attr("mode", AttrKind::String, AttrValue{std::string("DCR")})
      .set_infer(infer_depth_to_space)
      .set_cost(cost_data_movement);
  r.add("SpaceToDepth")
      .since(1, 27)
      .io(1, 1)
      .required_attr("blocksize", AttrKind::Int)
      .set_infer(infer_space_to_depth)
      .set_cost(cost_data_movement);
  r.add("SpaceToDepth")
      .since(28)
      .io(1, 1)
      .required_attr("blocksize", AttrKind::Int)
      .attr("mode", AttrKind::String, AttrValue{std::string("DCR")})
      .set_infer(infer_space_to_depth)
      .set_cost(cost_data_movement);

  r.add("TopK")
      .since(1, 9)
      .io(1, 1, 2, 2)
      .attr("axis", AttrKind::Int, AttrValue{int64_t{-1}})
      .required_attr("k", AttrKind::Int)
      .set_infer(infer_topk)
      .set_cost(cost_data_movement);
  r.add("TopK")
      .since(10, 10)
      .io(2, 2, 2, 2)
      .attr("axis", AttrKind::Int, AttrValue{int64_t{-1}})
      .set_infer(infer_topk)
      .set_cost(cost_data_movement);
  r.add("TopK")
      .since(11)
      .io(2, 2, 2, 2)
      .attr("axis", AttrKind::Int, AttrValue{int64_t{-1}})
      .attr("largest", AttrKind::Int, AttrValue{int64_t{1}})
      .attr("sorted", AttrKind::Int, AttrValue{int64_t{1}})
      .set_infer(infer_topk)
      .set_cost(cost_data_movement);

  r.add("Compress")
      .since(9)
      .io(2, 2)
      .attr("axis", AttrKind::Int)
      .set_infer(infer_compress)
      .set_cost(cost_data_movement);
  r.add("ReverseSequence")
      .since(10)
      .io(2, 2)
      .attr("batch_axis", AttrKind::Int, AttrValue{int64_t{1}})
      .attr("time_axis", AttrKind::Int, AttrValue{int64_t{0}})
      .set_infer(infer_reverse_sequence)
      .set_cost(cost_data_movement);
}

}  // namespace fusec
