// Shape inference with the CPU reference computing shape subgraphs: what the passes, the CLI and
// the tests call. ir/shape_inference.h holds the inference itself.
#pragma once
#include "ir/shape_inference.h"

namespace fusec {

/// infer_shapes with the CPU reference backend as the evaluator (cpu::evaluate_node).
void infer_shapes(Graph& g, const InferOptions& opts = {});

}  // namespace fusec
