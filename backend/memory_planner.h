// Liveness-based buffer placement, shared by the CPU and CUDA backends: buffers whose lifetimes do
// not overlap share memory in one arena.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace fusec {

struct BufferRequest {
  size_t bytes = 0;
  int first_step = 0;  // step that writes it
  int last_step = 0;   // last step that reads it (inclusive)
};

struct MemoryPlan {
  std::vector<size_t> offsets;  // per request, aligned to `alignment`
  size_t arena_bytes = 0;       // peak: the arena size that holds every buffer
};

/// Greedy best-fit by decreasing size (the classic "greedy by size" offset assignment): each
/// buffer goes at the lowest offset that does not overlap a placed buffer live at the same time.
MemoryPlan plan_memory(const std::vector<BufferRequest>& requests, size_t alignment = 256);

}  // namespace fusec
