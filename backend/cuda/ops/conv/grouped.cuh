// A direct grouped convolution over channels-last (NHWC) memory, with the FusedConv epilogue:
//
//   y[n, oh, ow, g·Kg + k] = act( Σ_{r,s,c} x[n, oh·sh − pt + r·dh, ow·sw − pl + s·dw, g·Cg + c]
//                                 · w[g, r, s, c, k] + b[g·Kg + k] + z[n, oh, ow, g·Kg + k] )
//
// for a 2-D conv of G groups, each Cg input and Kg output channels wide (1 < G < C: the depthwise
// kind has its own kernels), fp32/fp16/bf16 storage with fp32 accumulation. Two kinds of kernel:
// FMA (grouped.cu, every storage type) and tensor-core (grouped_mma.cu, fp16/bf16, groups of 8k
// channels). Each reads the route's own copy of the weights, made once at plan time from ONNX's
// [G·Kg][Cg][R][S] (grouped_route.cpp): fp32 in [G][R][S][Cg][Kg] order for the FMA kernels, the
// storage type in [G][Kg][R·S·Cg] for the tensor-core one.
//
// Why: cuDNN runs a channels-last grouped conv whose groups are not a multiple of its tile's
// channels (RegNetX-1.6GF's 24-wide groups) as a layout transform of the input, of the filter
// and of the output around its kernel: 72 transforms took 1.51 ms of RegNetX-1.6GF's 2.35 ms of
// device time (fusec profile, H200), where the convs themselves took about 0.3 ms.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/ops/elementwise/epilogue.cuh"
#include "ir/dtype.h"

namespace fusec::cuda {

struct GroupedShape {
  int64_t batch = 0, h = 0, w = 0;  // x: [batch, h, w, groups·cg]
  int64_t groups = 0, cg = 0, kg = 0;
  int64_t oh = 0, ow = 0;  // y: [batch, oh, ow, groups·kg]
  int64_t kh = 0, kw = 0;
  int64_t stride_h = 1, stride_w = 1, dil_h = 1, dil_w = 1;
  int64_t pad_top = 0, pad_left = 0;
};

struct GroupedArgs {
  GroupedShape s;
  DType dtype = DType::Undefined;  // storage of x, y, z and the bias
  const void* x = nullptr;
  const float* w = nullptr;     // [groups][kh][kw][cg][kg] float32: the FMA configurations'
  const void* w_mma = nullptr;  // [groups][kg][grouped_mma_k_stride] of dtype: the tensor-core one's
  const void* bias = nullptr;  // [groups·kg] or null
  const void* z = nullptr;     // like y, or null
  void* y = nullptr;
  ActParams act;
};

/// Why no configuration takes the conv's sizes (dims past 32 bits, strides past 4), or null.
const char* grouped_shape_refusal(const GroupedShape& s);
/// Why the FMA configurations do not take the conv (a dtype, a group width that is not a multiple of 4
/// output channels, an input patch past shared memory, dims past 32 bits), or null.
const char* grouped_refusal(const GroupedShape& s, DType dtype);

/// The kernel's configurations: 0 computes 2 pixels a thread, 1 computes 4 (more FMAs per weight
/// read, fewer threads a block), 2 is the tensor-core kernel (grouped_mma.cu). Their numbering is
/// stable within a build of fusec.
int grouped_config_count();
const char* grouped_config_name(int config);
constexpr int kGroupedMmaConfig = 2;
/// Why `config` does not take the conv, or null (grouped_refusal for the FMA configurations).
const char* grouped_config_refusal(int config, const GroupedShape& s, DType dtype);

/// The tensor-core configuration (grouped_mma.cu): an implicit GEMM per group on mma.sync, fp16 or
/// bf16 operands and fp32 accumulators, for groups of 8k input and 8k output channels.
const char* grouped_mma_refusal(const GroupedShape& s, DType dtype);
/// Its weights' row length: a group's output channel holds its R·S·Cg taps in (r, s, c) order,
/// zeros after them up to this multiple of 16.
int64_t grouped_mma_k_stride(const GroupedShape& s);
/// launch_grouped's configuration kGroupedMmaConfig (a.w_mma).
[[nodiscard]] bool launch_grouped_mma(const GroupedArgs& a, cudaStream_t st);

/// Runs the conv with `config` on stream st; false, launching nothing, where the kernel does not
/// take the shape, the dtype or the tensors' alignment.
[[nodiscard]] bool launch_grouped(const GroupedArgs& a, int config, cudaStream_t st);

}  // namespace fusec::cuda
