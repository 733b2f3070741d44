// What a fusion does once its pattern has matched, written once: remove the matched nodes (noting
// their names and the user's nodes behind them), add the node that stands for them, record the
// rewrite, or record the near-miss when a guard said no. A pass file then holds only its pattern
// (match and guards) and its replacement (which op, which inputs and attributes).
//
//   Rewriter r(g, ctx, name());
//   for (Node* n : g.node_list()) {
//     if (r.removed(n) || !is_op(n, "LayerNormalization")) continue;   // walk
//     ...match...; if (!why.empty()) { r.near_miss(what, why); continue; }   // guard
//     Replaced gone = r.remove({add, n});                                      // rewrite
//     Node* fused = r.add("SkipLayerNorm", ins, outs, name, "ai.fusec", gone.origins);
//     r.rewrote(gone.listed + " -> " + describe(fused), gone.names, name);
//   }
//   return r.changed();
//
// Removing a node does not drop the values only it used: the replacement usually writes them.
// Call Graph::remove_unused_values once nothing more is wired (each pass says when).
#pragma once
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "ir/graph.h"
#include "passes/pass.h"

namespace fusec {

/// Matched nodes as a rewrite records them, described before they are removed.
struct Replaced {
  std::vector<std::string> names;    // their names, in match order (Rewrite::replaced)
  std::vector<std::string> origins;  // the user's nodes behind them (fused_origins): a fused_from
  std::string listed;                // "Add 'a' + LayerNormalization 'ln'", for Rewrite::what
};

/// One pass's sweep over a graph: the graph edits every fusion makes, and its record of rewrites
/// and near-misses (PassContext) under the pass's name.
class Rewriter {
 public:
  Rewriter(Graph& g, PassContext& ctx, std::string pass) : g_(g), ctx_(ctx), pass_(std::move(pass)) {}

  Graph& graph() const { return g_; }
  const PassOptions& opts() const { return ctx_.opts; }

  /// Records why `what` was not rewritten. Returns false, so a guard can `return r.near_miss(...)`.
  bool near_miss(const std::string& what, const std::string& why);
  /// Records a rewrite: `what` happened, the nodes named `replaced` are gone or absorbed, `result`
  /// names the node that now stands for them. Counts it: changed() is true from then on.
  void rewrote(std::string what, std::vector<std::string> replaced, std::string result);
  /// Whether this sweep rewrote anything: what Pass::run returns.
  bool changed() const { return changed_; }

  /// Describes `nodes` (see Replaced), then removes them from the graph.
  Replaced remove(const std::vector<Node*>& nodes);
  /// True when this rewriter removed `n`: a node list taken before a rewrite still holds it.
  bool removed(const Node* n) const { return removed_.count(n) > 0; }
  /// Adds the node standing for removed ones: `op` in `domain` (declaring ai.fusec when it is that),
  /// named `name`, with fused_from = `origins`.
  Node* add(const std::string& op, std::vector<Value*> inputs, std::vector<Value*> outputs, const std::string& name,
            const std::string& domain, std::vector<std::string> origins);
  /// `keep` takes in `chain`, the nodes after it that each read the one before: keep now writes
  /// the last one's output 0 (so its name, readers and graph-output status survive), the chain is
  /// removed, and keep's fused_from lists keep's origins then the chain's. Returns the chain's
  /// description. keep's op, attributes and other inputs are the caller's to change.
  Replaced absorb(Node* keep, const std::vector<Node*>& chain);

 private:
  Graph& g_;
  PassContext& ctx_;
  std::string pass_;
  bool changed_ = false;
  std::unordered_set<const Node*> removed_;
};

}  // namespace fusec
