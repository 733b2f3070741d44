// Shape binding (--batch, --shape) and whole-graph type/shape inference. The values of small
// shape subgraphs (Shape -> Gather -> Concat -> Reshape) are computed by an evaluator the caller
// injects, so ir/ needs no backend: passes/infer_shapes.h supplies the CPU reference's.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ir/graph.h"

namespace fusec {

struct ShapeBindings {
  std::optional<int64_t> batch;                                      // --batch N
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes;  // --shape name:AxBxC
};

/// Applies --shape and --batch to the graph inputs. A symbol bound on one input is bound
/// everywhere it appears. Errors: unknown input name (lists the real ones), rank mismatch,
/// contradiction with a static dim, an ambiguous --batch.
void bind_input_shapes(Graph& g, const ShapeBindings& b);

struct InferOptions {
  /// Evaluate nodes whose inputs are all known (shape subgraphs) when the result has at most this
  /// many elements, so Reshape/Expand/Slice targets computed from Shape become known.
  int64_t max_propagated_elements = 4096;
};

/// Computes one node's outputs from its input tensors (`opset` is the node's domain's opset).
using NodeEvaluator =
    std::function<std::vector<Tensor>(const Node& n, int64_t opset, const std::vector<const Tensor*>& inputs)>;

/// Infers every value's dtype and shape from the graph inputs, in topological order, merging with
/// what the file declared (value_info). Unsupported ops leave their outputs as declared. Nodes
/// whose inputs are all known and small are computed with `evaluate` (empty: none are).
/// Throws BadInput naming the node on inconsistent types or shapes.
void infer_shapes(Graph& g, const NodeEvaluator& evaluate, const InferOptions& opts = {});

/// Names of values (graph outputs and intermediates) whose shape is not fully static.
std::vector<std::string> non_static_values(const Graph& g);

/// Throws BadInput naming the inputs whose shapes are not fully known, and how to bind them. Values
/// whose shapes the inputs' values decide (a Reshape target fed as an input, NonZero's output) may
/// stay unknown: the CPU reference finds them as it runs, and the CUDA backend plans with the
/// inputs' values or runs the nodes past them on the host (backend/host_tail.h).
void require_bound_inputs(const Graph& g);

}  // namespace fusec
