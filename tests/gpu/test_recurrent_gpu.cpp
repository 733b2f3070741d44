// RNN, GRU and LSTM on cuDNN (backend/cuda/ops/recurrent/recurrent_op.cpp) against the CPU
// reference: each cell forward and bidirectional (the bidirectional Y goes through the op's copy
// from cuDNN's [seq, batch, 2, hidden] to ONNX's [seq, 2, batch, hidden]), with and without biases
// and initial states, ONNX's layout 1, at fp32, tf32 and fp16; and the attributes cuDNN's cells do
// not have, which stay on the CPU and still match; every cuDNN RNN algorithm (recurrent_algo.h)
// where cuDNN takes the shape, and the tuner's race and its remembered pick.
#include <cstdio>
#include <map>
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

/// A tagger's layer (scripts/families.py's lstm_tagger and gru_tagger: 64 inputs, hidden 96, both
/// directions), at a shorter sequence: the shape torch runs on cuDNN's persistent kernels.
const std::vector<RecCase>& tagger_cases() {
  static const std::vector<RecCase> all = {
      {"LSTM", 24, 16, 64, 96, "bidirectional", true, false},
      {"GRU", 24, 16, 64, 96, "bidirectional", true, false, 0, {attr("linear_before_reset", int64_t{1})}},
      {"LSTM", 17, 5, 40, 24},  // odd batch and sequence, one direction, initial states
  };
  return all;
}

/// Runs c on the GPU at p, expects the reference's outputs, and returns the kernel the node ran as.
/// At fp32 the bound is 4e-5 of max|reference|, not 1e-5: cuDNN's persistent kernels sum each
/// step's products in another order than the reference, and 24 steps of recurrence carry the
/// difference (1.7e-5 at worst, seen on the H200).
std::string run_on_gpu(const OpCase& c, Precision p) {
  std::string kernel;
  expect_gpu_matches_cpu(c, p, p == Precision::FP32 ? 4e-5 : -1, true, "cuDNN RNN", &kernel);
  return kernel;
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

TEST(GpuRecurrent, EveryAlgorithmCudnnTakesMatchesTheReference) {
  FUSEC_REQUIRE_GPU();
  // Each algorithm pinned (FUSEC_RNN_ALGO): where cuDNN refuses it for a shape the node runs on the
  // standard one, and either way it must match. The persistent static algorithm must take the
  // tagger's fp16 layers, as it does torch's.
  const std::map<std::string, std::string> algos = {{"standard", "standard"},
                                                    {"static", "persistent static"},
                                                    {"small_h", "persistent static small-h"},
                                                    {"dynamic", "persistent dynamic"}};
  std::vector<RecCase> all = cases();
  all.insert(all.end(), tagger_cases().begin(), tagger_cases().end());
  uint64_t seed = 700;
  for (const auto& [value, name] : algos) {
    ScopedEnv pin("FUSEC_RNN_ALGO", value.c_str());
    int taken = 0, tagger_fp16 = 0;
    for (size_t i = 0; i < all.size(); ++i)
      for (Precision p : {Precision::FP32, Precision::FP16}) {
        const RecCase& d = all[i];
        SCOPED_TRACE(value + ": " + d.op + " " + d.direction + " seq " + std::to_string(d.seq) + " batch " +
                     std::to_string(d.batch) + " hidden " + std::to_string(d.hidden) + " at " + precision_name(p));
        const std::string kernel = run_on_gpu(make_case(d, seed += 3), p);
        const bool on_it =
            kernel.size() >= name.size() && kernel.compare(kernel.size() - name.size(), name.size(), name) == 0;
        taken += on_it;
        if (on_it && i >= cases().size() && i < cases().size() + 2 && p == Precision::FP16) ++tagger_fp16;
      }
    std::printf("[ info ] FUSEC_RNN_ALGO=%s: %d of %zu runs on %s\n", value.c_str(), taken, 2 * all.size(),
                name.c_str());
    if (value == "standard") EXPECT_EQ(taken, static_cast<int>(2 * all.size()));
    if (value == "static") EXPECT_EQ(tagger_fp16, 2) << "the tagger's fp16 layers did not run on the persistent kernel";
  }
}

TEST(GpuRecurrent, TheTunerRacesTheAlgorithmsAndRemembersItsPick) {
  FUSEC_REQUIRE_GPU();
  ScopedTuningCache cache("rnn_tune");
  const OpCase c = make_case(tagger_cases()[0], 900);
  const std::string first = run_on_gpu(c, Precision::FP16);
  const std::string key = cache.key_containing("rnn|");
  ASSERT_FALSE(key.empty()) << "the race left nothing in the tuning cache: " << cache.text();
  // A second engine build reads the pick back: the same algorithm, with no second race.
  const std::string before = cache.text();
  const std::string second = run_on_gpu(c, Precision::FP16);
  EXPECT_EQ(first, second);
  EXPECT_EQ(cache.text(), before);
  std::printf("[ info ] the tagger's fp16 LSTM layer ran as %s\n", first.c_str());
}
