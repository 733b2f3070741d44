// RNN, GRU and LSTM on the CPU reference. Expected values are onnxruntime 1.31's for the same
// inputs (its CPU kernels; the ONNX backend tests cover the default forms, tests/conformance).
#include <string>

#include "test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

const Tensor kAbsent;

/// One recurrent node over X, W, R, B, sequence_lens, initial_h, initial_c, P (kAbsent leaves one
/// out); returns its `outputs` outputs.
std::vector<Tensor> recur(const std::string& op, const std::vector<Tensor>& ins, std::vector<NamedAttribute> attrs,
                          size_t outputs, int64_t opset = 14) {
  GraphBuilder b(opset);
  std::vector<Value*> vals;
  std::vector<Tensor> feeds;
  for (size_t i = 0; i < ins.size(); ++i) {
    if (!ins[i].defined()) {
      vals.push_back(nullptr);
      continue;
    }
    vals.push_back(b.input("in" + std::to_string(i), ins[i].dtype(), shape_of(ins[i].dims())));
    feeds.push_back(ins[i]);
  }
  for (Value* v : b.node_n(op, vals, outputs, std::move(attrs), "rnn")) b.output(v);
  auto g = b.build();
  return run_cpu(*g, feeds);
}

std::string error_of(const std::string& op, const std::vector<Tensor>& ins, std::vector<NamedAttribute> attrs) {
  try {
    recur(op, ins, std::move(attrs), 2);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

Tensor lens(std::vector<int32_t> v) {
  Tensor t(DType::Int32, {static_cast<int64_t>(v.size())});
  std::copy(v.begin(), v.end(), t.data<int32_t>());
  return t;
}

// Seq 3, batch 2, input 2, hidden 2.
Tensor x() {
  return floats({0, 0.6442177f, 0.9854497f, 0.8632094f, 0.3349882f, -0.3507832f, -0.8715757f, -0.9824526f, -0.6312667f,
                 0.01681362f, 0.6569866f, 0.9881682f},
                {3, 2, 2});
}
const std::vector<float> kW = {1,           0.9553365f,  0.8253356f,  0.6216099f,  0.3623577f,  0.0707372f,
                               -0.2272022f, -0.5048462f, -0.7373938f, -0.9040722f, -0.9899925f, -0.9874797f,
                               -0.8967584f, -0.7259323f, -0.4902606f, -0.2107958f, 0.08749918f, 0.3779781f,
                               0.634693f,   0.8347129f,  0.9601703f,  0.9998586f,  0.9502324f,  0.815725f};
const std::vector<float> kR = {0.841471f,   0.997495f,   0.9092974f,  0.5984722f,  0.14112f,    -0.3507832f,
                               -0.7568025f, -0.9775301f, -0.9589243f, -0.7055403f, -0.2794155f, 0.21512f,
                               0.6569866f,  0.938f,      0.9893582f,  0.7984871f,  0.4121185f,  -0.07515112f,
                               -0.5440211f, -0.8796958f, -0.9999902f, -0.8754522f, -0.5365729f, -0.06632189f};
const std::vector<float> kB = {0.5f,        0.4900333f,  0.4605305f,   0.4126678f,  0.3483534f,  0.2701511f,
                               0.1811789f,  0.08498358f, -0.01459977f, -0.1136011f, -0.2080734f, -0.2942506f,
                               -0.3686969f, -0.4284444f, -0.4711111f,  -0.4949962f, -0.4991474f, -0.4833991f,
                               -0.4483792f, -0.3954839f, -0.3268218f,  -0.2451303f, -0.1536664f, -0.05607631f};
const std::vector<float> kH0 = {0, 0.9635581f, 0.5155015f, -0.687766f, -0.8834547f, 0.21512f, 0.9985433f, 0.3190989f};

Tensor first(const std::vector<float>& v, std::vector<int64_t> dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return floats(std::vector<float>(v.begin(), v.begin() + n), std::move(dims));
}

std::vector<Tensor> lstm_inputs() {
  return {x(),
          first(kW, {1, 8, 2}),
          first(kR, {1, 8, 2}),
          first(kB, {1, 16}),
          kAbsent,
          first(kH0, {1, 2, 2}),
          floats({1, 0.62161f, -0.227202f, -0.904072f}, {1, 2, 2}),
          floats({0, 0.3894183f, 0.7173561f, 0.9320391f, 0.9995736f, 0.9092974f}, {1, 6})};
}

}  // namespace

// Both directions, batch row 1 one step long: its later Y rows are zero, its reverse state is the
// one after its only step.
TEST(CpuRecurrent, BidirectionalGruWithSequenceLengths) {
  const std::vector<Tensor> ins = {x(),          floats(kW, {2, 6, 2}), floats(kR, {2, 6, 2}), floats(kB, {2, 12}),
                                   lens({3, 1}), floats(kH0, {2, 2, 2})};
  const std::string bidi = "bidirectional";
  auto out = recur("GRU", ins, {attr("direction", bidi), attr("hidden_size", int64_t{2})}, 2);
  expect_close(
      out[0],
      floats({-0.05278978f, 0.7008874f, 0.3784915f, -0.7214971f, 0.2030931f,  -0.01850184f, 0.5905098f, 0.5199487f,
              -0.03716815f, 0.5305346f, 0,          0,           -0.3097104f, -0.3856878f,  0,          0,
              0.122315f,    0.5461501f, 0,          0,           -0.828828f,  -0.5461725f,  0,          0},
             {3, 2, 2, 2}),
      1e-5, 1e-6);
  expect_close(
      out[1],
      floats({0.122315f, 0.5461501f, 0.3784915f, -0.7214971f, 0.2030931f, -0.01850184f, 0.5905098f, 0.5199487f},
             {2, 2, 2}),
      1e-5, 1e-6);
  out = recur("GRU", ins,
              {attr("direction", bidi), attr("hidden_size", int64_t{2}), attr("linear_before_reset", int64_t{1})}, 2);
  expect_close(
      out[1],
      floats({0.1361947f, 0.6254005f, 0.3822731f, -0.7196125f, 0.1878566f, 0.04974414f, 0.6267622f, 0.5375889f},
             {2, 2, 2}),
      1e-5, 1e-6);
}

TEST(CpuRecurrent, LstmPeepholesClipAndCoupledGates) {
  auto out = recur("LSTM", lstm_inputs(), {attr("hidden_size", int64_t{2}), attr("clip", 0.8f)}, 3);
  expect_close(out[0],
               floats({0.2835252f, 0.1405025f, -0.3133001f, -0.1947612f, 0.1726514f, 0.09131745f, -0.07003186f,
                       -0.3502325f, 0.2191807f, 0.1043015f, -0.2698734f, -0.1834746f},
                      {3, 1, 2, 2}),
               1e-5, 1e-6);
  expect_close(out[2], floats({0.4009554f, 0.1910133f, -0.5074182f, -0.6388653f}, {1, 2, 2}), 1e-5, 1e-6);
  const std::string reverse = "reverse";
  out = recur("LSTM", lstm_inputs(),
              {attr("hidden_size", int64_t{2}), attr("input_forget", int64_t{1}), attr("direction", reverse)}, 3);
  expect_close(out[0],
               floats({-0.157566f, -0.04789881f, -0.3862013f, -0.216022f, 0.2120154f, 0.0998867f, -0.2033831f,
                       -0.3981673f, 0.4077244f, 0.2489919f, -0.3920334f, -0.1790671f},
                      {3, 1, 2, 2}),
               1e-5, 1e-6);
  expect_close(out[2], floats({-0.3149384f, -0.1352057f, -0.9302278f, -0.8658802f}, {1, 2, 2}), 1e-5, 1e-6);
}

// layout 1 is layout 0 with batch first: the same numbers, transposed.
TEST(CpuRecurrent, BatchMajorLayoutIsTheTransposedSequenceMajorOne) {
  const Tensor xs = uniform_floats({4, 3, 5}, 1), w = uniform_floats({1, 6, 5}, 2), r = uniform_floats({1, 6, 6}, 3);
  Tensor xb(DType::Float32, {3, 4, 5});
  for (int64_t t = 0; t < 4; ++t)
    for (int64_t b = 0; b < 3; ++b)
      for (int64_t i = 0; i < 5; ++i) xb.data<float>()[(b * 4 + t) * 5 + i] = xs.data<float>()[(t * 3 + b) * 5 + i];
  const std::string relu = "Relu";
  auto seq_major = recur("RNN", {xs, w, r}, {attr("hidden_size", int64_t{6})}, 2);
  auto batch_major = recur("RNN", {xb, w, r}, {attr("hidden_size", int64_t{6}), attr("layout", int64_t{1})}, 2);
  ASSERT_EQ(batch_major[0].dims(), (std::vector<int64_t>{3, 4, 1, 6}));
  ASSERT_EQ(batch_major[1].dims(), (std::vector<int64_t>{3, 1, 6}));
  for (int64_t t = 0; t < 4; ++t)
    for (int64_t b = 0; b < 3; ++b)
      for (int64_t k = 0; k < 6; ++k)
        EXPECT_EQ(batch_major[0].data<float>()[(b * 4 + t) * 6 + k], seq_major[0].data<float>()[(t * 3 + b) * 6 + k]);
  for (int64_t i = 0; i < 18; ++i) EXPECT_EQ(batch_major[1].data<float>()[i], seq_major[1].data<float>()[i]);
}

TEST(CpuRecurrent, ShapesWithASymbolicBatch) {
  GraphBuilder b(14);
  Value* xv = b.input("x", DType::Float32, {Dim::sym("N"), 7, 5});
  Value* w = b.initializer("w", uniform_floats({2, 12, 5}, 4));
  Value* r = b.initializer("r", uniform_floats({2, 12, 3}, 5));
  const std::string bidi = "bidirectional";
  auto outs = b.node_n("LSTM", {xv, w, r}, 3, {attr("direction", bidi), attr("layout", int64_t{1})}, "lstm");
  for (Value* v : outs) b.output(v);
  auto g = b.build();
  infer_shapes(*g);
  EXPECT_EQ(*g->outputs[0]->type.shape, (Shape{Dim::sym("N"), 7, 2, 3}));
  EXPECT_EQ(*g->outputs[1]->type.shape, (Shape{Dim::sym("N"), 2, 3}));
  EXPECT_EQ(*g->outputs[2]->type.shape, (Shape{Dim::sym("N"), 2, 3}));
}

TEST(CpuRecurrent, BadInputsNameTheProblem) {
  const Tensor w = uniform_floats({1, 6, 2}, 6), r = uniform_floats({1, 6, 6}, 7);
  auto has = [](const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; };
  const std::string sideways = "sideways";
  std::string e = error_of("RNN", {x(), w, r}, {attr("direction", sideways)});
  EXPECT_TRUE(has(e, "direction 'sideways' is not one of forward, reverse, bidirectional")) << e;
  e = error_of("RNN", {x(), w, r}, {attr("activations", std::vector<std::string>{"Tanh", "Tanh"})});
  EXPECT_TRUE(has(e, "activations lists 2 functions; RNN with 1 direction(s) needs 1")) << e;
  e = error_of("RNN", {x(), w, r}, {attr("activations", std::vector<std::string>{"Swish"})});
  EXPECT_TRUE(has(e, "activation 'Swish' is not one of ONNX's recurrent activation functions")) << e;
  e = error_of("RNN", {x(), w, r}, {attr("hidden_size", int64_t{4})});
  EXPECT_TRUE(has(e, "W's dim 1 is 6, but hidden_size x gates says 4")) << e;
  e = error_of("RNN", {x(), uniform_floats({1, 6, 3}, 8), r}, {});
  EXPECT_TRUE(has(e, "W's dim 2 is 3, but X's input size says 2")) << e;
  e = error_of("RNN", {x(), w, r, kAbsent, lens({4, 1})}, {});
  EXPECT_TRUE(has(e, "sequence_lens[0] is 4, outside [0, 3]")) << e;
  e = error_of("RNN", {x(), w, r}, {attr("layout", int64_t{2})});
  EXPECT_TRUE(has(e, "layout must be 0 or 1")) << e;
  e = error_of("GRU", {x(), w, r}, {});
  EXPECT_TRUE(has(e, "op GRU")) << e;
}
