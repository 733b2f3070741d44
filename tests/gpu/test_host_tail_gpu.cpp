// The host tail (backend/cuda/executor/host_tail.cpp): a model whose shapes depend on its data past
// some node runs its GPU part on the GPU, captured and replayed, and the rest on the CPU
// reference after it, with every output equal to the CPU reference's run by run, whatever size
// the data gives the tail.
#include "gpu_test_util.h"
#include "host_tail_model.h"
#include "backend/cpu/cpu_backend.h"
#include "ir/error.h"
#include "ir/graph_builder.h"
#include "passes/infer_shapes.h"

using namespace fusec;
using namespace fusec::test;

namespace {

// Integer-valued inputs and weights keep every product exact in fp16, so the entries that are
// positive are the same at every precision.
std::unique_ptr<Graph> tail_model() {
  std::vector<float> w(36);
  for (int i = 0; i < 36; ++i) w[i] = static_cast<float>((i * 7) % 5) - 2.0f;
  return nonzero_tail_model(Tensor::from_float(w, {6, 6}));
}

Tensor integer_input(uint64_t seed, int lo, int hi) {
  std::vector<float> v(24);
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<float>(lo + static_cast<int>((seed * 2654435761u + i * 40503u) % (hi - lo + 1)));
  return Tensor::from_float(v, {4, 6});
}

}  // namespace

TEST(GpuHostTail, DataDependentShapesRunTheRestOnTheHost) {
  FUSEC_REQUIRE_GPU();
  auto g = tail_model();
  auto ref = cpu::CpuBackend().compile(*g);
  for (Precision p : {Precision::FP32, Precision::FP16}) {
    SCOPED_TRACE(precision_name(p));
    cuda::CudaOptions o;
    o.precision = p;
    o.context = shared_context();
    auto exe = cuda::CudaBackend(o).compile_cuda(*g);
    // Runs 0 and 1 stream and capture; later ones replay. The tail's sizes change from run to run,
    // down to nothing positive at all (x all 0: an empty NonZero and a sum of nothing).
    const std::pair<int, int> ranges[] = {{-3, 3}, {-3, 3}, {0, 4}, {-4, 0}, {0, 0}, {-3, 3}};
    for (size_t run = 0; run < std::size(ranges); ++run) {
      const Tensor x = integer_input(run, ranges[run].first, ranges[run].second);
      const auto want = ref->run({x});
      const auto got = exe->run({x});
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(got[i].dims(), want[i].dims()) << "output " << i << " run " << run;
        compare(got[i], want[i], p == Precision::FP32 ? 1e-6 : 2e-3,
                "output " + std::to_string(i) + " run " + std::to_string(run));
      }
    }
    EXPECT_EQ(exe->graph_status(), "on") << "the GPU part is captured";
    EXPECT_NE(kernel_of(*exe, "matmul"), kHostTailKernel);
    for (const char* n : {"nonzero", "indices", "picked", "sum"}) {
      EXPECT_EQ(kernel_of(*exe, n), kHostTailKernel) << n;
    }
    for (const auto& pl : exe->placement()) {
      if (pl.node == "relu" || pl.node == "sigmoid" || pl.node == "matmul") EXPECT_TRUE(pl.on_gpu) << pl.node;
      if (pl.node == "picked") {
        EXPECT_NE(pl.reason.find("'nonzero"), std::string::npos) << pl.reason;  // names where the data decides
        EXPECT_NE(pl.reason.find("NonZero"), std::string::npos) << pl.reason;
      }
    }
  }
}

// bench's and profile's path: one upload, many launches (replays), a timed launch, one download;
// the tail is one step of the profiler's, after the GPU part's.
TEST(GpuHostTail, LaunchesTimingAndStepsIncludeTheTail) {
  FUSEC_REQUIRE_GPU();
  auto g = tail_model();
  const Tensor x = integer_input(7, -3, 3);
  const auto want = cpu::CpuBackend().compile(*g)->run({x});
  cuda::CudaOptions o;
  o.context = shared_context();
  auto exe = cuda::CudaBackend(o).compile_cuda(*g);
  StepLog log;
  exe->set_step_observer(&log);
  exe->upload_inputs({x});
  exe->launch();
  exe->set_step_observer(nullptr);
  for (int i = 0; i < 3; ++i) exe->launch();
  EXPECT_GT(exe->timed_launch_ms(), 0.0);
  const auto got = exe->download_outputs();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) compare(got[i], want[i], 1e-6, "output " + std::to_string(i));
  ASSERT_FALSE(log.steps.empty());
  EXPECT_EQ(log.steps.back().first, "cpu");
  EXPECT_EQ(log.steps.back().second.rfind("host tail: 4 nodes", 0), 0u) << log.steps.back().second;
}

// --strict promises no node on the CPU: a tail is refused, naming the value whose shape the data
// decides. And bad data the GPU part finds is reported before the tail reads what it left.
TEST(GpuHostTail, StrictRefusesItAndDeviceErrorsComeFirst) {
  FUSEC_REQUIRE_GPU();
  auto g = tail_model();
  cuda::CudaOptions strict;
  strict.strict = true;
  strict.context = shared_context();
  auto exe = cuda::CudaBackend(strict).compile_cuda(*g);
  try {
    exe->run({integer_input(1, -3, 3)});
    FAIL() << "--strict ran a host tail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("depends on data"), std::string::npos) << e.what();
  }

  // More indices than the plan specializes on their values (1024), so the GPU's Gather checks them.
  constexpr int64_t kIdx = 1100;
  GraphBuilder b(17);
  Value* data = b.input("data", DType::Float32, {Dim(5), Dim(3)});
  Value* idx = b.input("idx", DType::Int64, {Dim(kIdx)});
  Value* rows = b.node("Gather", {data, idx}, {attr("axis", int64_t{0})}, "gather_rows");
  b.output(b.node("NonZero", {b.node("Relu", {rows})}, {}, "nonzero"));
  auto g2 = b.build();
  infer_shapes(*g2);
  cuda::CudaOptions o;
  o.context = shared_context();
  auto exe2 = cuda::CudaBackend(o).compile_cuda(*g2);
  const Tensor d = random_tensor(DType::Float32, {5, 3}, 4);
  std::vector<int64_t> iv(kIdx);
  for (int64_t i = 0; i < kIdx; ++i) iv[i] = (i * 3) % 5;
  const auto ok = exe2->run({d, Tensor::from_int64(iv, {kIdx})});
  const auto want = cpu::CpuBackend().compile(*g2)->run({d, Tensor::from_int64(iv, {kIdx})});
  compare(ok[0], want[0], 0, "nonzero");
  iv[777] = 7;
  try {
    exe2->run({d, Tensor::from_int64(iv, {kIdx})});
    FAIL() << "an index out of range ran";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_NE(std::string(e.what()).find("gather_rows"), std::string::npos) << e.what();
  }
}
