// The executor as a whole: errors without a GPU, CUDA-graph replay equal to stream execution,
// the CPU fallback and its precision conversions, views, plans specialized on input values, and
// the shipped models unfused and optimized against the CPU reference.
#include <filesystem>

#include "gpu_test_util.h"
#include "backend/cpu/cpu_backend.h"
#include "importer/onnx_import.h"
#include "ir/error.h"
#include "passes/infer_shapes.h"
#include "passes/pipeline.h"

using namespace fusec;
using namespace fusec::test;

namespace {

const Precision kAll[] = {Precision::FP32, Precision::TF32, Precision::FP16, Precision::BF16};

std::unique_ptr<Graph> load(const std::string& name, int64_t batch) {
  auto g = import_onnx_file(std::filesystem::path(FUSEC_SOURCE_DIR) / "models" / name);
  ShapeBindings b;
  b.batch = batch;
  bind_input_shapes(*g, b);
  infer_shapes(*g);
  return g;
}

std::vector<Tensor> random_inputs(const Graph& g, uint64_t seed) {
  std::vector<Tensor> ins;
  for (Value* v : g.inputs) {
    auto dims = static_dims(*v->type.shape);
    // Token ids must index the embedding table: keep integers small.
    ins.push_back(is_integer(v->type.dtype) ? random_tensor(v->type.dtype, dims, seed, 0, 50)
                                            : random_tensor(v->type.dtype, dims, seed));
  }
  return ins;
}

}  // namespace

TEST(CudaBackendNoGpu, CompileWithoutADeviceIsACleanError) {
  std::string why;
  if (cuda::gpu_available(&why)) GTEST_SKIP() << "this machine has a GPU";
  GraphBuilder b;
  b.output(b.node("Relu", {b.input("x", DType::Float32, {Dim(4)})}));
  auto g = b.build();
  infer_shapes(*g);
  try {
    cuda::CudaBackend().compile_cuda(*g);
    FAIL() << "compile succeeded without a GPU";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_NE(std::string(e.what()).find("no usable GPU"), std::string::npos) << e.what();
  }
}

TEST(GpuExecutor, BadDeviceIndexIsACleanError) {
  FUSEC_REQUIRE_GPU();
  GraphBuilder b;
  b.output(b.node("Relu", {b.input("x", DType::Float32, {Dim(4)})}));
  auto g = b.build();
  infer_shapes(*g);
  cuda::CudaOptions o;
  o.device = 99;
  EXPECT_THROW(cuda::CudaBackend(o).compile_cuda(*g), Error);
}

TEST(GpuExecutor, GraphReplayEqualsStreamExecution) {
  FUSEC_REQUIRE_GPU();
  auto g = load("bert_small.onnx", 2);
  auto ins = random_inputs(*g, 5);
  cuda::CudaOptions with, without;
  without.cuda_graph = false;
  auto a = cuda::CudaBackend(with).compile_cuda(*g);
  auto b = cuda::CudaBackend(without).compile_cuda(*g);
  std::vector<Tensor> first = a->run(ins), replay = a->run(ins), stream = b->run(ins);
  EXPECT_EQ(a->graph_status(), "on");
  EXPECT_EQ(b->graph_status(), "off (--cuda-graph off)");
  for (size_t i = 0; i < first.size(); ++i) {
    EXPECT_TRUE(first[i].bytes_equal(replay[i])) << "replay differs from the first run";
    EXPECT_TRUE(first[i].bytes_equal(stream[i])) << "graph differs from stream execution";
  }
  // New inputs after capture: the graph reads the input buffers, not a snapshot.
  auto ins2 = random_inputs(*g, 6);
  auto again = a->run(ins2), ref = b->run(ins2);
  for (size_t i = 0; i < again.size(); ++i) EXPECT_TRUE(again[i].bytes_equal(ref[i]));
}

// Programmatic dependent launches (common.cuh launch_pdl): in optimized BERT at strict fp32 the
// LayerNormalizations and the GELU pass after cuBLASLt's FFN1 are kernels that may be scheduled
// before their predecessor ends and wait for it on the GPU. A missing wait is a race: replays
// would differ from each other or from the CPU. Batch 8 gives the GEMMs several waves of CTAs.
// Once with cuBLASLt's GEMMs (the GELU pass runs), once with our SGEMM forced (GELU inside it).
TEST(GpuExecutor, DependentLaunchChainsReplayLikeTheReference) {
  FUSEC_REQUIRE_GPU();
  for (const char* sgemm : {"0", "force"}) {
    SCOPED_TRACE(std::string("FUSEC_SGEMM=") + sgemm);
    ::setenv("FUSEC_SGEMM", sgemm, 1);
    auto g = load("bert_small.onnx", 8);
    optimize_graph(*g, PipelineOptions{});
    auto ins = random_inputs(*g, 11);
    cuda::CudaOptions o;
    o.precision = Precision::FP32;
    auto exe = cuda::CudaBackend(o).compile_cuda(*g);
    ::unsetenv("FUSEC_SGEMM");
    bool own = false;
    for (const auto& pl : exe->placement()) own = own || pl.kernel.find("fusec SGEMM") != std::string::npos;
    EXPECT_EQ(own, std::string(sgemm) == "force") << "the SGEMM route";
    auto want = cpu::CpuBackend().compile(*g)->run(ins);
    std::vector<Tensor> first;
    for (int run = 0; run < 12; ++run) {  // run 0 streams, the others replay the graph
      auto got = exe->run(ins);
      ASSERT_EQ(got.size(), want.size());
      if (run == 1) first = got;
      for (size_t i = 0; i < got.size(); ++i) {
        compare(got[i], want[i], 1e-4, "output " + std::to_string(i) + " run " + std::to_string(run));
        if (run > 1) EXPECT_TRUE(got[i].bytes_equal(first[i])) << "replay " << run << " differs from the first";
      }
    }
    EXPECT_EQ(exe->graph_status(), "on");
  }
}

TEST(GpuExecutor, CpuFallbackNodeInTheMiddle) {
  FUSEC_REQUIRE_GPU();
  // Einsum has no CUDA kernel: it runs on the CPU between two GPU nodes, through the storage
  // conversions at fp16/bf16.
  GraphBuilder b;
  Value* x = b.input("x", DType::Float32, {Dim(3), Dim(5)});
  Value* w = b.initializer("w", random_tensor(DType::Float32, {5, 4}, 2));
  Value* m = b.node("MatMul", {x, w});
  Value* e = b.node("Einsum", {m}, {attr("equation", std::string("ij->ji"))}, "transpose_by_einsum");
  b.output(b.node("Relu", {e}));
  auto g = b.build();
  infer_shapes(*g);
  for (Precision p : kAll) expect_graph_gpu_matches_cpu(*g, {random_tensor(DType::Float32, {3, 5}, 3)}, p);
  auto exe = cuda::CudaBackend().compile_cuda(*g);
  bool einsum_on_cpu = false;
  for (const auto& pl : exe->placement())
    if (pl.node == "transpose_by_einsum") einsum_on_cpu = !pl.on_gpu && !pl.folded;
  EXPECT_TRUE(einsum_on_cpu);
  EXPECT_NE(exe->graph_status().find("runs on the CPU"), std::string::npos) << exe->graph_status();
  cuda::CudaOptions strict;
  strict.strict = true;
  EXPECT_THROW(cuda::CudaBackend(strict).compile_cuda(*g), Error);
}

TEST(GpuExecutor, ReshapeTargetFedAsAnInputSpecializesThePlan) {
  FUSEC_REQUIRE_GPU();
  GraphBuilder b;
  Value* x = b.input("x", DType::Float32, {Dim(2), Dim(6)});
  Value* s = b.input("shape", DType::Int64, {Dim(2)});
  b.output(b.node("Relu", {b.node("Reshape", {x, s})}));
  auto g = b.build();
  infer_shapes(*g);
  auto exe = cuda::CudaBackend().compile_cuda(*g);
  Tensor xv = random_tensor(DType::Float32, {2, 6}, 9);
  for (auto dims : {std::vector<int64_t>{3, 4}, std::vector<int64_t>{12, 1}, std::vector<int64_t>{3, 4}}) {
    auto out = exe->run({xv, Tensor::from_int64(dims, {2})});
    ASSERT_EQ(out[0].dims(), dims);
    for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(out[0].data<float>()[i], std::max(0.0f, xv.data<float>()[i]));
  }
}

TEST(GpuExecutor, DynamicBatchReplans) {
  FUSEC_REQUIRE_GPU();
  GraphBuilder b;
  Value* x = b.input("x", DType::Float32, {Dim::sym("N"), Dim(8)});
  Value* w = b.initializer("w", random_tensor(DType::Float32, {8, 3}, 4));
  Value* y = b.node("MatMul", {x, w});
  b.output(b.node("Flatten", {y}));
  auto g = b.build();
  infer_shapes(*g);
  auto exe = cuda::CudaBackend().compile_cuda(*g);
  for (int64_t n : {2, 5, 2}) {
    Tensor xv = random_tensor(DType::Float32, {n, 8}, n);
    auto ref = cpu::CpuBackend().compile(*g)->run({xv});
    auto got = exe->run({xv});
    ASSERT_EQ(got[0].dims(), ref[0].dims());
    for (int64_t i = 0; i < ref[0].numel(); ++i) EXPECT_NEAR(got[0].data<float>()[i], ref[0].data<float>()[i], 1e-5);
  }
}

TEST(GpuExecutor, ShippedModelsMatchTheReference) {
  FUSEC_REQUIRE_GPU();
  for (const char* name : {"resnet50_small.onnx", "mobilenetv2_small.onnx", "bert_small.onnx", "mlp_small.onnx"}) {
    for (bool optimized : {false, true}) {
      auto g = load(name, 2);
      if (optimized) optimize_graph(*g, PipelineOptions{});
      auto ins = random_inputs(*g, 7);
      for (Precision p : {Precision::FP32, Precision::FP16}) {
        SCOPED_TRACE(std::string(name) + (optimized ? " optimized" : " as exported") + " " + precision_name(p));
        // Whole models accumulate rounding over many layers: 1e-4 at fp32 (the figure).
        expect_graph_gpu_matches_cpu(*g, ins, p, p == Precision::FP32 ? 1e-4 : 2e-2);
      }
    }
  }
}
