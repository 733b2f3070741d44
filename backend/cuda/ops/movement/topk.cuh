// TopK along one axis: the k largest (or smallest) values of each row and their int64 indices, in
// the CPU reference's order (best first, ties by the lower index, NaN above every number). k
// passes over each row, each taking the best element after the one before: no scratch. Short
// rows (a mixture of experts' router over its E experts) take a thread a row; rows of 256 or more
// (a vocabulary, a detection head's anchors) a block a row, each pass a block-wide search. Past
// kTopKMaxPasses elements a thread, TopK runs on the CPU reference.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "ir/dtype.h"

namespace fusec::cuda {

/// Threads of a block that searches one row.
constexpr int kTopKRowThreads = 1024;

/// At most this many elements read by one thread over the k passes (k · its share of the row):
/// about a millisecond. Past it, TopK runs on the CPU reference.
constexpr int64_t kTopKMaxPasses = int64_t{1} << 18;

struct TopKPlan {
  DType dtype = DType::Undefined;  // float32/16, bfloat16, float64, int32, int64
  bool largest = true;
  int64_t outer = 0, n = 0, inner = 0, k = 0;  // x viewed [outer, n, inner]; outputs [outer, k, inner]
};

/// Whether each row gets a block (rows of 256 or more), else a thread.
inline bool topk_block_a_row(const TopKPlan& p) { return p.n >= 256; }

/// Elements one thread reads over the k passes.
inline int64_t topk_thread_work(const TopKPlan& p) {
  if (!topk_block_a_row(p)) return p.k * p.n;
  const int64_t threads = p.n >= 8192 ? kTopKRowThreads : 256;
  return p.k * ((p.n + threads - 1) / threads);
}

/// False for a dtype the kernel does not take. `indices` may be null (the output is not read).
[[nodiscard]] bool launch_topk(const TopKPlan& p, const void* x, void* values, int64_t* indices, cudaStream_t s);

}  // namespace fusec::cuda
