// Launchers of the softmax kernels (softmax.cu): Softmax, LogSoftmax and Hardmax over the middle
// dim of an [outer, n, inner] view of the input.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "ir/dtype.h"

namespace fusec::cuda {

enum class SoftmaxKind : int { Soft = 0, Log = 1, Hard = 2 };

struct SoftmaxArgs {
  DType dtype = DType::Undefined;  // storage of x and y: float32, float16 or bfloat16
  SoftmaxKind kind = SoftmaxKind::Soft;
  int64_t outer = 0, n = 0, inner = 1;
  const void* x = nullptr;
  void* y = nullptr;
  int splits = 0;             // long rows: row segments processed by separate blocks (softmax_plan)
  void* workspace = nullptr;  // softmax_workspace_bytes() of scratch for the long-row path
  int multiprocessors = 132;
};

/// Fills a.splits for these sizes; call once at plan time.
void softmax_plan(SoftmaxArgs& a);
size_t softmax_workspace_bytes(const SoftmaxArgs& a);
/// Whether Hardmax of these sizes has a kernel (rows of at most 16384 values, or a strided axis).
bool softmax_supported(const SoftmaxArgs& a);
[[nodiscard]] bool launch_softmax(const SoftmaxArgs& a, cudaStream_t s);
const char* softmax_variant(const SoftmaxArgs& a);

}  // namespace fusec::cuda
