// CUDA entry point of ai.fusec SqueezeExcite (kernels in squeeze_excite.cu). The op owns the hidden
// sums its two kernels pass between them and the ticket that zeroes them after (zeroed once here;
// every launch leaves them zero).
// It runs in whichever layout X is stored: channels-last inside a conv region, NCHW otherwise.
#include <memory>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "backend/cuda/core/check.h"
#include "backend/cuda/core/cuda_op.h"
#include "backend/cuda/ops/pool/squeeze_excite.cuh"

namespace fusec::cuda {

namespace {

class SqueezeExciteOp : public CudaOp {
 public:
  SqueezeExciteOp(SqueezeExciteArgs a, DeviceBuffer state) : a_(a), state_(std::move(state)) {
    a_.state = state_.get();
  }
  void launch(const LaunchArgs& l) override {
    SqueezeExciteArgs a = a_;
    a.x = l.inputs[0].data;
    a.w1 = l.inputs[1].data;
    a.w2 = l.inputs[2].data;
    a.b1 = l.inputs.size() > 3 && l.inputs[3].defined() ? l.inputs[3].data : nullptr;
    a.b2 = l.inputs.size() > 4 && l.inputs[4].defined() ? l.inputs[4].data : nullptr;
    a.y = l.outputs[0].data;
    require_launched(launch_squeeze_excite(a, l.stream), "squeeze-excite");
  }
  std::string kernel_name() const override {
    return std::string("squeeze-excite (") + dtype_name(a_.dtype) + (a_.nhwc ? " NHWC" : " NCHW") + ", " +
           std::to_string(a_.squeeze_chunks) + "/" + std::to_string(a_.scale_chunks) + " pixel chunks, " +
           activation_name(a_.act.act) + " / " + activation_name(a_.gate.act) + ")";
  }

 private:
  SqueezeExciteArgs a_;
  DeviceBuffer state_;
};

std::unique_ptr<CudaOp> refuse(std::string* why, std::string reason) {
  if (why) *why = std::move(reason);
  return nullptr;
}

std::unique_ptr<CudaOp> make_squeeze_excite(const PlanContext& c, std::string* why, bool nhwc) {
  const DType t = c.in_dtype(0);
  if (t != DType::Float32 && t != DType::Float16 && t != DType::BFloat16)
    return refuse(why, std::string("no CUDA squeeze-excite for ") + dtype_name(t));
  for (size_t i = 1; i < 5; ++i)
    if (c.has_input(i) && c.in_dtype(i) != t) return refuse(why, "a weight is stored in another type than X");
  const std::vector<int64_t>& x = c.in_dims(0);
  const std::vector<int64_t>&w1 = c.in_dims(1), &w2 = c.in_dims(2);
  if (x.size() < 3 || w1.size() < 2 || w2.size() < 2 || w1[1] != x[1] || w2[0] != x[1] || w2[1] != w1[0])
    return refuse(why, "X and the weights are not [N, C, ...], [Cr, C, 1...] and [C, Cr, 1...]");
  if (nhwc && x.size() != 4) return refuse(why, "channels-last X must be 4-D");
  SqueezeExciteArgs a;
  a.dtype = t;
  a.nhwc = nhwc;
  a.n = x[0];
  a.c = x[1];
  a.cr = w1[0];
  a.hw = 1;
  for (size_t d = 2; d < x.size(); ++d) a.hw *= x[d];
  if (a.n < 1 || a.c < 1 || a.hw < 1) return refuse(why, "X is empty");
  if (a.n * a.c * a.hw >= (int64_t{1} << 31) - 1 || a.n > 65535) return refuse(why, "X holds 2^31 values or more");
  // The scaling kernel keeps the image's hidden units in shared memory.
  if (a.cr > 10240) return refuse(why, "more than 10240 squeezed channels");
  if (!parse_activation(c.attr_string("activation"), c.attr_floats("activation_params"), &a.act))
    return refuse(why, "unknown activation '" + c.attr_string("activation") + "'");
  if (!parse_activation(c.attr_string("gate"), c.attr_floats("gate_params"), &a.gate))
    return refuse(why, "unknown gate '" + c.attr_string("gate") + "'");
  squeeze_excite_chunks(a.n, a.c, a.hw, c.ctx().multiprocessors(), &a.squeeze_chunks, &a.scale_chunks);
  const size_t bytes = squeeze_excite_state_bytes(a.n, a.cr);
  DeviceBuffer state(bytes, "a squeeze-excite block's hidden sums");
  FUSEC_CUDA_CHECK(cudaMemset(state.get(), 0, bytes));
  return std::make_unique<SqueezeExciteOp>(a, std::move(state));
}

}  // namespace

void register_squeeze_excite_ops(CudaOpRegistry& r) {
  r.add(
      "SqueezeExcite", [](const PlanContext& c, std::string* why) { return make_squeeze_excite(c, why, false); },
      "ai.fusec");
  r.add_channels_last(
      "SqueezeExcite", [](const PlanContext& c, std::string* why) { return make_squeeze_excite(c, why, true); },
      "ai.fusec", ChannelsLast::FollowInput);
}

}  // namespace fusec::cuda
