// The tuners' timing harness (backend/cuda/core/captured_reps.h): a capture that holds more nodes
// than its bound is refused and the candidate is timed on the stream instead, with the stream left
// usable; a capture within the bound replays what it captured.
#include <vector>

#include "backend/cuda/core/captured_reps.h"
#include "backend/cuda/core/check.h"
#include "gpu_test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

/// `n` one-byte memsets of `value`, each a node of a captured graph.
bool memsets(cudaStream_t stream, void* p, int n, int value) {
  for (int i = 0; i < n; ++i)
    if (cudaMemsetAsync(static_cast<char*>(p) + i, value, 1, stream) != cudaSuccess) return false;
  return true;
}

std::vector<unsigned char> download(const cuda::DeviceBuffer& b) {
  std::vector<unsigned char> out(b.size());
  FUSEC_CUDA_CHECK(cudaMemcpy(out.data(), b.get(), b.size(), cudaMemcpyDeviceToHost));
  return out;
}

}  // namespace

TEST(GpuCapturedReps, ACaptureOverItsNodeBoundIsRefusedAndTheStreamStaysUsable) {
  FUSEC_REQUIRE_GPU();
  cuda::Context ctx;
  cudaStream_t stream = ctx.stream();
  cuda::DeviceBuffer buf(64, "test");
  FUSEC_CUDA_CHECK(cudaMemsetAsync(buf.get(), 0, 64, stream));

  cuda::CapturedReps over;
  over.capture(stream, 32, [&] { return memsets(stream, buf.get(), 40, 7); });
  EXPECT_FALSE(over.replay(stream)) << "40 nodes kept under a bound of 32";
  // Nothing ran: the capture recorded the memsets without running them.
  FUSEC_CUDA_CHECK(cudaStreamSynchronize(stream));
  EXPECT_EQ(download(buf)[0], 0);

  cuda::CapturedReps within;
  within.capture(stream, 40, [&] { return memsets(stream, buf.get(), 40, 9); });
  ASSERT_TRUE(within.replay(stream)) << "40 nodes refused under a bound of 40";
  FUSEC_CUDA_CHECK(cudaStreamSynchronize(stream));
  const auto after = download(buf);
  EXPECT_EQ(after[0], 9);
  EXPECT_EQ(after[39], 9);
  EXPECT_EQ(after[40], 0);
}

TEST(GpuCapturedReps, ACandidateTooLargeToCaptureIsStillTimed) {
  FUSEC_REQUIRE_GPU();
  cuda::Context ctx;
  cudaStream_t stream = ctx.stream();
  cuda::DeviceBuffer buf(256, "test");
  cuda::TimingPlan plan;
  plan.reps = 3;
  plan.rounds = 2;
  plan.hold_us = 50;
  plan.max_nodes_per_call = 16;
  // Candidate 0 launches one node a call (captured), candidate 1 sixty (timed on the stream), and
  // candidate 2 is left out (ms < 0 on entry) and must stay out.
  const int launches[] = {1, 60, 1};
  std::vector<float> ms = {0.0f, 0.0f, -1.0f};
  int calls[] = {0, 0, 0};
  cuda::time_candidates(
      stream, ms, plan, [](size_t) {},
      [&](size_t i) {
        ++calls[i];
        return memsets(stream, buf.get(), launches[i], static_cast<int>(i));
      });
  EXPECT_GT(ms[0], 0.0f);
  EXPECT_GT(ms[1], 0.0f);
  EXPECT_EQ(ms[2], -1.0f);
  EXPECT_EQ(calls[2], 0);
  // Captured once (reps calls) and replayed: candidate 0's calls run only while capturing.
  EXPECT_EQ(calls[0], plan.reps);
  // Refused, then every round on the stream: its calls run each round.
  EXPECT_EQ(calls[1], plan.reps * (1 + plan.rounds));
  FUSEC_CUDA_CHECK(cudaStreamSynchronize(stream));
}

TEST(GpuCapturedReps, KernelsPerCallCountsWithoutRunningAndSaysWhenItCannot) {
  FUSEC_REQUIRE_GPU();
  cuda::Context ctx;
  cudaStream_t stream = ctx.stream();
  cuda::DeviceBuffer buf(64, "test");
  FUSEC_CUDA_CHECK(cudaMemsetAsync(buf.get(), 0, 64, stream));
  EXPECT_EQ(cuda::kernels_per_call(stream, [&] { return memsets(stream, buf.get(), 40, 5); }), 40);
  FUSEC_CUDA_CHECK(cudaStreamSynchronize(stream));
  EXPECT_EQ(download(buf)[0], 0) << "the counted call ran";
  // A call that refuses, and one that synchronizes the stream (not capturable): no count, and the
  // stream runs work again afterwards.
  EXPECT_EQ(cuda::kernels_per_call(stream, [&] { return memsets(stream, buf.get(), 3, 5) && false; }), -1);
  EXPECT_EQ(cuda::kernels_per_call(stream, [&] { return cudaStreamSynchronize(stream) == cudaSuccess; }), -1);
  ASSERT_TRUE(memsets(stream, buf.get(), 2, 6));
  FUSEC_CUDA_CHECK(cudaStreamSynchronize(stream));
  const auto after = download(buf);
  EXPECT_EQ(after[1], 6);
  EXPECT_EQ(after[2], 0);
}
