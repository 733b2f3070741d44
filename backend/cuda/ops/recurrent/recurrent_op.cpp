// RNN, GRU and LSTM on cuDNN's RNN API (cudnnRNNForward, inference mode): one ONNX node is a
// one-layer cuDNN RNN, one or two directions, its constant W, R and B packed into cuDNN's weight
// space once at plan time.
//
// Why: these ran on the CPU reference with copies in every CUDA plan. A two-layer bidirectional
// LSTM tagger (scripts/families.py's lstm_tagger, batch 16, 128 tokens) benched 54.6 ms on the
// H200 against torch's 0.68 (eager + CUDA graph), which runs the same cell on cuDNN; the CPU node
// also kept the whole model out of CUDA graph capture.
//
// What cuDNN computes is ONNX's cell where ONNX's attributes are their defaults: activations
// Sigmoid/Tanh(/Tanh) (RNN: Tanh or Relu), no clip, no input_forget, no peepholes, GRU with
// linear_before_reset = 1 (cuDNN applies the reset gate after the recurrent product, as PyTorch's
// GRU and its exports do), directions forward or bidirectional, every sequence full length.
// Anything else stays on the CPU reference, named by the planner. The gates' order differs:
// ONNX's LSTM rows are i, o, f, c where cuDNN's matrices are i, f, c, o; ONNX's GRU rows are
// z, r, h where cuDNN's are r, z, h.
//
// Layouts: cuDNN's y is [seq, batch, directions·hidden] (batch-major: [batch, seq, ...]), its
// states [directions, batch, hidden]. ONNX's Y is [seq, directions, batch, hidden] at layout 0:
// with two directions the op writes y into its workspace and copies it across (a strided copy);
// at layout 1 Y is cuDNN's batch-major y as it is, and the states are [batch, directions,
// hidden], the same memory as cuDNN's with one direction (two stay on the CPU).
//
// Which of cuDNN's algorithms runs the node is raced per shape and GPU (recurrent_algo.h).
#include <cudnn.h>

#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/core/check.h"
#include "backend/cuda/core/cuda_op.h"
#include "backend/cuda/core/dnn_check.h"
#include "backend/cuda/ops/movement/movement.cuh"
#include "backend/cuda/ops/recurrent/recurrent_algo.h"
#include "ir/half.h"
#include "ir/ops/recurrent.h"

namespace fusec::cuda {

namespace {

using recurrent::Activation;
using recurrent::Cell;

// ONNX's operands.
constexpr size_t kX = 0, kW = 1, kR = 2, kB = 3, kLens = 4, kH0 = 5, kC0 = 6, kP = 7;

size_t align256(size_t n) { return (n + 255) / 256 * 256; }

/// cuDNN's matrix (linLayerID) for ONNX's gate g of a cell: input matrices first, then the
/// recurrent ones at the same offset.
int cudnn_gate(Cell cell, int g) {
  static const int lstm[4] = {0, 3, 1, 2};  // ONNX i, o, f, c -> cuDNN i, f, c, o
  static const int gru[3] = {1, 0, 2};      // ONNX z, r, h -> cuDNN r, z, h
  return cell == Cell::Lstm ? lstm[g] : cell == Cell::Gru ? gru[g] : 0;
}

bool is(const Activation& a, Activation::Kind k) { return a.kind == k; }

/// Why cuDNN's cell is not this node's, or "" (the ONNX attributes above).
std::string cell_refusal(const recurrent::Config& c, Cell cell, cudnnRNNMode_t* mode) {
  using K = Activation::Kind;
  if (c.reverse) return "direction 'reverse' (cuDNN runs forward and bidirectional)";
  if (c.clip > 0) return "clip (cuDNN's clip is on the cell state only)";
  if (c.input_forget) return "input_forget";
  for (size_t i = 0; i < c.acts.size(); ++i) {
    const Activation& a = c.acts[i];
    const size_t slot = cell == Cell::Rnn ? 0 : i % (cell == Cell::Gru ? 2 : 3);
    const bool ok = cell == Cell::Rnn ? is(a, K::Tanh) || is(a, K::Relu)
                    : slot == 0       ? is(a, K::Sigmoid)
                                      : is(a, K::Tanh);
    if (!ok) return "activations other than cuDNN's (Sigmoid, Tanh, Tanh; RNN: Tanh or Relu)";
    if (cell == Cell::Rnn && a.kind != c.acts[0].kind) return "a different activation for each direction";
  }
  if (cell == Cell::Gru && !c.linear_before_reset) return "GRU with linear_before_reset = 0";
  *mode = cell == Cell::Lstm       ? CUDNN_LSTM
          : cell == Cell::Gru      ? CUDNN_GRU
          : is(c.acts[0], K::Relu) ? CUDNN_RNN_RELU
                                   : CUDNN_RNN_TANH;
  return "";
}

class RecurrentOp final : public CudaOp {
 public:
  ~RecurrentOp() override {
    if (xd_) cudnnDestroyRNNDataDescriptor(xd_);
    if (yd_) cudnnDestroyRNNDataDescriptor(yd_);
    if (hd_) cudnnDestroyTensorDescriptor(hd_);
    if (drop_) cudnnDestroyDropoutDescriptor(drop_);
  }

  /// False, with why, where cuDNN's RNN does not compute this node.
  bool plan(const PlanContext& c, std::string* why) {
    const recurrent::Config cfg = recurrent::configure(c, c.opset());
    cell_ = recurrent::cell_of(c.node().op_type);
    cudnnRNNMode_t mode = CUDNN_LSTM;
    if (std::string no = cell_refusal(cfg, cell_, &mode); !no.empty()) return *why = "cuDNN's RNN: " + no, false;
    dt_ = c.in_dtype(kX);
    if (dt_ != DType::Float32 && dt_ != DType::Float16)
      return *why = "cuDNN's RNN: float32 and float16 storage only", false;
    if (!c.constant(kW) || !c.constant(kR) || (c.has_input(kB) && !c.constant(kB)))
      return *why = "cuDNN's RNN: W, R and B must be constants (packed into its weight space at plan time)", false;
    if (c.has_input(kP) && (!c.constant(kP) || !all_zero(*c.constant(kP))))
      return *why = "cuDNN's RNN: peepholes (P)", false;
    const auto& xd = c.in_dims(kX);
    const auto& rd = c.in_dims(kR);
    if (xd.size() != 3 || rd.size() != 3) return *why = "cuDNN's RNN: X and R of rank 3", false;
    batch_major_ = cfg.batch_major;
    seq_ = xd[batch_major_ ? 1 : 0], batch_ = xd[batch_major_ ? 0 : 1], input_ = xd[2];
    hidden_ = rd[2], dirs_ = cfg.directions, gates_ = cfg.gates;
    if (seq_ < 1 || batch_ < 1 || input_ < 1 || hidden_ < 1) return *why = "cuDNN's RNN: an empty X", false;
    if (c.has_input(kLens)) {
      const Tensor* lens = c.constant(kLens);
      if (!lens) return *why = "cuDNN's RNN: sequence_lens known only at run time", false;
      for (int64_t b = 0; b < lens->numel(); ++b)
        if (lens->as_double(b) != static_cast<double>(seq_))
          return *why = "cuDNN's RNN: sequences shorter than X (sequence_lens)", false;
    }
    if (batch_major_ && dirs_ == 2 && (c.has_input(kH0) || c.has_input(kC0) || c.has_output(1) || c.has_output(2)))
      return *why = "cuDNN's RNN: layout 1 states of two directions ([batch, 2, hidden])", false;
    for (int64_t v : {seq_ * batch_ * input_, seq_ * batch_ * dirs_ * hidden_, gates_ * hidden_ * (input_ + hidden_)})
      if (v > INT32_MAX) return *why = "cuDNN's RNN: sizes past 32 bits", false;

    cudnnHandle_t h = c.ctx().cudnn();
    // A data layout cuDNN's RNN does not take (its status at plan time) stays on the CPU, named;
    // any other failure is an error.
    auto accepts = [](cudnnStatus_t st, const char* call, std::string* no) {
      if (st == CUDNN_STATUS_SUCCESS) return true;
      if (st != CUDNN_STATUS_NOT_SUPPORTED && st != CUDNN_STATUS_BAD_PARAM)
        throw_cudnn_error(st, call, __FILE__, __LINE__);
      *no = std::string("cuDNN's RNN: ") + call + " refused the configuration (" + cudnnGetErrorString(st) + ")";
      return false;
    };
    RnnProblem p;
    p.mode = mode;
    p.dirs = dirs_, p.seq = seq_, p.batch = batch_, p.input = input_, p.hidden = hidden_;
    p.batch_major = batch_major_;
    p.data = dt_ == DType::Float16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
    p.math = dt_ == DType::Float16 ? CUDNN_TENSOR_OP_MATH : c.allow_tf32() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
    p.elem_bytes = dtype_size(dt_);
    size_t states = 0;
    DNN_CHECK(cudnnCreateDropoutDescriptor(&drop_));
    DNN_CHECK(cudnnDropoutGetStatesSize(h, &states));
    drop_states_ = DeviceBuffer(states, "cuDNN's dropout states (an RNN descriptor needs them; dropout is 0)");
    DNN_CHECK(cudnnSetDropoutDescriptor(drop_, h, 0.0f, drop_states_.get(), states, 0));
    p.dropout = drop_;
    const cudnnRNNDataLayout_t layout =
        batch_major_ ? CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED : CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED;
    const std::vector<int> lens(static_cast<size_t>(batch_), static_cast<int>(seq_));
    float fill = 0.0f;
    DNN_CHECK(cudnnCreateRNNDataDescriptor(&xd_));
    if (!accepts(cudnnSetRNNDataDescriptor(xd_, p.data, layout, static_cast<int>(seq_), static_cast<int>(batch_),
                                           static_cast<int>(input_), lens.data(), &fill),
                 "cudnnSetRNNDataDescriptor", why))
      return false;
    DNN_CHECK(cudnnCreateRNNDataDescriptor(&yd_));
    if (!accepts(cudnnSetRNNDataDescriptor(yd_, p.data, layout, static_cast<int>(seq_), static_cast<int>(batch_),
                                           static_cast<int>(dirs_ * hidden_), lens.data(), &fill),
                 "cudnnSetRNNDataDescriptor", why))
      return false;
    const int hdims[3] = {static_cast<int>(dirs_), static_cast<int>(batch_), static_cast<int>(hidden_)};
    const int hstrides[3] = {static_cast<int>(batch_ * hidden_), static_cast<int>(hidden_), 1};
    DNN_CHECK(cudnnCreateTensorDescriptor(&hd_));
    DNN_CHECK(cudnnSetTensorNdDescriptor(hd_, p.data, 3, hdims, hstrides));
    dev_lens_ = DeviceBuffer(lens.size() * sizeof(int32_t), "cuDNN's RNN sequence lengths");
    FUSEC_CUDA_CHECK(cudaMemcpy(dev_lens_.get(), lens.data(), lens.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
    p.x = xd_, p.y = yd_, p.h = hd_;
    p.dev_lens = static_cast<const int32_t*>(dev_lens_.get());
    algo_ = pick_rnn_algo(p, c.ctx(), why);
    if (!algo_) return false;
    rnn_ = algo_->desc;
    ws_bytes_ = algo_->workspace_bytes, reserve_bytes_ = algo_->reserve_bytes;
    pack_weights(h, *c.constant(kW), *c.constant(kR), c.constant(kB));

    // Y through the workspace where ONNX's layout is not cuDNN's (two directions, layout 0), or
    // where the node does not ask for Y at all.
    y_bytes_ = static_cast<size_t>(seq_ * batch_ * dirs_ * hidden_) * dtype_size(dt_);
    y_direct_ = c.has_output(0) && (batch_major_ || dirs_ == 1);
    if (c.has_output(0) && !y_direct_) {
      // Y [seq, dir, batch, hidden] from y [seq, batch, dir, hidden].
      bool ok = true;
      copy_ = plan_strided_copy({seq_, dirs_, batch_, hidden_}, {batch_ * dirs_ * hidden_, hidden_, dirs_ * hidden_, 1},
                                0, dtype_size(dt_), seq_ * batch_ * dirs_ * hidden_, &ok);
      if (!ok) return *why = "cuDNN's RNN: no copy for Y's layout", false;
    }
    return true;
  }

  void launch(const LaunchArgs& a) override {
    auto in = [&](size_t i) -> const void* {
      return i < a.inputs.size() && a.inputs[i].defined() ? a.inputs[i].data : nullptr;
    };
    auto out = [&](size_t i) -> void* {
      return i < a.outputs.size() && a.outputs[i].defined() ? a.outputs[i].data : nullptr;
    };
    // The workspace: cuDNN's temp space, y where it is not Y (y_direct_), the reserve.
    char* ws = static_cast<char*>(a.workspace);
    char* y_tmp = ws + align256(ws_bytes_);
    char* reserve = y_tmp + (y_direct_ ? 0 : align256(y_bytes_));
    void* y = y_direct_ ? out(0) : y_tmp;
    const bool lstm = cell_ == Cell::Lstm;
    DNN_CHECK(cudnnRNNForward(a.ctx.cudnn(), rnn_, CUDNN_FWD_MODE_INFERENCE,
                              static_cast<const int32_t*>(dev_lens_.get()), xd_, in(kX), yd_, y, hd_, in(kH0), out(1),
                              hd_, lstm ? in(kC0) : nullptr, lstm ? out(2) : nullptr, weights_.size(), weights_.get(),
                              ws_bytes_, ws, reserve_bytes_, reserve_bytes_ ? reserve : nullptr));
    if (!y_direct_ && out(0)) launch_strided_copy(copy_, y, out(0), a.stream);
  }

  size_t workspace_bytes() const override {
    return align256(ws_bytes_) + (y_direct_ ? 0 : align256(y_bytes_)) + reserve_bytes_;
  }
  bool reads_input(size_t i) const override { return i != kW && i != kR && i != kB && i != kP && i != kLens; }
  std::string kernel_name() const override {
    const char* cell = cell_ == Cell::Lstm ? "LSTM" : cell_ == Cell::Gru ? "GRU" : "RNN";
    return std::string("cuDNN RNN ") + cell + (dirs_ == 2 ? " bidirectional " : " ") +
           (dt_ == DType::Float16 ? "fp16" : "fp32") + ", hidden " + std::to_string(hidden_) + ", " +
           rnn_algo_name(algo_->algo);
  }

 private:
  static bool all_zero(const Tensor& t) {
    for (int64_t i = 0; i < t.numel(); ++i)
      if (t.as_double(i) != 0.0) return false;
    return true;
  }

  /// ONNX's W [dirs, gates·H, input], R [dirs, gates·H, H] and B [dirs, 2·gates·H] (input biases
  /// then recurrent ones) into cuDNN's weight space, gate by gate, in the storage type.
  void pack_weights(cudnnHandle_t h, const Tensor& w, const Tensor& r, const Tensor* b) {
    size_t bytes = 0;
    DNN_CHECK(cudnnGetRNNWeightSpaceSize(h, rnn_, &bytes));
    weights_ = DeviceBuffer(bytes, "an RNN's weights in cuDNN's layout");
    FUSEC_CUDA_CHECK(cudaMemset(weights_.get(), 0, bytes));
    cudnnTensorDescriptor_t md = nullptr, bd = nullptr;
    DNN_CHECK(cudnnCreateTensorDescriptor(&md));
    DNN_CHECK(cudnnCreateTensorDescriptor(&bd));
    std::vector<uint16_t> half;
    std::vector<float> single;
    // Elements [from, from + n) of t into cuDNN's address `to`.
    auto put = [&](const Tensor& t, int64_t from, int64_t n, void* to) {
      if (!to) internal_error("cuDNN's RNN weight space has no room for a gate it computes");
      if (dt_ == DType::Float16) {
        half.resize(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i)
          half[static_cast<size_t>(i)] = float_to_half(static_cast<float>(t.as_double(from + i)));
        FUSEC_CUDA_CHECK(cudaMemcpy(to, half.data(), half.size() * 2, cudaMemcpyHostToDevice));
      } else {
        single.resize(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) single[static_cast<size_t>(i)] = static_cast<float>(t.as_double(from + i));
        FUSEC_CUDA_CHECK(cudaMemcpy(to, single.data(), single.size() * 4, cudaMemcpyHostToDevice));
      }
    };
    const int64_t H = hidden_;
    try {
      for (int64_t d = 0; d < dirs_; ++d)
        for (int g = 0; g < gates_; ++g) {
          const int id = cudnn_gate(cell_, g);
          for (int rec = 0; rec < 2; ++rec) {  // the input matrix and bias, then the recurrent ones
            void* m = nullptr;
            void* bias = nullptr;
            DNN_CHECK(cudnnGetRNNWeightParams(h, rnn_, static_cast<int32_t>(d), bytes, weights_.get(),
                                              id + rec * static_cast<int>(gates_), md, &m, bd, &bias));
            const int64_t cols = rec ? H : input_;
            put(rec ? r : w, (d * gates_ * H + g * H) * cols, H * cols, m);
            if (b) put(*b, d * 2 * gates_ * H + rec * gates_ * H + g * H, H, bias);
          }
        }
    } catch (...) {
      cudnnDestroyTensorDescriptor(md);
      cudnnDestroyTensorDescriptor(bd);
      throw;
    }
    cudnnDestroyTensorDescriptor(md);
    cudnnDestroyTensorDescriptor(bd);
  }

  Cell cell_ = Cell::Lstm;
  DType dt_ = DType::Float32;
  bool batch_major_ = false, y_direct_ = true;
  int64_t seq_ = 0, batch_ = 0, input_ = 0, hidden_ = 0, dirs_ = 1, gates_ = 4;
  std::unique_ptr<RnnAlgo> algo_;
  cudnnRNNDescriptor_t rnn_ = nullptr;  // algo_'s
  cudnnRNNDataDescriptor_t xd_ = nullptr, yd_ = nullptr;
  cudnnTensorDescriptor_t hd_ = nullptr;
  cudnnDropoutDescriptor_t drop_ = nullptr;
  DeviceBuffer drop_states_, dev_lens_, weights_;
  size_t ws_bytes_ = 0, reserve_bytes_ = 0, y_bytes_ = 0;
  StridedCopyPlan copy_;
};

std::unique_ptr<CudaOp> make_recurrent(const PlanContext& c, std::string* why) {
  auto op = std::make_unique<RecurrentOp>();
  if (!op->plan(c, why)) return nullptr;
  return op;
}

}  // namespace

void register_recurrent_ops(CudaOpRegistry& r) {
  for (const char* op : {"RNN", "GRU", "LSTM"}) r.add(op, make_recurrent);
}

}  // namespace fusec::cuda
