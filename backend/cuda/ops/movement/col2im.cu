// Col2Im kernel (col2im.cuh).
#include <type_traits>

#include "backend/cuda/core/check.h"
#include "backend/cuda/core/common.cuh"
#include "backend/cuda/ops/movement/col2im.cuh"

namespace fusec::cuda {

namespace {

/// Sums in float (double for float64), as the reference does.
template <typename T>
using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename T>
__global__ void __launch_bounds__(kBlock) col2im_kernel(const T* __restrict__ x, T* __restrict__ y, const Col2ImPlan p) {
  const int64_t total = p.images * p.pixels;
  for (int64_t o = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; o < total; o += int64_t{gridDim.x} * blockDim.x) {
    const int64_t img = o / p.pixels;
    int64_t at[kCol2ImMaxDims];
    for (int64_t d = p.dims - 1, r = o - img * p.pixels; d >= 0; --d) {
      at[d] = r % p.image[d];
      r /= p.image[d];
    }
    const T* cols = x + img * p.per_block * p.positions;
    Acc<T> sum = 0;
    for (int64_t kk = 0; kk < p.per_block; ++kk) {
      int64_t rk = kk, l = 0, scale = 1;
      bool lands = true;
      for (int64_t d = p.dims - 1; d >= 0 && lands; --d) {
        const int64_t kd = rk % p.block[d];
        rk /= p.block[d];
        const int64_t from = at[d] + p.pad_begin[d] - kd * p.dilation[d];  // the block start, times stride
        lands = from >= 0 && from % p.stride[d] == 0 && from / p.stride[d] < p.grid[d];
        l += from / p.stride[d] * scale;
        scale *= p.grid[d];
      }
      if (lands) sum += static_cast<Acc<T>>(to_compute(cols[kk * p.positions + l]));
    }
    y[o] = from_compute<T>(sum);
  }
}

template <typename T>
void launch_typed(const Col2ImPlan& p, const void* x, void* y, cudaStream_t s) {
  col2im_kernel<T><<<grid_for(p.images * p.pixels), kBlock, 0, s>>>(static_cast<const T*>(x), static_cast<T*>(y), p);
  check_launch("col2im_kernel");
}

}  // namespace

bool launch_col2im(const Col2ImPlan& p, const void* x, void* y, cudaStream_t s) {
  if (p.images * p.pixels == 0) return true;
  switch (p.dtype) {
    case DType::Float32:
      launch_typed<float>(p, x, y, s);
      return true;
    case DType::Float16:
      launch_typed<__half>(p, x, y, s);
      return true;
    case DType::BFloat16:
      launch_typed<__nv_bfloat16>(p, x, y, s);
      return true;
    case DType::Float64:
      launch_typed<double>(p, x, y, s);
      return true;
    default:
      return false;
  }
}

}  // namespace fusec::cuda
