// ExpertMatMul's per-row kernels (expert_matmul.cuh), for what the grouped GEMM (expert_grouped.cu)
// does not take: past 4096 experts, or FUSEC_EXPERT_GROUPED=0. Each row is a matrix-vector product with its expert's
// matrix: the weights are read once per row that picked them, where the exported graph copied them per row first and
// then read the copy.
#include <algorithm>

#include "backend/cuda/core/check.h"
#include "backend/cuda/core/common.cuh"
#include "backend/cuda/ops/gemm/expert_matmul.cuh"

namespace fusec::cuda {

namespace {

constexpr int kWarps = kBlock / 32;

struct Args {
  int64_t rows, k, m, experts, repeat;
  DeviceErrorSite err;
};

/// Row s's expert, or -1 (reported once, by thread 0 of the row's first block) when out of range.
template <typename I>
__device__ __forceinline__ int64_t expert_of(const I* idx, int64_t s, const Args& a) {
  const int64_t given = static_cast<int64_t>(idx[s]);
  const int64_t e = given < 0 ? given + a.experts : given;
  if (e >= 0 && e < a.experts) return e;
  if (blockIdx.x == 0 && threadIdx.x == 0) report_device_error(a.err, kIndexOutOfAxis, s, given, a.experts);
  return -1;
}

/// W [E, M, K]: a warp a output, its lanes along the row of K.
template <typename T, typename I>
__global__ void __launch_bounds__(kBlock)
    expert_rows_kernel(const T* __restrict__ x, const T* __restrict__ w, const I* __restrict__ idx,
                       const T* __restrict__ b, T* __restrict__ y, const Args a) {
  const int lane = threadIdx.x & 31;
  const int64_t out = blockIdx.x * int64_t{kWarps} + (threadIdx.x >> 5);
  for (int64_t s = blockIdx.y; s < a.rows; s += gridDim.y) {
    const int64_t e = expert_of(idx, s, a);
    if (e < 0 || out >= a.m) continue;
    const T* wr = w + (e * a.m + out) * a.k;
    const T* xr = x + (s / a.repeat) * a.k;
    float acc = 0;
    for (int64_t q = lane; q < a.k; q += 32) acc += to_compute(wr[q]) * to_compute(xr[q]);
    acc = warp_sum(acc);
    if (lane == 0) y[s * a.m + out] = from_compute<T>(acc + (b ? to_compute(b[e * a.m + out]) : 0.0f));
  }
}

/// W [E, K, M]: a thread a output column, down the K rows.
template <typename T, typename I>
__global__ void __launch_bounds__(kBlock)
    expert_cols_kernel(const T* __restrict__ x, const T* __restrict__ w, const I* __restrict__ idx,
                       const T* __restrict__ b, T* __restrict__ y, const Args a) {
  const int64_t out = blockIdx.x * int64_t{kBlock} + threadIdx.x;
  for (int64_t s = blockIdx.y; s < a.rows; s += gridDim.y) {
    const int64_t e = expert_of(idx, s, a);
    if (e < 0 || out >= a.m) continue;
    const T* wc = w + e * a.k * a.m + out;
    const T* xr = x + (s / a.repeat) * a.k;
    float acc = 0;
    for (int64_t q = 0; q < a.k; ++q) acc += to_compute(xr[q]) * to_compute(wc[q * a.m]);
    y[s * a.m + out] = from_compute<T>(acc + (b ? to_compute(b[e * a.m + out]) : 0.0f));
  }
}

template <typename T, typename I>
void launch_typed(const ExpertMatMulPlan& p, const void* x, const void* w, const void* idx, const void* b, void* y,
                  cudaStream_t s, const Args& a) {
  const auto* xt = static_cast<const T*>(x);
  const auto* wt = static_cast<const T*>(w);
  const auto* it = static_cast<const I*>(idx);
  const auto* bt = static_cast<const T*>(b);
  auto* yt = static_cast<T*>(y);
  const unsigned along = static_cast<unsigned>(std::min<int64_t>(p.rows, 65535));
  if (p.trans) {
    const dim3 grid(static_cast<unsigned>((p.m + kWarps - 1) / kWarps), along);
    expert_rows_kernel<T, I><<<grid, kBlock, 0, s>>>(xt, wt, it, bt, yt, a);
    check_launch("expert_rows_kernel");
  } else {
    const dim3 grid(static_cast<unsigned>((p.m + kBlock - 1) / kBlock), along);
    expert_cols_kernel<T, I><<<grid, kBlock, 0, s>>>(xt, wt, it, bt, yt, a);
    check_launch("expert_cols_kernel");
  }
}

template <typename T>
void launch_indexed(const ExpertMatMulPlan& p, const void* x, const void* w, const void* idx, const void* b, void* y,
                    cudaStream_t s, const Args& a) {
  if (p.index_type == DType::Int32)
    launch_typed<T, int32_t>(p, x, w, idx, b, y, s, a);
  else
    launch_typed<T, int64_t>(p, x, w, idx, b, y, s, a);
}

}  // namespace

bool launch_expert_matmul(const ExpertMatMulPlan& p, const void* x, const void* w, const void* idx, const void* b,
                          void* y, cudaStream_t s, const DeviceErrorSite& err, void* workspace) {
  if (p.rows == 0 || p.m == 0) return true;
  if (launch_expert_matmul_grouped(p, x, w, idx, b, y, s, err, workspace)) return true;
  const Args a{p.rows, p.k, p.m, p.experts, p.repeat, err};
  switch (p.dtype) {
    case DType::Float32:
      launch_indexed<float>(p, x, w, idx, b, y, s, a);
      return true;
    case DType::Float16:
      launch_indexed<__half>(p, x, w, idx, b, y, s, a);
      return true;
    case DType::BFloat16:
      launch_indexed<__nv_bfloat16>(p, x, w, idx, b, y, s, a);
      return true;
    default:
      return false;
  }
}

}  // namespace fusec::cuda
