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

/// Offsets such that no two buffers live at the same step overlap in memory: a sweep over the steps
/// that places each buffer, when it is first written, in the smallest free block that fits (best
/// fit, freed blocks coalesced), growing the arena only when none does. O(n log n) in the number
/// of requests.
MemoryPlan plan_memory(const std::vector<BufferRequest>& requests, size_t alignment = 256);

}  // namespace fusec
