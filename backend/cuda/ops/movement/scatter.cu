// Scatter family kernels (scatter.cuh): the copy of data is one device-to-device memcpy, then one
// thread per update element (per vector of a ScatterND slice, where the slices allow).
#include <type_traits>

#include "backend/cuda/core/check.h"
#include "backend/cuda/core/common.cuh"
#include "backend/cuda/ops/movement/scatter.cuh"

namespace fusec::cuda {

namespace {

bool aligned(const void* p, int bytes) { return reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(bytes) == 0; }

/// out = data (skipped where the executor gave the output data's own buffer).
void copy_data(const void* data, void* out, int64_t numel, DType t, cudaStream_t s) {
  if (data == out || numel == 0) return;
  FUSEC_CUDA_CHECK(cudaMemcpyAsync(out, data, static_cast<size_t>(numel) * dtype_size(t), cudaMemcpyDeviceToDevice, s));
}

/// Assigns or adds v at dst. U is a byte type for assignment, the element type for a sum.
template <typename U, bool kAdd>
__device__ __forceinline__ void put(U* dst, U v) {
  if constexpr (kAdd) {
    if constexpr (std::is_same_v<U, int64_t>)
      atomicAdd(reinterpret_cast<unsigned long long*>(dst), static_cast<unsigned long long>(v));
    else
      atomicAdd(dst, v);
  } else {
    *dst = v;
  }
}

// ---------------------------------------------------------------- ScatterND

struct ScatterNDArgs {
  int k;
  int64_t dims[kMoveMaxRank], strides[kMoveMaxRank];  // strides in units of U
  int64_t slice, n;                                   // in units of U
  DeviceErrorSite err;
};

template <typename U, bool kAdd>
__global__ void __launch_bounds__(kBlock)
    scatter_nd_kernel(const int64_t* __restrict__ idx, const U* __restrict__ upd, U* __restrict__ out,
                      const __grid_constant__ ScatterNDArgs a) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < a.n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / a.slice, j = i - t * a.slice;
    int64_t off = 0;
    bool ok = true;
    for (int d = 0; d < a.k; ++d) {
      const int64_t given = idx[t * a.k + d];
      const int64_t v = given < 0 ? given + a.dims[d] : given;
      if (v < 0 || v >= a.dims[d]) {
        if (j == 0) report_device_error(a.err, kIndexOutOfDim, t * a.k + d, given, a.dims[d]);
        ok = false;
        break;
      }
      off += v * a.strides[d];
    }
    if (ok) put<U, kAdd>(out + off + j, upd[i]);
  }
}

// ---------------------------------------------------------------- ScatterElements

struct ScatterElementsArgs {
  int rank;
  int64_t upd_dims[kMoveMaxRank], strides[kMoveMaxRank];
  int64_t axis_stride, axis_dim, n;
  DeviceErrorSite err;
};

template <typename U, typename I, bool kAdd>
__global__ void __launch_bounds__(kBlock)
    scatter_elements_kernel(const I* __restrict__ idx, const U* __restrict__ upd, U* __restrict__ out,
                            const __grid_constant__ ScatterElementsArgs a) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < a.n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t rem = i, off = 0;
#pragma unroll
    for (int d = kMoveMaxRank - 1; d >= 0; --d) {
      if (d >= a.rank) continue;
      const int64_t q = rem / a.upd_dims[d];
      off += (rem - q * a.upd_dims[d]) * a.strides[d];
      rem = q;
    }
    const int64_t given = static_cast<int64_t>(idx[i]);
    const int64_t v = given < 0 ? given + a.axis_dim : given;
    if (v < 0 || v >= a.axis_dim) {
      report_device_error(a.err, kIndexOutOfAxis, i, given, a.axis_dim);
      continue;
    }
    put<U, kAdd>(out + off + v * a.axis_stride, upd[i]);
  }
}

/// Calls f(T{}) with the element type of a sum over `t` (scatter_reduction has kept to float32,
/// int32 and int64).
template <typename F>
void dispatch_sum(DType t, F&& f) {
  if (t == DType::Float32)
    f(float{});
  else if (t == DType::Int32)
    f(int32_t{});
  else
    f(int64_t{});
}

}  // namespace

void launch_scatter_nd(const ScatterNDPlan& p, const void* data, const int64_t* indices, const void* updates, void* out,
                       cudaStream_t s, const DeviceErrorSite& err) {
  copy_data(data, out, p.data_numel, p.dtype, s);
  const int64_t total = p.count * p.slice;
  if (total == 0) return;
  const int esize = static_cast<int>(dtype_size(p.dtype));
  // Assignment moves whole slices as vectors where every offset allows (the strides of the indexed
  // dims are multiples of the slice).
  int vec = esize;
  if (p.reduction == ScatterReduction::None)
    for (int v : {16, 8, 4, 2}) {
      if (v <= esize) break;
      if ((p.slice * esize) % v == 0 && aligned(updates, v) && aligned(out, v)) {
        vec = v;
        break;
      }
    }
  const int64_t scale = vec / esize;
  ScatterNDArgs a{};
  a.k = p.k;
  for (int j = 0; j < p.k; ++j) {
    a.dims[j] = p.dims[j];
    a.strides[j] = p.strides[j] / scale;
  }
  a.slice = p.slice / scale;
  a.n = total / scale;
  a.err = err;
  auto go = [&](auto tag, auto add) {
    using U = decltype(tag);
    scatter_nd_kernel<U, decltype(add)::value>
        <<<grid_for(a.n), kBlock, 0, s>>>(indices, static_cast<const U*>(updates), static_cast<U*>(out), a);
    check_launch("scatter_nd_kernel");
  };
  if (p.reduction == ScatterReduction::None)
    dispatch_vec(vec, [&](auto tag) { go(tag, std::false_type{}); });
  else
    dispatch_sum(p.dtype, [&](auto tag) { go(tag, std::true_type{}); });
}

void launch_scatter_elements(const ScatterElementsPlan& p, const void* data, const void* indices, const void* updates,
                             void* out, cudaStream_t s, const DeviceErrorSite& err) {
  copy_data(data, out, p.data_numel, p.dtype, s);
  if (p.numel == 0) return;
  ScatterElementsArgs a{};
  a.rank = p.rank;
  for (int d = 0; d < p.rank; ++d) {
    a.upd_dims[d] = p.upd_dims[d];
    a.strides[d] = p.data_strides[d];
  }
  a.axis_stride = p.axis_stride;
  a.axis_dim = p.axis_dim;
  a.n = p.numel;
  a.err = err;
  auto go = [&](auto tag, auto add) {
    using U = decltype(tag);
    constexpr bool kAdd = decltype(add)::value;
    auto* u = static_cast<const U*>(updates);
    auto* y = static_cast<U*>(out);
    if (p.index_type == DType::Int32)
      scatter_elements_kernel<U, int32_t, kAdd>
          <<<grid_for(a.n), kBlock, 0, s>>>(static_cast<const int32_t*>(indices), u, y, a);
    else
      scatter_elements_kernel<U, int64_t, kAdd>
          <<<grid_for(a.n), kBlock, 0, s>>>(static_cast<const int64_t*>(indices), u, y, a);
    check_launch("scatter_elements_kernel");
  };
  if (p.reduction == ScatterReduction::None)
    dispatch_by_size(p.dtype, [&](auto tag) { go(tag, std::false_type{}); });
  else
    dispatch_sum(p.dtype, [&](auto tag) { go(tag, std::true_type{}); });
}

}  // namespace fusec::cuda
