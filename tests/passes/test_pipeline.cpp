// The pipeline's report of near-misses over sweeps: each reported once; kept when a later pass
// consumed the pattern (the miss was real); dropped when the same pass went on to rewrite it.
#include "passes/pipeline.h"

#include <gtest/gtest.h>

using namespace fusec;

namespace {

NearMiss miss(const std::string& pass, const std::string& what) { return {pass, what, "a reason"}; }

}  // namespace

TEST(Pipeline, NearMissesAreReportedOnce) {
  std::vector<NearMiss> all;
  merge_near_misses(all, {miss("merge_qkv", "MatMul 'q' + MatMul 'k' not merged")}, {});
  merge_near_misses(all, {miss("merge_qkv", "MatMul 'q' + MatMul 'k' not merged")}, {});
  EXPECT_EQ(all.size(), 1u);
}

TEST(Pipeline, NearMissTheSamePassLaterRewroteIsDropped) {
  std::vector<NearMiss> all;
  merge_near_misses(all,
                    {miss("merge_qkv", "MatMul 'q' + MatMul 'k' -> Attention 'a' not merged"),
                     miss("fuse_matmul_bias", "MatMul 'q' -> Sigmoid 's' not fused")},
                    {});
  // A later sweep: merge_qkv merged 'q' and 'k'. Its own miss goes; fuse_matmul_bias's stays (a
  // different pass: that miss was real, even if another rewrite consumed the nodes since).
  merge_near_misses(all, {}, {Rewrite{"merge_qkv", "MatMul 'q' + MatMul 'k' -> MatMul 'q'", {"q", "k"}, "q"}});
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].pass, "fuse_matmul_bias");
}

TEST(Pipeline, NearMissNamingAnotherNodeStays) {
  // 'q' is quoted whole: a rewrite of 'q' says nothing of 'q_proj'.
  std::vector<NearMiss> all;
  merge_near_misses(all, {miss("merge_qkv", "MatMul 'q_proj' not merged")},
                    {Rewrite{"merge_qkv", "MatMul 'q' -> MatMul 'q'", {"q"}, "q"}});
  EXPECT_EQ(all.size(), 1u);
}
