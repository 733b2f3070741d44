// Col2Im (opset 18, torch's nn.Fold): the columns of each block position summed back into the
// image. One thread an output value gathers the columns that land on it, block offsets in
// ascending order, which is the order the CPU reference adds them in: at float32 the sums are
// the reference's bit for bit. No atomics, so no scratch and no dependence on scheduling.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "ir/dtype.h"

namespace fusec::cuda {

constexpr int kCol2ImMaxDims = 4;

struct Col2ImPlan {
  DType dtype = DType::Undefined;  // float32, float16, bfloat16, float64
  int dims = 0;                    // spatial dims of the image
  int64_t images = 0;              // N · C: one image a channel of a batch element
  int64_t image[kCol2ImMaxDims] = {}, block[kCol2ImMaxDims] = {}, grid[kCol2ImMaxDims] = {};
  int64_t stride[kCol2ImMaxDims] = {}, dilation[kCol2ImMaxDims] = {}, pad_begin[kCol2ImMaxDims] = {};
  int64_t pixels = 0, per_block = 0, positions = 0;  // products of image, block and grid
};

/// False for a dtype the kernel does not take.
[[nodiscard]] bool launch_col2im(const Col2ImPlan& p, const void* x, void* y, cudaStream_t s);

}  // namespace fusec::cuda
