// Channels-last MaxPool and AveragePool through cuDNN's pooling, for the planner's NHWC conv regions
// (a ResNet's stem pool sits between convs; going back to NCHW for it would cost two layout
// passes). The global pools are reductions in either layout (pool_op.cpp). Only what cuDNN expresses exactly: symmetric
// pads, no dilation, floor rounding (or a ceil_mode that rounds the same), no Indices output; the
// rest is refused, and the planner then runs the node in NCHW.
#include <cudnn.h>

#include "backend/cuda/core/check.h"
#include "backend/cuda/core/dnn_check.h"
#include "backend/cuda/core/cuda_op.h"
#include "ir/ops/conv_geometry.h"

namespace fusec::cuda {

namespace {

bool dnn_float(DType t, cudnnDataType_t* out) {
  switch (t) {
    case DType::Float32:
      *out = CUDNN_DATA_FLOAT;
      return true;
    case DType::Float16:
      *out = CUDNN_DATA_HALF;
      return true;
    case DType::BFloat16:
      *out = CUDNN_DATA_BFLOAT16;
      return true;
    default:
      return false;
  }
}

class NhwcPool : public CudaOp {
 public:
  ~NhwcPool() override {
    if (x_) cudnnDestroyTensorDescriptor(x_);
    if (y_) cudnnDestroyTensorDescriptor(y_);
    if (pool_) cudnnDestroyPoolingDescriptor(pool_);
  }

  bool plan(const PlanContext& c, bool max, std::string* why) {
    cudnnDataType_t t;
    const auto& xd = c.in_dims(0);
    const auto& yd = c.out_dims(0);
    if (!dnn_float(c.in_dtype(0), &t) || xd.size() != 4 || c.has_output(1)) {
      *why = "channels-last pooling needs a 4-D float input and no Indices output";
      return false;
    }
    int window[2], pads[2] = {0, 0}, strides[2] = {1, 1};
    std::vector<int64_t> kernel = c.attr_ints("kernel_shape");
    if (kernel.size() != 2) {
      *why = "kernel_shape must have 2 values";
      return false;
    }
    bool ceil = c.schema().find_attr("ceil_mode") && c.attr_int("ceil_mode") != 0;
    WindowGeometry g = window_geometry(c, {xd[2], xd[3]}, kernel, ceil);
    for (int i = 0; i < 2; ++i) {
      if (g.dilation[i] != 1 || g.pad_begin[i] != g.pad_end[i]) {
        *why = "dilated or asymmetric pooling";
        return false;
      }
      // cuDNN rounds down; a ceil_mode that adds a window is not expressible.
      if ((xd[2 + i] + 2 * g.pad_begin[i] - g.kernel[i]) / g.stride[i] + 1 != yd[2 + i]) {
        *why = "ceil_mode rounding";
        return false;
      }
      window[i] = static_cast<int>(g.kernel[i]);
      pads[i] = static_cast<int>(g.pad_begin[i]);
      strides[i] = static_cast<int>(g.stride[i]);
    }
    // A window reaching entirely into the padding has no input: cuDNN and the reference differ.
    for (int i = 0; i < 2; ++i)
      if (pads[i] >= window[i]) {
        *why = "pads as large as the window";
        return false;
      }
    cudnnPoolingMode_t mode = CUDNN_POOLING_MAX_DETERMINISTIC;
    if (!max) {
      bool include = c.schema().find_attr("count_include_pad") && c.attr_int("count_include_pad") != 0;
      mode = include ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
    }
    handle_ = c.ctx().cudnn();
    DNN_CHECK(cudnnCreateTensorDescriptor(&x_));
    DNN_CHECK(cudnnCreateTensorDescriptor(&y_));
    DNN_CHECK(cudnnCreatePoolingDescriptor(&pool_));
    DNN_CHECK(cudnnSetTensor4dDescriptor(x_, CUDNN_TENSOR_NHWC, t, static_cast<int>(xd[0]), static_cast<int>(xd[1]),
                                         static_cast<int>(xd[2]), static_cast<int>(xd[3])));
    DNN_CHECK(cudnnSetTensor4dDescriptor(y_, CUDNN_TENSOR_NHWC, t, static_cast<int>(yd[0]), static_cast<int>(yd[1]),
                                         static_cast<int>(yd[2]), static_cast<int>(yd[3])));
    DNN_CHECK(cudnnSetPoolingNdDescriptor(pool_, mode, CUDNN_PROPAGATE_NAN, 2, window, pads, strides));
    int out[4];
    DNN_CHECK(cudnnGetPoolingNdForwardOutputDim(pool_, x_, 4, out));
    for (int i = 0; i < 4; ++i)
      if (out[i] != yd[i]) {
        *why = "cuDNN's pooled shape differs from the model's";
        return false;
      }
    name_ = std::string("cuDNN ") + (max ? "max" : "average") + " pool NHWC";
    return true;
  }

  std::string kernel_name() const override { return name_; }

  void launch(const LaunchArgs& a) override {
    if (a.outputs[0].numel() == 0) return;
    float one = 1, zero = 0;
    DNN_CHECK(cudnnPoolingForward(handle_, pool_, &one, x_, a.inputs[0].data, &zero, y_, a.outputs[0].data));
  }

 private:
  cudnnHandle_t handle_ = nullptr;
  cudnnTensorDescriptor_t x_ = nullptr, y_ = nullptr;
  cudnnPoolingDescriptor_t pool_ = nullptr;
  std::string name_;
};

OpFactory pool_factory(bool max) {
  return [max](const PlanContext& c, std::string* why) -> std::unique_ptr<CudaOp> {
    auto op = std::make_unique<NhwcPool>();
    if (!op->plan(c, max, why)) return nullptr;
    return op;
  };
}

}  // namespace

void register_channels_last_pool_ops(CudaOpRegistry& r) {
  r.add_channels_last("MaxPool", pool_factory(true));
  r.add_channels_last("AveragePool", pool_factory(false));
}

}  // namespace fusec::cuda
