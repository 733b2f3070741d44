// Which of cuDNN's RNN algorithms runs a recurrent node. The standard algorithm launches a GEMM and
// an elementwise cell kernel per time step and direction; the persistent ones keep the recurrent
// weights on chip and run the whole sequence in one kernel per direction, which is what small
// hidden sizes and batches want (the step's GEMM is then a few hundred nanoseconds of latency). On
// the H200, scripts/families.py's two-layer bidirectional LSTM tagger (hidden 96, batch 16, 128
// steps, fp16) ran 1024 launches on the standard algorithm where torch's cuDNN call ran 4
// persistent ones. Which algorithm wins depends on the shape and the GPU, and cuDNN has no
// heuristic for it, so the engine build times the standard and static persistent algorithms cuDNN
// accepts for the shape and remembers the winner in the tuning cache (tuning_cache.h).
#pragma once
#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "backend/cuda/core/context.h"

namespace fusec::cuda {

/// One node's problem, as its descriptors describe it (recurrent_op.cpp sets them up).
struct RnnProblem {
  cudnnRNNMode_t mode = CUDNN_LSTM;
  int64_t dirs = 1, seq = 0, batch = 0, input = 0, hidden = 0;
  bool batch_major = false;
  cudnnDataType_t data = CUDNN_DATA_FLOAT;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  size_t elem_bytes = 4;
  cudnnDropoutDescriptor_t dropout = nullptr;
  cudnnRNNDataDescriptor_t x = nullptr, y = nullptr;
  cudnnTensorDescriptor_t h = nullptr;
  const int32_t* dev_lens = nullptr;  // every sequence's length, on the device
};

/// An RNN descriptor set for one algorithm, with the sizes cuDNN asks for it.
struct RnnAlgo {
  RnnAlgo() = default;
  RnnAlgo(const RnnAlgo&) = delete;
  RnnAlgo& operator=(const RnnAlgo&) = delete;
  ~RnnAlgo();
  cudnnRNNDescriptor_t desc = nullptr;
  cudnnRNNAlgo_t algo = CUDNN_RNN_ALGO_STANDARD;
  size_t workspace_bytes = 0, reserve_bytes = 0, weight_bytes = 0;
};

/// "standard", "persistent static", "persistent static small-h", "persistent dynamic".
const char* rnn_algo_name(cudnnRNNAlgo_t algo);

/// The algorithm the node runs: FUSEC_RNN_ALGO's where it names one cuDNN accepts (untimed); else,
/// with tuning on, the fastest of the standard and static persistent ones cuDNN accepts, timed on
/// scratch buffers once per shape and GPU and then read from the tuning cache; else (FUSEC_TUNE=0)
/// the standard algorithm. nullptr, with why, where cuDNN refuses even the standard algorithm
/// (NOT_SUPPORTED or BAD_PARAM: the node stays on the CPU); any other failure of the standard
/// algorithm is an error.
std::unique_ptr<RnnAlgo> pick_rnn_algo(const RnnProblem& p, Context& ctx, std::string* why);

}  // namespace fusec::cuda
