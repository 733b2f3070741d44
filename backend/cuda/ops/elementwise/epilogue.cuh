// Epilogues the libraries cannot fuse, applied in place after a cuBLASLt GEMM or a cuDNN conv:
// the ai.fusec activations (docs/ops.md) and, for convs, a residual add. One pass over memory.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "ir/dtype.h"

namespace fusec::cuda {

enum class Act : int { None, Relu, LeakyRelu, Clip, Sigmoid, Tanh, HardSigmoid, HardSwish, SiLU, Gelu, GeluTanh };

struct ActParams {
  Act act = Act::None;
  float p0 = 0, p1 = 0;
};

/// Parses a FusedConv/FusedMatMul `activation` + `activation_params` pair (CPU defaults).
/// Returns false for an unknown name.
bool parse_activation(const std::string& name, const std::vector<float>& params, ActParams* out);

/// The `activation` name of `a` ("none" for Act::None), for kernel names.
const char* activation_name(Act a);

/// y[i] = act(y[i] + bias[(i / inner) % channels] + z[i]) for a float storage type, where bias and
/// z may be null (then 0). NCHW conv bias: inner = H*W; row bias: inner = 1, channels = N.
/// Returns false for other dtypes.
[[nodiscard]] bool launch_epilogue(void* y, const void* z, DType t, int64_t n, ActParams act, cudaStream_t s,
                                   const void* bias = nullptr, int64_t channels = 1, int64_t inner = 1);

}  // namespace fusec::cuda
