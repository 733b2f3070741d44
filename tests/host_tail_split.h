// A graph run as the CUDA executor splits it for a host tail (backend/host_tail.h), with both parts
// on the CPU reference: the graph without the tail's nodes, then the tail graph fed from what that
// computed. The host-tail tests and the conformance runner's --split-tail mode compare it with the
// whole graph's run, so the split is checked where there is no GPU.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/host_tail.h"
#include "ir/graph.h"

namespace fusec::test {

/// g's outputs, computed by the nodes outside `in_tail` (one per node of g, in order; every node
/// after one in it must be in it too where it reads what that computes), then by the tail.
inline std::vector<Tensor> run_split_on_cpu(const Graph& g, const std::vector<bool>& in_tail,
                                            const std::vector<Tensor>& inputs) {
  TailGraph tail = make_tail_graph(g, in_tail);
  auto prefix = graph_before_tail(g, in_tail, tail);
  std::vector<std::string> names;
  for (Value* v : prefix->outputs) names.push_back(v->name);
  std::map<std::string, Tensor> have;
  for (size_t i = 0; i < g.inputs.size() && i < inputs.size(); ++i) have[g.inputs[i]->name] = inputs[i];
  if (!names.empty()) {
    const auto got = cpu::CpuBackend().compile(*prefix)->run(inputs);
    for (size_t i = 0; i < names.size(); ++i) have[names[i]] = got[i];
  }
  std::vector<Tensor> tail_in;
  for (Value* v : tail.reads) tail_in.push_back(have.at(v->name));
  std::vector<Tensor> tail_out;
  if (!tail.graph->nodes().empty()) tail_out = cpu::CpuBackend().compile(*tail.graph)->run(tail_in);
  std::vector<Tensor> outs;
  for (size_t i = 0; i < g.outputs.size(); ++i)
    outs.push_back(tail.output_of[i] >= 0 ? tail_out[tail.output_of[i]] : have.at(g.outputs[i]->name));
  return outs;
}

/// The tail a forced cut at node `k` makes: node k and every node after it.
inline std::vector<bool> tail_from(const Graph& g, size_t k) {
  std::vector<bool> in(g.nodes().size(), false);
  for (size_t i = k; i < in.size(); ++i) in[i] = true;
  return in;
}

}  // namespace fusec::test
