// The CUDA op registry (backend/cuda/ops/*/*_op.cpp) against the schemas (ir/ops/) and the CPU
// kernels (backend/cpu/kernels/): every op the CUDA backend plans must be one fusec accepts (a
// schema) and one the CPU reference runs (a kernel), under the same name and canonical domain
// (ir/op_key.h), or its results could not be checked. The registries are host-side tables: no GPU
// is needed, so nothing here skips. The other direction is not required: an op with no CUDA factory
// runs on the CPU by design (the executor's fallback), and those ops are not listed. CUDA factories
// carry no opset range: a factory serves every opset its op's schemas cover (PlanContext::opset()),
// and tests/ir/test_registry_agreement.cpp checks those ranges.
#include <gtest/gtest.h>

#include "backend/cpu/kernel.h"
#include "backend/cuda/core/cuda_op.h"
#include "ir/op_key.h"
#include "registry_agreement.h"

using namespace fusec;
using namespace fusec::test;

namespace {

// CUDA ops with no schema or no CPU kernel, each with the reason. Empty, and it should stay so:
// an entry here is an op whose GPU results nothing can check.
const std::map<OpKey, const char*> kCudaOpsWithoutSchema = {};
const std::map<OpKey, const char*> kCudaOpsWithoutCpuKernel = {};

/// Plain and channels-last factories, once each.
std::vector<OpKey> cuda_ops() {
  const auto& r = cuda::CudaOpRegistry::global();
  std::set<OpKey> all;
  for (const OpKey& k : r.ops()) all.insert(k);
  for (const OpKey& k : r.channels_last_ops()) all.insert(k);
  return {all.begin(), all.end()};
}

std::set<OpKey> cpu_ops() {
  const std::vector<OpKey> v = cpu::KernelRegistry::global().ops();
  return {v.begin(), v.end()};
}

}  // namespace

TEST(RegistryAgreementCuda, EntriesUseTheCanonicalDomain) {
  const auto& r = cuda::CudaOpRegistry::global();
  for (const OpKey& k : cuda_ops()) EXPECT_EQ(k.first, canonical_domain(k.first)) << "CUDA op " << k.second;
  EXPECT_NE(r.find("ai.onnx", "MatMul"), nullptr);
  EXPECT_EQ(r.find("ai.onnx", "MatMul"), r.find("", "MatMul"));
  EXPECT_EQ(r.find_channels_last("ai.onnx", "Conv"), r.find_channels_last("", "Conv"));
  EXPECT_EQ(r.channels_last_kind("ai.onnx", "Conv"), r.channels_last_kind("", "Conv"));
}

TEST(RegistryAgreementCuda, EveryCudaOpHasASchema) {
  ASSERT_GT(cuda::CudaOpRegistry::global().ops().size(), 50u)
      << "the CUDA registry is (nearly) empty: nothing to compare";
  const std::string gaps = unexpected_gaps(cuda_ops(), schema_ops(), kCudaOpsWithoutSchema);
  EXPECT_EQ(gaps, "") << "CUDA ops (backend/cuda/ops/) with no schema (ir/ops/) under the same name and domain:\n"
                      << gaps;
}

TEST(RegistryAgreementCuda, EveryCudaOpHasACpuKernel) {
  const std::string gaps = unexpected_gaps(cuda_ops(), cpu_ops(), kCudaOpsWithoutCpuKernel);
  EXPECT_EQ(gaps, "") << "CUDA ops (backend/cuda/ops/) with no CPU kernel (backend/cpu/kernels/) to check "
                         "them against:\n"
                      << gaps;
}

TEST(RegistryAgreementCuda, AllowListsHaveNoStaleEntries) {
  const std::string a = stale_entries(cuda_ops(), schema_ops(), kCudaOpsWithoutSchema);
  EXPECT_EQ(a, "") << "kCudaOpsWithoutSchema lists ops that now have a schema or no CUDA factory:\n" << a;
  const std::string b = stale_entries(cuda_ops(), cpu_ops(), kCudaOpsWithoutCpuKernel);
  EXPECT_EQ(b, "") << "kCudaOpsWithoutCpuKernel lists ops that now have a CPU kernel or no CUDA factory:\n" << b;
}

TEST(RegistryAgreementCuda, EveryChannelsLastOpAlsoHasAPlainFactory) {
  // A channels-last factory is a variant: outside a channels-last region (strict fp32 by default,
  // FUSEC_CHANNELS_LAST=0) the planner takes the op's plain factory, and without one the node
  // would fall back to the CPU there.
  const auto& r = cuda::CudaOpRegistry::global();
  for (const OpKey& k : r.channels_last_ops()) {
    EXPECT_NE(r.find(k.first, k.second), nullptr) << op_name(k) << " has only a channels-last factory";
    EXPECT_NE(r.channels_last_kind(k.first, k.second), cuda::ChannelsLast::None) << op_name(k);
  }
}
