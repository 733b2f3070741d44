// The plugin boundary (backend/gpu_plugin.h), host-side: runs without a GPU.
#include <gtest/gtest.h>

#include <algorithm>

#include "backend/cuda/core/context.h"
#include "backend/cuda/core/cuda_op.h"
#include "backend/gpu_plugin.h"

extern "C" fusec::GpuPlugin* fusec_cuda_plugin();

using namespace fusec;

TEST(CudaPlugin, KernelFamilyTableMatchesTheRegistry) {
  // inspect reads gpu_kernel_families() without loading the plugin; the registry is the truth.
  std::vector<std::pair<std::string, std::string>> registered;
  for (auto [domain, op] : cuda::CudaOpRegistry::global().ops())
    registered.emplace_back(domain == "ai.onnx" ? "" : domain, op);
  std::sort(registered.begin(), registered.end());
  registered.erase(std::unique(registered.begin(), registered.end()), registered.end());
  const auto& table = gpu_kernel_families();
  for (const auto& r : registered)
    EXPECT_TRUE(std::binary_search(table.begin(), table.end(), r))
        << "'" << r.first << "' " << r.second << " is registered but missing from gpu_kernel_families()";
  for (const auto& t : table)
    EXPECT_TRUE(std::binary_search(registered.begin(), registered.end(), t))
        << "'" << t.first << "' " << t.second << " is in gpu_kernel_families() but not registered";
  EXPECT_TRUE(gpu_has_kernel_family("ai.onnx", "Conv"));
  EXPECT_FALSE(gpu_has_kernel_family("", "NonMaxSuppression"));
}

TEST(CudaPlugin, EntryPointAnswersWithoutAGpu) {
  GpuPlugin* p = fusec_cuda_plugin();
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p, fusec_cuda_plugin());  // one instance
  std::string why;
  const bool have = p->gpu_available(&why);
  EXPECT_EQ(have, cuda::gpu_available());
  if (!have) EXPECT_FALSE(why.empty());
  EXPECT_EQ(p->counter_metric_names().size(), 6u);
  EXPECT_NE(p->make_backend(GpuOptions{}), nullptr);  // a backend is made before any device is touched
}
