// optimize --dot before.dot,after.dot and --svg before.svg,after.svg: the graph before and after
// the pipeline (ir/graph_dot.h), as DOT text or rendered by Graphviz's `dot` when it is installed.
#pragma once
#include <string>

#include "ir/graph.h"

namespace fusec::cli {

/// `dot_pair` / `svg_pair`: "BEFORE,AFTER" (either may be empty: not asked for). BadInput for a
/// value that is not two comma-separated paths, an unwritable file, or --svg without Graphviz.
void write_graph_pictures(const Graph& original, const Graph& optimized, const std::string& dot_pair,
                          const std::string& svg_pair);

/// Checks the flags' form before any work ("--dot needs two paths: before.dot,after.dot") and
/// claims the four paths as outputs of the command (importer/file_claims.h).
void check_picture_flags(const std::string& dot_pair, const std::string& svg_pair);

}  // namespace fusec::cli
