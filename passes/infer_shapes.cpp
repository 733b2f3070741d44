#include "passes/infer_shapes.h"

#include "backend/cpu/kernel.h"

namespace fusec {

void infer_shapes(Graph& g, const InferOptions& opts) { infer_shapes(g, cpu::evaluate_node, opts); }

}  // namespace fusec
