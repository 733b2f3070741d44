// The float32 island on the GPU (backend/float32_island.h, planned in executor/plan.cpp): at fp16,
// bf16 and tf32, values read for their absolute size (a rotary embedding's angles, a GridSample
// grid, floats cast to indices, a norm's sum of squares) are computed and stored in float32 and
// match the CPU reference to the precision of the run's type; where the island meets the rest of
// the model, one conversion per value, none where an island kernel widens its input as it loads it.
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "gpu_test_util.h"
#include "passes/infer_shapes.h"

using namespace fusec;
using namespace fusec::test;

namespace {

/// Converts to `dtype` ("float32", "float16") in one run of g at p.
std::vector<std::string> conversions(const Graph& g, const std::vector<Tensor>& in, Precision p,
                                     const std::string& dtype, std::vector<NodePlacement>* placement = nullptr) {
  cuda::CudaOptions o;
  o.precision = p;
  o.context = shared_context();
  auto exe = cuda::CudaBackend(o).compile_cuda(g);
  StepLog log;
  exe->set_step_observer(&log);
  exe->run(in);
  exe->set_step_observer(nullptr);
  if (placement) *placement = exe->placement();
  std::vector<std::string> out;
  for (const auto& [kind, label] : log.steps)
    if (kind == "convert" && label.size() > dtype.size() &&
        label.compare(label.size() - dtype.size(), dtype.size(), dtype) == 0)
      out.push_back(label);
  return out;
}

const NodePlacement* placement_of(const std::vector<NodePlacement>& placement, const std::string& op) {
  for (const auto& pl : placement)
    if (pl.op_type == op) return &pl;
  return nullptr;
}

Value* unsqueeze(GraphBuilder& b, Value* x, int64_t axis) {
  return b.node("Unsqueeze", {x, b.initializer("axes_" + x->name, Tensor::from_int64({axis}, {1}))});
}

/// transformers' rotary tables from position ids: Cast -> Unsqueeze -> MatMul(inv_freq) -> Concat ->
/// Cos, Sin.
std::unique_ptr<Graph> rotary_tables(int64_t batch, int64_t seq, int64_t half) {
  GraphBuilder b;
  Value* pos = b.input("position_ids", DType::Int64, {Dim(batch), Dim(seq)});
  Value* pf = b.node("Cast", {pos}, {attr("to", int64_t{1})});
  std::vector<float> f(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    f[static_cast<size_t>(i)] =
        static_cast<float>(std::pow(10000.0, -static_cast<double>(i) / static_cast<double>(half)));
  Value* freqs = b.node("MatMul", {unsqueeze(b, pf, 2), b.initializer("inv_freq", Tensor::from_float(f, {1, half}))});
  Value* emb = b.node("Concat", {freqs, freqs}, {attr("axis", int64_t{-1})});
  b.output(b.node("Cos", {emb}));
  b.output(b.node("Sin", {emb}));
  auto g = b.build();
  infer_shapes(*g);
  return g;
}

}  // namespace

TEST(GpuFloat32Island, RotaryTablesAtPositionsPastHalfPrecisionsIntegersMatchTheReference) {
  FUSEC_REQUIRE_GPU();
  // Positions up to 32767: fp16 steps by 16 there, TF32 and bf16 coarser still, so an angle
  // rounded to the run's type misses by radians; within the island it is the reference's float32.
  auto g = rotary_tables(2, 257, 24);
  const Tensor pos = random_tensor(DType::Int64, {2, 257}, 7, 0, 32768);
  for (auto [p, tol] : {std::pair{Precision::FP16, 2e-3}, {Precision::BF16, 8e-3}, {Precision::TF32, 1e-3}}) {
    SCOPED_TRACE(precision_name(p));
    expect_graph_gpu_matches_cpu(*g, {pos}, p, tol);
    std::vector<NodePlacement> placement;
    conversions(*g, {pos}, p, "float32", &placement);
    ASSERT_TRUE(placement_of(placement, "MatMul") && placement_of(placement, "Cos"));
    EXPECT_TRUE(placement_of(placement, "MatMul")->float32);
    EXPECT_FALSE(placement_of(placement, "Cos")->float32) << "the tables are in the run's type";
  }
}

TEST(GpuFloat32Island, AGridComputedOnAWideImageSamplesThePixelsTheReferenceDoes) {
  FUSEC_REQUIRE_GPU();
  // Pixel coordinates -> normalized grid at run time, on a 1021-pixel-wide image of noise: a grid
  // rounded to fp16 lands a quarter pixel off, which moves a linear sample by a quarter of the
  // noise's range.
  const int64_t w = 1021;
  GraphBuilder b(20);
  Value* x = b.input("x", DType::Float32, {Dim(1), Dim(3), Dim(5), Dim(w)});
  Value* px = b.input("px", DType::Float32, {Dim(1), Dim(7), Dim(301), Dim(2)});
  Value* scale = b.initializer("scale", Tensor::from_float({2.0f / (w - 1), 2.0f / 4}, {2}));
  Value* grid =
      b.node("Sub", {b.node("Mul", {px, scale}), b.initializer("one", Tensor::scalar_float(1.0f))}, {}, "grid");
  b.output(b.node("GridSample", {x, grid}, {attr("align_corners", int64_t{1})}));
  b.output(b.node("Relu", {grid}));  // read outside the island, widened as it is loaded
  b.output(b.node("Transpose", {grid}, {attr("perm", std::vector<int64_t>{0, 3, 1, 2})}));  // converted once
  auto g = b.build();
  infer_shapes(*g);
  Tensor coords = random_tensor(DType::Float32, {1, 7, 301, 2}, 3, 0, 4);
  float* c = coords.data<float>();
  for (int64_t i = 0; i < coords.numel(); i += 2) c[i] *= static_cast<float>(w - 1) / 4;  // x across the width
  const std::vector<Tensor> in = {random_tensor(DType::Float32, {1, 3, 5, w}, 4), coords};
  for (Precision p : {Precision::FP16, Precision::BF16}) {
    SCOPED_TRACE(precision_name(p));
    expect_graph_gpu_matches_cpu(*g, in, p, p == Precision::FP16 ? 4e-3 : 2e-2);
    const std::string half = dtype_name(storage_dtype(p, DType::Float32));
    EXPECT_EQ(conversions(*g, in, p, "float32").size(), 0u) << "px and the grid are float32 from the start";
    EXPECT_EQ(conversions(*g, in, p, half), std::vector<std::string>{"convert 'grid_out' to " + half})
        << "the grid for the Transpose, once; the Relu reads it as stored";
  }
}

TEST(GpuFloat32Island, FloatsCastToIndicesStayExactAndAConvOutputIsWidenedAsItIsRead) {
  FUSEC_REQUIRE_GPU();
  // floor(3 (big + conv(small))) as int64, big up to 20000 (past fp16's integers): big and the
  // arithmetic stay float32; the conv runs in the run's type and the island's Add reads it as
  // stored, so its rounding (|conv| < 2, about 1e-3 at fp16) moves an index by one where
  // 3 (big + conv) lies that close to an integer, and never by more.
  GraphBuilder b;
  const std::vector<int64_t> d = {1, 4, 33, 65};
  Value* small = b.input("small", DType::Float32, shape_of(d));
  Value* big = b.input("big", DType::Float32, shape_of(d));
  Value* w = b.initializer("w", random_tensor(DType::Float32, {4, 4, 3, 3}, 5, -0.3, 0.3));
  Value* conv = b.node("Conv", {small, w}, {attr("pads", std::vector<int64_t>{1, 1, 1, 1})}, "conv");
  Value* idx =
      b.node("Floor", {b.node("Mul", {b.node("Add", {big, conv}), b.initializer("k", Tensor::scalar_float(3.0f))})});
  b.output(b.node("Cast", {idx}, {attr("to", int64_t{7})}));
  auto g = b.build();
  infer_shapes(*g);
  const std::vector<Tensor> in = {random_tensor(DType::Float32, d, 6), random_tensor(DType::Float32, d, 8, 0, 20000)};
  auto want = cpu::CpuBackend().compile(*g)->run(in);
  for (Precision p : {Precision::FP16, Precision::BF16}) {
    SCOPED_TRACE(precision_name(p));
    cuda::CudaOptions o;
    o.precision = p;
    o.context = shared_context();
    auto got = cuda::CudaBackend(o).compile_cuda(*g)->run(in);
    ASSERT_EQ(got[0].dtype(), DType::Int64);
    int64_t off = 0, far = 0;
    for (int64_t i = 0; i < want[0].numel(); ++i) {
      const int64_t diff = got[0].data<int64_t>()[i] - want[0].data<int64_t>()[i];
      off += diff != 0;
      far += diff > 1 || diff < -1;
    }
    EXPECT_EQ(far, 0) << "an index moved by more than the conv's rounding";
    EXPECT_LE(off, want[0].numel() / 20) << off << " of " << want[0].numel() << " indices off by one";
    EXPECT_TRUE(conversions(*g, in, p, "float32").empty())
        << "the island's Add widens the conv's output as it loads it";
  }
}

TEST(GpuFloat32Island, ANormOfActivationsWhoseSquaresPassFp16sRangeMatchesTheReference) {
  FUSEC_REQUIRE_GPU();
  // RMSNorm as exporters write it, unfused, over activations up to 2000 (a transformer's outlier
  // features reach that): their squares pass fp16's 65504, which made the row's statistic inf and
  // its output 0. The square, the mean, epsilon and the root run in float32; x and y stay fp16.
  for (bool mul_form : {false, true}) {
    SCOPED_TRACE(mul_form ? "Mul(x, x), Reciprocal" : "Pow(x, 2), Div");
    GraphBuilder b(18);
    Value* x = b.input("x", DType::Float32, {Dim(3), Dim(7), Dim(96)});
    Value* sq = mul_form ? b.node("Mul", {x, x}) : b.node("Pow", {x, b.initializer("two", Tensor::scalar_float(2.0f))});
    Value* mean = b.node("ReduceMean", {sq, b.initializer("axes", Tensor::from_int64({-1}, {1}))});
    Value* root = b.node("Sqrt", {b.node("Add", {mean, b.initializer("eps", Tensor::scalar_float(1e-6f))})});
    Value* normed = mul_form ? b.node("Mul", {x, b.node("Reciprocal", {root})}) : b.node("Div", {x, root});
    b.output(b.node("Mul", {normed, b.initializer("gamma", random_tensor(DType::Float32, {96}, 9, 0.5, 1.5))}));
    auto g = b.build();
    infer_shapes(*g);
    const std::vector<Tensor> in = {random_tensor(DType::Float32, {3, 7, 96}, 11, -2000, 2000)};
    for (Precision p : {Precision::FP16, Precision::BF16}) {
      SCOPED_TRACE(precision_name(p));
      // bf16 rounds x, gamma and y by up to 2^-8 each.
      expect_graph_gpu_matches_cpu(*g, in, p, p == Precision::BF16 ? 2e-2 : -1);
      EXPECT_TRUE(conversions(*g, in, p, "float32").empty()) << "the square widens x as it loads it";
    }
  }
}

TEST(GpuFloat32Island, AnIslandNodeThatMovesDataReadsAHalfActivationConvertedOnce) {
  FUSEC_REQUIRE_GPU();
  // A conv predicts offsets; Transpose (data movement: no widening load) and Add put them on a base
  // grid for GridSample. The conv stays in the run's type; the Transpose reads it converted up.
  GraphBuilder b(20);
  Value* img = b.input("img", DType::Float32, {Dim(2), Dim(3), Dim(9), Dim(13)});
  Value* w = b.initializer("w", random_tensor(DType::Float32, {2, 3, 3, 3}, 12, -0.05, 0.05));
  Value* flow = b.node("Conv", {img, w}, {attr("pads", std::vector<int64_t>{1, 1, 1, 1})}, "conv");
  Value* offsets = b.node("Transpose", {flow}, {attr("perm", std::vector<int64_t>{0, 2, 3, 1})});
  Value* base = b.initializer("base", random_tensor(DType::Float32, {1, 9, 13, 2}, 13, -1, 1));
  b.output(b.node("GridSample", {img, b.node("Add", {offsets, base})}));
  auto g = b.build();
  infer_shapes(*g);
  const std::vector<Tensor> in = {random_tensor(DType::Float32, {2, 3, 9, 13}, 14)};
  for (Precision p : {Precision::FP16, Precision::BF16}) {
    SCOPED_TRACE(precision_name(p));
    expect_graph_gpu_matches_cpu(*g, in, p, p == Precision::FP16 ? 1e-2 : 3e-2);
    EXPECT_EQ(conversions(*g, in, p, "float32"), std::vector<std::string>{"convert 'conv_out' to float32"});
  }
}

TEST(GpuFloat32Island, AOnePassLayerNormOfLargeActivationsMatchesTheReference) {
  FUSEC_REQUIRE_GPU();
  // var = mean(x·x) − μ·μ, as the ONNX LayerNormalization function body writes it, over rows whose
  // mean is past 256 too (its square, 9e4, is past fp16's range as x's are): both squares, their
  // difference, epsilon and the root run in float32. μ itself is stored in the run's type, as torch
  // would store it: at x in [0, 600] its rounding (0.125 at fp16) moves var (3e4) by 0.25%.
  GraphBuilder b(18);
  Value* x = b.input("x", DType::Float32, {Dim(5), Dim(3), Dim(77)});
  Value* axes = b.initializer("axes", Tensor::from_int64({-1}, {1}));
  Value* mu = b.node("ReduceMean", {x, axes});
  Value* var = b.node("Sub", {b.node("ReduceMean", {b.node("Mul", {x, x}), axes}), b.node("Mul", {mu, mu})});
  Value* s = b.node("Sqrt", {b.node("Add", {var, b.initializer("eps", Tensor::scalar_float(1e-5f))})});
  b.output(b.node("Div", {b.node("Sub", {x, mu}), s}));
  auto g = b.build();
  infer_shapes(*g);
  const std::vector<Tensor> in = {random_tensor(DType::Float32, {5, 3, 77}, 15, 0, 600)};
  for (Precision p : {Precision::FP16, Precision::BF16}) {
    SCOPED_TRACE(precision_name(p));
    expect_graph_gpu_matches_cpu(*g, in, p, p == Precision::FP16 ? 2e-2 : 5e-2);
  }
}

TEST(GpuFloat32Island, AFlowReadOffCoordinatesPastTheirLastSampleMatchesTheReference) {
  FUSEC_REQUIRE_GPU();
  // RAFT's refinement on a 1021-px-wide image: coordinates start on the pixel grid, each step
  // samples at them and adds a conv's flow, and the model returns the last coordinates less the
  // grid. Rounded to fp16 at 1000 px (a step of 0.5), the last coordinates would put an error of
  // up to 0.25 px into a flow of about 1 px; in the island the flow is the convs' own precision.
  // Fused as the optimizer leaves it (each sum a FusedConv's residual), the plan splits the sums
  // back out first.
  const int64_t w = 1021, h = 5;
  std::vector<float> px(2 * h * w);
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x) {
      px[static_cast<size_t>(y * w + x)] = static_cast<float>(x);
      px[static_cast<size_t>(h * w + y * w + x)] = static_cast<float>(y);
    }
  for (bool fused : {false, true}) {
    SCOPED_TRACE(fused ? "fused" : "as exported");
    GraphBuilder b(20);
    b.graph().opsets["ai.fusec"] = 1;
    Value* img = b.input("img", DType::Float32, {Dim(1), Dim(2), Dim(h), Dim(w)});
    Value* grid = b.initializer("grid", Tensor::from_float(px, {1, 2, h, w}));
    auto step = [&](Value* in, Value* z, int k) {
      Value* wt =
          b.initializer("w" + std::to_string(k), random_tensor(DType::Float32, {2, 2, 3, 3}, 20 + k, -0.3, 0.3));
      Value* bias = b.initializer("b" + std::to_string(k), random_tensor(DType::Float32, {2}, 30 + k, -0.5, 0.5));
      const std::vector<NamedAttribute> pads = {attr("pads", std::vector<int64_t>{1, 1, 1, 1})};
      const std::string name = "conv" + std::to_string(k);
      if (fused) return b.node_n("FusedConv", {in, wt, bias, z}, 1, pads, name, "ai.fusec")[0];
      return b.node("Add", {z, b.node("Conv", {in, wt, bias}, pads, name)});
    };
    Value* c1 = step(img, grid, 1);
    Value* nhwc = b.node("Transpose", {c1}, {attr("perm", std::vector<int64_t>{0, 2, 3, 1})});
    Value* scale = b.initializer("scale", Tensor::from_float({2.0f / (w - 1), 2.0f / (h - 1)}, {2}));
    Value* normed = b.node("Sub", {b.node("Mul", {nhwc, scale}), b.initializer("one", Tensor::scalar_float(1.0f))});
    Value* sampled = b.node("GridSample", {img, normed}, {attr("align_corners", int64_t{1})});
    b.output(b.node("Sub", {step(sampled, c1, 2), grid}));
    auto g = b.build();
    infer_shapes(*g);
    const std::vector<Tensor> in = {random_tensor(DType::Float32, {1, 2, h, w}, 16)};
    for (auto [p, tol] : {std::pair{Precision::FP16, 4e-3}, {Precision::BF16, 3e-2}}) {
      SCOPED_TRACE(precision_name(p));
      expect_graph_gpu_matches_cpu(*g, in, p, tol);
      std::vector<NodePlacement> placement;
      conversions(*g, in, p, "float32", &placement);
      int float32_adds = 0;
      for (const auto& pl : placement) float32_adds += pl.op_type == "Add" && pl.float32;
      EXPECT_EQ(float32_adds, 2) << "both coordinate sums, the last one for the difference";
    }
  }
}
