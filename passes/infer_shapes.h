// Shape binding (--batch, --shape) and whole-graph type/shape inference.
#pragma once
#include <cstdint>
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

/// Parses trtexec's "name:16x3x224x224" (the name may itself contain ':'; the last one splits).
std::pair<std::string, std::vector<int64_t>> parse_shape_flag(const std::string& flag);

/// Applies --shape and --batch to the graph inputs. A symbol bound on one input is bound
/// everywhere it appears. Errors: unknown input name (lists the real ones), rank mismatch,
/// contradiction with a static dim, an ambiguous --batch.
void bind_input_shapes(Graph& g, const ShapeBindings& b);

struct InferOptions {
  /// Evaluate nodes whose inputs are all known (shape subgraphs) when the result has at most this
  /// many elements, so Reshape/Expand/Slice targets computed from Shape become known.
  int64_t max_propagated_elements = 4096;
};

/// Infers every value's dtype and shape from the graph inputs, in topological order, merging with
/// what the file declared (value_info). Unsupported ops leave their outputs as declared.
/// Throws BadInput naming the node on inconsistent types or shapes.
void infer_shapes(Graph& g, const InferOptions& opts = {});

/// Names of values (graph outputs and intermediates) whose shape is not fully static.
std::vector<std::string> non_static_values(const Graph& g);

/// Throws BadInput naming the first non-static values (and how to bind them) if any remain.
void require_static_shapes(const Graph& g);

}  // namespace fusec
