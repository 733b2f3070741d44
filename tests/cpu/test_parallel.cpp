// The CPU thread pool: every chunk of every region runs exactly once and has finished when
// parallel_for returns, regions back to back (where a late worker once claimed a chunk of the
// next region twice, and parallel_for returned while a chunk still ran); exceptions reach the
// caller and leave the pool usable.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

#include "backend/cpu/parallel.h"

using fusec::cpu::parallel_for;

TEST(CpuParallel, EveryChunkRunsOnceAndHasFinishedOnReturn) {
  constexpr int64_t kN = 24;
  std::vector<std::atomic<int>> hits(kN);
  for (int region = 0; region < 20000; ++region) {
    for (auto& h : hits) h.store(0, std::memory_order_relaxed);
    parallel_for(kN, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1, std::memory_order_relaxed);
    });
    for (int64_t i = 0; i < kN; ++i) {
      const int h = hits[static_cast<size_t>(i)].load();
      ASSERT_EQ(h, 1) << "region " << region << ", element " << i;
    }
  }
}

TEST(CpuParallel, AChunksExceptionReachesTheCallerAndThePoolGoesOn) {
  EXPECT_THROW(parallel_for(64, 1,
                            [](int64_t b, int64_t) {
                              if (b == 0) throw std::runtime_error("chunk 0");
                            }),
               std::runtime_error);
  std::atomic<int64_t> sum{0};
  parallel_for(1000, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) sum += i;
  });
  EXPECT_EQ(sum.load(), 999 * 1000 / 2);
}
