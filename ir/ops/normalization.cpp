// Normalizations: BatchNormalization, InstanceNormalization, GroupNormalization, LayerNormalization
// (also in domain ai.fusec, so fusion passes can emit it below opset 17), RMSNormalization,
// MeanVarianceNormalization, LRN.
#include "ir/op_schema.h"
#include "ir/ops/all_ops.h"

namespace fusec {

namespace {

/// Input i must be 1-D with `c` entries (when both are known).
void require_channel_vector(const InferContext& ctx, size_t i, const Dim& c, const char* what) {
  const auto& s = ctx.input_shape(i);
  if (!s) return;
  if (s->size() != 1) ctx.fail(std::string(what) + " must be 1-D, got shape " + shape_str(*s));
  if ((*s)[0].is_static() && c.is_static() && (*s)[0].value != c.value)
    ctx.fail(std::string(what) + " has " + (*s)[0].str() + " entries for " + c.str() + " channels");
}

/// BatchNormalization. Test mode normalizes with the given mean/var; training mode (training_mode=1
/// from opset 14, or more than one output before) with the batch statistics, and also returns the
/// running statistics updated with `momentum` (and, before 14, the batch mean and variance).
void infer_batchnorm(InferContext& c) {
  c.require_float(0);
  for (size_t i = 1; i < 5; ++i) c.require_float(i);
  const auto& x = c.input_shape(0);
  Dim channels;
  if (x) {
    if (x->size() < 2) c.fail("X must have shape [N, C, ...], got " + shape_str(*x));
    channels = (*x)[1];
  }
  const bool spatial = !c.schema().find_attr("spatial") || c.attr_int("spatial") != 0;
  const char* names[] = {"", "scale", "B", "mean", "var"};
  // spatial=0 (opsets 6-8) takes per-activation parameters of shape [C, D1, ...]; the kernel
  // checks their size.
  if (spatial)
    for (size_t i = 1; i < 5; ++i) require_channel_vector(c, i, channels, names[i]);
  c.propagate(0);
  const DType stat = c.input_dtype(3);
  Shape cshape{channels};
  for (size_t i = 1; i < c.num_outputs(); ++i) c.set_output(i, stat, cshape);
}

void infer_instancenorm(InferContext& c) {
  c.require_float(0);
  const auto& x = c.input_shape(0);
  if (x) {
    if (x->size() < 2) c.fail("input must have shape [N, C, ...], got " + shape_str(*x));
    require_channel_vector(c, 1, (*x)[1], "scale");
    require_channel_vector(c, 2, (*x)[1], "B");
  }
  c.propagate(0);
}

/// Scale/B of LayerNormalization must broadcast (unidirectionally) to X's normalized dims [axis:].
void require_broadcasts_to(const InferContext& c, size_t i, const Shape& to, const char* what) {
  const auto& s = c.input_shape(i);
  if (!s) return;
  if (s->size() > to.size())
    c.fail(std::string(what) + " shape " + shape_str(*s) + " does not broadcast to " + shape_str(to));
  for (size_t k = 0; k < s->size(); ++k) {
    const Dim& a = (*s)[s->size() - 1 - k];
    const Dim& b = to[to.size() - 1 - k];
    if (a.is_static() && b.is_static() && a.value != 1 && a.value != b.value)
      c.fail(std::string(what) + " shape " + shape_str(*s) + " does not broadcast to " + shape_str(to));
  }
}

DType stash_dtype(const InferContext& c) {
  const int64_t code = c.attr_int("stash_type");
  DType t = dtype_from_onnx(static_cast<int32_t>(code));
  if (!is_float(t)) c.fail("stash_type " + std::to_string(code) + " is not a supported float type");
  return t;
}

void infer_layernorm(InferContext& c) {
  c.require_float(0);
  const DType stash = stash_dtype(c);
  const auto& x = c.input_shape(0);
  if (c.input_dtype(1) != c.input_dtype(0)) c.fail("Scale must have the type of X");
  if (c.has_input(2) && c.input_dtype(2) != c.input_dtype(0)) c.fail("B must have the type of X");
  c.propagate(0);
  if (!x) {
    c.set_output(1, stash, std::nullopt);
    c.set_output(2, stash, std::nullopt);
    return;
  }
  const int64_t rank = static_cast<int64_t>(x->size());
  if (rank == 0) c.fail("X must have rank >= 1");
  const int64_t axis = normalize_axis(c.attr_int("axis"), rank, c);
  Shape normalized(x->begin() + axis, x->end());
  require_broadcasts_to(c, 1, normalized, "Scale");
  if (c.has_input(2)) require_broadcasts_to(c, 2, normalized, "B");
  Shape stats(x->begin(), x->begin() + axis);
  stats.resize(x->size(), Dim(1));
  c.set_output(1, stash, stats);
  c.set_output(2, stash, stats);
}

/// RMSNormalization (opset 23): X's type T, Scale's (and Y's) type V, Scale broadcasting
/// (unidirectionally) to X.
void infer_rmsnorm(InferContext& c) {
  c.require_float(0);
  c.require_float(1);
  stash_dtype(c);
  const auto& x = c.input_shape(0);
  if (x) {
    const int64_t rank = static_cast<int64_t>(x->size());
    if (rank == 0) c.fail("X must have rank >= 1");
    normalize_axis(c.attr_int("axis"), rank, c);
    require_broadcasts_to(c, 1, *x, "scale");
  }
  c.set_output(0, c.input_dtype(1), x);
}

/// GroupNormalization: X [N, C, ...] in num_groups groups of C / num_groups channels; scale and
/// bias hold one value per group (opset 18) or per channel (opset 21).
void infer_groupnorm(InferContext& c) {
  c.require_float(0);
  const int64_t groups = c.attr_int("num_groups");
  if (groups <= 0) c.fail("num_groups must be positive, got " + std::to_string(groups));
  if (c.schema().find_attr("stash_type")) stash_dtype(c);
  for (size_t i : {size_t(1), size_t(2)})
    if (c.input_dtype(i) != c.input_dtype(0))
      c.fail(std::string(i == 1 ? "scale" : "bias") + " must have the type of X");
  const auto& x = c.input_shape(0);
  if (x) {
    if (x->size() < 2) c.fail("X must have shape [N, C, ...], got " + shape_str(*x));
    const Dim& ch = (*x)[1];
    if (ch.is_static() && ch.value % groups != 0)
      c.fail("num_groups " + std::to_string(groups) + " does not divide the " + ch.str() + " channels");
    const bool per_channel = c.opset() >= 21;
    require_channel_vector(c, 1, per_channel ? ch : Dim(groups), "scale");
    require_channel_vector(c, 2, per_channel ? ch : Dim(groups), "bias");
  }
  c.propagate(0);
}

void infer_mvn(InferContext& c) {
  c.require_float(0);
  const auto& x = c.input_shape(0);
  if (x)
    for (int64_t a : c.attr_ints("axes")) normalize_axis(a, static_cast<int64_t>(x->size()), c);
  c.propagate(0);
}

void infer_lrn(InferContext& c) {
  c.require_float(0);
  const auto& x = c.input_shape(0);
  if (x && x->size() < 2) c.fail("X must have shape [N, C, ...], got " + shape_str(*x));
  if (c.attr_int("size") <= 0) c.fail("size must be positive");
  c.propagate(0);
}

void infer_lpnorm(InferContext& c) {
  c.require_float(0);
  const int64_t p = c.attr_int("p");
  if (p != 1 && p != 2) c.fail("p must be 1 or 2, not " + std::to_string(p));
  if (const auto& x = c.input_shape(0)) normalize_axis(c.attr_int("axis"), static_cast<int64_t>(x->size()), c);
  c.propagate(0);
}

void declare_layernorm(OpSchema& s) {
  s.io(2, 3, 1, 3)
      .attr("axis", AttrKind::Int, AttrValue{int64_t{-1}})
      .attr("epsilon", AttrKind::Float, AttrValue{1e-5f})
      .attr("stash_type", AttrKind::Int, AttrValue{int64_t{1}})
      .set_infer(infer_layernorm)
      // mean (1), centre (1), square-accumulate (2), scale by inv-std (1), affine (2), plus the
      // per-row rsqrt: ~8 per element with the one-off terms rounded in.
      .set_cost([](const CostContext& c) { return cost_elementwise(c, 8); });
}

}  // namespace

void register_normalization_schemas(OpRegistry& r) {
  // BatchNormalization cost: 2 per element (inference folds to x*s + b; training adds the
  // statistics pass, ~3 more per element, which we count too).
  auto bn_cost = [](const CostContext& c) {
    const bool training = c.out_dims.size() > 1;
    return cost_elementwise(c, training ? 5 : 2);
  };
  r.add("BatchNormalization")
      .since(6, 6)
      .io(5, 5, 1, 5)
      .attr("epsilon", AttrKind::Float, AttrValue{1e-5f})
      .attr("is_test", AttrKind::Int, AttrValue{int64_t{0}})
      .attr("momentum", AttrKind::Float, AttrValue{0.9f})
      .attr("spatial", AttrKind::Int, AttrValue{int64_t{1}})
      .set_infer(infer_batchnorm)
      .set_cost(bn_cost);
  r.add("BatchNormalization")
      .since(7, 8)
      .io(5, 5, 1, 5)
      .attr("epsilon", AttrKind::Float, AttrValue{1e-5f})
      .attr("momentum", AttrKind::Float, AttrValue{0.9f})
      .attr("spatial", AttrKind::Int, AttrValue{int64_t{1}})
      .set_infer(infer_batchnorm)
      .set_cost(bn_cost);
  r.add("BatchNormalization")
      .since(9, 13)
      .io(5, 5, 1, 5)
      .attr("epsilon", AttrKind::Float, AttrValue{1e-5f})
      .attr("momentum", AttrKind::Float, AttrValue{0.9f})
      .set_infer(infer_batchnorm)
      .set_cost(bn_cost);
  r.add("BatchNormalization")
      .since(14)
      .io(5, 5, 1, 3)
      .attr("epsilon", AttrKind::Float, AttrValue{1e-5f})
      .attr("momentum", AttrKind::Float, AttrValue{0.9f})
      .attr("training_mode", AttrKind::Int, AttrValue{int64_t{0}})
      .set_infer(infer_batchnorm)
      .set_cost(bn_cost);

  // InstanceNormalization: mean, variance, normalize, affine: ~8 per element like LayerNorm.
  r.add("InstanceNormalization")
      .since(6)
      .io(3, 3)
      .attr("epsilon", AttrKind::Float, AttrValue{1e-5f})
      .set_infer(infer_instancenorm)
      .set_cost([](const CostContext& c) { return cost_elementwise(c, 8); });

  declare_layernorm(r.add("LayerNormalization").since(17));
  declare_layernorm(r.add("LayerNormalization", "ai.fusec").since(1));

  // RMSNormalization: square-accumulate (2), scale by the inverse root (1), times scale (1).
  r.add("RMSNormalization")
      .since(23)
      .io(2, 2)
      .attr("axis", AttrKind::Int, AttrValue{int64_t{-1}})
      .attr("epsilon", AttrKind::Float, AttrValue{1e-5f})
      .attr("stash_type", AttrKind::Int, AttrValue{int64_t{1}})
      .set_infer(infer_rmsnorm)
      .set_cost([](const CostContext& c) { return cost_elementwise(c, 4); });

  // GroupNormalization: as InstanceNormalization, ~8 per element.
  auto groupnorm_cost = [](const CostContext& c) { return cost_elementwise(c, 8); };
  r.add("GroupNormalization")
      .since(18, 20)
      .io(3, 3)
      .attr("epsilon", AttrKind::Float, AttrValue{1e-5f})
      .required_attr("num_groups", AttrKind::Int)
      .set_infer(infer_groupnorm)
      .set_cost(groupnorm_cost);
  r.add("GroupNormalization")
      .since(21)
      .io(3, 3)
      .attr("epsilon", AttrKind::Float, AttrValue{1e-5f})
      .attr("stash_type", AttrKind::Int, AttrValue{int64_t{1}})
      .required_attr("num_groups", AttrKind::Int)
      .set_infer(infer_groupnorm)
      .set_cost(groupnorm_cost);

  // LpNormalization: accumulate |x| or x² (2), divide (1).
  r.add("LpNormalization")
      .since(1)
      .io(1, 1)
      .attr("axis", AttrKind::Int, AttrValue{int64_t{-1}})
      .attr("p", AttrKind::Int, AttrValue{int64_t{2}})
      .set_infer(infer_lpnorm)
      .set_cost([](const CostContext& c) { return cost_elementwise(c, 3); });

  // MVN: mean (1), centre (1), square-accumulate (2), divide by std (1): 5 per element.
  r.add("MeanVarianceNormalization")
      .since(9)
      .io(1, 1)
      .attr("axes", AttrKind::Ints, AttrValue{std::vector<int64_t>{0, 2, 3}})
      .set_infer(infer_mvn)
      .set_cost([](const CostContext& c) { return cost_elementwise(c, 5); });

  // LRN: per element a window of `size` squares summed (2 per term), then bias + alpha/size*sum,
  // pow and divide (~3 more; pow counted as one op).
  r.add("LRN")
      .since(1)
      .io(1, 1)
      .attr("alpha", AttrKind::Float, AttrValue{1e-4f})
      .attr("beta", AttrKind::Float, AttrValue{0.75f})
      .attr("bias", AttrKind::Float, AttrValue{1.0f})
      .required_attr("size", AttrKind::Int)
      .set_infer(infer_lrn)
      .set_cost([](const CostContext& c) {
        const int64_t size = c.node.attr_int("size", 1);
        return cost_elementwise(c, 2.0 * static_cast<double>(size) + 3);
      });
}

}  // namespace fusec
