// Two placements, the smaller arena wins; both are O(n log n) in the number of buffers.
//
// 1. Largest first (the classic "greedy by size"): buffers in decreasing size, each at the best-fit
//    gap among the already placed buffers live at the same time. Those are found through an index
//    over time, not by scanning every placed buffer (which made planning O(n²); docs/benchmarks.md
//    times both). Buffers that live long enough to overlap almost everything can still make
//    the gap searches quadratic, so the placement gets a work budget linear in n; past it, it gives
//    up and the sweep's plan is used.
// 2. A sweep over time, like a best-fit allocator run ahead of time: buffers are placed when they
//    are first written, in the smallest free block that fits, and their block is returned (and
//    coalesced with its free neighbours) after their last reader.
//
//   steps   0    1    2    3    4
//   a       [=========]                 a dies after step 1, so c (born at step 2) may take a's
//   b            [=========]            memory; b is live with both and must not overlap either.
//   c                      [====]
//
// Largest-first usually packs tighter (big buffers first, small ones in the gaps); the sweep wins on
// long chains of similar sizes and is the one with a guaranteed bound.
#include "backend/memory_planner.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <optional>
#include <queue>
#include <set>

namespace fusec {

namespace {

class FreeList {
 public:
  /// Takes `size` bytes for a new buffer; returns its offset. `top` is the arena's current end.
  size_t take(size_t size, size_t& top) {
    auto fit = by_size_.lower_bound({size, 0});
    if (fit != by_size_.end()) {
      const auto [block, offset] = *fit;
      erase(offset, block);
      if (block > size) insert(offset + size, block - size);
      return offset;
    }
    // Nothing fits: grow the arena, starting in the free block that ends at the top, if any.
    size_t offset = top;
    if (!by_offset_.empty()) {
      auto last = std::prev(by_offset_.end());
      if (last->first + last->second == top) {
        offset = last->first;
        erase(last->first, last->second);
      }
    }
    top = offset + size;
    return offset;
  }

  /// Returns a dead buffer's block, merged with the free blocks right before and after it.
  void give_back(size_t offset, size_t size) {
    auto next = by_offset_.lower_bound(offset);
    if (next != by_offset_.end() && offset + size == next->first) {
      size += next->second;
      erase(next->first, next->second);
    }
    next = by_offset_.lower_bound(offset);
    if (next != by_offset_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == offset) {
        offset = prev->first;
        size += prev->second;
        erase(prev->first, prev->second);
      }
    }
    insert(offset, size);
  }

 private:
  void insert(size_t offset, size_t size) {
    by_offset_.emplace(offset, size);
    by_size_.emplace(size, offset);
  }
  void erase(size_t offset, size_t size) {
    by_offset_.erase(offset);
    by_size_.erase({size, offset});
  }

  std::map<size_t, size_t> by_offset_;           // offset -> size
  std::set<std::pair<size_t, size_t>> by_size_;  // (size, offset)
};

/// Placement 2: the sweep over time.
MemoryPlan sweep_plan(const std::vector<BufferRequest>& reqs, const std::vector<size_t>& sizes) {
  MemoryPlan plan;
  plan.offsets.assign(reqs.size(), 0);
  // Birth order; among buffers born at the same step the larger goes first, so it gets the pick
  // of the free blocks and small ones fill what is left.
  std::vector<size_t> order(reqs.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (reqs[a].first_step != reqs[b].first_step) return reqs[a].first_step < reqs[b].first_step;
    return reqs[a].bytes > reqs[b].bytes;
  });
  // Live buffers by their last step: the earliest to die on top.
  using Death = std::pair<int, size_t>;  // (last_step, request index)
  std::priority_queue<Death, std::vector<Death>, std::greater<Death>> live;
  FreeList free_list;
  size_t top = 0;
  for (size_t idx : order) {
    const BufferRequest& r = reqs[idx];
    // A buffer read last at step s is dead from step s + 1 on (a step's inputs and outputs overlap).
    while (!live.empty() && live.top().first < r.first_step) {
      const size_t dead = live.top().second;
      live.pop();
      free_list.give_back(plan.offsets[dead], sizes[dead]);
    }
    plan.offsets[idx] = free_list.take(sizes[idx], top);
    live.push({r.last_step, idx});
  }
  plan.arena_bytes = top;
  return plan;
}

/// Placed buffers by lifetime, for "which placed buffers are live at some step of [first, last]".
/// A buffer overlaps [first, last] iff it is live at step `first`, or it is born within
/// (first, last]. The first set comes from a segment tree over steps (each buffer stored at the
/// O(log T) nodes covering its lifetime, a query walks one root-to-leaf path), the second from a
/// map by birth step.
class LifetimeIndex {
 public:
  explicit LifetimeIndex(int steps) : steps_(std::max(steps, 1)), nodes_(4 * static_cast<size_t>(steps_)) {}

  void insert(int first, int last, uint32_t id) {
    insert(1, 0, steps_ - 1, first, last, id);
    by_birth_.emplace(first, id);
  }

  /// Calls f(id) for every inserted buffer live at some step of [first, last], once each.
  template <typename F>
  void for_each_overlapping(int first, int last, F&& f) const {
    size_t node = 1;
    int lo = 0, hi = steps_ - 1;
    while (true) {
      for (uint32_t id : nodes_[node]) f(id);
      if (lo == hi) break;
      const int mid = lo + (hi - lo) / 2;
      if (first <= mid) {
        node = 2 * node;
        hi = mid;
      } else {
        node = 2 * node + 1;
        lo = mid + 1;
      }
    }
    for (auto it = by_birth_.upper_bound(first); it != by_birth_.end() && it->first <= last; ++it) f(it->second);
  }

 private:
  void insert(size_t node, int lo, int hi, int first, int last, uint32_t id) {
    if (last < lo || hi < first) return;
    if (first <= lo && hi <= last) {
      nodes_[node].push_back(id);
      return;
    }
    const int mid = lo + (hi - lo) / 2;
    insert(2 * node, lo, mid, first, last, id);
    insert(2 * node + 1, mid + 1, hi, first, last, id);
  }

  int steps_;
  std::vector<std::vector<uint32_t>> nodes_;
  std::multimap<int, uint32_t> by_birth_;
};

/// Placement 1: largest first, best-fit gap among the placed buffers it overlaps in time. Gives up
/// (nullopt) once the overlapping buffers it has looked at pass `budget`.
std::optional<MemoryPlan> largest_first_plan(const std::vector<BufferRequest>& reqs, const std::vector<size_t>& sizes,
                                             int steps, size_t budget) {
  MemoryPlan plan;
  plan.offsets.assign(reqs.size(), 0);
  std::vector<size_t> order(reqs.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return reqs[a].bytes > reqs[b].bytes; });
  LifetimeIndex placed(steps);
  std::vector<std::pair<size_t, size_t>> busy;  // [begin, end) of overlapping placed buffers
  size_t work = 0;
  for (size_t idx : order) {
    const BufferRequest& r = reqs[idx];
    const size_t size = sizes[idx];
    busy.clear();
    placed.for_each_overlapping(r.first_step, r.last_step, [&](uint32_t other) {
      busy.push_back({plan.offsets[other], plan.offsets[other] + sizes[other]});
    });
    work += busy.size();
    if (work > budget) return std::nullopt;
    std::sort(busy.begin(), busy.end());
    // The smallest gap between busy ranges that fits (lowest offset on ties), else above them all.
    size_t best = SIZE_MAX, best_gap = SIZE_MAX, cursor = 0;
    for (const auto& [lo, hi] : busy) {
      if (lo > cursor && lo - cursor >= size && lo - cursor < best_gap) {
        best = cursor;
        best_gap = lo - cursor;
      }
      cursor = std::max(cursor, hi);
    }
    if (best == SIZE_MAX) best = cursor;
    plan.offsets[idx] = best;
    plan.arena_bytes = std::max(plan.arena_bytes, best + size);
    placed.insert(r.first_step, r.last_step, static_cast<uint32_t>(idx));
  }
  return plan;
}

}  // namespace

MemoryPlan plan_memory(const std::vector<BufferRequest>& reqs, size_t alignment) {
  // Lifetimes renumbered to 0..T-1 over the steps that occur (only their order matters, and the
  // index over time is then O(n) whatever step numbers a backend uses); a buffer is live at least
  // at the step that writes it. Sizes rounded up to the alignment, so every offset is aligned.
  std::vector<int> step_values;
  for (const auto& q : reqs) {
    step_values.push_back(q.first_step);
    step_values.push_back(std::max(q.last_step, q.first_step));
  }
  std::sort(step_values.begin(), step_values.end());
  step_values.erase(std::unique(step_values.begin(), step_values.end()), step_values.end());
  auto rank = [&](int step) {
    return static_cast<int>(std::lower_bound(step_values.begin(), step_values.end(), step) - step_values.begin());
  };
  std::vector<BufferRequest> r = reqs;
  std::vector<size_t> sizes(r.size());
  for (size_t i = 0; i < r.size(); ++i) {
    r[i].last_step = rank(std::max(r[i].last_step, r[i].first_step));
    r[i].first_step = rank(r[i].first_step);
    const size_t b = std::max<size_t>(r[i].bytes, 1);
    sizes[i] = (b + alignment - 1) / alignment * alignment;
  }
  const int steps = static_cast<int>(step_values.size());
  MemoryPlan sweep = sweep_plan(r, sizes);
  // Typical graphs look at a handful of overlapping buffers per placement; 64 per buffer on
  // average is generous and keeps the whole plan O(n log n).
  std::optional<MemoryPlan> largest = largest_first_plan(r, sizes, steps, 64 * r.size() + 4096);
  return largest && largest->arena_bytes <= sweep.arena_bytes ? *largest : sweep;
}

}  // namespace fusec
