// Launchers of the reduction kernels (reduce.cu): Reduce* and ArgMax/ArgMin.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ir/dtype.h"

namespace fusec::cuda {

enum class ReduceKind : int { Sum, Mean, Max, Min, Prod, L1, L2, LogSum, LogSumExp, SumSquare, ArgMax, ArgMin };

enum class ReducePath : int {
  None,     // no output elements: nothing to launch
  Rows,     // [outer, n] with n contiguous (inner == 1)
  Cols,     // [outer, n, inner], inner > 1: a column reduction
  General,  // several separate groups of reduced dims: strided walk per output
};

constexpr int kReduceMaxRank = 8;

struct ReduceArgs {
  DType dtype = DType::Undefined;  // storage type of x (and y, except ArgMax/ArgMin: int64)
  ReduceKind kind = ReduceKind::Sum;
  bool select_last = false;  // ArgMax/ArgMin: the last of equal extremes
  ReducePath path = ReducePath::None;
  int64_t outer = 1, n = 1, inner = 1;  // Rows / Cols view
  int64_t outputs = 0, reduced = 0;     // output elements; input elements folded into each
  // General: kept dims (row-major, in output order) and reduced dims, with their input strides.
  int kept_rank = 0, red_rank = 0;
  int64_t kept_dims[kReduceMaxRank] = {}, kept_strides[kReduceMaxRank] = {};
  int64_t red_dims[kReduceMaxRank] = {}, red_strides[kReduceMaxRank] = {};  // without the run
  int64_t run = 1;  // General: length of an innermost reduced contiguous run (1: innermost kept)
  int splits = 1;   // blocks along the reduced positions per output group (partials via the workspace)
  int multiprocessors = 132;
  const void* x = nullptr;
  void* y = nullptr;
  void* workspace = nullptr;
};

/// Whether a kernel exists for this reduction of this storage type.
bool reduce_supported(ReduceKind k, DType t);
/// Fills the path and view of `a` for x of `dims` reduced over the flagged axes (size-1 dims
/// dropped, neighbours of the same kind merged), then the split count. False if the general path
/// would need more than kReduceMaxRank dims.
bool reduce_plan(const std::vector<int64_t>& dims, const std::vector<bool>& reduce, ReduceArgs& a);
size_t reduce_workspace_bytes(const ReduceArgs& a);
[[nodiscard]] bool launch_reduce(const ReduceArgs& a, cudaStream_t s);
const char* reduce_variant(const ReduceArgs& a);

}  // namespace fusec::cuda
