// Nodes with subgraphs (If, Loop): the inputs they take for their bodies' outer-scope reads, and
// the bodies themselves (ir/attribute.h, SubGraph).
#pragma once
#include <cstddef>
#include <string>

#include "ir/graph.h"

namespace fusec {

/// How many of n's inputs are captured outer values (the last ones), 0 for a node without subgraphs.
size_t captured_input_count(const Node& n);
/// The inputs n's op declares: its inputs without the captured ones.
size_t declared_input_count(const Node& n);
/// n's subgraph attribute `name`, or nullptr.
const SubGraph* subgraph_attr(const Node& n, const std::string& name);
/// Whether n has a subgraph attribute (GRAPH or GRAPHS).
bool has_subgraph(const Node& n);

}  // namespace fusec
