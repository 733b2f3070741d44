// Where the engine build's timing keeps a node's parts (a library kernel, then an epilogue pass)
// over a candidate that runs the whole node in one kernel, the op says so (device_decision, which
// bench prints and writes): consistent with what it picked, recalled by a warm build from the
// tuning cache, and empty where the one-kernel candidate won or there was none.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "backend/cuda/core/tuning_cache.h"
#include "backend/cuda/ops/gemm/hgemm.cuh"
#include "gpu_test_util.h"
#include "passes/infer_shapes.h"

using namespace fusec;
using namespace fusec::test;

namespace {

/// x [16, 160, 7, 7] -> FusedConv 1x1 to 960 channels with bias and HardSwish ("conv"), and a
/// FusedMatMul [512, 256] x [256, 1024] with bias and erf-GELU ("mm"): MobileNetV3's last
/// expansion and a transformer's FFN1, each with an activation cuDNN and cuBLASLt cannot fuse.
std::unique_ptr<Graph> conv_and_ffn() {
  GraphBuilder b;
  b.graph().opsets["ai.fusec"] = 1;
  auto w = [&](const char* name, std::vector<int64_t> d, uint64_t seed) {
    return b.initializer(name, random_tensor(DType::Float32, d, seed, -0.1, 0.1));
  };
  Value* x = b.input("x", DType::Float32, {Dim(16), Dim(160), Dim(7), Dim(7)});
  b.output(b.node_n("FusedConv", {x, w("cw", {960, 160, 1, 1}, 1), w("cb", {960}, 2)}, 1,
                    {attr("activation", std::string("HardSwish"))}, "conv", "ai.fusec")[0]);
  Value* a = b.input("a", DType::Float32, {Dim(512), Dim(256)});
  b.output(b.node_n("FusedMatMul", {a, w("mw", {256, 1024}, 3), w("mb", {1024}, 4)}, 1,
                    {attr("activation", std::string("Gelu"))}, "mm", "ai.fusec")[0]);
  auto g = b.build();
  infer_shapes(*g);
  return g;
}

const NodePlacement* placed(const cuda::CudaExecutable& exe, const std::string& node) {
  for (const auto& pl : exe.placement())
    if (pl.node == node) return &pl;
  return nullptr;
}

}  // namespace

TEST(GpuDeviceDecisions, ThePartsKeptOverAOneKernelCandidateAreNamedAndRecalled) {
  FUSEC_REQUIRE_GPU();
  int device = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  // The one-kernel candidates here are fusec's wgmma GEMM (the 1x1 conv's and the FusedMatMul's):
  // Hopper only. Elsewhere there is nothing to keep the parts over, and no decision may be named.
  const bool one_kernel_candidates = cuda::hgemm_available(device);
  auto dir = std::filesystem::temp_directory_path() / ("fusec_decisions_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  ::setenv("FUSEC_TUNING_CACHE", (dir / "t.json").string().c_str(), 1);
  auto& cache = cuda::TuningCache::global();
  cache.reload();
  auto g = conv_and_ffn();
  const std::vector<Tensor> in = {random_tensor(DType::Float32, {16, 160, 7, 7}, 5),
                                  random_tensor(DType::Float32, {512, 256}, 6)};
  cuda::CudaOptions o;
  o.precision = Precision::FP16;
  std::string cold_kernel[2], cold_decision[2];
  for (int build = 0; build < 2; ++build) {  // cold (timed), then warm (from the tuning cache)
    SCOPED_TRACE(build ? "warm build" : "cold build");
    auto exe = cuda::CudaBackend(o).compile_cuda(*g);
    expect_graph_gpu_matches_cpu(*g, in, Precision::FP16);
    const char* nodes[] = {"conv", "mm"};
    for (int i = 0; i < 2; ++i) {
      const NodePlacement* pl = placed(*exe, nodes[i]);
      ASSERT_TRUE(pl) << nodes[i];
      SCOPED_TRACE(std::string(nodes[i]) + ": " + pl->kernel + " | " + pl->device_decision);
      const bool fused_pick = pl->kernel.find("fusec wgmma GEMM 1x1 conv") != std::string::npos ||
                              pl->kernel.find("fusec HGEMM") != std::string::npos;
      if (fused_pick || !one_kernel_candidates) {
        EXPECT_EQ(pl->device_decision, "");
      } else {
        // The parts ran faster, or were kept within the bar the heuristics' choice has.
        EXPECT_TRUE(pl->device_decision.find("ran faster than") != std::string::npos ||
                    pl->device_decision.find("was kept, within") != std::string::npos);
        EXPECT_NE(pl->device_decision.find(i == 0 ? "HardSwish" : "Gelu"), std::string::npos);
        EXPECT_NE(pl->device_decision.find(" us)"), std::string::npos);
      }
      if (build == 0) {
        cold_kernel[i] = pl->kernel;
        cold_decision[i] = pl->device_decision;
      } else {
        EXPECT_EQ(pl->kernel, cold_kernel[i]);
        EXPECT_EQ(pl->device_decision, cold_decision[i]);
      }
    }
  }
  ::unsetenv("FUSEC_TUNING_CACHE");
  cache.reload();
  std::filesystem::remove_all(dir);
}
