// ai.fusec FusedElementwise: one node for a whole region of elementwise float math, written by the
// fuse_elementwise pass. Its `program` (ir/ops/elementwise_program.h, docs/fused_elementwise.md)
// says what each output element is, in terms of the inputs' broadcast elements.
#include <climits>

#include "ir/op_schema.h"
#include "ir/ops/all_ops.h"
#include "ir/ops/elementwise_program.h"

namespace fusec {

void register_fused_elementwise_schemas(OpRegistry& r) {
  r.add("FusedElementwise", "ai.fusec")
      .since(1)
      .io(1, INT_MAX)
      .required_attr("program", AttrKind::String)
      .set_infer([](InferContext& c) {
        const int n = static_cast<int>(c.num_inputs());
        for (int i = 0; i < n; ++i)
          if (!c.has_input(static_cast<size_t>(i)))
            c.fail("input " + std::to_string(i) + " is left out; every input is required");
        DType t = c.input_dtype(0);
        if (t != DType::Float32 && t != DType::Float16 && t != DType::BFloat16)
          c.fail(std::string("inputs must be float32, float16 or bfloat16, not ") + dtype_name(t));
        for (int i = 1; i < n; ++i)
          if (c.input_dtype(static_cast<size_t>(i)) != t)
            c.fail(std::string("inputs have different types: ") + dtype_name(t) + " and " +
                   dtype_name(c.input_dtype(static_cast<size_t>(i))));
        elementwise_program_of(c, n);  // validates
        c.set_output(0, t, broadcast_all_inputs(c));
      })
      .set_cost([](const CostContext& c) {
        // One operation per instruction per output element; inputs read once, output written once.
        std::string error;
        auto p =
            parse_elementwise_program(c.node.attr_string("program", ""), static_cast<int>(c.in_dims.size()), &error);
        return cost_elementwise(c, p ? static_cast<double>(p->code.size()) : 0.0);
      })
      .set_doc("Y = program(X0, X1, ...) elementwise over the inputs' broadcast shape (docs/fused_elementwise.md)");
}

}  // namespace fusec
