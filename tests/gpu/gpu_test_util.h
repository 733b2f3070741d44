// Helpers for the GPU suite: skip without a device, random data, and the differential check every
// CUDA kernel goes through: one node run on the CPU reference (float32) and on the CUDA backend
// at a given precision, each output compared relative to its magnitude.
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/core/context.h"
#include "backend/cuda/cuda_backend.h"
#include "ir/graph_builder.h"

namespace fusec::test {

#define FUSEC_REQUIRE_GPU()                                                                   \
  do {                                                                                        \
    std::string fusec_why_;                                                                   \
    if (!::fusec::cuda::gpu_available(&fusec_why_)) GTEST_SKIP() << "no GPU: " << fusec_why_; \
  } while (0)

/// Seeded uniform data in [lo, hi) (floats), or [lo, hi) truncated for integer types.
Tensor random_tensor(DType dtype, std::vector<int64_t> dims, uint64_t seed, double lo = -1, double hi = 1);

/// One node over the given inputs. Inputs listed in `constant` become initializers (weights, shape
/// operands); the others are graph inputs.
struct OpCase {
  std::string op, domain;
  int64_t opset = 17;
  std::vector<Tensor> inputs;  // an undefined Tensor leaves that optional input out
  std::set<size_t> constant;   // indices of inputs that are initializers
  std::vector<NamedAttribute> attrs;
  size_t num_outputs = 1;
};

/// One CUDA context for the whole suite: creating cuDNN/cuBLASLt handles per case would dominate.
std::shared_ptr<cuda::Context> shared_context();

/// The case's one-node graph (its node is named "node_under_test"); the inputs that are not
/// constants are appended to `feeds`.
std::unique_ptr<Graph> build_case(const OpCase& c, std::vector<Tensor>* feeds);

/// Tolerance for a precision, relative to the output's largest magnitude (the figures).
double default_tolerance(Precision p);

/// Runs the case on the CPU reference and on CUDA at `p`; expects every output within `tol`
/// (negative: default_tolerance(p)) of the reference relative to max|reference| (exact for
/// integer and bool outputs). With `require_gpu_kernel`, also expects the node to have run on the
/// GPU rather than through the CPU fallback; with `kernel_has`, that its kernel's name contains it.
/// `ran_as`, where given, receives the kernel the node ran as ("cpu reference" on the CPU).
void expect_gpu_matches_cpu(const OpCase& c, Precision p, double tol = -1, bool require_gpu_kernel = true,
                            const std::string& kernel_has = "", std::string* ran_as = nullptr);

/// Expects `got` within `tol` of `want` relative to max|want| (exact for integers and bools).
void compare(const Tensor& got, const Tensor& want, double tol, const std::string& what);

/// Same for a whole graph (already built; shapes must be bindable from the inputs).
void expect_graph_gpu_matches_cpu(const Graph& g, const std::vector<Tensor>& inputs, Precision p, double tol = -1,
                                  bool cuda_graph = true);

/// The steps of the runs it observes, as the executor enqueues them: (kind, label).
struct StepLog : StepObserver {
  std::vector<std::pair<std::string, std::string>> steps;
  void step_begin(const StepInfo& s) override { steps.emplace_back(s.kind, s.label); }
  void step_end(const StepInfo&) override {}
};

/// The kernel a node ran as: its placement's kernel name ("" for a node the plan does not list).
std::string kernel_of(const cuda::CudaExecutable& exe, const std::string& node);

/// A graph compiled at a precision and run once, with the steps that run enqueued.
struct PlannedRun {
  std::unique_ptr<cuda::CudaExecutable> exe;
  std::vector<std::pair<std::string, std::string>> steps;  // (kind, label)
  /// Relayout steps of value v (every one when v is empty).
  int relayouts(const std::string& v = "") const;
  std::string kernel_of(const std::string& node) const { return test::kernel_of(*exe, node); }
};
PlannedRun plan_and_run(const Graph& g, const std::vector<Tensor>& inputs, Precision p);

/// An environment variable set for a scope, unset at its end.
struct ScopedEnv {
  std::string name;
  ScopedEnv(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
  ~ScopedEnv() { unsetenv(name.c_str()); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
};

/// A tuning cache of the test's own for a scope (FUSEC_TUNING_CACHE in a fresh temporary folder,
/// the process's cache read again at both ends), so a test that times or remembers choices
/// starts cold and leaves the user's cache alone.
class ScopedTuningCache {
 public:
  explicit ScopedTuningCache(const std::string& tag);
  ~ScopedTuningCache();
  ScopedTuningCache(const ScopedTuningCache&) = delete;
  ScopedTuningCache& operator=(const ScopedTuningCache&) = delete;
  const std::string& path() const { return path_; }
  /// The cache file's whole text ("" before the first write).
  std::string text() const;
  /// The key of the first entry whose key contains `part` ("" when there is none).
  std::string key_containing(const std::string& part) const;

 private:
  std::filesystem::path dir_;
  std::string path_;
};

}  // namespace fusec::test
