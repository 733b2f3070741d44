// The host tail of a graph for a GPU plan: where shapes stop being known before the run. A plan
// places every value before the first launch, so it needs every shape; past a node whose output's
// shape is its data's (NonZero, NonMaxSuppression, Unique, an If whose branches differ), nothing
// that reads it can be placed. The tail is those nodes and every node that reads what one of them
// computes; the GPU runs the rest, and the CPU reference runs the tail after it, finding the
// shapes as it goes (backend/cuda/executor/host_tail.cpp). Host-side, so that the split is tested
// where there is no GPU: the prefix and the tail, each run on the CPU, give the whole graph's outputs.
#pragma once
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "ir/graph.h"

namespace fusec {

struct TailSplit {
  std::vector<bool> in_tail;  // per node of the graph, in its order
  std::string why;            // "the shape of 'V' depends on its data (node ..., op ...)": the first
  bool any() const { return !nodes.empty(); }
  bool has(const Node* n) const { return nodes.count(n) > 0; }
  std::unordered_set<const Node*> nodes;  // the same nodes, for lookups by node
};

/// The tail of `g`, whose nodes are in order and whose shapes were inferred for its inputs' dims
/// (and the values the plan is specialized on): every node with a used output whose type or shape
/// is still not known, and every node after one that reads what a tail node computes.
TailSplit find_host_tail(const Graph& g);

struct TailGraph {
  /// The tail nodes (attributes and names kept) over their own values. Its inputs are the values
  /// of `g` the tail reads and does not compute, initializers aside, which stay initializers; its
  /// outputs are the outputs of `g` the tail computes. Values the tail computes carry no shape.
  std::unique_ptr<Graph> graph;
  std::vector<Value*> reads;   // per input of `graph`: the value of `g` that feeds it
  std::vector<int> output_of;  // per output of `g`: its index among graph's outputs, or -1
};
TailGraph make_tail_graph(const Graph& g, const std::vector<bool>& in_tail);

/// `g` without the tail's nodes, as a graph of its own that the CPU reference can run where the GPU
/// part would: its outputs are g's outputs the tail does not compute, in order, then the values
/// `tail` reads that are not graph inputs, in `tail.reads` order. For checking and timing the split
/// without a GPU (tests/host_tail_split.h, scripts/lab/host_tail_time.cpp).
std::unique_ptr<Graph> graph_before_tail(const Graph& g, const std::vector<bool>& in_tail, const TailGraph& tail);

}  // namespace fusec
