// The float32 island of a reduced-precision run (backend/float32_island.h), without a GPU: which
// nodes run at float32 and which values are stored so, for the consumers that read an absolute
// value (angles, coordinates, indices), and where the island ends.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/float32_island.h"
#include "ir/graph_builder.h"
#include "passes/infer_shapes.h"

using namespace fusec;

namespace {

std::vector<std::string> island_ops(const Graph& g, const Float32Island& is) {
  std::vector<std::string> ops;
  for (const auto& n : g.nodes())  // graph order, so the expectation reads like the model
    if (is.nodes.count(n.get())) ops.push_back(n->op_type);
  return ops;
}

Value* unsqueeze(GraphBuilder& b, Value* x, int64_t axis) {
  return b.node("Unsqueeze",
                {x, b.initializer("axes" + std::to_string(axis) + x->name, Tensor::from_int64({axis}, {1}))});
}

/// A rotary embedding's tables from position ids, as transformers exports them: positions (int64)
/// -> Cast -> Unsqueeze -> MatMul(., inv_freq [1, half]) -> Concat(freqs, freqs) -> Cos, Sin.
struct Rotary {
  std::unique_ptr<Graph> g;
  Value *pos_f, *freqs, *emb, *cos, *inv_freq;
};

Rotary rotary_tables(int64_t seq, int64_t half) {
  GraphBuilder b;
  Rotary r;
  Value* pos = b.input("position_ids", DType::Int64, {Dim(1), Dim(seq)});
  r.pos_f = b.node("Cast", {pos}, {attr("to", int64_t{1})});
  std::vector<float> f(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) f[static_cast<size_t>(i)] = 1.0f / static_cast<float>(1 + i);
  r.inv_freq = b.initializer("inv_freq", Tensor::from_float(f, {1, half}));
  r.freqs = b.node("MatMul", {unsqueeze(b, r.pos_f, 2), r.inv_freq});
  r.emb = b.node("Concat", {r.freqs, r.freqs}, {attr("axis", int64_t{-1})});
  r.cos = b.node("Cos", {r.emb});
  b.output(r.cos);
  b.output(b.node("Sin", {r.emb}));
  r.g = b.build();
  infer_shapes(*r.g);
  return r;
}

}  // namespace

TEST(Float32Island, ARotaryEmbeddingsAnglesStayFloat32FromThePositionsOn) {
  Rotary r = rotary_tables(4096, 8);
  for (Precision p : {Precision::FP16, Precision::BF16}) {
    const Float32Island is = float32_island(*r.g, p);
    EXPECT_EQ(island_ops(*r.g, is), (std::vector<std::string>{"Cast", "Unsqueeze", "MatMul", "Concat"}));
    for (const Value* v : {r.pos_f, r.freqs, r.emb, r.inv_freq}) {
      EXPECT_TRUE(is.values.count(v)) << v->name;
      EXPECT_EQ(is.storage(p, *v), DType::Float32) << v->name;
    }
    // The tables themselves are within [-1, 1]: the run's type holds them to its precision.
    EXPECT_FALSE(is.values.count(r.cos));
    EXPECT_EQ(is.storage(p, *r.cos), storage_dtype(p, DType::Float32));
  }
  // At fp32 there is nothing to keep; at tf32 storage is float32 already, but the island's MatMul
  // still runs strict (TF32 rounds a position past 2048 as fp16 does).
  EXPECT_TRUE(float32_island(*r.g, Precision::FP32).empty());
  EXPECT_EQ(island_ops(*r.g, float32_island(*r.g, Precision::TF32)),
            (std::vector<std::string>{"Cast", "Unsqueeze", "MatMul", "Concat"}));
}

TEST(Float32Island, AGridSampleGridStaysFloat32BackToTheConvThatPredictsItsOffsets) {
  // flow = Conv(x); grid = Transpose(flow) + base; y = GridSample(x, grid). The conv's output
  // carries its own relative error and stays in the run's type; the coordinates after it do not.
  GraphBuilder b;
  Value* x = b.input("x", DType::Float32, {Dim(1), Dim(8), Dim(16), Dim(16)});
  Tensor w(DType::Float32, {2, 8, 3, 3});
  Value* flow = b.node("Conv", {x, b.initializer("w", std::move(w))}, {attr("pads", std::vector<int64_t>{1, 1, 1, 1})});
  Value* nhwc = b.node("Transpose", {flow}, {attr("perm", std::vector<int64_t>{0, 2, 3, 1})});
  Value* base = b.initializer("base", Tensor(DType::Float32, {1, 16, 16, 2}));
  Value* grid = b.node("Add", {nhwc, base});
  b.output(b.node("GridSample", {x, grid}));
  auto g = b.build();
  infer_shapes(*g);
  const Float32Island is = float32_island(*g, Precision::FP16);
  EXPECT_EQ(island_ops(*g, is), (std::vector<std::string>{"Transpose", "Add"}));
  EXPECT_TRUE(is.values.count(grid) && is.values.count(nhwc) && is.values.count(base));
  EXPECT_FALSE(is.values.count(flow)) << "a conv's output stays fp16";
  EXPECT_FALSE(is.values.count(x)) << "the sampled image is read for its relative value";
  EXPECT_TRUE(reads_absolute_value(*grid->consumers[0], 1));
  EXPECT_FALSE(reads_absolute_value(*grid->consumers[0], 0));
}

TEST(Float32Island, AMatMulOverMoreThanOneTermEndsTheIsland) {
  GraphBuilder b;
  Value* h = b.input("h", DType::Float32, {Dim(2), Dim(5), Dim(64)});
  Value* angles = b.node("MatMul", {h, b.initializer("w", Tensor(DType::Float32, {64, 32}))});
  Value* scaled = b.node("Mul", {angles, b.initializer("s", Tensor::scalar_float(2.0f))});
  b.output(b.node("Sin", {scaled}));
  auto g = b.build();
  infer_shapes(*g);
  const Float32Island is = float32_island(*g, Precision::FP16);
  EXPECT_EQ(island_ops(*g, is), std::vector<std::string>{"Mul"});
  EXPECT_FALSE(is.values.count(angles));
  EXPECT_FALSE(is.values.count(h));
}

TEST(Float32Island, AFloatCastToAnIndexKeepsItsArithmeticInFloat32) {
  GraphBuilder b;
  Value* x = b.input("x", DType::Float32, {Dim(7)});
  Value* fl = b.node("Floor", {b.node("Mul", {x, b.initializer("k", Tensor::scalar_float(3.0f))})});
  b.output(b.node("Cast", {fl}, {attr("to", int64_t{7})}));  // int64
  Value* y = b.node("Relu", {x});
  b.output(b.node("Cast", {y}, {attr("to", int64_t{10})}));  // float16: not an index
  auto g = b.build();
  infer_shapes(*g);
  const Float32Island is = float32_island(*g, Precision::BF16);
  EXPECT_EQ(island_ops(*g, is), (std::vector<std::string>{"Mul", "Floor"}));
  EXPECT_TRUE(is.values.count(x)) << "a graph input the island reads is stored as given";
  EXPECT_FALSE(is.values.count(y));
}

TEST(Float32Island, AModelWithoutSuchConsumersHasNone) {
  GraphBuilder b;
  Value* x = b.input("x", DType::Float32, {Dim(4), Dim(16)});
  Value* h = b.node("Relu", {b.node("MatMul", {x, b.initializer("w", Tensor(DType::Float32, {16, 16}))})});
  b.output(b.node("Add", {h, x}));
  auto g = b.build();
  infer_shapes(*g);
  EXPECT_TRUE(float32_island(*g, Precision::FP16).empty());
}

namespace {

/// y = x / sqrt(mean(x^2) + eps) * gamma over the last axis, as exporters write RMSNorm; the square
/// as Pow(x, 2) with the exponent from an initializer or a Constant node, or as Mul(x, x); the
/// root as Sqrt then Div, or Sqrt then Reciprocal then Mul (dynamo's rsqrt).
struct Norm {
  std::unique_ptr<Graph> g;
  Value *x, *sq, *mean, *root, *y;
};

Norm rms_norm(const std::string& square, bool reciprocal) {
  GraphBuilder b(18);
  Norm r;
  r.x = b.input("x", DType::Float32, {Dim(2), Dim(5), Dim(64)});
  if (square == "mul") {
    r.sq = b.node("Mul", {r.x, r.x});
  } else {
    Value* two = square == "constant_node" ? b.node("Constant", {}, {attr("value", Tensor::scalar_float(2.0f))})
                                           : b.initializer("two", Tensor::scalar_float(2.0f));
    r.sq = b.node("Pow", {r.x, two});
  }
  r.mean = b.node("ReduceMean", {r.sq, b.initializer("axes", Tensor::from_int64({-1}, {1}))},
                  {attr("keepdims", int64_t{1})});
  r.root = b.node("Sqrt", {b.node("Add", {r.mean, b.initializer("eps", Tensor::scalar_float(1e-6f))})});
  Value* normed = reciprocal ? b.node("Mul", {r.x, b.node("Reciprocal", {r.root})}) : b.node("Div", {r.x, r.root});
  r.y = b.node("Mul", {normed, b.initializer("gamma", Tensor::from_float(std::vector<float>(64, 0.5f), {64}))});
  b.output(r.y);
  r.g = b.build();
  infer_shapes(*r.g);
  return r;
}

}  // namespace

TEST(Float32Island, ANormsSumOfSquaresStaysFloat32FromTheSquareToTheRoot) {
  // Past |x| = 256 a square overflows fp16; the activation itself and the normalized output do not.
  for (const char* square : {"initializer", "constant_node", "mul"})
    for (bool reciprocal : {false, true}) {
      SCOPED_TRACE(std::string(square) + (reciprocal ? ", rsqrt" : ", div"));
      Norm r = rms_norm(square, reciprocal);
      const Float32Island is = float32_island(*r.g, Precision::FP16);
      const std::string sq = std::string(square) == "mul" ? "Mul" : "Pow";
      EXPECT_EQ(island_ops(*r.g, is), (std::vector<std::string>{sq, "ReduceMean", "Add", "Sqrt"}));
      for (const Value* v : {r.sq, r.mean, r.root}) EXPECT_TRUE(is.values.count(v)) << v->name;
      EXPECT_FALSE(is.values.count(r.x)) << "the activation is in range: read in the run's type";
      EXPECT_FALSE(is.values.count(r.y));
      EXPECT_TRUE(float32_island(*r.g, Precision::FP32).empty());
      EXPECT_TRUE(float32_island(*r.g, Precision::TF32).empty()) << "tf32 stores float32: nothing overflows";
    }
}

TEST(Float32Island, ASquareThatNoSumReadsIsLeftInTheRunsType) {
  // GELU's tanh form cubes x; x^2 * c feeds no reduction: an overflow there saturates tanh the
  // same way, so nothing is kept.
  GraphBuilder b;
  Value* x = b.input("x", DType::Float32, {Dim(4), Dim(32)});
  Value* sq = b.node("Pow", {x, b.initializer("two", Tensor::scalar_float(2.0f))});
  Value* cube = b.node("Pow", {x, b.initializer("three", Tensor::scalar_float(3.0f))});
  b.output(b.node("Add", {b.node("Mul", {sq, b.initializer("c", Tensor::scalar_float(0.1f))}), cube}));
  auto g = b.build();
  infer_shapes(*g);
  EXPECT_TRUE(float32_island(*g, Precision::FP16).empty());
}

TEST(Float32Island, AOnePassVarianceKeepsBothSquaresAndTheirDifference) {
  // var = mean(x·x) − μ·μ (the ONNX LayerNormalization function body): μ itself is in range, its
  // square is not.
  GraphBuilder b(18);
  Value* x = b.input("x", DType::Float32, {Dim(3), Dim(40)});
  Value* axes = b.initializer("axes", Tensor::from_int64({-1}, {1}));
  Value* mu = b.node("ReduceMean", {x, axes});
  Value* ex2 = b.node("ReduceMean", {b.node("Mul", {x, x}), axes});
  Value* var = b.node("Sub", {ex2, b.node("Mul", {mu, mu})});
  Value* s = b.node("Sqrt", {b.node("Add", {var, b.initializer("eps", Tensor::scalar_float(1e-5f))})});
  b.output(b.node("Div", {b.node("Sub", {x, mu}), s}));
  auto g = b.build();
  infer_shapes(*g);
  const Float32Island is = float32_island(*g, Precision::FP16);
  EXPECT_EQ(island_ops(*g, is), (std::vector<std::string>{"Mul", "ReduceMean", "Mul", "Sub", "Add", "Sqrt"}));
  EXPECT_FALSE(is.values.count(mu));
}

namespace {

/// RAFT's refinement in small: coordinates start on a pixel grid; a step samples the image at
/// them and adds the flow a conv predicts; the model returns its last coordinates less the grid.
///   c1 = grid + Conv(x); s = GridSample(x, Transpose(c1)); c2 = c1 + Conv(s); out = c2 - grid
/// Fused (as fuse_conv_activation leaves it), each sum is a FusedConv's residual Z. With
/// `difference` false the model returns 3·c2 instead: no difference reads the last coordinates.
struct Refinement {
  std::unique_ptr<Graph> g;
  Value *grid, *c1, *c2, *out;
};

Refinement refinement(bool fused, bool difference = true, const std::string& activation = "") {
  GraphBuilder b;
  b.graph().opsets["ai.fusec"] = 1;
  Refinement r;
  Value* x = b.input("x", DType::Float32, {Dim(1), Dim(2), Dim(16), Dim(16)});
  r.grid = b.initializer("grid", Tensor(DType::Float32, {1, 2, 16, 16}));
  auto step = [&](Value* in, Value* z, const std::string& k) {
    Value* w = b.initializer("w" + k, Tensor(DType::Float32, {2, 2, 3, 3}));
    Value* bias = b.initializer("b" + k, Tensor(DType::Float32, {2}));
    std::vector<NamedAttribute> attrs = {attr("pads", std::vector<int64_t>{1, 1, 1, 1})};
    if (!fused) return b.node("Add", {z, b.node("Conv", {in, w, bias}, attrs)});
    if (!activation.empty()) attrs.push_back(attr("activation", activation));
    return b.node_n("FusedConv", {in, w, bias, z}, 1, attrs, "conv" + k, "ai.fusec")[0];
  };
  r.c1 = step(x, r.grid, "1");
  Value* s = b.node("GridSample", {x, b.node("Transpose", {r.c1}, {attr("perm", std::vector<int64_t>{0, 2, 3, 1})})});
  r.c2 = step(s, r.c1, "2");
  r.out =
      difference ? b.node("Sub", {r.c2, r.grid}) : b.node("Mul", {r.c2, b.initializer("k", Tensor::scalar_float(3))});
  b.output(r.out);
  r.g = b.build();
  infer_shapes(*r.g);
  return r;
}

}  // namespace

TEST(Float32Island, CoordinatesCarriedPastTheirLastSampleToADifferenceStayFloat32) {
  // c2 is sampled by nothing, but c2 - grid cancels the coordinates' leading digits: rounded to
  // fp16 at 128 px, c2 would be 1/16 px off, and so would the flow the model returns.
  Refinement r = refinement(false);
  const Float32Island is = float32_island(*r.g, Precision::FP16);
  EXPECT_EQ(island_ops(*r.g, is), (std::vector<std::string>{"Add", "Transpose", "Add", "Sub"}));
  for (const Value* v : {r.grid, r.c1, r.c2}) EXPECT_TRUE(is.values.count(v)) << v->name;
  for (const Value* in : r.c2->producer->inputs)
    if (in != r.c1) EXPECT_FALSE(is.values.count(in)) << "the conv's flow stays in the run's type";
  EXPECT_TRUE(float32_island(*r.g, Precision::FP32).empty());
}

TEST(Float32Island, CoordinatesThatNoDifferenceReadsAfterTheirLastSampleAreLeftInTheRunsType) {
  Refinement r = refinement(false, /*difference=*/false);
  const Float32Island is = float32_island(*r.g, Precision::FP16);
  EXPECT_EQ(island_ops(*r.g, is), (std::vector<std::string>{"Add", "Transpose"}));
  EXPECT_FALSE(is.values.count(r.c2));
}

TEST(Float32Island, ACoordinateSumFusedIntoAConvComesBackOutAsAnAddTheIslandHolds) {
  // Optimized, each step's sum is the conv's epilogue, whose output a plan would store in fp16.
  // The first is split because the island samples at its output, the second because its
  // residual is then a position, each to a plain Conv and an Add.
  Refinement r = refinement(true);
  EXPECT_EQ(split_position_sums(*r.g, Precision::FP32), 0u);
  EXPECT_EQ(split_position_sums(*r.g, Precision::FP16), 2u);
  std::vector<std::string> ops;
  for (const auto& n : r.g->nodes()) ops.push_back(n->op_type);
  EXPECT_EQ(ops, (std::vector<std::string>{"Conv", "Add", "Transpose", "GridSample", "Conv", "Add", "Sub"}));
  for (const auto& n : r.g->nodes()) EXPECT_TRUE(n->domain.empty()) << n->name;
  EXPECT_EQ(r.c1->producer->op_type, "Add");
  EXPECT_EQ(r.c2->producer->op_type, "Add");
  EXPECT_EQ(r.c2->producer->name, "conv2_residual");
  const Float32Island is = float32_island(*r.g, Precision::FP16);
  EXPECT_EQ(island_ops(*r.g, is), (std::vector<std::string>{"Add", "Transpose", "Add", "Sub"}));
  EXPECT_EQ(split_position_sums(*r.g, Precision::FP16), 0u) << "nothing left to split";
}

TEST(Float32Island, AFusedConvWithAnActivationAfterItsResidualIsNotSplit) {
  // Relu(conv + z) is not a position however z is: its residual stays fused.
  Refinement r = refinement(true, true, "Relu");
  EXPECT_EQ(split_position_sums(*r.g, Precision::FP16), 0u);
  EXPECT_EQ(r.c1->producer->op_type, "FusedConv");
}

TEST(Float32Island, ALinearsOffsetsFusedOntoReferencePointsComeBackOutAndKeepTheirBias) {
  // Deformable attention's sampling points: reference points + Linear(query) offsets, fused by
  // fuse_matmul_bias into one FusedMatMul with the points as its residual, then a GridSample grid.
  GraphBuilder b;
  b.graph().opsets["ai.fusec"] = 1;
  Value* q = b.input("q", DType::Float32, {Dim(1), Dim(6), Dim(10), Dim(16)});
  Value* ref = b.input("ref", DType::Float32, {Dim(1), Dim(6), Dim(10), Dim(2)});
  Value* img = b.input("img", DType::Float32, {Dim(1), Dim(4), Dim(9), Dim(9)});
  Value* points = b.node_n(
      "FusedMatMul",
      {q, b.initializer("w", Tensor(DType::Float32, {16, 2})), b.initializer("bias", Tensor(DType::Float32, {2})), ref},
      1, {}, "offsets", "ai.fusec")[0];
  b.output(b.node("GridSample", {img, points}));
  auto g = b.build();
  infer_shapes(*g);
  EXPECT_EQ(split_position_sums(*g, Precision::BF16), 1u);
  const Node* mm = g->nodes().front().get();
  EXPECT_EQ(mm->op_type, "FusedMatMul") << "the bias stays fused";
  EXPECT_EQ(mm->inputs.size(), 3u);
  EXPECT_EQ(points->producer->op_type, "Add");
  const Float32Island is = float32_island(*g, Precision::BF16);
  EXPECT_EQ(island_ops(*g, is), std::vector<std::string>{"Add"});
  EXPECT_TRUE(is.values.count(ref));
}

TEST(Float32Island, AResidualStreamReadByAnUnfusedNormStaysFusedIntoItsMatMul) {
  // h = FusedMatMul(a, w, b, Z = x) then RMSNorm(h) written out: the norm's square is in the
  // island, but it reads h as an activation in range, so the residual stays in the epilogue.
  GraphBuilder b(18);
  b.graph().opsets["ai.fusec"] = 1;
  Value* a = b.input("a", DType::Float32, {Dim(2), Dim(5), Dim(32)});
  Value* x = b.input("x", DType::Float32, {Dim(2), Dim(5), Dim(32)});
  Value* h = b.node_n(
      "FusedMatMul",
      {a, b.initializer("w", Tensor(DType::Float32, {32, 32})), b.initializer("bias", Tensor(DType::Float32, {32})), x},
      1, {}, "proj", "ai.fusec")[0];
  Value* mean = b.node("ReduceMean", {b.node("Pow", {h, b.initializer("two", Tensor::scalar_float(2.0f))}),
                                      b.initializer("axes", Tensor::from_int64({-1}, {1}))});
  Value* root = b.node("Sqrt", {b.node("Add", {mean, b.initializer("eps", Tensor::scalar_float(1e-6f))})});
  b.output(b.node("Div", {h, root}));
  auto g = b.build();
  infer_shapes(*g);
  EXPECT_FALSE(float32_island(*g, Precision::FP16).empty());
  EXPECT_EQ(split_position_sums(*g, Precision::FP16), 0u);
  EXPECT_EQ(h->producer->op_type, "FusedMatMul");
}
