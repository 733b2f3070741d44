// The interface between the CUDA executor and the op families (one file per family, each with a
// `register_*_ops` function). At plan time a factory sees one node with static shapes and the
// values of its constant inputs, and returns a CudaOp that has done its one-time setup (library
// descriptors, algorithm choice, NVRTC module); at run time the executor calls launch() with
// device tensors whose addresses never change for a compiled plan, so a whole run can be
// captured into a CUDA graph.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/core/context.h"
#include "backend/cuda/core/device_error.h"
#include "backend/cuda/executor/layout_rule.h"
#include "ir/error.h"
#include "backend/precision.h"
#include "ir/op_schema.h"
#include "ir/tensor.h"

namespace fusec::cuda {

/// A device tensor: address, storage dtype (Float16 for a float32 value under --precision fp16)
/// and dims. Contiguous, row-major.
struct DTensor {
  void* data = nullptr;
  DType dtype = DType::Undefined;
  std::vector<int64_t> dims;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
  }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  bool defined() const { return dtype != DType::Undefined; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }
};

/// Static facts about one input or output of a node at plan time.
struct PlanValue {
  bool present = false;
  std::vector<int64_t> dims;
  DType dtype = DType::Undefined;       // device storage dtype
  DType onnx_dtype = DType::Undefined;  // the model's dtype
  const Tensor* constant = nullptr;     // host value when the input is an initializer
  // A 4-D activation stored channels-last. Its dims stay N, C, H, W, except for elementwise ops
  // planned channels-last (layout_rule.h), which see every dim in memory order, N, H, W, C.
  bool nhwc = false;
};

/// What a factory sees. Attribute getters (with schema defaults) come from NodeAttrs; fail()
/// throws BadInput naming the node.
class PlanContext : public NodeAttrs {
 public:
  PlanContext(const Node& node, const OpSchema& schema, int64_t opset, Precision precision, Context& ctx,
              std::vector<PlanValue> inputs, std::vector<PlanValue> outputs)
      : NodeAttrs(node, schema),
        opset_(opset),
        precision_(precision),
        ctx_(ctx),
        inputs_(std::move(inputs)),
        outputs_(std::move(outputs)) {}

  int64_t opset() const { return opset_; }
  Precision precision() const { return precision_; }
  Context& ctx() const { return ctx_; }
  size_t num_inputs() const { return inputs_.size(); }
  size_t num_outputs() const { return outputs_.size(); }
  bool has_input(size_t i) const { return i < inputs_.size() && inputs_[i].present; }
  bool has_output(size_t i) const { return i < outputs_.size() && outputs_[i].present; }
  const PlanValue& input(size_t i) const { return inputs_.at(i); }
  const PlanValue& output(size_t i) const { return outputs_.at(i); }
  const std::vector<int64_t>& in_dims(size_t i) const { return inputs_.at(i).dims; }
  const std::vector<int64_t>& out_dims(size_t i) const { return outputs_.at(i).dims; }
  DType in_dtype(size_t i) const { return inputs_.at(i).dtype; }
  DType out_dtype(size_t i) const { return outputs_.at(i).dtype; }
  /// Host value of input i when it is a constant (initializer), else nullptr.
  const Tensor* constant(size_t i) const { return has_input(i) ? inputs_[i].constant : nullptr; }
  /// Allow GEMMs/convs to use TF32 tensor cores for float32 data.
  bool allow_tf32() const { return precision_ == Precision::TF32; }

 private:
  int64_t opset_;
  Precision precision_;
  Context& ctx_;
  std::vector<PlanValue> inputs_, outputs_;
};

/// A launcher's false means the planner chose it for a case its kernels do not take (a dtype, a
/// rank): a bug in fusec, never the user's input. Every launcher's result goes through here or is
/// handled where it is called.
inline void require_launched(bool launched, const char* what) {
  if (!launched) internal_error(std::string(what) + ": the kernel was planned for a case it does not take");
}

struct LaunchArgs {
  const std::vector<DTensor>& inputs;   // undefined DTensor for an absent optional input
  const std::vector<DTensor>& outputs;  // undefined DTensor for an absent optional output
  Context& ctx;
  Stream stream;
  void* workspace;  // at least workspace_bytes() of the op
  /// Where a kernel reports bad data it finds (an index out of range, an integer division by
  /// zero) instead of answering silently: device_error.h.
  DeviceErrorSite error = {};
};

class CudaOp {
 public:
  virtual ~CudaOp() = default;
  /// Enqueues the node's work on a.stream. Must not synchronize, allocate or touch host memory
  /// (it may be captured into a CUDA graph).
  virtual void launch(const LaunchArgs& a) = 0;
  /// Scratch this op needs during launch (shared by all ops; reserved at plan time).
  virtual size_t workspace_bytes() const { return 0; }
  /// A short description of what runs (for `inspect`/`bench`/profiler): "cuDNN conv fp16 NHWC".
  virtual std::string kernel_name() const { return ""; }
  /// Whether the op's outputs may alias its first input (a view: Reshape and friends). The
  /// executor then skips launch() and points the output at the input's memory.
  virtual bool is_view() const { return false; }
  /// False for a constant input the op copied for itself at plan time (channels-last conv
  /// filters): the executor then does not upload the shared copy, and a.inputs[i].data is null.
  virtual bool reads_input(size_t i) const { return true; }
  /// Where the engine build's timing kept the node's parts (a library kernel plus an epilogue
  /// pass) over a candidate that runs the whole node in one kernel because the parts ran faster
  /// on this GPU: a sentence naming both and their times, for bench and inspect; else "".
  virtual std::string device_decision() const { return ""; }
};

/// Returns nullptr and sets *why when this node (this dtype, attribute, shape) has no CUDA kernel;
/// the executor then runs it on the CPU with copies, and says so.
using OpFactory = std::function<std::unique_ptr<CudaOp>(const PlanContext&, std::string* why)>;

class CudaOpRegistry {
 public:
  static const CudaOpRegistry& global();
  void add(const std::string& op_type, OpFactory f, const std::string& domain = "");
  const OpFactory* find(const std::string& domain, const std::string& op_type) const;
  /// (domain, op_type) of every factory, domain canonical (ir/op_key.h), sorted. Like a CPU
  /// kernel, a factory serves every opset its op's schemas cover (PlanContext::opset()).
  std::vector<std::pair<std::string, std::string>> ops() const;

  /// Channels-last variants: a factory that runs the node with its 4-D activations (input 0, a
  /// FusedConv residual, output 0) stored NHWC. The planner uses them for conv regions at
  /// fp16/bf16/tf32, where cuDNN's tensor-core kernels want NHWC. `kind` says whether the kernel
  /// is worth a layout change (Region: convs, window pools) or only runs where the input already
  /// is channels-last (FollowInput: reductions); layout_rule.h has the planner's rule.
  void add_channels_last(const std::string& op_type, OpFactory f, const std::string& domain = "",
                         ChannelsLast kind = ChannelsLast::Region);
  const OpFactory* find_channels_last(const std::string& domain, const std::string& op_type) const;
  /// None when the op has no channels-last factory.
  ChannelsLast channels_last_kind(const std::string& domain, const std::string& op_type) const;
  /// (domain, op_type) of every channels-last factory, as ops().
  std::vector<std::pair<std::string, std::string>> channels_last_ops() const;

 private:
  std::map<std::pair<std::string, std::string>, OpFactory> factories_, channels_last_;
  std::map<std::pair<std::string, std::string>, ChannelsLast> channels_last_kind_;
};

// One function per op family file in backend/cuda/.
void register_elementwise_ops(CudaOpRegistry& r);         // NVRTC: standalone elementwise + FusedElementwise
void register_gemm_ops(CudaOpRegistry& r);                // cuBLASLt: MatMul, Gemm, FusedMatMul, GatedMatMul
void register_conv_ops(CudaOpRegistry& r);                // cuDNN: Conv, FusedConv, ConvTranspose
void register_normalization_ops(CudaOpRegistry& r);       // LayerNorm family, BatchNorm, InstanceNorm, LpNorm
void register_softmax_ops(CudaOpRegistry& r);             // Softmax, LogSoftmax
void register_attention_ops(CudaOpRegistry& r);           // Attention (ONNX 23+ and ai.fusec), fused
void register_rotary_ops(CudaOpRegistry& r);              // ai.fusec Rotary (rotary position embedding)
void register_reduce_ops(CudaOpRegistry& r);              // Reduce* (either layout), ArgMax/ArgMin
void register_pool_ops(CudaOpRegistry& r);                // MaxPool, AveragePool, LpPool, Global*Pool (either layout)
void register_expert_matmul_ops(CudaOpRegistry& r);       // ai.fusec ExpertMatMul (mixtures of experts)
void register_squeeze_excite_ops(CudaOpRegistry& r);      // ai.fusec SqueezeExcite (either layout)
void register_movement_ops(CudaOpRegistry& r);            // Transpose, Concat, Split, Slice, Gather, Pad, ...
void register_view_ops(CudaOpRegistry& r);                // Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout
void register_recurrent_ops(CudaOpRegistry& r);           // cuDNN: RNN, GRU, LSTM
void register_grid_sample_ops(CudaOpRegistry& r);         // GridSample, AffineGrid

}  // namespace fusec::cuda
