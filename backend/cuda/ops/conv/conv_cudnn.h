// Conv, FusedConv and ConvTranspose through cuDNN 9's convolution API: the conv op's default
// route (conv_op.cpp chooses), and the only one for ConvTranspose, channels-last, fp16, bf16 and
// fp64 convs.
//
// The descriptors are built once at plan time, in steps the op interleaves with its own checks
// (set_tensors, own_weights for channels-last, set_convolution). cuDNN's heuristics list the
// algorithms whose math mode honours the precision (strict fp32 must not use TF32 tensor cores).
// A run is one cudnnConvolutionForward / BackwardData plus, when the node has a bias, a residual
// or an activation, one in-place epilogue pass (epilogue.cu) in the reference's order:
// y = act(conv(x, w) + b + z). Where cuDNN's fused call can do the epilogue (bias, residual and
// ReLU or nothing), the conv is cudnnConvolutionBiasActivationForward instead, tried once at plan
// time on scratch buffers. Only the fused call needs a bias tensor: a bias-free node gets [C] zeros
// made once at plan time.
// Layout: NCHW as the model has it, or NHWC for the planner's channels-last conv regions (fp16,
// bf16, tf32: cuDNN's tensor-core kernels want NHWC); then this route keeps its own copy of the
// weights in KRSC order. 1-D convs run as 2-D with H = 1.
#pragma once
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <string>
#include <vector>

#include "backend/cuda/core/cuda_op.h"
#include "backend/cuda/ops/conv/conv_route.h"

namespace fusec::cuda {

/// The most workspace a cuDNN algorithm may ask for; one that wants more is not used.
constexpr size_t kMaxConvWorkspace = 512u << 20;

class CudnnConv {
 public:
  /// `ep` is the op's epilogue: the op fills it before set_tensors; this route only reads it.
  explicit CudnnConv(const ConvEpilogue& ep) : ep_(ep) {}
  ~CudnnConv();
  CudnnConv(const CudnnConv&) = delete;
  CudnnConv& operator=(const CudnnConv&) = delete;

  /// cuDNN's data type for a storage dtype; false when cuDNN has none.
  static bool data_type(DType t, cudnnDataType_t* out);

  /// The x, y and w descriptors (for ConvTranspose the forward conv runs from the op's output,
  /// cuDNN's dx, to its input, dy), NHWC strides when nhwc.
  void set_tensors(const PlanContext& c, cudnnDataType_t t, bool transpose, bool nhwc);
  /// Channels-last: the route's own KRSC copy of the constant weights (the shared weight buffer's
  /// KCRS copy is then not uploaded: see owned_weights()).
  void own_weights(const PlanContext& c);
  /// The convolution descriptor: symmetric pads, strides, dilations (as cuDNN wants them, at
  /// least 2-D), the group count, FMA math at strict fp32.
  void set_convolution(const std::vector<int>& pads, const std::vector<int>& strides, const std::vector<int>& dil,
                       int group, bool strict);

  /// cuDNN's heuristics: the usable forward algorithms in their order into *candidates, the first
  /// one applied (or, for ConvTranspose, the first backward-data algorithm). False when none.
  bool heuristics(bool strict, std::vector<FwdChoice>* candidates);
  /// Each candidate's exact workspace (past kMaxConvWorkspace where cuDNN cannot say); returns the
  /// largest within the cap.
  size_t candidate_workspaces(std::vector<FwdChoice>* cands);

  /// Sets the route to run `ch` (ch.gemm and ch.igemm are not cuDNN's): algorithm, math mode,
  /// exact workspace, fused or not. False when this cuDNN does not take it.
  bool apply(const FwdChoice& ch);
  /// The applied algorithm, math mode and workspace, unfused.
  FwdChoice choice() const { return {fwd_algo_, math_, false, workspace_}; }
  /// Back to `ch` (from choice()) after trials that may have left another choice applied; the
  /// descriptor's math mode is set again by exact_workspace().
  void restore(const FwdChoice& ch);
  /// Another route runs the conv: not cuDNN's fused call.
  void unfuse() { fused_ = false; }
  /// The heuristics' choice made exact: its math mode set, the workspace asked for (the
  /// heuristics' figure can be an estimate).
  void exact_workspace();

  /// The tuning-cache key of this conv: "launch" for a timed choice, "choice" for the heuristics'
  /// untimed one. Empty when the descriptor cannot be read back.
  std::string choice_key(const PlanContext& c, const char* what, bool fma, bool may_fuse) const;
  /// A remembered untimed choice, applied when this cuDNN still takes the algorithm.
  bool recall_choice(const std::string& key, bool may_fuse);
  /// Remembers the untimed choice under `key`.
  void remember_choice(const std::string& key) const;

  /// The bias and activation descriptors the fused call needs (made once).
  bool fused_desc_ready(bool may_fuse);
  /// Tries the fused call for the applied algorithm (or implicit GEMM); keeps it when it works.
  void try_fused(const PlanContext& c);
  /// Drops the zero bias unless cuDNN's fused call runs without the node's bias.
  void keep_zero_bias_if_fused();
  /// Whether cudnnConvolutionBiasActivationForward may be tried at this rank: 4-D tensors (1-D and
  /// 2-D convs), and 5-D ones channels-last (the default; FUSEC_CHANNELS_LAST_3D=0 turns it off); an NCDHW 3-D conv
  /// keeps the conv + epilogue pass.
  bool fusable_rank() const { return rank_ == 4 || nhwc_; }

  /// The convolution as it launches: the fused call, or the conv (forward, or backward data for
  /// ConvTranspose) then the epilogue pass.
  cudnnStatus_t run(const void* x, const void* w, const void* b, const void* z, void* y, void* ws, cudaStream_t stream);
  /// Whether the fused call was recalled from the tuning cache and not yet called.
  bool fused_unchecked() const { return unchecked_fused_; }
  /// The first launch of a recalled fused call: true when it ran; false when this cuDNN refuses
  /// it (then the route runs unfused, and its kernel name changes).
  bool check_fused(const void* x, const void* w, const void* b, const void* z, void* y, void* ws, cudaStream_t stream);

  size_t workspace() const { return workspace_; }
  /// The channels-last KRSC weights, or null (the op's input 1 is read).
  const void* owned_weights() const { return own_weights_.get(); }
  /// Frees the KRSC weights when another route with its own copy runs the conv.
  void release_weights() { own_weights_ = DeviceBuffer(); }
  /// [channels] zeros for the fused call of a bias-free node, or null.
  const void* zero_bias() const { return zero_bias_.get(); }
  std::string kernel_name() const;

 private:
  void try_fused(const PlanContext& c, cudnnConvolutionFwdAlgo_t algo);

  const ConvEpilogue& ep_;
  bool transpose_ = false, nhwc_ = false, found_ = false, fused_ = false, strict_ = false;
  int rank_ = 4;                  // of the cuDNN tensors: 4 for 1-D and 2-D convs, 5 for 3-D
  bool unchecked_fused_ = false;  // fused_ from the tuning cache, not yet called
  DeviceBuffer own_weights_;      // NHWC: KRSC weights
  cudnnTensorDescriptor_t bias_ = nullptr;
  DeviceBuffer zero_bias_;  // [channels] zeros: the fused call's bias when the node has none
  cudnnActivationDescriptor_t act_desc_ = nullptr;
  cudnnConvolutionFwdAlgo_t fused_algo_{};
  cudnnHandle_t handle_ = nullptr;
  cudnnTensorDescriptor_t x_ = nullptr, y_ = nullptr;
  cudnnFilterDescriptor_t w_ = nullptr;
  cudnnConvolutionDescriptor_t conv_ = nullptr;
  cudnnConvolutionFwdAlgo_t fwd_algo_{};
  cudnnConvolutionBwdDataAlgo_t bwd_algo_{};
  cudnnMathType_t math_ = CUDNN_DEFAULT_MATH;
  size_t workspace_ = 0;
};

}  // namespace fusec::cuda
