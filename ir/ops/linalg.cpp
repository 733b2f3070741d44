// Matrix products: MatMul (numpy semantics), Gemm (BLAS-style with a broadcast bias), Einsum.
#include "ir/op_schema.h"
#include "ir/ops/all_ops.h"
#include "ir/ops/einsum.h"
#include "ir/ops/linalg.h"

namespace fusec {

std::optional<Shape> matmul_output_shape(const InferContext& c, size_t ai, size_t bi) {
  const auto& sa = c.input_shape(ai);
  const auto& sb = c.input_shape(bi);
  if (!sa || !sb) return std::nullopt;
  if (sa->empty() || sb->empty()) c.fail("MatMul operands must have rank >= 1");
  Shape a = *sa, b = *sb;
  const bool a_vec = a.size() == 1, b_vec = b.size() == 1;
  if (a_vec) a.insert(a.begin(), Dim(1));
  if (b_vec) b.push_back(Dim(1));
  const Dim& k1 = a[a.size() - 1];
  const Dim& k2 = b[b.size() - 2];
  if (k1.is_static() && k2.is_static() && k1.value != k2.value)
    c.fail("inner dimensions differ: " + shape_str(*sa) + " x " + shape_str(*sb));
  Shape out = broadcast_shapes(Shape(a.begin(), a.end() - 2), Shape(b.begin(), b.end() - 2), c);
  if (!a_vec) out.push_back(a[a.size() - 2]);
  if (!b_vec) out.push_back(b[b.size() - 1]);
  return out;
}

namespace {

void require_same_types(const InferContext& c) {
  DType t = c.input_dtype(0);
  for (size_t i = 1; i < c.num_inputs(); ++i)
    if (c.has_input(i) && c.input_dtype(i) != t)
      c.fail(std::string("inputs have different types: ") + dtype_name(t) + " and " + dtype_name(c.input_dtype(i)));
}

void require_matmul_type(const InferContext& c, size_t i) {
  c.require_dtype(i, {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int32, DType::Int64});
}

// MatMul: [..., M, K] x [..., K, N] -> [broadcast(...), M, N]; a 1-D first operand gains a
// leading 1 and a 1-D second operand a trailing 1, both removed from the result.
void infer_matmul(InferContext& c) {
  require_same_types(c);
  require_matmul_type(c, 0);
  c.set_output(0, c.input_dtype(0), matmul_output_shape(c, 0, 1));
}

Cost cost_matmul(const CostContext& c) {
  const auto& a = c.in_dims[0];
  const double k = a.empty() ? 0 : static_cast<double>(a.back());
  return {2 * c.out_numel(0) * k, c.all_in_bytes(), c.all_out_bytes()};
}

// Gemm: Y = alpha·op(A)·op(B) + beta·C with A, B 2-D and C unidirectionally broadcast to (M, N).
void infer_gemm(InferContext& c) {
  require_same_types(c);
  require_matmul_type(c, 0);
  const DType t = c.input_dtype(0);
  const auto& sa = c.input_shape(0);
  const auto& sb = c.input_shape(1);
  if (sa && sa->size() != 2) c.fail("A must be 2-D, got " + shape_str(*sa));
  if (sb && sb->size() != 2) c.fail("B must be 2-D, got " + shape_str(*sb));
  const bool ta = c.attr_int("transA") != 0, tb = c.attr_int("transB") != 0;
  Dim m, n, ka, kb;
  if (sa) {
    m = (*sa)[ta ? 1 : 0];
    ka = (*sa)[ta ? 0 : 1];
  }
  if (sb) {
    kb = (*sb)[tb ? 1 : 0];
    n = (*sb)[tb ? 0 : 1];
  }
  if (ka.is_static() && kb.is_static() && ka.value != kb.value)
    c.fail("inner dimensions differ: A " + shape_str(*sa) + " and B " + shape_str(*sb) +
           (ta || tb ? " (after transA/transB)" : ""));
  if (c.has_input(2) && c.input_shape(2)) {
    const Shape& sc = *c.input_shape(2);
    if (sc.size() > 2) c.fail("C must have rank <= 2, got " + shape_str(sc));
    const Dim* target[2] = {&m, &n};
    for (size_t i = 0; i < sc.size(); ++i) {
      const Dim& want = *target[2 - sc.size() + i];
      if (sc[i].is_static() && want.is_static() && sc[i].value != 1 && sc[i].value != want.value)
        c.fail("C of shape " + shape_str(sc) + " cannot be broadcast to (" + want.str() + ") in dim " +
               std::to_string(i) + " of the output");
    }
  }
  c.set_output(0, t, Shape{m, n});
}

Cost cost_gemm(const CostContext& c) {
  const auto& a = c.in_dims[0];
  const double k = a.size() == 2 ? static_cast<double>(a[c.node.attr_int("transA", 0) ? 0 : 1]) : 0;
  const double mn = c.out_numel(0);
  return {2 * mn * k + (c.has_input(2) ? 2 * mn : 0), c.all_in_bytes(), c.all_out_bytes()};
}

void infer_einsum(InferContext& c) {
  require_same_types(c);
  c.require_dtype(0, {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int8, DType::UInt8,
                      DType::Int16, DType::Int32, DType::Int64});
  const DType t = c.input_dtype(0);
  std::vector<size_t> ranks;
  for (size_t i = 0; i < c.num_inputs(); ++i) {
    if (!c.has_input(i)) c.fail("input " + std::to_string(i) + " is empty");
    if (!c.input_shape(i)) {
      c.set_output(0, t, std::nullopt);
      return;
    }
    ranks.push_back(c.input_shape(i)->size());
  }
  EinsumSpec spec = parse_einsum(c.attr_string("equation"), ranks, c);
  // Each label's dim: a static size other than 1 wins (1 broadcasts); sizes must agree.
  std::vector<Dim> size(52 + spec.ellipsis_rank, Dim(1));
  std::vector<bool> seen(size.size(), false);
  for (size_t k = 0; k < spec.inputs.size(); ++k) {
    const Shape& s = *c.input_shape(k);
    for (size_t d = 0; d < s.size(); ++d) {
      const int l = spec.inputs[k][d];
      const Dim& x = s[d];
      Dim& cur = size[l];
      if (!seen[l]) {
        cur = x;
        seen[l] = true;
      } else if (x.is_static() && cur.is_static()) {
        if (x.value != cur.value && x.value != 1 && cur.value != 1)
          c.fail("equation label sizes differ: " + std::to_string(cur.value) + " vs " + std::to_string(x.value));
        if (cur.value == 1) cur = x;
      } else if (x.is_static() && x.value != 1) {
        cur = x;
      } else if (!x.is_static() && cur.is_static() && cur.value == 1) {
        cur = x;
      }
    }
  }
  Shape out;
  for (int l : spec.output) out.push_back(size[l]);
  c.set_output(0, t, out);
}

Cost cost_einsum(const CostContext& c) {
  std::vector<size_t> ranks;
  for (const auto& d : c.in_dims) ranks.push_back(d.size());
  // Cost functions get no NodeAttrs; the registered schema serves for error reporting (the equation
  // was already validated by inference).
  const OpSchema& schema = *OpRegistry::global().find("", "Einsum", 12);
  EinsumSpec spec = parse_einsum(c.node.attr_string("equation", ""), ranks, NodeAttrs(c.node, schema));
  std::vector<double> size(52 + spec.ellipsis_rank, 1);
  for (size_t k = 0; k < spec.inputs.size(); ++k)
    for (size_t d = 0; d < c.in_dims[k].size(); ++d)
      size[spec.inputs[k][d]] = std::max(size[spec.inputs[k][d]], static_cast<double>(c.in_dims[k][d]));
  double iterations = 1;
  for (double s : size) iterations *= s;
  // Every point of the full index space: (inputs - 1) multiplies and one add.
  return {iterations * static_cast<double>(c.in_dims.size()), c.all_in_bytes(), c.all_out_bytes()};
}

// Det: [*, M, M] -> [*].
void infer_det(InferContext& c) {
  c.require_float(0);
  const auto& s = c.input_shape(0);
  if (!s) return c.set_output(0, c.input_dtype(0), std::nullopt);
  if (s->size() < 2) c.fail("Det needs a matrix or a batch of them, got " + shape_str(*s));
  const Dim &m = (*s)[s->size() - 2], &n = (*s)[s->size() - 1];
  if (m.is_static() && n.is_static() && m.value != n.value) c.fail("Det needs square matrices, got " + shape_str(*s));
  c.set_output(0, c.input_dtype(0), Shape(s->begin(), s->end() - 2));
}

/// An LU factorization per matrix: about (2/3)·M^3 flops.
Cost cost_det(const CostContext& c) {
  const auto& d = c.in_dims[0];
  const double m = d.empty() ? 0 : static_cast<double>(d.back());
  return {c.out_numel(0) * 2 * m * m * m / 3, c.all_in_bytes(), c.all_out_bytes()};
}

}  // namespace

void register_linalg_schemas(OpRegistry& r) {
  r.add("Det").since(11).io(1, 1).set_infer(infer_det).set_cost(cost_det);
  r.add("MatMul").since(1).io(2, 2).set_infer(infer_matmul).set_cost(cost_matmul);

  // Gemm 1-6 carry a `broadcast` flag for C; 7 made C's broadcast implicit; 11 made C optional.
  r.add("Gemm")
      .since(1, 6)
      .io(3, 3)
      .attr("alpha", AttrKind::Float, AttrValue{1.0f})
      .attr("beta", AttrKind::Float, AttrValue{1.0f})
      .attr("transA", AttrKind::Int, AttrValue{int64_t{0}})
      .attr("transB", AttrKind::Int, AttrValue{int64_t{0}})
      .attr("broadcast", AttrKind::Int, AttrValue{int64_t{0}})
      .set_infer(infer_gemm)
      .set_cost(cost_gemm);
  r.add("Gemm")
      .since(7, 10)
      .io(3, 3)
      .attr("alpha", AttrKind::Float, AttrValue{1.0f})
      .attr("beta", AttrKind::Float, AttrValue{1.0f})
      .attr("transA", AttrKind::Int, AttrValue{int64_t{0}})
      .attr("transB", AttrKind::Int, AttrValue{int64_t{0}})
      .set_infer(infer_gemm)
      .set_cost(cost_gemm);
  r.add("Gemm")
      .since(11)
      .io(2, 3)
      .attr("alpha", AttrKind::Float, AttrValue{1.0f})
      .attr("beta", AttrKind::Float, AttrValue{1.0f})
      .attr("transA", AttrKind::Int, AttrValue{int64_t{0}})
      .attr("transB", AttrKind::Int, AttrValue{int64_t{0}})
      .set_infer(infer_gemm)
      .set_cost(cost_gemm);

  r.add("Einsum")
      .since(12)
      .io(1, 1 << 20)
      .required_attr("equation", AttrKind::String)
      .set_infer(infer_einsum)
      .set_cost(cost_einsum);
}

}  // namespace fusec
