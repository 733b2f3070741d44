// The CPU thread pool: every chunk of every region runs exactly once and has finished when
// parallel_for returns, regions back to back (where a late worker once claimed a chunk of the
// next region twice, and parallel_for returned while a chunk still ran) and regions after the
// workers have stopped spinning and gone to sleep; exceptions reach the caller and leave the pool
// usable.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
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

TEST(CpuParallel, RegionsAfterTheWorkersSleptRunEveryChunkOnce) {
  // Gaps longer than the pool's spin (parallel.cpp's kSpin) put the workers to sleep, so the next
  // region wakes them; shorter ones catch them spinning; chunk counts and chunk lengths vary, so
  // a worker may arrive after the caller has run every chunk, or leave last.
  std::vector<std::atomic<int>> hits(97);
  for (int region = 0; region < 600; ++region) {
    const int64_t n = 1 + region % 97;
    for (auto& h : hits) h.store(0, std::memory_order_relaxed);
    if (region % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(150 + 50 * (region % 7)));
    parallel_for(n, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        if (i % 5 == region % 5) std::this_thread::sleep_for(std::chrono::microseconds(region % 4 * 20));
        hits[static_cast<size_t>(i)].fetch_add(1, std::memory_order_relaxed);
      }
    });
    for (int64_t i = 0; i < 97; ++i)
      ASSERT_EQ(hits[static_cast<size_t>(i)].load(), i < n ? 1 : 0) << "region " << region << ", element " << i;
  }
}
