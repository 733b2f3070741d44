// Normalization kernels (norm.cu) against the CPU reference: LayerNormalization (ai.onnx and
// ai.fusec, axis variants, optional bias, Mean/InvStdDev outputs), SkipLayerNorm (full skip, bias
// vector, [S, H] table, the optional sum output), LayerNormGelu (erf and tanh), SimplifiedLayerNorm,
// SkipSimplifiedLayerNorm, RMSNormalization, InstanceNormalization, GroupNormalization,
// BatchNormalization (inference) and LpNormalization, at fp32 (1e-5), fp16 and bf16 (1e-2),
// over row widths that take every kernel variant (warp rows, block rows, vector and scalar loads,
// the long-row path), and the cases that must fall back to the CPU.
#include <cmath>

#include "backend/cuda/core/cuda_op.h"
#include "gpu_test_util.h"
#include "passes/infer_shapes.h"

using namespace fusec;
using namespace fusec::test;

namespace {

const Precision kAll[] = {Precision::FP32, Precision::FP16, Precision::BF16};

/// Random values on a 1/64 grid in [lo, hi] (|lo|, |hi| <= 2): exact in float16 and bfloat16, so
/// the half-precision runs measure the kernel, not the rounding of their inputs.
Tensor data(std::vector<int64_t> dims, uint64_t seed, double lo = -2, double hi = 2) {
  Tensor t = random_tensor(DType::Float32, dims, seed, lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = std::round(t.data<float>()[i] * 64.0f) / 64.0f;
  return t;
}

std::vector<int64_t> tail(const std::vector<int64_t>& d, int64_t axis) {
  if (axis < 0) axis += static_cast<int64_t>(d.size());
  return std::vector<int64_t>(d.begin() + axis, d.end());
}

OpCase layernorm(std::vector<int64_t> dims, int64_t axis, bool bias, uint64_t seed, size_t outputs = 1,
                 const std::string& domain = "") {
  OpCase c;
  c.op = "LayerNormalization";
  c.domain = domain;
  c.inputs = {data(dims, seed), data(tail(dims, axis), seed + 1, 0.5, 1.5),
              bias ? data(tail(dims, axis), seed + 2, -0.5, 0.5) : Tensor()};
  c.constant = {1, 2};
  c.attrs = {attr("axis", axis), attr("epsilon", 1e-5f)};
  c.num_outputs = outputs;
  return c;
}

void all_precisions(const OpCase& c) {
  for (Precision p : kAll) {
    SCOPED_TRACE(precision_name(p));
    expect_gpu_matches_cpu(c, p);
  }
}

/// Builds and runs the node like the harness does and reports where the CUDA backend placed it
/// (planning happens at the first run).
bool placed_on_gpu(const OpCase& c, Precision p = Precision::FP32) {
  GraphBuilder b(c.opset);
  if (!c.domain.empty()) b.graph().opsets[c.domain] = 1;
  std::vector<Value*> ins;
  std::vector<Tensor> feeds;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const Tensor& t = c.inputs[i];
    if (!t.defined()) {
      ins.push_back(nullptr);
      continue;
    }
    const std::string name = "in" + std::to_string(i);
    if (c.constant.count(i)) {
      ins.push_back(b.initializer(name, t.clone()));
    } else {
      ins.push_back(b.input(name, t.dtype(), shape_of(t.dims())));
      feeds.push_back(t);
    }
  }
  for (Value* v : b.node_n(c.op, ins, c.num_outputs, c.attrs, "node_under_test", c.domain)) b.output(v);
  auto g = b.build();
  infer_shapes(*g);
  cuda::CudaOptions o;
  o.precision = p;
  auto exe = cuda::CudaBackend(o).compile_cuda(*g);
  exe->run(feeds);
  for (const auto& pl : exe->placement())
    if (pl.node == "node_under_test") return pl.on_gpu;
  ADD_FAILURE() << "node_under_test not placed";
  return false;
}

// 96, 192 and 384 (ConvNeXt's channels-last LayerNorms) take the 4-, 8- and 16-lane row groups at
// fp16; 300 rows leave a partial last block of groups.
const int64_t kWidths[] = {1, 7, 64, 96, 127, 192, 384, 768, 1024, 1025, 4096, 40000};

}  // namespace

TEST(GpuNorm, LayerNormRowWidths) {
  FUSEC_REQUIRE_GPU();
  uint64_t seed = 10;
  for (int64_t w : kWidths) {
    // Many rows (warp or block per row) and few rows (a block per row).
    for (int64_t rows : {int64_t(3), w >= 40000 ? int64_t(40) : int64_t(300)}) {
      SCOPED_TRACE("rows " + std::to_string(rows) + " width " + std::to_string(w));
      all_precisions(layernorm({rows, w}, -1, true, seed += 3));
    }
  }
}

TEST(GpuNorm, LayerNormModelShapes) {
  FUSEC_REQUIRE_GPU();
  all_precisions(layernorm({16, 128, 768}, -1, true, 1));  // BERT-base, batch 16, seq 128
  all_precisions(layernorm({16, 1024}, -1, true, 2));      // the seed MLP
  all_precisions(layernorm({16, 128, 768}, -1, false, 3, 1, "ai.fusec"));
  all_precisions(layernorm({2, 56, 56, 96}, -1, true, 4));   // ConvNeXt-T's first stage, channels-last
  all_precisions(layernorm({3, 14, 14, 384}, -1, true, 5));  // its third
}

TEST(GpuNorm, LayerNormAxesAndOutputs) {
  FUSEC_REQUIRE_GPU();
  all_precisions(layernorm({4, 6, 33}, -2, true, 20));
  all_precisions(layernorm({5, 40}, 0, true, 21));
  all_precisions(layernorm({2, 3, 64}, 1, false, 22));
  all_precisions(layernorm({2, 3, 1}, -1, true, 23));
  // Mean and InvStdDev (stash_type float32), short and long rows.
  all_precisions(layernorm({6, 768}, -1, true, 24, 3));
  all_precisions(layernorm({3, 5000}, -1, true, 25, 3));
  all_precisions(layernorm({2, 40000}, -1, true, 26, 3));
  all_precisions(layernorm({4, 6, 33}, 1, true, 27, 3, "ai.fusec"));
}

TEST(GpuNorm, LayerNormLargeMeanFp32) {
  FUSEC_REQUIRE_GPU();
  // A large mean next to a small spread: the statistics must not lose the spread's digits.
  for (int64_t w : {int64_t(768), int64_t(40000)}) {
    OpCase c = layernorm({8, w}, -1, true, 30 + w, 3);
    c.inputs[0] = random_tensor(DType::Float32, {8, w}, 31 + w, 100, 101);
    expect_gpu_matches_cpu(c, Precision::FP32);
  }
}

TEST(GpuNorm, SkipLayerNorm) {
  FUSEC_REQUIRE_GPU();
  auto skip_case = [](std::vector<int64_t> x, std::vector<int64_t> skip, bool bias, size_t outputs, uint64_t seed) {
    OpCase c;
    c.op = "SkipLayerNorm";
    c.domain = "ai.fusec";
    const int64_t h = x.back();
    c.inputs = {data(x, seed, -1, 1), data(skip, seed + 1, -1, 1), data({h}, seed + 2, 0.5, 1.5),
                bias ? data({h}, seed + 3, -0.5, 0.5) : Tensor()};
    c.constant = {2, 3};
    c.num_outputs = outputs;
    return c;
  };
  all_precisions(skip_case({16, 128, 768}, {16, 128, 768}, true, 2, 40));  // BERT residual, sum kept
  all_precisions(skip_case({16, 128, 768}, {16, 128, 768}, true, 1, 41));
  all_precisions(skip_case({4, 33, 768}, {768}, true, 2, 42));     // skip is a bias vector
  all_precisions(skip_case({4, 33, 64}, {33, 64}, false, 2, 43));  // a [S, H] table
  all_precisions(skip_case({3, 1025}, {1, 1025}, true, 2, 44));
  all_precisions(skip_case({2, 40000}, {2, 40000}, true, 2, 45));
  all_precisions(skip_case({5, 7}, {7}, true, 1, 46));
  // A broadcast inside the rows ([B, 1, H] against [B, S, H]) goes to the CPU.
  OpCase mid = skip_case({2, 5, 64}, {2, 1, 64}, true, 2, 47);
  EXPECT_FALSE(placed_on_gpu(mid));
  expect_gpu_matches_cpu(mid, Precision::FP32, -1, false);
}

TEST(GpuNorm, LayerNormGelu) {
  FUSEC_REQUIRE_GPU();
  for (const char* approx : {"none", "tanh"}) {
    for (std::vector<int64_t> dims : {std::vector<int64_t>{16, 1024}, {300, 768}, {3, 127}, {2, 4096}}) {
      OpCase c = layernorm(dims, -1, true, 50 + dims[1], 1, "ai.fusec");
      c.op = "LayerNormGelu";
      c.attrs.push_back(attr("approximate", std::string(approx)));
      SCOPED_TRACE(approx);
      all_precisions(c);
    }
  }
}

TEST(GpuNorm, SimplifiedLayerNorm) {
  FUSEC_REQUIRE_GPU();
  uint64_t seed = 60;
  for (int64_t w : kWidths) {
    // Few rows and many: RMSNorm has its own kernels for every row shape LayerNorm has.
    for (int64_t rows : {int64_t(5), w >= 40000 ? int64_t(40) : int64_t(300)}) {
      OpCase c;
      c.op = "SimplifiedLayerNorm";
      c.domain = "ai.fusec";
      c.inputs = {data({rows, w}, seed), data({w}, seed + 1, 0.5, 1.5)};
      c.constant = {1};
      seed += 2;
      SCOPED_TRACE("rows " + std::to_string(rows) + " width " + std::to_string(w));
      all_precisions(c);
    }
  }
  OpCase c;
  c.op = "SimplifiedLayerNorm";
  c.domain = "ai.fusec";
  c.inputs = {data({3, 4, 16}, 70), data({4, 16}, 71, 0.5, 1.5)};
  c.constant = {1};
  c.attrs = {attr("axis", int64_t{1}), attr("epsilon", 1e-3f)};
  all_precisions(c);
}

TEST(GpuNorm, SkipSimplifiedLayerNorm) {
  FUSEC_REQUIRE_GPU();
  auto skip_case = [](std::vector<int64_t> x, std::vector<int64_t> skip, size_t outputs, uint64_t seed) {
    OpCase c;
    c.op = "SkipSimplifiedLayerNorm";
    c.domain = "ai.fusec";
    c.inputs = {data(x, seed, -1, 1), data(skip, seed + 1, -1, 1), data({x.back()}, seed + 2, 0.5, 1.5)};
    c.constant = {2};
    c.num_outputs = outputs;
    c.attrs = {attr("epsilon", 1e-6f)};
    return c;
  };
  all_precisions(skip_case({16, 128, 2048}, {16, 128, 2048}, 2, 90));  // a Llama residual, sum kept
  all_precisions(skip_case({16, 128, 2048}, {16, 128, 2048}, 1, 91));
  all_precisions(skip_case({3, 33, 96}, {33, 96}, 2, 92));  // short rows in lane groups, a table skip
  all_precisions(skip_case({5, 7}, {7}, 1, 93));
  all_precisions(skip_case({2, 40000}, {2, 40000}, 2, 94));
}

TEST(GpuNorm, InstanceNormalization) {
  FUSEC_REQUIRE_GPU();
  uint64_t seed = 80;
  for (std::vector<int64_t> dims :
       {std::vector<int64_t>{2, 3, 7}, {2, 4, 16, 16}, {1, 2, 40000}, {3, 5, 1}, {2, 8, 33, 31}}) {
    OpCase c;
    c.op = "InstanceNormalization";
    c.inputs = {data(dims, seed), data({dims[1]}, seed + 1, 0.5, 1.5), data({dims[1]}, seed + 2, -0.5, 0.5)};
    c.constant = {1, 2};
    c.attrs = {attr("epsilon", 1e-5f)};
    seed += 3;
    all_precisions(c);
  }
}

// GroupNormalization: each instance's group is one row of the row kernel; at opset 21 its scale and
// bias change every S values within the row (per channel), at 18 once a row (per group). Groups
// of 1 and of every channel, odd spatial sizes (scalar loads), and rows long enough for the
// long-row kernel (a diffusion UNet's 32 groups of 320 channels at 64 x 64 hold 40960 values).
TEST(GpuNorm, GroupNormalization) {
  FUSEC_REQUIRE_GPU();
  uint64_t seed = 120;
  struct G {
    std::vector<int64_t> dims;
    int64_t groups;
  };
  for (const G& g : {G{{2, 6, 5}, 3}, G{{2, 8, 4, 4}, 2}, G{{1, 8, 4, 4}, 8}, G{{2, 16, 3, 5}, 1}, G{{2, 32, 8, 8}, 4},
                     G{{1, 320, 64, 64}, 32}, G{{3, 12, 1}, 4}})
    for (int64_t opset : {int64_t{18}, int64_t{21}}) {
      const int64_t params = opset >= 21 ? g.dims[1] : g.groups;
      OpCase c;
      c.op = "GroupNormalization";
      c.opset = opset;
      c.inputs = {data(g.dims, seed), data({params}, seed + 1, 0.5, 1.5), data({params}, seed + 2, -0.5, 0.5)};
      c.constant = {1, 2};
      c.attrs = {attr("num_groups", g.groups), attr("epsilon", 1e-5f)};
      seed += 3;
      SCOPED_TRACE("groups " + std::to_string(g.groups) + " of " + std::to_string(g.dims[1]) + " at opset " +
                   std::to_string(opset));
      EXPECT_TRUE(placed_on_gpu(c));
      all_precisions(c);
    }
}

// RMSNormalization (opset 23) runs on the RMSNorm rows where its scale holds the normalized values
// (leading 1s allowed) in X's type; a scale that varies along the rows, or stored in another type,
// falls back to the CPU reference, which the result still matches.
TEST(GpuNorm, RmsNormalization) {
  FUSEC_REQUIRE_GPU();
  auto rms = [](std::vector<int64_t> x, std::vector<int64_t> scale, int64_t axis, uint64_t seed) {
    OpCase c;
    c.op = "RMSNormalization";
    c.opset = 23;
    c.inputs = {data(x, seed), data(scale, seed + 1, 0.5, 1.5)};
    c.constant = {1};
    c.attrs = {attr("axis", axis), attr("epsilon", 1e-6f)};
    return c;
  };
  const OpCase llama = rms({16, 128, 2048}, {2048}, -1, 130);
  EXPECT_TRUE(placed_on_gpu(llama));
  all_precisions(llama);
  const OpCase leading_ones = rms({3, 4, 16}, {1, 4, 16}, 1, 132);
  EXPECT_TRUE(placed_on_gpu(leading_ones));
  all_precisions(leading_ones);
  all_precisions(rms({5, 7}, {7}, -1, 134));
  const OpCase per_row = rms({4, 8}, {4, 1}, -1, 136);
  EXPECT_FALSE(placed_on_gpu(per_row));
  for (Precision p : kAll) {  // the CPU fallback inside a CUDA plan
    SCOPED_TRACE(precision_name(p));
    expect_gpu_matches_cpu(per_row, p, -1, /*require_gpu_kernel=*/false);
  }
}

TEST(GpuNorm, BatchNormalizationInference) {
  FUSEC_REQUIRE_GPU();
  uint64_t seed = 90;
  for (int64_t opset : {int64_t(9), int64_t(15)}) {
    for (std::vector<int64_t> dims :
         {std::vector<int64_t>{2, 3, 5, 5}, {4, 8}, {2, 16, 7, 7}, {1, 64, 56, 56}, {3, 5, 9}}) {
      const int64_t C = dims[1];
      OpCase c;
      c.op = "BatchNormalization";
      c.opset = opset;
      c.inputs = {data(dims, seed), data({C}, seed + 1, 0.5, 1.5), data({C}, seed + 2, -0.5, 0.5),
                  data({C}, seed + 3, -0.5, 0.5), data({C}, seed + 4, 0.5, 2)};
      c.constant = {1, 2, 3, 4};
      seed += 5;
      SCOPED_TRACE(opset);
      all_precisions(c);
    }
  }
}

TEST(GpuNorm, BatchNormalizationTrainingFallsBack) {
  FUSEC_REQUIRE_GPU();
  OpCase c;
  c.op = "BatchNormalization";
  c.opset = 15;
  c.inputs = {data({4, 3, 5}, 100), data({3}, 101, 0.5, 1.5), data({3}, 102), data({3}, 103), data({3}, 104, 0.5, 2)};
  c.constant = {1, 2, 3, 4};
  c.attrs = {attr("training_mode", int64_t{1})};
  c.num_outputs = 3;
  EXPECT_FALSE(placed_on_gpu(c));
  expect_gpu_matches_cpu(c, Precision::FP32, -1, false);
}

// LpNormalization (lp_norm.cu): the axis innermost (a warp per slice) and not (a thread per lane),
// p 1 and 2, a negative axis, every precision and float64, and a slice of zeros, whose norm is 0
// and which the reference gives as 0, not 0/0.
TEST(GpuNorm, LpNormalization) {
  FUSEC_REQUIRE_GPU();
  auto lp = [](Tensor x, int64_t axis, int64_t p) {
    OpCase c;
    c.op = "LpNormalization";
    c.opset = 22;
    c.inputs = {std::move(x)};
    c.attrs = {attr("axis", axis), attr("p", p)};
    return c;
  };
  for (int64_t p : {1, 2}) {
    SCOPED_TRACE("p " + std::to_string(p));
    for (const OpCase& c : {lp(data({6, 37}, 140), -1, p), lp(data({4, 1000}, 141), 1, p),
                            lp(data({3, 5, 7}, 142), 1, p), lp(data({2, 9, 3, 4}, 143), 0, p)}) {
      EXPECT_TRUE(placed_on_gpu(c));
      all_precisions(c);
      OpCase d = c;
      d.inputs[0] = random_tensor(DType::Float64, c.inputs[0].dims(), 144);
      expect_gpu_matches_cpu(d, Precision::FP32, 1e-12, true, "LpNormalization");
    }
    Tensor zeros = data({4, 6}, 145);
    for (int64_t j = 0; j < 6; ++j) zeros.data<float>()[2 * 6 + j] = 0.0f;  // row 2
    for (int64_t axis : {1, 0}) all_precisions(lp(zeros, axis, p));
  }
}
