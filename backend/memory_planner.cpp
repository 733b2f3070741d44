#include "backend/memory_planner.h"

#include <algorithm>
#include <numeric>

namespace fusec {

MemoryPlan plan_memory(const std::vector<BufferRequest>& reqs, size_t alignment) {
  MemoryPlan plan;
  plan.offsets.assign(reqs.size(), 0);
  std::vector<size_t> order(reqs.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return reqs[a].bytes > reqs[b].bytes; });
  auto align = [&](size_t x) { return (x + alignment - 1) / alignment * alignment; };
  struct Placed { size_t offset, bytes; int first, last; };
  std::vector<Placed> placed;
  for (size_t idx : order) {
    const auto& r = reqs[idx];
    size_t size = align(std::max<size_t>(r.bytes, 1));
    // Collect the intervals of buffers alive at the same time, sorted by offset.
    std::vector<std::pair<size_t, size_t>> busy;
    for (const auto& p : placed)
      if (!(p.last < r.first_step || r.last_step < p.first)) busy.push_back({p.offset, p.offset + p.bytes});
    std::sort(busy.begin(), busy.end());
    size_t best = SIZE_MAX, best_gap = SIZE_MAX, cursor = 0;
    for (const auto& [lo, hi] : busy) {
      if (lo > cursor && lo - cursor >= size && lo - cursor < best_gap) { best = cursor; best_gap = lo - cursor; }
      cursor = std::max(cursor, hi);
    }
    if (best == SIZE_MAX) best = cursor;
    plan.offsets[idx] = best;
    placed.push_back({best, size, r.first_step, r.last_step});
    plan.arena_bytes = std::max(plan.arena_bytes, best + size);
  }
  return plan;
}

}  // namespace fusec
