// The interface every backend implements: compile a graph once, run it many times.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/tensor.h"

namespace fusec {

struct MemoryStats {
  size_t peak_activation_bytes = 0;  // planned (static shapes) or observed (dynamic) peak
  size_t weight_bytes = 0;           // initializers
  size_t packed_weight_bytes = 0;    // CPU: weights packed for the GEMM on first use (a copy beside them)
  bool planned = false;              // true when a static plan was made at compile time
};

/// One step of a run as the profiler sees it: a node's kernel(s), or a step the backend added
/// (a dtype conversion of a graph input, a layout change, a copy), which has no node.
struct StepInfo {
  size_t index = 0;            // position in execution order, stable for one plan
  const Node* node = nullptr;  // in executed_graph(); null for steps the backend added
  const char* kind = "";       // "node" (CPU backend); CUDA: "kernel", "cpu" (fallback), "convert", "copy", "relayout"
  std::string label;           // node name, or what an added step does ("convert input 'x'")
};

/// Told, on the launching thread, around each step of a run (profiler attribution). The CUDA
/// backend calls it while it enqueues work (also while capturing a CUDA graph), not when the GPU
/// executes it.
class StepObserver {
 public:
  virtual ~StepObserver() = default;
  virtual void step_begin(const StepInfo& step) = 0;
  virtual void step_end(const StepInfo& step) = 0;
};

/// A compiled graph. Inputs and outputs are host tensors in graph order.
class Executable {
 public:
  virtual ~Executable() = default;
  virtual std::vector<Tensor> run(const std::vector<Tensor>& inputs) = 0;
  virtual MemoryStats memory() const = 0;
  virtual std::string backend_name() const = 0;
  /// Null detaches. The observer must outlive the runs it watches.
  virtual void set_step_observer(StepObserver* observer) = 0;
  /// The graph the steps' nodes belong to (shapes as planned), or null before the first run of a
  /// model whose plan waits for the inputs.
  virtual const Graph* executed_graph() const = 0;
};

struct UnsupportedNode {
  std::string node, op_type, domain, reason;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  /// Nodes this backend cannot run, each with the reason (empty: it can run the graph).
  virtual std::vector<UnsupportedNode> unsupported(const Graph& g) const = 0;
  /// Throws BadInput listing every unsupported node at once.
  virtual std::unique_ptr<Executable> compile(const Graph& g) = 0;
  /// Throws BadInput when running `g` (shapes bound) clearly needs more memory than this backend
  /// may use. Host-side arithmetic, cheap: the CLI calls it before it makes any input, so a batch
  /// that cannot fit fails in seconds. The CPU backend checks each allocation as it happens instead.
  virtual void check_memory(const Graph& g) const { (void)g; }
};

/// Checks a host tensor against the graph input it feeds (dtype, rank, static dims); BadInput
/// naming the input otherwise. Every backend's run() starts with it.
void check_input_tensor(const Value& v, const Tensor& t);

/// "fusec: error" text for a list of unsupported nodes: every one named, with its op.
std::string describe_unsupported(const std::vector<UnsupportedNode>& nodes);

}  // namespace fusec
