// Float storage conversion at the precision boundary (graph inputs and outputs, CPU fallback
// nodes), and the broadcast index map shared by the kernels.
#include "backend/cuda/core/common.cuh"
#include "backend/cuda/core/convert.h"
#include "backend/cuda/core/constant_upload.h"

namespace fusec::cuda {

namespace {
template <typename S, typename D>
__global__ void convert_kernel(const S* __restrict__ src, D* __restrict__ dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = from_compute<D>(to_compute(src[i]));
}

// V elements a thread and access (a 16-byte access on the narrower side), then the n % V last
// elements one a thread: one element a thread moved a model's fp32 output at half the copy rate
// (Llama's [16, 128, 2048]: 11 us).
template <typename S, typename D, int V>
__global__ void convert_vec_kernel(const S* __restrict__ src, D* __restrict__ dst, int64_t n) {
  const int64_t chunks = n / V;
  const int64_t first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  for (int64_t i = first; i < chunks; i += int64_t(gridDim.x) * blockDim.x) {
    float v[V];
    load_vec<S, V>(src + i * V, v);
    store_vec<D, V>(dst + i * V, v);
  }
  const int64_t t = chunks * V + first;
  if (t < n) dst[t] = from_compute<D>(to_compute(src[t]));
}

template <typename S, typename D>
void launch_typed(const S* src, D* dst, int64_t n, cudaStream_t s) {
  constexpr int V = 16 / (sizeof(S) < sizeof(D) ? sizeof(S) : sizeof(D));
  const auto aligned = [](const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; };
  // float64 keeps its own scalar path: the vector path computes in float.
  if constexpr (sizeof(S) <= 4 && sizeof(D) <= 4) {
    if (n >= V && aligned(src, V * sizeof(S)) && aligned(dst, V * sizeof(D))) {
      convert_vec_kernel<S, D, V><<<grid_for(n / V), kBlock, 0, s>>>(src, dst, n);
      check_launch("convert_vec_kernel");
      return;
    }
  }
  convert_kernel<S, D><<<grid_for(n), kBlock, 0, s>>>(src, dst, n);
  check_launch("convert_kernel");
}
}  // namespace

bool launch_convert_float(const void* src, DType src_t, void* dst, DType dst_t, int64_t n, cudaStream_t s) {
  if (n == 0) return true;
  bool ok = false;
  dispatch_float_storage(src_t, [&](auto s_tag) {
    using S = decltype(s_tag);
    ok = dispatch_float_storage(dst_t, [&](auto d_tag) {
      using D = decltype(d_tag);
      launch_typed<S, D>(static_cast<const S*>(src), static_cast<D*>(dst), n, s);
    });
  });
  return ok;
}

namespace {
/// Constants arrive as float32 on the host. fp16 saturates finite values at ±65504 instead of
/// making them infinite: exporters write "minus infinity" attention masks as -3.4e38, and 0 · -inf
/// would turn a fully visible mask into NaN. With rs > 0
/// the source is [K, C, RS] and the destination [K, RS, C] (channels-last conv filters).
template <typename D>
__global__ void constant_from_f32_kernel(const float* __restrict__ src, D* __restrict__ dst, int64_t n, int64_t c,
                                         int64_t rs, bool saturate) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t from = i;
    if (rs > 0) {  // i = (k * RS + r) * C + ch
      const int64_t ch = i % c, kr = i / c;
      from = ((kr / rs) * c + ch) * rs + kr % rs;
    }
    float v = src[from];
    if (saturate && isfinite(v)) v = fminf(65504.0f, fmaxf(-65504.0f, v));
    dst[i] = from_compute<D>(v);
  }
}
}  // namespace

bool launch_constant_from_f32(const float* src, void* dst, DType dst_t, int64_t n, int64_t c, int64_t rs,
                              cudaStream_t s) {
  if (n == 0) return true;
  if (rs > 0 && (c <= 0 || n % (c * rs) != 0)) return false;
  return dispatch_float_storage(dst_t, [&](auto d_tag) {
    using D = decltype(d_tag);
    constant_from_f32_kernel<D>
        <<<grid_for(n), kBlock, 0, s>>>(src, static_cast<D*>(dst), n, c, rs, dst_t == DType::Float16);
    check_launch("constant_from_f32_kernel");
  });
}

IndexMap broadcast_map(const std::vector<int64_t>& out_dims, const std::vector<int64_t>& in_dims) {
  IndexMap m;
  m.rank = static_cast<int>(out_dims.size());
  if (m.rank > kMaxRank)
    internal_error("broadcast_map: rank " + std::to_string(m.rank) + " exceeds " + std::to_string(kMaxRank));
  int64_t stride = 1;
  const int off = m.rank - static_cast<int>(in_dims.size());
  for (int d = m.rank - 1; d >= 0; --d) {
    m.dims[d] = out_dims[d];
    int k = d - off;
    if (k >= 0 && in_dims[k] != 1) {
      m.strides[d] = stride;
      stride *= in_dims[k];
    } else {
      m.strides[d] = 0;
      if (k >= 0) stride *= in_dims[k];
    }
  }
  return m;
}

}  // namespace fusec::cuda
