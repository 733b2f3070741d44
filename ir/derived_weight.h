// Weights a pass builds by rearranging the bytes of others: merge_qkv's concatenation of Q, K and V
// projections, fuse_gated_matmul's halves of a packed gate/up weight. Built in memory, such a
// weight costs its whole size in RAM and makes the writer write it from memory, where the
// weights it came from are memory-mapped and copied file to file, so fusec's memory would grow
// with the model (docs/benchmarks.md, scale). The commands install a store
// (importer/scratch_weights.h) that builds them in a scratch file instead, from the source files
// where they are mapped; the IR only sees the interface.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "ir/tensor.h"

namespace fusec {

/// `bytes` bytes copied from `src`, or zeros where `src` is null.
struct ByteRun {
  const void* src = nullptr;
  size_t bytes = 0;
};

/// Builds a derived weight somewhere other than anonymous memory.
class DerivedWeightStore {
 public:
  virtual ~DerivedWeightStore() = default;
  /// A tensor of `dtype` and `dims` whose bytes are `runs` in order (they cover it exactly), or an
  /// undefined Tensor where this store does not take it (too small, or it failed): then it is
  /// built in memory.
  virtual Tensor make(DType dtype, const std::vector<int64_t>& dims, const std::vector<ByteRun>& runs) = 0;
};

/// Installs the store derived_weight() uses from now on; nullptr: memory only (the default).
void set_derived_weight_store(std::shared_ptr<DerivedWeightStore> store);

/// The weight of `dtype` and `dims` whose bytes are `runs`, in the installed store or in memory.
Tensor derived_weight(DType dtype, std::vector<int64_t> dims, const std::vector<ByteRun>& runs);

/// Appends a run to `runs`, merged into the last one where it continues it (the next bytes of the
/// same memory, or more zeros): a row-by-row copy of contiguous rows stays one run.
void append_run(std::vector<ByteRun>& runs, const void* src, size_t bytes);

}  // namespace fusec
