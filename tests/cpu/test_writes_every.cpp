// Kernels registered with Writes::Every (backend/cpu/kernel.h) promise to write every element of
// every output: the executor then hands them arena memory still holding an earlier tensor's bytes,
// without zeroing it. Each such kernel runs here twice, on outputs filled with 0xFF bytes (NaN,
// or -1 for integers) and on zeroed outputs; the two results must match byte for byte. Every
// kernel so registered must have a case below (CpuWritesEvery.EveryFlaggedKernelHasACase).
#include <cmath>
#include <cstring>
#include <set>

#include "backend/cpu/kernel.h"
#include "ir/half.h"
#include "node_case.h"
#include "test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

using Case = NodeCase;

/// The node's outputs computed with every output buffer first filled with `fill`.
std::vector<Tensor> run_filled(const Case& c, unsigned char fill) {
  const InferredNode n = infer_node(c);
  const cpu::Kernel* kernel = cpu::KernelRegistry::global().find(n.node->domain, n.node->op_type);
  if (!kernel) ADD_FAILURE() << "no kernel for " << c.op;
  if (!n.schema || !kernel) return {};
  std::vector<Tensor> outs;
  for (size_t i = 0; i < c.outputs; ++i) {
    outs.emplace_back(n.outputs[i].dtype, static_dims(*n.outputs[i].shape));
    std::memset(outs.back().raw(), fill, outs.back().nbytes());
  }
  std::vector<Tensor*> out_ptrs;
  for (Tensor& t : outs) out_ptrs.push_back(&t);
  cpu::KernelContext kctx(*n.node, *n.schema, n.opset, n.values, out_ptrs);
  (*kernel)(kctx);
  return outs;
}

std::string label(const Case& c) { return (c.domain.empty() ? "" : c.domain + ".") + c.op; }

void expect_writes_every(const Case& c) {
  SCOPED_TRACE(label(c));
  const auto poisoned = run_filled(c, 0xFF), zeroed = run_filled(c, 0x00);
  ASSERT_EQ(poisoned.size(), zeroed.size());
  for (size_t i = 0; i < zeroed.size(); ++i) {
    ASSERT_EQ(poisoned[i].nbytes(), zeroed[i].nbytes());
    EXPECT_EQ(std::memcmp(poisoned[i].raw(), zeroed[i].raw(), zeroed[i].nbytes()), 0)
        << "output " << i << " [" << dims_str(zeroed[i].dims()) << "] keeps bytes the kernel did not write";
  }
}

Tensor u(std::vector<int64_t> dims, unsigned seed) { return uniform_floats(std::move(dims), seed); }
Tensor positive(std::vector<int64_t> dims, unsigned seed) {
  Tensor t = u(std::move(dims), seed);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = std::fabs(t.data<float>()[i]) + 0.1f;
  return t;
}
Tensor halves(std::vector<int64_t> dims, unsigned seed) {
  Tensor f = u(dims, seed), h(DType::Float16, std::move(dims));
  for (int64_t i = 0; i < f.numel(); ++i) h.data<uint16_t>()[i] = float_to_half(f.data<float>()[i]);
  return h;
}
Tensor ints(std::vector<int64_t> v, std::vector<int64_t> dims) { return int64s(std::move(v), std::move(dims)); }
Tensor int32s(std::vector<int64_t> dims, int32_t start) {
  Tensor t(DType::Int32, std::move(dims));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<int32_t>()[i] = static_cast<int32_t>(start + i % 7);
  return t;
}
Tensor int32s_of(std::vector<int32_t> v, std::vector<int64_t> dims) {
  Tensor t(DType::Int32, std::move(dims));
  std::copy(v.begin(), v.end(), t.data<int32_t>());
  return t;
}
Tensor bools(std::vector<int64_t> dims) {
  Tensor t(DType::Bool, std::move(dims));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<uint8_t>()[i] = static_cast<uint8_t>(i % 3 == 0);
  return t;
}
/// uint8 or int8 data, `start` + i stepping by 37 (wrapping).
Tensor bytes_of(DType t, std::vector<int64_t> dims, int start) {
  Tensor out(t, std::move(dims));
  for (int64_t i = 0; i < out.numel(); ++i) out.data<uint8_t>()[i] = static_cast<uint8_t>(start + 37 * i);
  return out;
}
Tensor byte_scalar(DType t, int v) { return bytes_of(t, {}, v); }
const Tensor kNone;

std::vector<Case> cases() {
  using V = std::vector<int64_t>;
  std::vector<Case> cs;
  // Binary arithmetic: same shape, a trailing-dim broadcast, a middle broadcast, integers, half.
  for (const char* op : {"Add", "Sub", "Mul", "Div"}) {
    cs.push_back({op, {u({2, 3, 5}, 1), positive({2, 3, 5}, 2)}});
    cs.push_back({op, {u({2, 3, 5}, 3), positive({5}, 4)}});
    cs.push_back({op, {positive({2, 1, 5}, 5), u({3, 1}, 6)}});
    cs.push_back({op, {ints({5, 7, -9, 11, 13, 0}, {2, 3}), ints({2, -3, 4}, {3})}});
    cs.push_back({op, {halves({4, 3}, 7), halves({3}, 8)}});
  }
  cs.push_back({"Pow", {positive({2, 3}, 9), u({3}, 10)}});
  cs.push_back({"Pow", {ints({1, 2, 3, 4}, {4}), ints({2}, {1})}});
  for (const char* op : {"Neg", "Reciprocal", "Sqrt", "Exp", "Log", "Erf"}) {
    cs.push_back({op, {positive({3, 7, 5}, 11)}});
    cs.push_back({op, {halves({9}, 12)}});
  }
  cs.push_back({"Neg", {ints({1, -2, 3}, {3})}});
  cs.push_back({"Erf", {ints({-1, 0, 2}, {3})}});
  cs.push_back({"Where", {bools({3, 1}), u({1, 4}, 13), u({3, 4}, 14)}});
  cs.push_back({"Where", {bools({2, 3, 4}), ints({7}, {1}), ints({1, 2, 3, 4}, {4})}});
  for (const char* op : {"Relu", "Sigmoid", "Tanh"}) {
    cs.push_back({op, {u({4, 33}, 15)}});
    cs.push_back({op, {halves({5}, 16)}});
  }
  cs.push_back({"Relu", {ints({-1, 0, 2}, {3})}});
  cs.push_back({"Gelu", {u({3, 17}, 17)}, {}, 1, "", 20});
  cs.push_back({"Gelu", {u({3, 17}, 18)}, {attr("approximate", std::string("tanh"))}, 1, "", 20});
  cs.push_back({"Gelu", {u({3, 17}, 19)}, {}, 1, "ai.fusec", 17});
  // Softmax family: contiguous rows, a strided (inner > 1) axis, opset 11's 2-D coercion.
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    cs.push_back({op, {u({2, 3, 40}, 20)}, {attr("axis", int64_t{-1})}});
    cs.push_back({op, {u({2, 3, 40}, 21)}, {attr("axis", int64_t{1})}});
    cs.push_back({op, {u({2, 600, 3}, 22)}, {attr("axis", int64_t{2})}});
    cs.push_back({op, {u({2, 3, 4}, 23)}, {attr("axis", int64_t{1})}, 1, "", 11});
    cs.push_back({op, {halves({2, 5}, 24)}});
  }
  // LayerNormalization with its optional Mean and InvStdDev outputs; a broadcast Scale.
  cs.push_back({"LayerNormalization", {u({2, 3, 8}, 25), u({8}, 26), u({8}, 27)}, {}, 3});
  cs.push_back({"LayerNormalization", {u({2, 3, 8}, 28), u({1, 8}, 29), kNone}, {attr("axis", int64_t{1})}, 3});
  cs.push_back({"LayerNormalization", {u({4, 6}, 30), u({6}, 31)}, {}, 1, "ai.fusec"});
  // RMSNormalization (a broadcast scale; two normalized dims) and GroupNormalization (per group at
  // opset 18, per channel at 21).
  cs.push_back({"RMSNormalization", {u({2, 3, 8}, 140), u({1, 8}, 141)}, {attr("axis", int64_t{1})}, 1, "", 23});
  // LpNormalization (L1 over a middle axis), RotaryEmbedding (3-D at position_ids; 4-D interleaved
  // and partial without them) and AffineGrid (2 and 3 spatial axes).
  cs.push_back({"LpNormalization", {u({2, 5, 3}, 148)}, {attr("axis", int64_t{1}), attr("p", int64_t{1})}, 1, "", 22});
  cs.push_back({"RotaryEmbedding",
                {u({2, 3, 12}, 149), u({6, 2}, 150), u({6, 2}, 151), ints({0, 1, 2, 5, 4, 3}, {2, 3})},
                {attr("num_heads", int64_t{3})},
                1,
                "",
                23});
  cs.push_back({"RotaryEmbedding",
                {u({2, 3, 4, 6}, 152), u({2, 4, 2}, 153), u({2, 4, 2}, 154)},
                {attr("interleaved", int64_t{1}), attr("rotary_embedding_dim", int64_t{4})},
                1,
                "",
                23});
  cs.push_back({"AffineGrid", {u({2, 2, 3}, 155), ints({2, 3, 4, 5}, {4})}, {}, 1, "", 20});
  cs.push_back(
      {"AffineGrid", {u({1, 3, 4}, 156), ints({1, 1, 2, 3, 4}, {5})}, {attr("align_corners", int64_t{1})}, 1, "", 20});
  cs.push_back({"GroupNormalization",
                {u({2, 6, 5}, 142), u({3}, 143), u({3}, 144)},
                {attr("num_groups", int64_t{3})},
                1,
                "",
                18});
  cs.push_back({"GroupNormalization",
                {u({2, 6, 2, 3}, 145), u({6}, 146), u({6}, 147)},
                {attr("num_groups", int64_t{2})},
                1,
                "",
                21});
  // Transpose: BERT's head split and Kᵀ, the default reversal, a pure reshape-like permutation.
  cs.push_back({"Transpose", {u({2, 5, 3, 4}, 32)}, {attr("perm", V{0, 2, 1, 3})}});
  cs.push_back({"Transpose", {u({2, 5, 3, 4}, 33)}, {attr("perm", V{0, 2, 3, 1})}});
  cs.push_back({"Transpose", {u({37, 41}, 34)}});
  cs.push_back({"Transpose", {ints({1, 2, 3, 4, 5, 6}, {1, 2, 3})}, {attr("perm", V{1, 0, 2})}});
  // Copies that cover their outputs: concatenated blocks, split blocks, strided reads (a negative
  // step), gathered rows (a negative index), broadcasts and tiles.
  cs.push_back({"Concat", {u({2, 3, 4}, 135), u({2, 1, 4}, 136), u({2, 5, 4}, 137)}, {attr("axis", int64_t{1})}});
  cs.push_back({"Split", {u({3, 7}, 138), ints({2, 5}, {2})}, {attr("axis", int64_t{1})}, 2, "", 13});
  cs.push_back(
      {"Slice", {u({6, 9}, 139), ints({5, 1}, {2}), ints({0, 8}, {2}), ints({0, 1}, {2}), ints({-2, 3}, {2})}});
  cs.push_back({"Gather", {u({4, 6, 3}, 140), ints({5, -1, 0, 5}, {2, 2})}, {attr("axis", int64_t{1})}});
  cs.push_back({"Expand", {u({3, 1}, 141), ints({2, 3, 5}, {3})}});
  cs.push_back({"Tile", {u({2, 3}, 142), ints({3, 2}, {2})}});
  cs.push_back({"GatherElements", {u({3, 4}, 149), ints({0, 3, -1, 1, 2, 2}, {3, 2})}, {attr("axis", int64_t{1})}});
  cs.push_back({"GatherND", {u({2, 3, 4}, 150), ints({1, 0, 0, -1}, {2, 2})}});
  cs.push_back({"Pad", {u({2, 3}, 151), ints({1, 0, 2, 1}, {4}), floats({7}, {})}});
  cs.push_back({"Pad", {u({3, 4}, 152), ints({2, 1, 1, 3}, {4})}, {attr("mode", std::string("reflect"))}});
  cs.push_back({"DepthToSpace", {u({1, 8, 2, 3}, 153)}, {attr("blocksize", int64_t{2})}});
  cs.push_back(
      {"DepthToSpace", {u({2, 8, 3, 2}, 154)}, {attr("blocksize", int64_t{2}), attr("mode", std::string("CRD"))}});
  cs.push_back({"SpaceToDepth", {u({1, 2, 4, 6}, 155)}, {attr("blocksize", int64_t{2})}});
  cs.push_back({"TopK", {u({3, 7}, 156), ints({3}, {1})}, {attr("axis", int64_t{1})}, 2});
  cs.push_back({"TopK", {halves({4, 5}, 157), ints({2}, {1})}, {attr("axis", int64_t{0})}, 2});
  cs.push_back({"Compress", {u({3, 4}, 158), bools({4})}, {attr("axis", int64_t{1})}});
  cs.push_back({"Compress", {u({3, 4}, 159), bools({7})}});
  cs.push_back({"ReverseSequence",
                {u({4, 2, 3}, 160), ints({3, 1}, {2})},
                {attr("time_axis", int64_t{0}), attr("batch_axis", int64_t{1})}});
  // The scatters copy data whole, then write the updates (duplicates and a reduction too).
  cs.push_back({"ScatterElements",
                {u({4, 5}, 143), ints({1, 3, 1, 0, 2, 2}, {2, 3}), u({2, 3}, 144)},
                {attr("axis", int64_t{0}), attr("reduction", std::string("add"))},
                1,
                "",
                18});
  cs.push_back(
      {"Scatter", {u({3, 4}, 145), ints({0, 3, 1, 2}, {2, 2}), u({2, 2}, 146)}, {attr("axis", int64_t{1})}, 1, "", 10});
  cs.push_back({"ScatterND", {u({4, 3}, 147), ints({2, 0}, {2, 1}), u({2, 3}, 148)}});
  cs.push_back({"Reshape", {u({2, 6}, 35), ints({3, -1}, {2})}});
  cs.push_back({"Flatten", {u({2, 3, 4}, 36)}, {attr("axis", int64_t{2})}});
  cs.push_back({"Squeeze", {u({2, 1, 3}, 37), ints({1}, {1})}});
  cs.push_back({"Unsqueeze", {u({2, 3}, 38), ints({0}, {1})}});
  cs.push_back({"Identity", {ints({4, 5}, {2})}});
  // MatMul: batched, stacked (B shared), broadcast batch dims, vectors, K = 0, integers, the
  // packed GEMM with edge tiles, and batched heads like attention's.
  cs.push_back({"MatMul", {u({2, 3, 4, 5}, 39), u({2, 3, 5, 6}, 40)}});
  cs.push_back({"MatMul", {u({2, 4, 5}, 41), u({5, 6}, 42)}});
  cs.push_back({"MatMul", {u({1, 3, 4, 5}, 43), u({2, 1, 5, 6}, 44)}});
  cs.push_back({"MatMul", {u({5}, 45), u({5, 6}, 46)}});
  cs.push_back({"MatMul", {u({4, 5}, 47), u({5}, 48)}});
  cs.push_back({"MatMul", {u({3, 0}, 49), u({0, 4}, 50)}});
  cs.push_back({"MatMul", {int32s({3, 4}, -3), int32s({4, 2}, 1)}});
  cs.push_back({"MatMul", {u({67, 45}, 51), u({45, 53}, 52)}});
  cs.push_back({"MatMul", {u({2, 3, 33, 16}, 53), u({2, 3, 16, 33}, 54)}});
  cs.push_back({"MatMul", {halves({3, 4}, 55), halves({4, 2}, 56)}});
  // Gemm: transposes, alpha/beta, C broadcast from a row, a column or a scalar, or absent.
  cs.push_back({"Gemm",
                {u({5, 4}, 57), u({6, 5}, 58), u({6}, 59)},
                {attr("transA", int64_t{1}), attr("transB", int64_t{1}), attr("alpha", 0.5f), attr("beta", 2.0f)}});
  cs.push_back({"Gemm", {u({4, 5}, 60), u({5, 6}, 61), u({4, 1}, 62)}});
  cs.push_back({"Gemm", {u({4, 5}, 63), u({5, 6}, 64), u({1}, 65)}, {attr("beta", 0.0f)}});
  cs.push_back({"Gemm", {u({40, 50}, 66), u({50, 30}, 67)}});
  cs.push_back({"Gemm", {int32s({3, 4}, 0), int32s({4, 2}, 2), int32s({2}, 1)}});
  // ai.fusec: FusedMatMul with bias and activation; GatedMatMul; SkipLayerNorm with and without its sum output.
  cs.push_back({"FusedMatMul",
                {u({2, 4, 8}, 68), u({8, 6}, 69), u({6}, 70)},
                {attr("activation", std::string("Gelu"))},
                1,
                "ai.fusec"});
  cs.push_back({"FusedMatMul", {u({2, 4, 8}, 71), u({8, 6}, 72)}, {}, 1, "ai.fusec"});
  cs.push_back({"GatedMatMul",
                {u({2, 4, 8}, 84), u({8, 6}, 85), u({8, 6}, 86), u({6}, 87), u({6}, 88)},
                {attr("activation", std::string("SiLU"))},
                1,
                "ai.fusec"});
  // ExpertMatMul: each row picks an expert (one picked by none, one by several), either orientation.
  cs.push_back({"ExpertMatMul",
                {u({3, 8}, 97), u({4, 5, 8}, 98), Tensor::from_int64({2, 0, 2, -1, 0, 3}, {6}), u({4, 5}, 99)},
                {attr("trans_w", int64_t{1}), attr("repeat", int64_t{2})},
                1,
                "ai.fusec"});
  cs.push_back({"ExpertMatMul",
                {u({5, 8}, 100), u({3, 8, 6}, 101), Tensor::from_int64({1, 1, 0, 2, 1}, {5})},
                {},
                1,
                "ai.fusec"});
  cs.push_back({"SkipLayerNorm", {u({2, 3, 8}, 73), u({2, 3, 8}, 74), u({8}, 75), u({8}, 76)}, {}, 2, "ai.fusec"});
  cs.push_back({"SkipLayerNorm", {u({2, 3, 8}, 77), u({8}, 78), u({8}, 79), u({8}, 80)}, {}, 1, "ai.fusec"});
  cs.push_back({"SkipSimplifiedLayerNorm", {u({2, 3, 8}, 81), u({2, 3, 8}, 82), u({8}, 83)}, {}, 2, "ai.fusec"});
  // GridSample: each mode and padding, 2 and 3 spatial axes, half data; grids reach outside [-1, 1].
  const std::string s_nearest = "nearest", s_reflection = "reflection", s_cubic = "cubic", s_border = "border";
  cs.push_back({"GridSample", {u({2, 3, 5, 6}, 89), u({2, 4, 7, 2}, 90)}, {}, 1, "", 16});
  cs.push_back({"GridSample",
                {u({1, 2, 4, 4}, 91), u({1, 3, 3, 2}, 92)},
                {attr("mode", s_nearest), attr("padding_mode", s_reflection)},
                1,
                "",
                16});
  cs.push_back({"GridSample",
                {u({1, 2, 4, 4}, 93), u({1, 3, 3, 2}, 94)},
                {attr("mode", s_cubic), attr("padding_mode", s_border), attr("align_corners", int64_t{1})},
                1,
                "",
                20});
  cs.push_back({"GridSample", {u({1, 2, 3, 4, 5}, 95), u({1, 2, 3, 4, 3}, 96)}, {}, 1, "", 20});
  cs.push_back({"GridSample", {halves({1, 1, 3, 3}, 97), halves({1, 2, 2, 2}, 98)}, {}, 1, "", 16});
  // RNN, GRU, LSTM: every output, both directions, rows shorter than the sequence, batch-major.
  const std::string s_bidi = "bidirectional";
  cs.push_back({"RNN", {u({4, 2, 3}, 99), u({1, 5, 3}, 100), u({1, 5, 5}, 101)}, {}, 2});
  cs.push_back({"GRU",
                {u({4, 3, 3}, 102), u({2, 15, 3}, 103), u({2, 15, 5}, 104), u({2, 30}, 105), int32s_of({4, 1, 0}, {3})},
                {attr("direction", s_bidi), attr("hidden_size", int64_t{5})},
                2});
  cs.push_back(
      {"LSTM",
       {u({2, 4, 3}, 106), u({1, 20, 3}, 107), u({1, 20, 5}, 108), kNone, kNone, kNone, kNone, u({1, 15}, 109)},
       {attr("layout", int64_t{1})},
       3,
       "",
       14});
  // Quantization: per-axis and blocked scales, every integer product with zero points.
  const DType U8 = DType::UInt8, I8 = DType::Int8;
  cs.push_back({"QuantizeLinear", {u({2, 3, 4}, 110), positive({3}, 111), bytes_of(I8, {3}, 5)}, {}, 1, "", 13});
  cs.push_back({"QuantizeLinear",
                {u({2, 5}, 112), positive({2, 3}, 113)},
                {attr("axis", int64_t{1}), attr("block_size", int64_t{2})},
                1,
                "",
                21});
  cs.push_back(
      {"DequantizeLinear", {bytes_of(U8, {2, 3, 4}, 7), positive({3}, 114), bytes_of(U8, {3}, 9)}, {}, 1, "", 13});
  cs.push_back({"DynamicQuantizeLinear", {u({3, 5}, 115)}, {}, 3, "", 11});
  cs.push_back({"MatMulInteger",
                {bytes_of(U8, {2, 3, 4}, 1), bytes_of(I8, {4, 5}, 2), bytes_of(U8, {3}, 3), bytes_of(I8, {5}, 4)},
                {},
                1,
                "",
                10});
  cs.push_back({"QLinearMatMul",
                {bytes_of(U8, {3, 4}, 1), positive({}, 116), byte_scalar(U8, 3), bytes_of(I8, {4, 2}, 2),
                 positive({2}, 117), bytes_of(I8, {2}, 4), positive({}, 118), byte_scalar(I8, 1)},
                {},
                1,
                "",
                10});
  cs.push_back(
      {"ConvInteger",
       {bytes_of(U8, {1, 2, 5, 5}, 1), bytes_of(I8, {4, 1, 3, 3}, 2), byte_scalar(U8, 3), bytes_of(I8, {4}, 4)},
       {attr("group", int64_t{2}), attr("pads", V{1, 1, 0, 0})},
       1,
       "",
       10});
  cs.push_back({"QLinearConv",
                {bytes_of(U8, {1, 2, 5, 5}, 1), positive({}, 119), byte_scalar(U8, 3), bytes_of(I8, {3, 2, 2, 2}, 2),
                 positive({3}, 120), bytes_of(I8, {3}, 4), positive({}, 121), byte_scalar(U8, 100), int32s({3}, -5)},
                {attr("strides", V{2, 2})},
                1,
                "",
                10});
  // RoiAlign's bins (one roi partly outside X). NonZero, Unique and NonMaxSuppression make their
  // outputs themselves (test_self_sizing.cpp).
  cs.push_back({"RoiAlign",
                {u({2, 3, 5, 4}, 125), floats({0, 0, 3, 2, -1, 1, 6, 7}, {2, 4}), ints({1, 0}, {2})},
                {attr("output_height", int64_t{2}), attr("output_width", int64_t{3})},
                1,
                "",
                16});
  cs.push_back({"Det", {u({3, 4, 4}, 126)}, {}, 1, "", 11});
  cs.push_back({"MaxUnpool",
                {u({1, 2, 2, 2}, 127), ints({0, 3, 9, 14, 16, 19, 26, 31}, {1, 2, 2, 2})},
                {attr("kernel_shape", V{2, 2}), attr("strides", V{2, 2})},
                1,
                "",
                11});
  // Signal: a window, each DFT form, STFT with a window, MelWeightMatrix.
  cs.push_back({"HannWindow", {ints({6}, {})}, {}, 1, "", 17});
  cs.push_back({"HammingWindow", {ints({5}, {})}, {attr("periodic", int64_t{0})}, 1, "", 17});
  cs.push_back({"BlackmanWindow", {ints({7}, {})}, {}, 1, "", 17});
  cs.push_back({"DFT", {u({2, 5, 1}, 128), ints({7}, {})}, {attr("onesided", int64_t{1})}, 1, "", 17});
  cs.push_back({"DFT", {u({2, 4, 2}, 129)}, {attr("inverse", int64_t{1}), attr("onesided", int64_t{1})}, 1, "", 17});
  cs.push_back({"STFT", {u({2, 9, 1}, 130), ints({2}, {}), u({4}, 131)}, {}, 1, "", 17});
  cs.push_back({"MelWeightMatrix",
                {ints({3}, {}), ints({32}, {}), ints({1000}, {}), floats({50}, {}), floats({480}, {})},
                {},
                1,
                "",
                17});
  // Mod (both signs rules, integers, half), the variadic ops (one input copied, a pair broadcast,
  // a third input wider than the first two), and the unary maps over every type they take.
  cs.push_back({"Mod", {u({2, 3, 5}, 200), positive({5}, 201)}, {attr("fmod", int64_t{1})}});
  cs.push_back({"Mod", {ints({5, -7, 9, -11, 13, 0}, {2, 3}), ints({2, -3, 4}, {3})}});
  cs.push_back({"Mod", {halves({4, 3}, 202), halves({3}, 203)}, {attr("fmod", int64_t{1})}});
  for (const char* op : {"Max", "Min", "Sum", "Mean"}) {
    cs.push_back({op, {u({2, 3}, 204)}});
    cs.push_back({op, {u({3, 1}, 205), u({1, 4}, 206)}});
    cs.push_back({op, {u({4}, 207), u({3, 1}, 208), u({2, 3, 4}, 209)}});
    cs.push_back({op, {halves({2, 3}, 210), halves({3}, 211)}});
  }
  cs.push_back({"Max", {ints({1, 5, -3}, {3}), ints({2}, {1})}});
  cs.push_back({"Min", {int32s({2, 3}, -3), int32s({3}, 1), int32s({1, 1}, 2)}});
  for (const char* op : {"Abs", "Sign"}) {
    cs.push_back({op, {u({3, 7, 5}, 212)}});
    cs.push_back({op, {halves({9}, 213)}});
    cs.push_back({op, {ints({-3, 0, 4}, {3})}});
    cs.push_back({op, {bytes_of(I8, {5}, -100)}});
  }
  for (const char* op : {"Floor", "Ceil", "Round", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh",
                         "Acosh", "Atanh"}) {
    cs.push_back({op, {u({3, 7, 5}, 214)}});
    cs.push_back({op, {halves({9}, 215)}});
  }
  cs.push_back({"Acosh", {positive({2, 3}, 216)}});
  const Tensor specials = floats({NAN, INFINITY, -INFINITY, 1, -2, 0}, {2, 3});
  cs.push_back({"IsNaN", {specials}});
  cs.push_back({"IsNaN", {halves({7}, 217)}});
  cs.push_back({"IsInf", {specials}});
  cs.push_back({"IsInf", {specials}, {attr("detect_negative", int64_t{0})}});
  cs.push_back({"IsInf", {halves({7}, 218)}});
  // Comparisons (broadcast, integers, half, bool), logic, bit ops.
  for (const char* op : {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"}) {
    cs.push_back({op, {u({2, 3, 4}, 219), u({4}, 220)}});
    cs.push_back({op, {ints({1, 2, 3, 4}, {4, 1}), ints({2, 3}, {1, 2})}});
    cs.push_back({op, {halves({3, 1}, 221), halves({1, 5}, 222)}});
  }
  cs.push_back({"Equal", {bools({3, 1}), bools({1, 4})}});
  for (const char* op : {"And", "Or", "Xor"}) cs.push_back({op, {bools({3, 1}), bools({2, 1, 4})}});
  cs.push_back({"Not", {bools({2, 5})}});
  const std::string s_left = "LEFT", s_right = "RIGHT";
  cs.push_back({"BitShift", {bytes_of(U8, {2, 3}, 5), bytes_of(U8, {3}, 1)}, {attr("direction", s_left)}, 1, "", 11});
  cs.push_back({"BitShift", {bytes_of(U8, {4}, 200), byte_scalar(U8, 3)}, {attr("direction", s_right)}, 1, "", 11});
  cs.push_back({"BitShift", {int32s({2, 3}, -3), int32s({3}, 0)}, {attr("direction", s_right)}, 1, "", 28});
  for (const char* op : {"BitwiseAnd", "BitwiseOr", "BitwiseXor"}) {
    cs.push_back({op, {int32s({2, 3}, -3), int32s({3}, 5)}, {}, 1, "", 18});
    cs.push_back({op, {bytes_of(U8, {4, 1}, 9), bytes_of(U8, {3}, 7)}, {}, 1, "", 18});
  }
  cs.push_back({"BitwiseNot", {bytes_of(I8, {2, 3}, 3)}, {}, 1, "", 18});
  cs.push_back({"BitwiseNot", {ints({0, -1, 5}, {3})}, {}, 1, "", 18});
  // Cast between float, half, integer and bool types (float64 to half rounds to odd first).
  auto to = [](DType t) { return attr("to", static_cast<int64_t>(t)); };
  Tensor doubles(DType::Float64, {2, 3});
  for (int64_t i = 0; i < 6; ++i) doubles.data<double>()[i] = 0.1 * static_cast<double>(i) - 0.25;
  cs.push_back({"Cast", {u({3, 4}, 223)}, {to(DType::Int32)}});
  cs.push_back({"Cast", {u({3, 4}, 224)}, {to(DType::Float16)}});
  cs.push_back({"Cast", {doubles}, {to(DType::Float16)}});
  cs.push_back({"Cast", {doubles}, {to(DType::BFloat16)}});
  cs.push_back({"Cast", {ints({-300, 5, 70000}, {3})}, {to(DType::Int8)}});
  cs.push_back({"Cast", {ints({0, 5, -1}, {3})}, {to(DType::Bool)}});
  cs.push_back({"Cast", {halves({5}, 225)}, {to(DType::Float64)}});
  cs.push_back({"Cast", {bools({4})}, {to(DType::Float32)}});
  cs.push_back({"CastLike", {u({2, 3}, 226), ints({0}, {1})}, {}, 1, "", 15});
  cs.push_back({"CastLike", {int32s({5}, -2), halves({1}, 227)}, {}, 1, "", 15});
  // Clip: bounds as inputs (one left out; min above max), as attributes (opset 6), integers, half.
  cs.push_back({"Clip", {u({3, 5}, 228), floats({-0.5f}, {}), floats({0.25f}, {})}, {}, 1, "", 13});
  cs.push_back({"Clip", {u({3, 5}, 229), kNone, floats({0.25f}, {})}, {}, 1, "", 13});
  cs.push_back({"Clip", {u({3, 5}, 230), floats({0.5f}, {}), floats({-0.5f}, {})}, {}, 1, "", 13});
  cs.push_back({"Clip", {u({4}, 231)}, {attr("min", -0.2f), attr("max", 0.3f)}, 1, "", 6});
  cs.push_back({"Clip", {ints({-5, 0, 9}, {3}), ints({-1}, {}), ints({4}, {})}, {}, 1, "", 13});
  cs.push_back({"Clip", {halves({6}, 232), halves({}, 233)}, {}, 1, "", 13});
  // Activations: unary_map over float and half (Shrink over integers too); PRelu broadcasts its
  // slope (per channel before opset 7).
  const struct {
    const char* op;
    int64_t opset;
    std::vector<NamedAttribute> attrs;
  } acts[] = {{"LeakyRelu", 17, {attr("alpha", 0.2f)}},
              {"HardSigmoid", 17, {}},
              {"Swish", 24, {attr("alpha", 1.5f)}},
              {"HardSwish", 14, {}},
              {"Elu", 17, {}},
              {"Selu", 17, {}},
              {"Celu", 17, {attr("alpha", 2.0f)}},
              {"Softplus", 17, {}},
              {"Softsign", 17, {}},
              {"ThresholdedRelu", 17, {attr("alpha", 0.1f)}},
              {"Shrink", 17, {attr("bias", 0.5f), attr("lambd", 0.25f)}},
              {"Mish", 18, {}}};
  for (const auto& a : acts) {
    cs.push_back({a.op, {u({4, 33}, 234)}, a.attrs, 1, "", a.opset});
    cs.push_back({a.op, {halves({5}, 235)}, a.attrs, 1, "", a.opset});
  }
  cs.push_back({"Shrink", {ints({-3, 0, 2, 5}, {4})}, {attr("lambd", 1.5f)}});
  cs.push_back({"PRelu", {u({2, 3, 4, 5}, 236), u({3, 1, 1}, 237)}});
  cs.push_back({"PRelu", {u({2, 3, 4}, 238), u({3}, 239)}, {}, 1, "", 6});
  cs.push_back({"PRelu", {ints({-3, 0, 2, -5}, {2, 2}), ints({2}, {1})}});
  cs.push_back({"PRelu", {halves({2, 5}, 240), halves({5}, 241)}});
  // Pools: MaxPool with and without Indices over padding, strides, dilations, ceil_mode and both
  // storage orders, 1-D and 3-D, int8 and half; AveragePool with and without the padding counted;
  // LpPool; the global pools.
  auto ints_attr = [](const char* name, V v) { return attr(name, std::move(v)); };
  const std::vector<NamedAttribute> k3s2 = {ints_attr("kernel_shape", {3, 3}), ints_attr("strides", {2, 2}),
                                            ints_attr("pads", {1, 0, 1, 2})};
  cs.push_back({"MaxPool", {u({2, 3, 7, 8}, 242)}, k3s2});
  cs.push_back({"MaxPool", {u({2, 3, 7, 8}, 243)}, k3s2, 2, "", 12});
  cs.push_back({"MaxPool",
                {u({1, 2, 9, 9}, 244)},
                {ints_attr("kernel_shape", {2, 3}), ints_attr("dilations", {2, 1}), ints_attr("strides", {2, 2}),
                 attr("ceil_mode", int64_t{1}), attr("storage_order", int64_t{1})},
                2,
                "",
                12});
  cs.push_back({"MaxPool", {u({2, 3, 20}, 245)}, {ints_attr("kernel_shape", {4}), ints_attr("strides", {3})}, 2});
  cs.push_back({"MaxPool", {u({1, 2, 4, 5, 6}, 246)}, {ints_attr("kernel_shape", {2, 2, 2})}, 2});
  cs.push_back({"MaxPool", {bytes_of(I8, {1, 2, 5, 5}, 3)}, {ints_attr("kernel_shape", {2, 2})}, 1, "", 12});
  cs.push_back({"MaxPool", {halves({1, 2, 5, 5}, 247)}, {ints_attr("kernel_shape", {2, 2})}, 2, "", 12});
  cs.push_back({"AveragePool", {u({2, 3, 7, 8}, 248)}, k3s2});
  cs.push_back({"AveragePool",
                {u({1, 2, 7, 7}, 249)},
                {ints_attr("kernel_shape", {3, 3}), ints_attr("strides", {2, 2}), ints_attr("pads", {1, 1, 1, 1}),
                 attr("count_include_pad", int64_t{1}), attr("ceil_mode", int64_t{1})}});
  cs.push_back({"AveragePool",
                {u({1, 2, 9, 9}, 250)},
                {ints_attr("kernel_shape", {3, 2}), ints_attr("dilations", {2, 2}), ints_attr("pads", {2, 1, 0, 1})},
                1,
                "",
                19});
  cs.push_back({"AveragePool", {halves({1, 1, 4, 4, 4}, 251)}, {ints_attr("kernel_shape", {2, 2, 2})}});
  cs.push_back({"LpPool", {u({2, 3, 7, 8}, 252)}, k3s2});
  cs.push_back({"LpPool",
                {u({1, 2, 8}, 253)},
                {ints_attr("kernel_shape", {3}), attr("p", int64_t{1}), attr("ceil_mode", int64_t{1}),
                 ints_attr("strides", {2})},
                1,
                "",
                18});
  cs.push_back({"LpPool", {halves({1, 2, 4, 4}, 254)}, {ints_attr("kernel_shape", {2, 2})}});
  for (const char* op : {"GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"}) {
    cs.push_back({op, {u({2, 3, 4, 5}, 255)}});
    cs.push_back({op, {u({3, 2, 7}, 256)}});
    cs.push_back({op, {halves({1, 3, 2, 2}, 257)}});
  }
  // Reductions: several axes kept, the innermost axis dropped, everything, nothing
  // (noop_with_empty_axes), an empty reduced axis, one long row (split into chunks), integers and
  // half; axes as an attribute before opset 18. ArgMax and ArgMin either way.
  for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                         "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"}) {
    cs.push_back({op, {positive({2, 3, 4, 5}, 258), ints({0, 2}, {2})}, {}, 1, "", 18});
    cs.push_back({op, {positive({2, 3, 4, 5}, 259), ints({-1}, {1})}, {attr("keepdims", int64_t{0})}, 1, "", 18});
    cs.push_back({op, {positive({3, 5, 7}, 260)}, {attr("keepdims", int64_t{0})}, 1, "", 18});
    cs.push_back({op, {positive({3, 5}, 261)}, {attr("noop_with_empty_axes", int64_t{1})}, 1, "", 18});
    cs.push_back({op, {u({2, 0, 3}, 262), ints({1}, {1})}, {}, 1, "", 18});
    cs.push_back({op, {positive({1, 70000}, 263)}, {}, 1, "", 18});
    cs.push_back({op, {halves({4, 6}, 264), ints({1}, {1})}, {}, 1, "", 18});
  }
  for (const char* op : {"ReduceMean", "ReduceMax", "ReduceL2"})
    cs.push_back({op, {u({2, 3, 4}, 265)}, {ints_attr("axes", {0, 2})}, 1, "", 13});
  for (const char* op : {"ReduceSum", "ReduceMax", "ReduceProd"})
    cs.push_back({op, {int32s({3, 4}, -2), ints({0}, {1})}, {attr("keepdims", int64_t{0})}, 1, "", 18});
  cs.push_back({"ReduceMax", {bools({3, 4}), ints({1}, {1})}, {}, 1, "", 20});
  for (const char* op : {"ArgMax", "ArgMin"}) {
    cs.push_back({op, {u({2, 5, 3}, 266)}, {attr("axis", int64_t{1}), attr("keepdims", int64_t{0})}});
    cs.push_back(
        {op, {ints({3, 1, 3, 1, 2, 2}, {2, 3})}, {attr("axis", int64_t{-1}), attr("select_last_index", int64_t{1})}});
    cs.push_back({op, {halves({4, 3}, 267)}});
  }
  // Conv: padding and strides with a bias, groups with dilations, depthwise (a channel multiplier,
  // rows long enough for the vector blocks), pointwise, 1-D and 3-D, SAME_UPPER, chunks of a larger
  // image, half. ConvTranspose: strides, output_padding, pads, groups, pointwise, output_shape.
  cs.push_back({"Conv",
                {u({1, 3, 7, 6}, 268), u({4, 3, 3, 3}, 269), u({4}, 270)},
                {ints_attr("pads", {1, 0, 1, 2}), ints_attr("strides", {2, 1})}});
  cs.push_back({"Conv",
                {u({2, 4, 6, 6}, 271), u({6, 2, 3, 2}, 272)},
                {attr("group", int64_t{2}), ints_attr("dilations", {2, 1})}});
  cs.push_back({"Conv",
                {u({1, 4, 9, 40}, 273), u({8, 1, 3, 3}, 274), u({8}, 275)},
                {attr("group", int64_t{4}), ints_attr("pads", {1, 1, 1, 1})}});
  cs.push_back({"Conv",
                {u({1, 3, 9, 9}, 276), u({3, 1, 3, 3}, 277)},
                {attr("group", int64_t{3}), ints_attr("strides", {2, 2}), ints_attr("pads", {0, 1, 2, 0})}});
  cs.push_back({"Conv", {u({2, 8, 5, 5}, 278), u({6, 8, 1, 1}, 279)}});
  cs.push_back({"Conv", {u({2, 3, 11}, 280), u({4, 3, 3}, 281), u({4}, 282)}, {ints_attr("strides", {2})}});
  cs.push_back({"Conv", {u({1, 2, 4, 5, 6}, 283), u({3, 2, 2, 2, 2}, 284)}});
  cs.push_back({"Conv",
                {u({1, 3, 7, 7}, 285), u({4, 3, 2, 2}, 286)},
                {attr("auto_pad", std::string("SAME_UPPER")), ints_attr("strides", {2, 2})}});
  cs.push_back({"Conv", {u({1, 3, 32, 32}, 287), u({8, 3, 3, 3}, 288), u({8}, 289)}});
  cs.push_back({"Conv", {halves({1, 2, 5, 5}, 290), halves({3, 2, 3, 3}, 291)}});
  cs.push_back({"ConvTranspose",
                {u({1, 2, 3, 4}, 292), u({2, 3, 3, 3}, 293), u({3}, 294)},
                {ints_attr("strides", {2, 2}), ints_attr("output_padding", {1, 0}), ints_attr("pads", {0, 1, 1, 0})}});
  cs.push_back({"ConvTranspose",
                {u({2, 4, 3, 3}, 295), u({4, 2, 2, 2}, 296)},
                {attr("group", int64_t{2}), ints_attr("dilations", {2, 1}), ints_attr("strides", {3, 1})}});
  cs.push_back({"ConvTranspose", {u({1, 3, 4, 4}, 297), u({3, 5, 1, 1}, 298), u({5}, 299)}});
  cs.push_back({"ConvTranspose",
                {u({1, 2, 5}, 300), u({2, 2, 3}, 301)},
                {ints_attr("strides", {2}), ints_attr("output_shape", {10})}});
  cs.push_back(
      {"ConvTranspose", {halves({1, 1, 3, 3}, 302), halves({1, 2, 2, 2}, 303)}, {ints_attr("strides", {2, 2})}});
  // InstanceNormalization, MeanVarianceNormalization (default axes, one axis, the innermost two),
  // LRN with an odd and an even size.
  cs.push_back({"InstanceNormalization", {u({2, 3, 4, 5}, 304), u({3}, 305), u({3}, 306)}});
  cs.push_back({"InstanceNormalization", {halves({1, 2, 7}, 307), halves({2}, 308), halves({2}, 309)}});
  cs.push_back({"MeanVarianceNormalization", {u({2, 3, 4, 5}, 310)}});
  cs.push_back({"MeanVarianceNormalization", {u({2, 3, 4, 5}, 311)}, {ints_attr("axes", {1})}});
  cs.push_back({"MeanVarianceNormalization", {u({2, 3, 4, 5}, 312)}, {ints_attr("axes", {2, 3})}});
  cs.push_back({"MeanVarianceNormalization", {halves({2, 3, 2, 2}, 313)}});
  cs.push_back({"LRN", {u({2, 5, 3, 3}, 314)}, {attr("size", int64_t{3})}});
  cs.push_back({"LRN", {u({1, 6, 4}, 315)}, {attr("size", int64_t{4}), attr("bias", 2.0f)}});
  cs.push_back({"LRN", {halves({1, 3, 2, 2}, 316)}, {attr("size", int64_t{2})}});
  // ai.fusec: FusedConv (a bias, a residual, an activation; depthwise), LayerNormGelu,
  // SimplifiedLayerNorm, Rotary (some heads rotated; a partial rotation, interleaved, QK-norm) and
  // SqueezeExcite.
  cs.push_back({"FusedConv",
                {u({1, 3, 6, 6}, 317), u({4, 3, 3, 3}, 318), u({4}, 319), u({1, 4, 6, 6}, 320)},
                {ints_attr("pads", {1, 1, 1, 1}), attr("activation", std::string("Relu"))},
                1,
                "ai.fusec"});
  cs.push_back({"FusedConv",
                {u({1, 4, 5, 18}, 321), u({4, 1, 3, 3}, 322)},
                {attr("group", int64_t{4}), attr("activation", std::string("LeakyRelu")),
                 attr("activation_params", std::vector<float>{0.3f})},
                1,
                "ai.fusec"});
  cs.push_back({"LayerNormGelu", {u({2, 3, 8}, 323), u({8}, 324), u({8}, 325)}, {}, 1, "ai.fusec"});
  cs.push_back({"LayerNormGelu",
                {u({2, 3, 8}, 326), u({3, 8}, 327)},
                {attr("axis", int64_t{1}), attr("approximate", std::string("tanh"))},
                1,
                "ai.fusec"});
  cs.push_back({"SimplifiedLayerNorm", {u({2, 3, 8}, 328), u({8}, 329)}, {}, 1, "ai.fusec"});
  cs.push_back({"SimplifiedLayerNorm", {u({2, 3, 8}, 330), u({3, 8}, 331)}, {attr("axis", int64_t{1})}, 1, "ai.fusec"});
  cs.push_back({"Rotary",
                {u({2, 3, 16}, 332), u({3, 1, 4}, 333), u({3, 1, 4}, 334)},
                {attr("head_size", int64_t{4}), attr("rotated", int64_t{8})},
                1,
                "ai.fusec"});
  cs.push_back({"Rotary",
                {u({2, 3, 12}, 335), u({3, 1, 4}, 336), u({3, 1, 4}, 337), u({6}, 338), u({6}, 339)},
                {attr("head_size", int64_t{6}), attr("rotary_dim", int64_t{4}), attr("interleaved", int64_t{1}),
                 attr("norm", int64_t{2})},
                1,
                "ai.fusec"});
  cs.push_back({"SqueezeExcite",
                {u({2, 4, 3, 3}, 340), u({2, 4, 1, 1}, 341), u({4, 2, 1, 1}, 342), u({2}, 343), u({4}, 344)},
                {attr("activation", std::string("Relu")), attr("gate", std::string("HardSigmoid"))},
                1,
                "ai.fusec"});
  // FusedElementwise: broadcast inputs over several blocks, literals, half.
  const std::string program = "r0 = add i0 i1; r1 = mul r0 0.5; r2 = erf r1; r3 = max r2 i0";
  cs.push_back({"FusedElementwise", {u({3, 200}, 345), u({200}, 346)}, {attr("program", program)}, 1, "ai.fusec"});
  cs.push_back({"FusedElementwise", {u({3, 1, 5}, 347), u({4, 5}, 348)}, {attr("program", program)}, 1, "ai.fusec"});
  cs.push_back(
      {"FusedElementwise", {halves({2, 7}, 349), halves({7}, 350)}, {attr("program", program)}, 1, "ai.fusec"});
  // Generators: each Constant attribute, ConstantOfShape with and without a value, Range of floats
  // and of integers stepping down.
  cs.push_back({"Constant", {}, {attr("value", floats({1, 2, 3, 4, 5, 6}, {2, 3}))}});
  cs.push_back({"Constant", {}, {attr("value_floats", std::vector<float>{1.5f, -2.0f})}});
  cs.push_back({"Constant", {}, {attr("value_int", int64_t{7})}});
  cs.push_back({"Constant", {}, {ints_attr("value_ints", {3, 1, 4})}});
  cs.push_back({"ConstantOfShape", {ints({2, 3}, {2})}, {attr("value", int32s_of({9}, {1}))}});
  cs.push_back({"ConstantOfShape", {ints({4}, {1})}});
  cs.push_back({"Range", {floats({0.5f}, {}), floats({3.0f}, {}), floats({0.3f}, {})}});
  cs.push_back({"Range", {ints({10}, {}), ints({-3}, {}), ints({-4}, {})}});
  // Einsum: products, a batch, a trace and a diagonal, a transpose, three operands, a dot product,
  // broadcast ellipses, integers, half.
  auto eq = [](const char* e) { return attr("equation", std::string(e)); };
  cs.push_back({"Einsum", {u({3, 4}, 351), u({4, 5}, 352)}, {eq("ij,jk->ik")}});
  cs.push_back({"Einsum", {u({2, 3, 4}, 353), u({2, 5, 4}, 354)}, {eq("bij,bkj->bki")}});
  cs.push_back({"Einsum", {u({4, 4}, 355)}, {eq("ii->i")}});
  cs.push_back({"Einsum", {u({4, 4}, 356)}, {eq("ii->")}});
  cs.push_back({"Einsum", {u({3, 5}, 357)}, {eq("ij->ji")}});
  cs.push_back({"Einsum", {u({2, 3}, 358), u({3, 4}, 359), u({4, 2}, 360)}, {eq("ij,jk,kl->il")}});
  cs.push_back({"Einsum", {u({6}, 361), u({6}, 362)}, {eq("i,i->")}});
  cs.push_back({"Einsum", {u({2, 1, 3, 4}, 363), u({3, 4, 2}, 364)}, {eq("...ij,...jk->...ik")}});
  cs.push_back({"Einsum", {u({3, 3, 2}, 365), u({2, 3}, 366)}, {eq("iij,jk->ki")}});
  cs.push_back({"Einsum", {int32s({2, 3}, 1), int32s({3, 2}, -2)}, {eq("ij,jk->ik")}});
  cs.push_back({"Einsum", {halves({2, 3}, 367), halves({3}, 368)}, {eq("ij,j->i")}});
  // Resize: nearest (an upscale, tf_crop_and_resize reaching outside X), linear (sizes,
  // align_corners; integer data rounds), cubic (exclude_outside), an antialiased downscale, axes
  // with a kept aspect ratio, half; Upsample at opsets 7 and 9.
  const std::string s_linear = "linear", s_asym = "asymmetric";
  auto mode = [](const std::string& m) { return attr("mode", m); };
  auto ctm = [](const std::string& m) { return attr("coordinate_transformation_mode", m); };
  cs.push_back({"Resize",
                {u({1, 2, 3, 4}, 369), kNone, floats({1, 1, 2, 1.5f}, {4})},
                {ctm(s_asym), attr("nearest_mode", std::string("floor"))},
                1,
                "",
                19});
  cs.push_back(
      {"Resize",
       {u({1, 1, 4, 4}, 370), floats({0, 0, -0.2f, 0.1f, 1, 1, 0.9f, 1.3f}, {8}), kNone, ints({1, 1, 5, 3}, {4})},
       {ctm("tf_crop_and_resize"), attr("extrapolation_value", 7.0f)},
       1,
       "",
       19});
  cs.push_back(
      {"Resize",
       {u({1, 1, 4, 4}, 371), floats({0, 0, -0.2f, 0.1f, 1, 1, 0.9f, 1.3f}, {8}), kNone, ints({1, 1, 5, 3}, {4})},
       {mode(s_linear), ctm("tf_crop_and_resize"), attr("extrapolation_value", 7.0f)},
       1,
       "",
       19});
  cs.push_back({"Resize",
                {u({2, 3, 4, 5}, 372), kNone, kNone, ints({2, 3, 7, 3}, {4})},
                {mode(s_linear), ctm("align_corners")},
                1,
                "",
                19});
  cs.push_back(
      {"Resize", {bytes_of(U8, {1, 1, 3, 4}, 11), kNone, floats({1, 1, 2, 2}, {4})}, {mode(s_linear)}, 1, "", 19});
  cs.push_back({"Resize",
                {u({1, 2, 5, 5}, 373), kNone, floats({1, 1, 1.6f, 0.8f}, {4})},
                {mode(s_cubic), attr("exclude_outside", int64_t{1})},
                1,
                "",
                19});
  cs.push_back({"Resize",
                {u({1, 1, 8, 9}, 374), kNone, floats({1, 1, 0.5f, 0.4f}, {4})},
                {mode(s_linear), attr("antialias", int64_t{1})},
                1,
                "",
                19});
  cs.push_back(
      {"Resize",
       {u({2, 3, 4, 6}, 375), kNone, kNone, ints({8, 9}, {2})},
       {mode(s_linear), ints_attr("axes", {2, 3}), attr("keep_aspect_ratio_policy", std::string("not_larger"))},
       1,
       "",
       19});
  cs.push_back({"Resize", {halves({1, 1, 3, 3}, 376), kNone, floats({1, 1, 2, 2}, {4})}, {mode(s_linear)}, 1, "", 19});
  cs.push_back({"Resize", {halves({1, 1, 3, 3}, 377), kNone, floats({1, 1, 2, 1.5f}, {4})}, {}, 1, "", 19});
  cs.push_back({"Upsample", {u({1, 2, 2, 3}, 378)}, {attr("scales", std::vector<float>{1, 1, 2, 2})}, 1, "", 7});
  cs.push_back({"Upsample", {u({1, 2, 2, 3}, 379), floats({1, 1, 2, 1.5f}, {4})}, {mode(s_linear)}, 1, "", 9});
  // Shape ops: Shape (a slice of the dims), Size, Dropout with its mask (bool, and float at opset
  // 7), EyeLike on and off the matrix, Trilu both ways with k, CumSum and CumProd (exclusive,
  // reverse, integers, half, more than one block of lanes), OneHot (negative and out-of-range
  // indices, float indices, axis 0).
  cs.push_back({"Shape", {u({2, 3, 4}, 380)}});
  cs.push_back({"Shape", {u({2, 3, 4}, 381)}, {attr("start", int64_t{-2}), attr("end", int64_t{5})}, 1, "", 15});
  cs.push_back({"Size", {u({2, 3, 4}, 382)}});
  cs.push_back({"Dropout", {u({3, 4}, 383), floats({0.3f}, {})}, {}, 2, "", 13});
  cs.push_back({"Dropout", {halves({5}, 384)}, {}, 2, "", 13});
  cs.push_back({"Dropout", {u({3, 4}, 385)}, {}, 2, "", 7});
  cs.push_back({"Dropout", {u({3, 4}, 386)}, {}, 1, "", 13});
  cs.push_back({"EyeLike", {u({3, 5}, 387)}, {attr("k", int64_t{1})}});
  cs.push_back({"EyeLike", {ints({1, 2, 3, 4, 5, 6}, {3, 2})}, {attr("k", int64_t{-5})}});
  cs.push_back({"EyeLike", {u({4, 4}, 388)}, {attr("dtype", static_cast<int64_t>(DType::Int32))}});
  cs.push_back({"Trilu", {u({2, 3, 4}, 389)}, {}, 1, "", 14});
  cs.push_back({"Trilu", {u({2, 3, 4}, 390), ints({-1}, {})}, {attr("upper", int64_t{0})}, 1, "", 14});
  cs.push_back({"Trilu", {ints({1, 2, 3, 4, 5, 6}, {2, 3}), ints({9}, {})}, {}, 1, "", 14});
  for (const char* op : {"CumSum", "CumProd"}) {
    const int64_t opset = std::string(op) == "CumSum" ? 17 : 26;
    cs.push_back({op, {u({2, 5, 3}, 391), ints({1}, {})}, {}, 1, "", opset});
    cs.push_back({op,
                  {u({2, 5, 3}, 392), ints({-1}, {})},
                  {attr("exclusive", int64_t{1}), attr("reverse", int64_t{1})},
                  1,
                  "",
                  opset});
    cs.push_back({op, {int32s({3, 4}, -2), int32s_of({0}, {})}, {attr("reverse", int64_t{1})}, 1, "", opset});
    cs.push_back({op, {halves({2, 6}, 393), ints({1}, {})}, {attr("exclusive", int64_t{1})}, 1, "", opset});
    cs.push_back({op, {u({3, 4200}, 394), ints({0}, {})}, {}, 1, "", opset});
  }
  cs.push_back({"OneHot", {ints({0, 2, -1, 5, -4, 1}, {2, 3}), ints({3}, {}), floats({0.5f, 2.0f}, {2})}});
  cs.push_back({"OneHot",
                {floats({1.7f, -0.5f, 3.0f, NAN}, {4}), floats({4}, {1}), ints({-1, 9}, {2})},
                {attr("axis", int64_t{0})}});
  // Hardmax (contiguous and strided axes, opset 11's 2-D view, half); the losses with each
  // reduction, weights, an ignored index, and SoftmaxCrossEntropyLoss's log_prob.
  cs.push_back({"Hardmax", {u({2, 3, 40}, 395)}});
  cs.push_back({"Hardmax", {u({2, 3, 40}, 396)}, {attr("axis", int64_t{1})}});
  cs.push_back({"Hardmax", {u({2, 3, 4}, 397)}, {attr("axis", int64_t{1})}, 1, "", 11});
  cs.push_back({"Hardmax", {halves({3, 5}, 398)}});
  const std::string s_none = "none", s_sum = "sum";
  for (const char* op : {"NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"}) {
    const size_t outs = std::string(op) == "SoftmaxCrossEntropyLoss" ? 2 : 1;
    cs.push_back({op, {u({3, 4}, 399), ints({0, 3, 1}, {3})}, {attr("reduction", s_none)}, outs});
    cs.push_back(
        {op, {u({2, 4, 3}, 400), ints({0, 3, 1, 2, 2, 1}, {2, 3}), u({4}, 401)}, {attr("reduction", s_sum)}, outs});
    cs.push_back(
        {op, {u({2, 3, 2}, 402), ints({0, 2, 1, 1}, {2, 2}), u({3}, 403)}, {attr("ignore_index", int64_t{1})}, outs});
    cs.push_back({op, {halves({3, 4}, 404), ints({2, 0, 1}, {3})}, {attr("reduction", s_none)}, outs});
  }
  // Attention: the standard op with a cache, every output (the scores after the softcap), a float
  // mask shorter than the keys; 3-D inputs with heads, causal, a bool mask, and scores after the
  // softmax; the GEMM path; ai.fusec packed QKV; half.
  cs.push_back({"Attention",
                {u({1, 2, 3, 4}, 405), u({1, 2, 5, 4}, 406), u({1, 2, 5, 4}, 407), u({3, 6}, 408), u({1, 2, 2, 4}, 409),
                 u({1, 2, 2, 4}, 410)},
                {attr("softcap", 2.0f), attr("qk_matmul_output_mode", int64_t{1})},
                4,
                "",
                23});
  cs.push_back({"Attention",
                {u({2, 3, 8}, 411), u({2, 4, 4}, 412), u({2, 4, 6}, 413), bools({3, 4})},
                {attr("q_num_heads", int64_t{2}), attr("kv_num_heads", int64_t{1}), attr("is_causal", int64_t{1}),
                 attr("qk_matmul_output_mode", int64_t{3})},
                4,
                "",
                23});
  cs.push_back({"Attention", {u({1, 2, 64, 32}, 414), u({1, 2, 64, 32}, 415), u({1, 2, 64, 32}, 416)}, {}, 3, "", 23});
  cs.push_back({"Attention",
                {u({2, 5, 32}, 417)},
                {attr("q_num_heads", int64_t{4}), attr("kv_num_heads", int64_t{2}), attr("is_causal", int64_t{1})},
                1,
                "ai.fusec"});
  cs.push_back(
      {"Attention", {halves({1, 2, 3, 4}, 418), halves({1, 2, 3, 4}, 419), halves({1, 2, 3, 4}, 420)}, {}, 1, "", 23});
  return cs;
}

}  // namespace

TEST(CpuWritesEvery, KernelsOverwritePoisonedOutputs) {
  for (const Case& c : cases()) expect_writes_every(c);
}

TEST(CpuWritesEvery, EveryFlaggedKernelHasACase) {
  std::set<std::pair<std::string, std::string>> covered;
  for (const Case& c : cases()) covered.insert({c.domain, c.op});
  for (const auto& key : cpu::KernelRegistry::global().registered_as(cpu::Writes::Every))
    EXPECT_TRUE(covered.count(key)) << (key.first.empty() ? "" : key.first + ".") << key.second
                                    << " is registered Writes::Every but has no case here";
}

TEST(CpuWritesEvery, ExecutorResultsDoNotDependOnArenaReuse) {
  // x -> Exp -> Softmax -> MatMul -> Add -> Transpose: every intermediate goes through the arena,
  // later ones into memory earlier ones used. Two runs of one executable (the arena then holds
  // the first run's values) and a fresh one must agree exactly.
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, shape_of({2, 3, 8, 8}));
  Value* e = b.node("Exp", {x});
  Value* s = b.node("Softmax", {e}, {attr("axis", int64_t{-1})});
  Value* m = b.node("MatMul", {s, b.initializer("w", u({8, 8}, 81))});
  Value* a = b.node("Add", {m, b.initializer("bias", u({8}, 82))});
  b.output(b.node("Transpose", {a}, {attr("perm", std::vector<int64_t>{0, 2, 1, 3})}));
  auto g = b.build();
  infer_shapes(*g);
  cpu::CpuBackend backend;
  auto exe = backend.compile(*g);
  const Tensor in1 = u({2, 3, 8, 8}, 83), in2 = u({2, 3, 8, 8}, 84);
  const auto first = exe->run({in1});
  const auto second = exe->run({in2});
  const auto fresh = backend.compile(*g)->run({in2});
  ASSERT_EQ(second[0].nbytes(), fresh[0].nbytes());
  EXPECT_EQ(std::memcmp(second[0].raw(), fresh[0].raw(), fresh[0].nbytes()), 0);
  EXPECT_NE(std::memcmp(first[0].raw(), second[0].raw(), fresh[0].nbytes()), 0);
}
