// Helpers shared by the pass tests: run one pass (checking a second run changes nothing), count
// ops, find a node, deterministic data.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "passes/infer_shapes.h"
#include "passes/pass.h"
#include "test_util.h"

namespace fusec::test {

/// Nodes of op type `op` in `domain` ("" is ai.onnx).
inline int count(const Graph& g, const std::string& op, const std::string& domain = "") {
  int n = 0;
  for (const auto& node : g.nodes()) n += node->op_type == op && node->domain == domain;
  return n;
}

/// The first node of op type `op` (any domain), or nullptr.
inline const Node* find_op(const Graph& g, const std::string& op) {
  for (const auto& n : g.nodes())
    if (n->op_type == op) return n.get();
  return nullptr;
}

inline std::vector<float> ramp(size_t n, float from, float step) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = from + step * static_cast<float>(i);
  return v;
}

struct Outcome {
  std::unique_ptr<Graph> original, optimized;
  PassContext ctx;
  bool changed = false;
};

/// Runs pass P once on `g` (shapes inferred first), keeps the original for comparison, and checks
/// the result validates and that a second run changes nothing.
template <typename P>
Outcome run_one_pass(std::unique_ptr<Graph> g, PassOptions opts = {}) {
  infer_shapes(*g);
  Outcome o;
  o.original = g->clone();
  o.ctx = PassContext(opts);
  P pass;
  o.changed = pass.run(*g, o.ctx);
  g->topo_sort();
  infer_shapes(*g);
  validate_graph(*g);
  PassContext again(opts);
  EXPECT_FALSE(pass.run(*g, again)) << "not idempotent";
  o.optimized = std::move(g);
  return o;
}

}  // namespace fusec::test
