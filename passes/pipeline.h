// The optimization pipeline: one explicit list of passes, run to a fixed point.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "passes/pass.h"

namespace fusec {

struct PipelineOptions {
  PassOptions pass;
  std::vector<std::string> only;  // --passes a,b: run just these (in pipeline order)
  std::vector<std::string> skip;  // --skip a,b
  int max_iterations = 8;
};

struct PassStats {
  std::string name;
  int rewrites = 0;
  double ms = 0;
};

struct OptimizeResult {
  std::vector<PassStats> per_pass;  // in pipeline order, summed over iterations
  std::vector<Rewrite> rewrites;
  std::vector<NearMiss> near_misses;  // from every sweep, each reported once
  int iterations = 0;
};

/// The passes in pipeline order.
std::vector<std::unique_ptr<Pass>> default_pipeline();
std::vector<std::string> pipeline_pass_names();

/// Adds one sweep's near-misses to those of the sweeps before (each reported once), then drops
/// every near-miss that names a node one of the sweep's rewrites by the same pass replaced: that
/// pattern was not missed after all.
void merge_near_misses(std::vector<NearMiss>& all, std::vector<NearMiss> sweep, const std::vector<Rewrite>& rewrites);

/// Runs the pipeline on `g` (shapes should be bound and inferred) until nothing changes.
/// Unknown names in only/skip are a BadInput error listing the real ones.
OptimizeResult optimize_graph(Graph& g, const PipelineOptions& opts);

}  // namespace fusec
