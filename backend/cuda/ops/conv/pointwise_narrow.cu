#include "backend/cuda/core/common.cuh"
#include "backend/cuda/ops/conv/pointwise_narrow.cuh"
#include "backend/cuda/ops/elementwise/epilogue_act.cuh"

namespace fusec::cuda {

namespace {

constexpr int kBN = 64, kBK = 16;

// BM rows x 64 output channels a block, 4x4 outputs a thread, Cin in slices of 16. Both slices are
// stored k-major as floats, so that a thread reads its 4 rows and its 4 channels of one k as two
// 16-byte shared loads; the +4 keeps those aligned. Slots past Cin, Cout or the last row hold zeros,
// and each output's products are summed in k order, in fp32, as the reference sums them.
template <typename T, int BM>
__global__ void __launch_bounds__(BM * 4) pointwise_narrow_kernel(PointwiseNarrowArgs a) {
  constexpr int kThreads = BM * 4;
  __shared__ __align__(16) float xs[kBK][BM + 4];
  __shared__ __align__(16) float ws[kBK][kBN + 4];
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const int cin = static_cast<int>(a.cin), cout = static_cast<int>(a.cout);
  const int64_t rows = a.rows, m0 = int64_t(blockIdx.x) * BM;
  const int n0 = static_cast<int>(blockIdx.y) * kBN;
  const T* __restrict__ x = static_cast<const T*>(a.x);
  const T* __restrict__ w = static_cast<const T*>(a.w);
  float acc[4][4] = {};
  for (int k0 = 0; k0 < cin; k0 += kBK) {
    for (int e = tid; e < BM * kBK; e += kThreads) {
      const int r = e / kBK, k = k0 + e % kBK;
      const int64_t m = m0 + r;
      xs[e % kBK][r] = m < rows && k < cin ? to_compute(x[m * cin + k]) : 0.0f;
    }
    for (int e = tid; e < kBN * kBK; e += kThreads) {
      const int n = n0 + e / kBK, k = k0 + e % kBK;
      ws[e % kBK][e / kBK] = n < cout && k < cin ? to_compute(w[int64_t(n) * cin + k]) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kBK; ++k) {
      const float4 xv = *reinterpret_cast<const float4*>(&xs[k][ty * 4]);
      const float4 wv = *reinterpret_cast<const float4*>(&ws[k][tx * 4]);
      const float xr[4] = {xv.x, xv.y, xv.z, xv.w}, wr[4] = {wv.x, wv.y, wv.z, wv.w};
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(xr[i], wr[j], acc[i][j]);
    }
    __syncthreads();
  }
  const T* __restrict__ bias = static_cast<const T*>(a.bias);
  const T* __restrict__ z = static_cast<const T*>(a.z);
  T* __restrict__ y = static_cast<T*>(a.y);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t m = m0 + ty * 4 + i;
    if (m >= rows) break;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int n = n0 + tx * 4 + j;
      if (n >= cout) break;
      float v = acc[i][j];
      if (bias) v += to_compute(bias[n]);  // the reference's order: conv + bias, then the residual
      if (z) v += to_compute(z[m * cout + n]);
      y[m * cout + n] = from_compute<T>(apply_act(v, a.act));
    }
  }
}

template <typename T>
void launch_t(const PointwiseNarrowArgs& a, int config, cudaStream_t s) {
  const int bm = pointwise_narrow_block_rows(config);
  const dim3 grid(static_cast<unsigned>((a.rows + bm - 1) / bm), static_cast<unsigned>((a.cout + kBN - 1) / kBN));
  if (bm == 64)
    pointwise_narrow_kernel<T, 64><<<grid, 64 * 4, 0, s>>>(a);
  else
    pointwise_narrow_kernel<T, 32><<<grid, 32 * 4, 0, s>>>(a);
}

}  // namespace

bool launch_pointwise_narrow(const PointwiseNarrowArgs& a, int config, cudaStream_t s) {
  if (config < 0 || config >= kPointwiseNarrowConfigs || a.rows < 1 || a.cin < 1 || a.cout < 1 ||
      a.cin > kPointwiseNarrowMaxChannels || a.cout > kPointwiseNarrowMaxChannels || (a.rows + 31) / 32 > INT32_MAX)
    return false;
  switch (a.dtype) {
    case DType::Float32:
      launch_t<float>(a, config, s);
      return true;
    case DType::Float16:
      launch_t<__half>(a, config, s);
      return true;
    case DType::BFloat16:
      launch_t<__nv_bfloat16>(a, config, s);
      return true;
    default:
      return false;
  }
}

}  // namespace fusec::cuda
