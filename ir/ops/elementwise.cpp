// Elementwise arithmetic, comparison and logic ops with ONNX multidirectional broadcasting.
#include "ir/op_schema.h"
#include "ir/ops/all_ops.h"

namespace fusec {

namespace {

void infer_same_type_broadcast(InferContext& ctx) {
  DType t = ctx.input_dtype(0);
  for (size_t i = 1; i < ctx.num_inputs(); ++i)
    if (ctx.has_input(i) && ctx.input_dtype(i) != t)
      ctx.fail(std::string("inputs have different types: ") + dtype_name(t) + " and " +
               dtype_name(ctx.input_dtype(i)));
  ctx.set_output(0, t, broadcast_all_inputs(ctx));
}

}  // namespace

void register_elementwise_schemas(OpRegistry& r) {
  // Binary arithmetic: opset 7 introduced numpy broadcasting; older versions (with the `broadcast`
  // attribute) are not supported.
  for (const char* op : {"Add", "Sub", "Mul", "Div"})
    r.add(op).since(7).io(2, 2).set_infer(infer_same_type_broadcast).set_cost([](const CostContext& c) {
      return cost_elementwise(c, 1);
    });
}

}  // namespace fusec
