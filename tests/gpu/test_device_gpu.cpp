// GPU suite: runs on the lent GPU; skips cleanly where there is none (CI, users without CUDA).
#include <gtest/gtest.h>

#include "backend/cuda/core/device_info.h"

TEST(GpuDevice, DiscoversTheDevice) {
  std::string why;
  auto devices = fusec::cuda::list_devices(&why);
  if (devices.empty()) GTEST_SKIP() << "no CUDA device: " << why;
  for (const auto& d : devices) {
    EXPECT_FALSE(d.name.empty());
    EXPECT_GT(d.sm_major, 0);
    EXPECT_GT(d.total_memory, size_t(1) << 30);
    EXPECT_GT(d.multiprocessors, 0);
  }
}
