// RNN, GRU and LSTM on cuDNN (backend/cuda/ops/recurrent/recurrent_op.cpp) against the CPU
// reference: each cell forward and bidirectional (the bidirectional Y goes through the op's copy
// from cuDNN's [seq, batch, 2, hidden] to ONNX's [seq, 2, batch, hidden]), with and without biases
// and initial states, ONNX's layout 1, at fp32, tf32 and fp16; and the attributes cuDNN's cells do
// not have, which stay on the CPU and still match.
#include <string>
#include <vector>

#include "gpu_test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

struct RecCase {
  const char* op;
  int64_t seq, batch, input, hidden;
  const char* direction = "forward";
  bool bias = true, states = true;
  int64_t layout = 0;
  std::vector<NamedAttribute> extra;
};

OpCase make_case(const RecCase& d, uint64_t seed) {
  const std::string op = d.op;
  const int64_t gates = op == "LSTM" ? 4 : op == "GRU" ? 3 : 1;
  const int64_t dirs = std::string(d.direction) == "bidirectional" ? 2 : 1;
  const int64_t H = d.hidden;
  OpCase c;
  c.op = op;
  c.opset = 14;
  const std::vector<int64_t> x =
      d.layout ? std::vector<int64_t>{d.batch, d.seq, d.input} : std::vector<int64_t>{d.seq, d.batch, d.input};
  const std::vector<int64_t> state =
      d.layout ? std::vector<int64_t>{d.batch, dirs, H} : std::vector<int64_t>{dirs, d.batch, H};
  c.inputs = {random_tensor(DType::Float32, x, seed),
              random_tensor(DType::Float32, {dirs, gates * H, d.input}, seed + 1, -0.4, 0.4),
              random_tensor(DType::Float32, {dirs, gates * H, H}, seed + 2, -0.4, 0.4),
              d.bias ? random_tensor(DType::Float32, {dirs, 2 * gates * H}, seed + 3, -0.3, 0.3) : Tensor(),
              Tensor(),  // sequence_lens
              d.states ? random_tensor(DType::Float32, state, seed + 4) : Tensor()};
  if (op == "LSTM") c.inputs.push_back(d.states ? random_tensor(DType::Float32, state, seed + 5) : Tensor());
  c.constant = {1, 2};
  if (d.bias) c.constant.insert(3);
  c.attrs = {attr("hidden_size", H), attr("direction", std::string(d.direction)), attr("layout", d.layout)};
  c.attrs.insert(c.attrs.end(), d.extra.begin(), d.extra.end());
  c.num_outputs = op == "LSTM" ? 3 : 2;
  return c;
}

const std::vector<RecCase>& cases() {
  static const std::vector<RecCase> all = {
      {"LSTM", 7, 3, 5, 8},
      {"LSTM", 9, 4, 6, 16, "bidirectional", true, false},
      {"LSTM", 5, 2, 3, 8, "forward", false, true, 1},  // layout 1, no biases
      {"GRU", 6, 3, 5, 8, "forward", true, true, 0, {attr("linear_before_reset", int64_t{1})}},
      {"GRU", 8, 5, 4, 12, "bidirectional", true, true, 0, {attr("linear_before_reset", int64_t{1})}},
      {"RNN", 6, 3, 4, 8},
      {"RNN",
       5,
       2,
       4,
       8,
       "bidirectional",
       true,
       true,
       0,
       {attr("activations", std::vector<std::string>{"Relu", "Relu"})}},
  };
  return all;
}

}  // namespace

TEST(GpuRecurrent, EachCellMatchesTheReferenceOnCudnn) {
  FUSEC_REQUIRE_GPU();
  uint64_t seed = 40;
  for (const RecCase& d : cases())
    for (Precision p : {Precision::FP32, Precision::TF32, Precision::FP16}) {
      SCOPED_TRACE(std::string(d.op) + " " + d.direction + " seq " + std::to_string(d.seq) + " hidden " +
                   std::to_string(d.hidden) + " layout " + std::to_string(d.layout) + " at " + precision_name(p));
      expect_gpu_matches_cpu(make_case(d, seed += 7), p, -1, true, "cuDNN RNN");
    }
}

TEST(GpuRecurrent, WhatCudnnsCellsDoNotHaveStaysOnTheCpu) {
  FUSEC_REQUIRE_GPU();
  // GRU applying the reset gate before its recurrent product, a clip, LSTM's input_forget, a
  // reverse direction, activations of other shapes, peepholes: each runs on the CPU reference and
  // matches.
  const std::vector<RecCase> refused = {
      {"GRU", 6, 3, 5, 8},  // linear_before_reset = 0, ONNX's default
      {"LSTM", 6, 3, 5, 8, "forward", true, true, 0, {attr("clip", 0.5f)}},
      {"LSTM", 6, 3, 5, 8, "forward", true, true, 0, {attr("input_forget", int64_t{1})}},
      {"LSTM", 6, 3, 5, 8, "reverse"},
      {"GRU",
       6,
       3,
       5,
       8,
       "forward",
       true,
       true,
       0,
       {attr("linear_before_reset", int64_t{1}), attr("activations", std::vector<std::string>{"HardSigmoid", "Tanh"})}},
  };
  uint64_t seed = 400;
  for (const RecCase& d : refused) {
    SCOPED_TRACE(std::string(d.op) + " " + d.direction);
    expect_gpu_matches_cpu(make_case(d, seed += 7), Precision::FP32, -1, false);
  }
  // Peepholes given at run time (not a constant the planner could see is zero).
  SCOPED_TRACE("LSTM with P as a graph input");
  OpCase peep = make_case({"LSTM", 6, 3, 5, 8}, 470);
  peep.inputs.push_back(random_tensor(DType::Float32, {1, 3 * 8}, 471, -0.3, 0.3));
  expect_gpu_matches_cpu(peep, Precision::FP32, -1, false);
}
