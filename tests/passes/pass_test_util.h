// Helpers shared by the pass tests: run one pass (checking a second run changes nothing) or one
// pass through the pipeline driver, count ops, find a node, deterministic data, and the checks
// every pass test makes: same numbers, graph unchanged, a near-miss given.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "passes/infer_shapes.h"
#include "passes/pass.h"
#include "passes/pipeline.h"
#include "passes/verify.h"
#include "test_util.h"

namespace fusec::test {

/// Nodes of op type `op` in `domain` ("" is ai.onnx).
inline int count(const Graph& g, const std::string& op, const std::string& domain = "") {
  int n = 0;
  for (const auto& node : g.nodes()) n += node->op_type == op && node->domain == domain;
  return n;
}

/// Nodes of op type `op` in any domain.
inline int count_any_domain(const Graph& g, const std::string& op) {
  int n = 0;
  for (const auto& node : g.nodes()) n += node->op_type == op;
  return n;
}

/// The node named `name`, or nullptr.
inline const Node* node_named(const Graph& g, const std::string& name) {
  for (const auto& n : g.nodes())
    if (n->name == name) return n.get();
  return nullptr;
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

/// Runs the pass named `pass` alone through the pipeline driver (to a fixed point), as
/// `fusec optimize` would with only that pass.
struct PipelineOutcome {
  std::unique_ptr<Graph> original, optimized;
  OptimizeResult opt;
};

inline PipelineOutcome run_through_pipeline(std::unique_ptr<Graph> g, const std::string& pass, bool portable = false) {
  infer_shapes(*g);
  PipelineOutcome r;
  r.original = g->clone();
  PipelineOptions po;
  po.only = {pass};
  po.pass.portable = portable;
  r.opt = optimize_graph(*g, po);
  r.optimized = std::move(g);
  return r;
}

/// Runs the whole pipeline, as `fusec optimize` does.
inline PipelineOutcome run_full_pipeline(std::unique_ptr<Graph> g) {
  infer_shapes(*g);
  PipelineOutcome r;
  r.original = g->clone();
  r.opt = optimize_graph(*g, PipelineOptions{});
  r.optimized = std::move(g);
  return r;
}

/// Every output of `optimized` within `tol` (default 1e-4 relative / 1e-5 absolute) of `original`
/// on seeded random inputs (two runs).
/// Binds every open dim of the graph's inputs to n, as `fusec optimize` verifies a model whose batch
/// is left open (verify_equivalence takes static inputs).
inline void bind_open_dims(Graph& g, int64_t n = 2) {
  for (Value* v : g.inputs)
    if (v->type.shape)
      for (Dim& d : *v->type.shape)
        if (!d.is_static()) d = Dim(n);
}

inline void expect_same_numbers(const Graph& original, const Graph& optimized, uint64_t seed,
                                const Tolerance& tol = {1e-4, 1e-5}) {
  VerifyResult v = verify_equivalence(original, optimized, 2, seed, tol);
  for (const auto& o : v.outputs) EXPECT_TRUE(o.ok) << o.name << ": max abs " << o.max_abs << " " << o.problem;
  EXPECT_TRUE(v.ok);
}

inline void expect_unchanged(const Graph& original, const Graph& optimized) {
  EXPECT_EQ(graph_difference(original, optimized), "");
}

/// The near-miss of `pass` (any pass if empty) whose what or reason mentions `needle`, or nullptr.
inline const NearMiss* find_near_miss(const std::vector<NearMiss>& all, const std::string& pass,
                                      const std::string& needle) {
  for (const auto& m : all)
    if ((pass.empty() || m.pass == pass) && (m.what + " | " + m.reason).find(needle) != std::string::npos) return &m;
  return nullptr;
}

/// Not rewritten: the graph is bit-for-bit the same and a near-miss of `pass` (any pass if empty)
/// mentions `reason`.
inline void expect_near_miss(const Outcome& o, const std::string& pass, const std::string& reason) {
  EXPECT_FALSE(o.changed);
  expect_unchanged(*o.original, *o.optimized);
  std::string all;
  for (const auto& m : o.ctx.near_misses) all += "\n  " + m.what + ": " + m.reason;
  EXPECT_NE(find_near_miss(o.ctx.near_misses, pass, reason), nullptr)
      << "no near-miss mentioning '" << reason << "'; got:" << all;
}

}  // namespace fusec::test
