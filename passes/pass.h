// The pass interface: a pass rewrites a graph and says whether it changed anything, recording each
// rewrite (which user nodes it replaced) and each near-miss (a pattern that almost matched, and
// why it did not), so `fusec optimize --explain` can answer "why was this not fused?".
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace fusec {

struct Rewrite {
  std::string pass;
  std::string what;                   // "Conv 'c1' + BatchNormalization 'bn1' -> Conv 'c1'"
  std::vector<std::string> replaced;  // names of the nodes that are gone or absorbed
  std::string result;                 // name of the node that now stands for them ("" if removed)
};

struct NearMiss {
  std::string pass;
  std::string what;    // "Conv 'c3' -> BatchNormalization 'bn3' not fused"
  std::string reason;  // "the conv output has 2 consumers"
};

struct PassOptions {
  /// Write only standard ONNX ops (no ai.fusec domain), so onnxruntime/TensorRT can load the result.
  bool portable = false;
  /// Constant folding skips outputs larger than this (bytes), so folding never bloats a model.
  int64_t fold_size_cap = 64ll << 20;
};

class PassContext {
 public:
  explicit PassContext(PassOptions o = {}) : opts(o) {}
  PassOptions opts;
  std::vector<Rewrite> rewrites;
  std::vector<NearMiss> near_misses;

  void rewrite(const std::string& pass, std::string what, std::vector<std::string> replaced, std::string result) {
    rewrites.push_back({pass, std::move(what), std::move(replaced), std::move(result)});
  }
  void near_miss(const std::string& pass, std::string what, std::string reason) {
    near_misses.push_back({pass, std::move(what), std::move(reason)});
  }
};

class Pass {
 public:
  virtual ~Pass() = default;
  virtual std::string name() const = 0;
  /// One sweep over the graph. Returns true if the graph changed.
  virtual bool run(Graph& g, PassContext& ctx) = 0;
};

/// "Conv 'c1'": how rewrites and near-misses name a node.
inline std::string describe(const Node* n) { return n->op_type + " '" + n->name + "'"; }

}  // namespace fusec
