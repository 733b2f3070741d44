// The GPU profiler against things whose answer is known: a large memory-bound kernel runs near the
// measured copy peak, a large fp16 GEMM near the measured GEMM peak; every record of a real model
// is attributed to a step, in CUDA-graph replay as in separate launches, and no iteration's kernel
// time exceeds its wall time.
#include <filesystem>
#include <map>

#include "gpu_test_util.h"
#include "importer/onnx_import.h"
#include "passes/infer_shapes.h"
#include "passes/pipeline.h"
#include "profiler/cuda/cuda_profiler.h"
#include "profiler/peaks.h"

using namespace fusec;
using namespace fusec::test;

namespace {

/// The device's peaks, measured once per test binary (and not cached: tests leave the user's
/// cache alone).
const profiler::Peaks& peaks() {
  static profiler::Peaks p = [] {
    cuda::Context ctx(0);
    return profiler::measure_cuda_peaks(ctx);
  }();
  return p;
}

struct Profiled {
  std::unique_ptr<cuda::CudaExecutable> exe;
  profiler::Collected c;
  profiler::Analysis a;
};

Profiled profile(const Graph& g, const std::vector<Tensor>& inputs, Precision p, int iterations = 10) {
  cuda::CudaOptions o;
  o.precision = p;
  Profiled r;
  r.exe = cuda::CudaBackend(o).compile_cuda(g);
  profiler::CudaRunSettings s;
  s.warmup = 2;
  s.iterations = iterations;
  r.c = profiler::profile_cuda(*r.exe, inputs, s);
  r.a = profiler::analyze(r.c, peaks(), p, storage_dtype(p, DType::Float32));
  return r;
}

const profiler::NodeProfile& node(const profiler::Analysis& a, const std::string& name) {
  for (const auto& n : a.nodes)
    if (n.name == name) return n;
  throw std::runtime_error("no node " + name);
}

}  // namespace

TEST(GpuProfiler, PeaksArePlausible) {
  FUSEC_REQUIRE_GPU();
  const auto& p = peaks();
  EXPECT_GT(p.bandwidth_bytes_per_s, 100e9);
  for (const char* k : {"fp32", "tf32", "fp16", "bf16"}) EXPECT_GT(p.flops_per_s.at(k), 1e12) << k;
  EXPECT_GT(p.flops_per_s.at("fp16"), p.flops_per_s.at("fp32"));
}

TEST(GpuProfiler, LargeCopyKernelNearTheCopyPeak) {
  FUSEC_REQUIRE_GPU();
  // Neg over 64 Mi floats: 256 MiB read, 256 MiB written, no arithmetic to speak of.
  GraphBuilder b;
  Value* x = b.input("x", DType::Float32, {Dim(64), Dim(1024), Dim(1024)});
  Value* y = b.node("Neg", {x}, {}, "neg");
  b.output(y);
  auto g = b.build();
  infer_shapes(*g);
  auto r = profile(*g, {random_tensor(DType::Float32, {64, 1024, 1024}, 1)}, Precision::FP32);
  const auto& n = node(r.a, "neg");
  ASSERT_EQ(n.bound, "memory");
  EXPECT_GT(n.pct_of_peak, 85.0) << n.bytes_per_s / 1e9 << " GB/s against " << peaks().bandwidth_bytes_per_s / 1e9;
  EXPECT_LT(n.pct_of_peak, 115.0) << n.bytes_per_s / 1e9 << " GB/s against " << peaks().bandwidth_bytes_per_s / 1e9;
}

TEST(GpuProfiler, LargeFp16GemmNearTheGemmPeak) {
  FUSEC_REQUIRE_GPU();
  const int64_t n = 8192;
  GraphBuilder b;
  Value* a = b.input("a", DType::Float32, {Dim(n), Dim(n)});
  Value* w = b.initializer("w", random_tensor(DType::Float32, {n, n}, 2));
  b.output(b.node("MatMul", {a, w}, {}, "mm"));
  auto g = b.build();
  infer_shapes(*g);
  auto r = profile(*g, {random_tensor(DType::Float32, {n, n}, 3)}, Precision::FP16, 8);
  const auto& mm = node(r.a, "mm");
  ASSERT_EQ(mm.bound, "compute");
  EXPECT_EQ(mm.peak, "fp16");
  EXPECT_GT(mm.pct_of_peak, 85.0) << mm.flops_per_s / 1e12 << " TFLOP/s";
  EXPECT_LT(mm.pct_of_peak, 115.0) << mm.flops_per_s / 1e12 << " TFLOP/s";
}

TEST(GpuProfiler, EveryRecordAttributedInBothModesAndWithinWallTime) {
  FUSEC_REQUIRE_GPU();
  auto g = import_onnx_file(std::filesystem::path(FUSEC_SOURCE_DIR) / "models" / "resnet50_small.onnx");
  ShapeBindings sb;
  sb.batch = 16;
  bind_input_shapes(*g, sb);
  infer_shapes(*g);
  optimize_graph(*g, PipelineOptions{});
  std::vector<Tensor> in{random_tensor(DType::Float32, static_dims(*g->inputs[0]->type.shape), 4)};
  auto r = profile(*g, in, Precision::FP16);
  ASSERT_EQ(r.c.modes.size(), 2u);
  EXPECT_EQ(r.c.modes[0].name, "cuda_graph");
  EXPECT_EQ(r.c.modes[1].name, "stream");
  EXPECT_EQ(r.c.dropped_records, 0u);
  for (const auto& m : r.a.modes) {
    EXPECT_EQ(m.unattributed, 0) << m.name << ": " << r.c.attribution;
    EXPECT_GT(m.launches, 0) << m.name;
  }
  // Per iteration: the records' summed durations never exceed the events' wall time.
  std::map<std::pair<int, int>, double> sum;
  for (const auto& rec : r.c.records)
    if (rec.iteration >= 0) sum[{rec.mode, rec.iteration}] += rec.ms();
  for (const auto& [key, ms] : sum)
    EXPECT_LE(ms, r.c.modes[key.first].wall_ms[key.second] * 1.001 + 1e-3)
        << r.c.modes[key.first].name << " iteration " << key.second;
  // Replay and separate launches run the same kernels for each step.
  std::map<int, std::vector<std::string>> per_mode[2];
  for (const auto& rec : r.c.records)
    if (rec.iteration == 0) per_mode[rec.mode][rec.step].push_back(rec.name);
  EXPECT_EQ(per_mode[0], per_mode[1]);
  // Every node on the GPU launched something, except views (Flatten) that alias their input.
  for (const auto& n : r.a.nodes)
    if (n.kind == "kernel" && n.op_type != "Flatten" && n.op_type != "Reshape")
      EXPECT_GT(n.records_per_iteration, 0) << n.name;
}

TEST(GpuProfiler, StreamOnlyWhenGraphsAreOff) {
  FUSEC_REQUIRE_GPU();
  GraphBuilder b;
  Value* x = b.input("x", DType::Float32, {Dim(256), Dim(256)});
  b.output(b.node("Relu", {b.node("Neg", {x}, {}, "neg")}, {}, "relu"));
  auto g = b.build();
  infer_shapes(*g);
  cuda::CudaOptions o;
  auto exe = cuda::CudaBackend(o).compile_cuda(*g);
  profiler::CudaRunSettings s;
  s.graph = false;
  s.iterations = 3;
  auto c = profiler::profile_cuda(*exe, {random_tensor(DType::Float32, {256, 256}, 5)}, s);
  ASSERT_EQ(c.modes.size(), 1u);
  EXPECT_EQ(c.modes[0].name, "stream");
  int kernels = 0;
  for (const auto& rec : c.records)
    if (rec.iteration >= 0 && rec.kind == profiler::RecordKind::Kernel) {
      ++kernels;
      EXPECT_GE(rec.step, 0);
      EXPECT_GT(rec.end_ns, rec.start_ns);
    }
  EXPECT_EQ(kernels, 2 * 3);
  // Profiling twice in one process (as --compare-unfused does) works the same.
  auto exe2 = cuda::CudaBackend(o).compile_cuda(*g);
  auto c2 = profiler::profile_cuda(*exe2, {random_tensor(DType::Float32, {256, 256}, 5)}, s);
  EXPECT_EQ(c2.records.size(), c.records.size());
}

TEST(GpuProfiler, WithoutCuptiEventsTimeEachStep) {
  FUSEC_REQUIRE_GPU();
  GraphBuilder b;
  Value* x = b.input("x", DType::Float32, {Dim(1024), Dim(1024)});
  b.output(b.node("Relu", {b.node("Neg", {x}, {}, "neg")}, {}, "relu"));
  auto g = b.build();
  infer_shapes(*g);
  auto exe = cuda::CudaBackend(cuda::CudaOptions{}).compile_cuda(*g);
  ::setenv("FUSEC_PROFILE_NO_CUPTI", "1", 1);
  profiler::CudaRunSettings s;
  s.iterations = 4;
  profiler::Collected c;
  try {
    c = profiler::profile_cuda(*exe, {random_tensor(DType::Float32, {1024, 1024}, 6)}, s);
  } catch (...) {
    ::unsetenv("FUSEC_PROFILE_NO_CUPTI");
    throw;
  }
  ::unsetenv("FUSEC_PROFILE_NO_CUPTI");
  ASSERT_EQ(c.modes.size(), 2u);
  EXPECT_EQ(c.modes[0].name, "stream");
  EXPECT_EQ(c.modes[1].name, "cuda_graph");
  EXPECT_NE(c.attribution.find("CUDA events"), std::string::npos) << c.attribution;
  auto a = profiler::analyze(c, peaks(), Precision::FP32, DType::Undefined);
  for (const char* n : {"neg", "relu"}) {
    EXPECT_GT(node(a, n).median_ms, 0.0) << n;
    EXPECT_EQ(node(a, n).records_per_iteration, 1) << n;
  }
  for (int it = 0; it < 4; ++it) {
    double sum = 0;
    for (const auto& r : c.records)
      if (r.iteration == it) sum += r.ms();
    EXPECT_LE(sum, c.modes[0].wall_ms[it] * 1.001 + 1e-3);
  }
}
