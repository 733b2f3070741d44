// Softmax, LogSoftmax, Hardmax and the two classification losses built on them
// (NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss).
//
// Before opset 13 the softmax family coerces its input to 2-D at `axis` (default 1) and normalizes
// over everything from `axis` on; from 13 it normalizes along the single axis `axis` (default -1).
#include "ir/op_schema.h"
#include "ir/ops/all_ops.h"

namespace fusec {

namespace {

void infer_softmax(InferContext& c) {
  c.require_float(0);
  const auto& s = c.input_shape(0);
  if (s) {
    const int64_t rank = static_cast<int64_t>(s->size());
    if (rank == 0) c.fail("softmax needs an input of rank >= 1");
    normalize_axis(c.attr_int("axis"), rank, c);
  }
  c.propagate(0);
}

// The target/labels input of the losses: same shape as the scores without the class dim 1.
void check_loss_inputs(InferContext& c) {
  c.require_float(0);
  c.require_dtype(1, {DType::Int32, DType::Int64});
  if (c.has_input(2)) {
    if (c.input_dtype(2) != c.input_dtype(0)) c.fail("weights must have the type of the scores");
    const auto& w = c.input_shape(2);
    if (w && w->size() != 1) c.fail("weights must be a 1-D tensor of size C");
  }
  const auto& x = c.input_shape(0);
  const auto& t = c.input_shape(1);
  if (x && x->size() < 2) c.fail("scores must have shape [N, C, d1, ...]");
  if (!x || !t) return;
  if (t->size() + 1 != x->size()) c.fail("target must have shape [N, d1, ...] for scores " + shape_str(*x));
  for (size_t i = 0; i < t->size(); ++i) {
    const Dim& a = (*x)[i == 0 ? 0 : i + 1];
    const Dim& b = (*t)[i];
    if (a.is_static() && b.is_static() && a.value != b.value)
      c.fail("target shape " + shape_str(*t) + " does not match scores shape " + shape_str(*x));
  }
  const auto& w = c.has_input(2) ? c.input_shape(2) : std::nullopt;
  if (w && (*w)[0].is_static() && (*x)[1].is_static() && (*w)[0].value != (*x)[1].value)
    c.fail("weights have " + (*w)[0].str() + " entries for " + (*x)[1].str() + " classes");
}

void infer_loss(InferContext& c) {
  check_loss_inputs(c);
  const std::string reduction = c.attr_string("reduction");
  if (reduction != "none" && reduction != "sum" && reduction != "mean")
    c.fail("reduction must be 'none', 'sum' or 'mean', not '" + reduction + "'");
  const DType t = c.input_dtype(0);
  if (reduction == "none")
    c.set_output(0, t, c.input_shape(1));
  else
    c.set_output(0, t, Shape{});
  c.set_output(1, t, c.input_shape(0));  // SoftmaxCrossEntropyLoss's log_prob
}

}  // namespace

void register_softmax_schemas(OpRegistry& r) {
  // Cost per element: Softmax = max, subtract, exp, sum, multiply by 1/sum (5);
  // LogSoftmax = max, subtract, exp, sum, subtract log-sum (5); Hardmax = one compare (1).
  const struct {
    const char* name;
    double flops;
  } ops[] = {{"Softmax", 5}, {"LogSoftmax", 5}, {"Hardmax", 1}};
  for (const auto& op : ops) {
    const double f = op.flops;
    r.add(op.name)
        .since(1, 12)
        .io(1, 1)
        .attr("axis", AttrKind::Int, AttrValue{int64_t{1}})
        .set_infer(infer_softmax)
        .set_cost([f](const CostContext& c) { return cost_elementwise(c, f); });
    r.add(op.name)
        .since(13)
        .io(1, 1)
        .attr("axis", AttrKind::Int, AttrValue{int64_t{-1}})
        .set_infer(infer_softmax)
        .set_cost([f](const CostContext& c) { return cost_elementwise(c, f); });
  }
  // NLL: per target element a gather, a weight multiply and an add into the reduction (3).
  r.add("NegativeLogLikelihoodLoss")
      .since(12)
      .io(2, 3)
      .attr("ignore_index", AttrKind::Int)
      .attr("reduction", AttrKind::String, AttrValue{std::string("mean")})
      .set_infer(infer_loss)
      .set_cost([](const CostContext& c) {
        return Cost{3 * c.in_numel(1), c.all_in_bytes(), c.all_out_bytes()};
      });
  // SCE: a log-softmax over the scores (5 per score) plus the NLL above (3 per label).
  r.add("SoftmaxCrossEntropyLoss")
      .since(12)
      .io(2, 3, 1, 2)
      .attr("ignore_index", AttrKind::Int)
      .attr("reduction", AttrKind::String, AttrValue{std::string("mean")})
      .set_infer(infer_loss)
      .set_cost([](const CostContext& c) {
        return Cost{5 * c.in_numel(0) + 3 * c.in_numel(1), c.all_in_bytes(), c.all_out_bytes()};
      });
}

}  // namespace fusec
