// A graph as Graphviz DOT text, for `fusec optimize --dot before.dot,after.dot`.
//
//   before:  conv1 ─▶ bn1 ─▶ relu1         the three nodes share one colour: the colour of the
//   after:   conv1 [FusedConv]              fused node that absorbed them, labelled with their
//            absorbed: conv1 Conv, bn1 ...  names and ops
//
// Nodes are boxes (op type, name, output shape), graph inputs and outputs ellipses; initializers
// are not drawn (their count is in the label). In the "before" picture a node that no node of the
// optimized graph stands for (folded into a constant, or removed as a no-op) is grey and dashed.
#pragma once
#include <string>

#include "ir/graph.h"

namespace fusec {

struct DotPair {
  std::string before, after;
};

/// DOT text of the original and the optimized graph. Fusion groups are read from the optimized
/// nodes' fused_from (the names of the original nodes each one replaced).
DotPair graphs_to_dot(const Graph& original, const Graph& optimized);

}  // namespace fusec
