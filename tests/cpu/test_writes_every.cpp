// Kernels registered with Writes::Every (backend/cpu/kernel.h) promise to write every element of
// every output: the executor then hands them arena memory still holding an earlier tensor's bytes,
// without zeroing it. Each such kernel runs here twice, on outputs filled with 0xFF bytes (NaN,
// or -1 for integers) and on zeroed outputs; the two results must match byte for byte. Every
// kernel so registered must have a case below (CpuWritesEvery.EveryFlaggedKernelHasACase).
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
