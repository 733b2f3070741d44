// Which nodes of a model the CUDA plan keeps in float32 at fp16 (backend/float32_island.h), without
// a GPU: the island of the graph as imported, less the nodes the plan folds (every input constant,
// or Shape/Size), as the planner folds them. One line per island node and per consumer that reads
// an absolute value, then a count by op. Build with scripts/lab/build_island_probe.sh (needs build/).
//
//     build/lab/island_probe model.onnx [fp16|bf16|tf32]
#include <cstdio>
#include <map>
#include <string>
#include <unordered_set>

#include "backend/float32_island.h"
#include "importer/onnx_import.h"
#include "ir/error.h"
#include "passes/infer_shapes.h"

using namespace fusec;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: island_probe model.onnx [fp16|bf16|tf32]\n");
    return 2;
  }
  try {
    const Precision p = parse_precision(argc > 2 ? argv[2] : "fp16");
    auto g = import_onnx_file(argv[1]);
    infer_shapes(*g);
    const size_t split = split_position_sums(*g, p);
    if (split) std::printf("split %zu position sum(s) out of fused convs and matmuls\n", split);
    std::unordered_set<const Value*> constant;
    for (const Value* v : g->values())
      if (v->is_initializer()) constant.insert(v);
    std::unordered_set<const Node*> folded;
    for (const auto& n : g->nodes()) {
      bool all = n->op_type.rfind("Random", 0) != 0;
      for (const Value* v : n->inputs)
        if (v && !constant.count(v)) all = false;
      if (all || n->op_type == "Shape" || n->op_type == "Size") {
        folded.insert(n.get());
        for (const Value* o : n->outputs)
          if (o) constant.insert(o);
      }
    }
    const Float32Island island = float32_island(*g, p);
    std::map<std::string, int> by_op;
    for (const auto& n : g->nodes()) {
      if (folded.count(n.get())) continue;
      if (island.nodes.count(n.get())) {
        ++by_op[n->op_type];
        std::printf("island %s %s\n", n->op_type.c_str(), n->name.c_str());
      }
      for (size_t i = 0; i < n->inputs.size(); ++i)
        if (n->inputs[i] && reads_absolute_value(*n, i))
          std::printf("reads  %s %s input %zu '%s' (%s)\n", n->op_type.c_str(), n->name.c_str(), i,
                      n->inputs[i]->name.c_str(), island.values.count(n->inputs[i]) ? "float32" : "run type");
    }
    int total = 0;
    std::string ops;
    for (const auto& [op, k] : by_op) {
      total += k;
      ops += " " + std::to_string(k) + " " + op;
    }
    std::printf("%s: %d of %zu nodes in the float32 island at %s at run time%s%s\n", argv[1], total, g->nodes().size(),
                precision_name(p), ops.empty() ? "" : ":", ops.c_str());
  } catch (const Error& e) {
    std::fprintf(stderr, "island_probe: %s\n", e.what());
    return 1;
  }
  return 0;
}
