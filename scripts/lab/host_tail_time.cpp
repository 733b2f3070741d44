// Times a model split as the CUDA executor splits it for a host tail (backend/host_tail.h), with
// both parts on the CPU reference: the whole graph, the part before the tail, and the tail fed from
// it. What the tail costs on the host is what a CUDA run adds after its GPU part.
//
//   cmake --build build --target fusec_host_tail_time
//   build/fusec_host_tail_time MODEL.onnx [ROUNDS]        (default 5 rounds; the median of each)
//
// The inputs are the model's own input shapes (every dim must be fixed), filled with a fixed
// pattern in [0, 1). Prints the first value whose shape depends on data, the tail's node count and
// its heaviest ops, the three medians and the tail's heaviest nodes, and checks that the split gives the whole graph's
// outputs bit for bit.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/kernel.h"
#include "backend/host_tail.h"
#include "importer/onnx_import.h"
#include "ir/error.h"
#include "ir/memory_limit.h"
#include "passes/infer_shapes.h"

using namespace fusec;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// Time per node of the tail, summed over the rounds.
class NodeTimes : public StepObserver {
 public:
  void step_begin(const StepInfo&) override { t0_ = std::chrono::steady_clock::now(); }
  void step_end(const StepInfo& s) override {
    if (s.node) ms_[s.node->op_type + " " + s.node->name] += 1e3 * seconds_since(t0_);
  }
  void print(int rounds, size_t top) const {
    std::vector<std::pair<double, std::string>> v;
    for (const auto& [k, ms] : ms_) v.push_back({ms / rounds, k});
    std::sort(v.rbegin(), v.rend());
    std::printf("  heaviest tail nodes (mean ms a round):\n");
    for (size_t i = 0; i < v.size() && i < top; ++i) std::printf("    %8.3f  %s\n", v[i].first, v[i].second.c_str());
  }

 private:
  std::chrono::steady_clock::time_point t0_;
  std::map<std::string, double> ms_;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

Tensor pattern_input(const Value& v) {
  if (!v.type.shape || !is_static(*v.type.shape))
    throw Error(ErrorKind::BadInput, "input '" + v.name + "' has no fixed shape");
  if (v.type.dtype != DType::Float32) throw Error(ErrorKind::BadInput, "input '" + v.name + "' is not float32");
  const auto dims = static_dims(*v.type.shape);
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<float> x(static_cast<size_t>(n));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 2654435761u) % 1000) / 1000.0f;
  return Tensor::from_float(x, dims);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: fusec_host_tail_time MODEL.onnx [ROUNDS]\n");
    return 2;
  }
  keep_freed_memory_for_reuse();  // as fusec's main() does
  try {
    const int rounds = argc > 2 ? std::max(1, std::atoi(argv[2])) : 5;
    auto g = import_onnx_file(argv[1]);
    for (Value* v : g->values())
      if (v->producer && !v->is_initializer()) v->type.shape.reset();
    infer_shapes(*g, cpu::evaluate_node);
    const TailSplit split = find_host_tail(*g);
    if (!split.any()) {
      std::printf("%s: every shape is known before the run: no host tail\n", argv[1]);
      return 0;
    }
    std::map<std::string, int> ops;
    for (size_t i = 0; i < g->nodes().size(); ++i)
      if (split.in_tail[i]) ops[g->nodes()[i]->op_type]++;

    // The part before the tail computes the graph's other outputs and what the tail reads.
    TailGraph tail = make_tail_graph(*g, split.in_tail);
    auto prefix = graph_before_tail(*g, split.in_tail, tail);
    std::vector<std::string> names;
    for (Value* v : prefix->outputs) names.push_back(v->name);

    std::vector<Tensor> inputs;
    for (Value* v : g->inputs) inputs.push_back(pattern_input(*v));
    auto whole = cpu::CpuBackend().compile(*g);
    auto before = cpu::CpuBackend().compile(*prefix);
    auto after = cpu::CpuBackend().compile(*tail.graph);
    NodeTimes node_times;
    after->set_step_observer(&node_times);
    std::vector<double> t_whole, t_before, t_after;
    bool same = true;
    for (int r = 0; r < rounds; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      const auto want = whole->run(inputs);
      t_whole.push_back(seconds_since(t0));
      t0 = std::chrono::steady_clock::now();
      const auto got = before->run(inputs);
      t_before.push_back(seconds_since(t0));
      std::map<std::string, Tensor> have;
      for (size_t i = 0; i < g->inputs.size(); ++i) have[g->inputs[i]->name] = inputs[i];
      for (size_t i = 0; i < names.size(); ++i) have[names[i]] = got[i];
      std::vector<Tensor> tail_in;
      for (Value* v : tail.reads) tail_in.push_back(have.at(v->name));
      t0 = std::chrono::steady_clock::now();
      const auto tail_out = after->run(tail_in);
      t_after.push_back(seconds_since(t0));
      for (size_t i = 0; i < g->outputs.size(); ++i) {
        const Tensor& o = tail.output_of[i] >= 0 ? tail_out[tail.output_of[i]] : have.at(g->outputs[i]->name);
        same = same && o.dims() == want[i].dims() && o.bytes_equal(want[i]);
      }
    }
    std::printf("%s\n  the tail starts where %s\n  tail: %zu of %zu nodes;", argv[1], split.why.c_str(),
                tail.graph->nodes().size(), g->nodes().size());
    std::vector<std::pair<int, std::string>> by_count;
    for (const auto& [op, n] : ops) by_count.push_back({n, op});
    std::sort(by_count.rbegin(), by_count.rend());
    for (size_t i = 0; i < by_count.size() && i < 8; ++i)
      std::printf(" %s %d", by_count[i].second.c_str(), by_count[i].first);
    std::printf("\n  CPU reference, median of %d: whole %.4f s, before the tail %.4f s, the tail %.4f s\n", rounds,
                median(t_whole), median(t_before), median(t_after));
    node_times.print(rounds, 10);
    std::printf("  split outputs %s the whole graph's\n", same ? "equal" : "DIFFER FROM");
    return same ? 0 : 1;
  } catch (const Error& e) {
    std::fprintf(stderr, "fusec_host_tail_time: error: %s\n", e.what());
    return 2;
  }
}
