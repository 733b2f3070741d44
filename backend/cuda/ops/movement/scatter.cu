// Scatter family kernels (scatter.cuh): the copy of data is one device-to-device memcpy (a widening
// to float32 in the workspace for half types under a reduction), then one thread per update element
// (per vector of a ScatterND slice, where the slices allow).
#include <type_traits>

#include "backend/cuda/core/check.h"
#include "backend/cuda/core/common.cuh"
#include "backend/cuda/core/convert.h"
#include "backend/cuda/ops/movement/scatter.cuh"

namespace fusec::cuda {

namespace {

bool aligned(const void* p, int bytes) { return reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(bytes) == 0; }

/// out = data (skipped where the executor gave the output data's own buffer).
void copy_data(const void* data, void* out, int64_t numel, DType t, cudaStream_t s) {
  if (data == out || numel == 0) return;
  FUSEC_CUDA_CHECK(cudaMemcpyAsync(out, data, static_cast<size_t>(numel) * dtype_size(t), cudaMemcpyDeviceToDevice, s));
}

/// old combined with v as the CPU reference combines them (std::max/std::min's comparisons, so a
/// NaN already there stays and a NaN update is passed over).
template <ScatterReduction R, typename T>
__device__ __forceinline__ T combine(T old, T v) {
  if constexpr (R == ScatterReduction::Add)
    return old + v;
  else if constexpr (R == ScatterReduction::Mul)
    return old * v;
  else if constexpr (R == ScatterReduction::Max)
    return old < v ? v : old;
  else
    return v < old ? v : old;
}

/// Writes v at dst (None), or combines it with what is there by an atomic: the hardware's own
/// where there is one, else a compare-and-swap loop over the element's bits.
template <ScatterReduction R, typename T>
__device__ __forceinline__ void put(T* dst, T v) {
  constexpr bool kInt = std::is_same_v<T, int32_t> || std::is_same_v<T, int64_t>;
  using Wide = std::conditional_t<sizeof(T) == 8, long long, int>;
  if constexpr (R == ScatterReduction::None) {
    *dst = v;
  } else if constexpr (R == ScatterReduction::Add && std::is_same_v<T, int64_t>) {
    atomicAdd(reinterpret_cast<unsigned long long*>(dst), static_cast<unsigned long long>(v));
  } else if constexpr (R == ScatterReduction::Add) {
    atomicAdd(dst, v);
  } else if constexpr (kInt && R == ScatterReduction::Max) {
    atomicMax(reinterpret_cast<Wide*>(dst), static_cast<Wide>(v));
  } else if constexpr (kInt && R == ScatterReduction::Min) {
    atomicMin(reinterpret_cast<Wide*>(dst), static_cast<Wide>(v));
  } else {
    using Bits = std::conditional_t<sizeof(T) == 8, unsigned long long, unsigned int>;
    static_assert(sizeof(T) == sizeof(Bits));
    Bits* at = reinterpret_cast<Bits*>(dst);
    Bits seen = *at, was;
    do {
      was = seen;
      T cur, next;
      memcpy(&cur, &was, sizeof(T));
      next = combine<R>(cur, v);
      Bits want;
      memcpy(&want, &next, sizeof(T));
      if (want == was) return;  // nothing changes (max/min passed over, a product by one)
      seen = atomicCAS(at, was, want);
    } while (seen != was);
  }
}

/// An update as the accumulator type: half types widen to float32, the rest are already T.
template <typename T, typename In>
__device__ __forceinline__ T widen(In v) {
  if constexpr (std::is_same_v<T, In>)
    return v;
  else
    return static_cast<T>(static_cast<float>(v));
}

// ---------------------------------------------------------------- ScatterND

struct ScatterNDArgs {
  int k;
  int64_t dims[kMoveMaxRank], strides[kMoveMaxRank];  // strides in units of U
  int64_t slice, n;                                   // in units of U
  DeviceErrorSite err;
};

template <typename T, typename In, ScatterReduction R>
__global__ void __launch_bounds__(kBlock)
    scatter_nd_kernel(const int64_t* __restrict__ idx, const In* __restrict__ upd, T* __restrict__ out,
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
    if (ok) put<R>(out + off + j, widen<T>(upd[i]));
  }
}

// ---------------------------------------------------------------- ScatterElements

struct ScatterElementsArgs {
  int rank;
  int64_t upd_dims[kMoveMaxRank], strides[kMoveMaxRank];
  int64_t axis_stride, axis_dim, n;
  DeviceErrorSite err;
};

template <typename T, typename In, typename I, ScatterReduction R>
__global__ void __launch_bounds__(kBlock)
    scatter_elements_kernel(const I* __restrict__ idx, const In* __restrict__ upd, T* __restrict__ out,
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
    put<R>(out + off + v * a.axis_stride, widen<T>(upd[i]));
  }
}

/// Calls f(T{}, In{}, R) for a reduction: T the type combined in (float32 for the half types), In the
/// updates' type, R a std::integral_constant of the reduction.
template <typename F>
void dispatch_reduction(DType t, ScatterReduction r, F&& f) {
  auto typed = [&](auto red) {
    switch (t) {
      case DType::Float32:
        return f(float{}, float{}, red);
      case DType::Float64:
        return f(double{}, double{}, red);
      case DType::Int32:
        return f(int32_t{}, int32_t{}, red);
      case DType::Int64:
        return f(int64_t{}, int64_t{}, red);
      case DType::Float16:
        return f(float{}, __half{}, red);
      case DType::BFloat16:
        return f(float{}, __nv_bfloat16{}, red);
      default:
        internal_error(std::string("scatter: a reduction planned on ") + dtype_name(t));
    }
  };
  using SR = ScatterReduction;
  switch (r) {
    case SR::Add:
      return typed(std::integral_constant<SR, SR::Add>{});
    case SR::Mul:
      return typed(std::integral_constant<SR, SR::Mul>{});
    case SR::Max:
      return typed(std::integral_constant<SR, SR::Max>{});
    case SR::Min:
      return typed(std::integral_constant<SR, SR::Min>{});
    case SR::None:
      internal_error("scatter: dispatch_reduction without a reduction");
  }
}

bool widened(DType t, ScatterReduction r) {
  return r != ScatterReduction::None && (t == DType::Float16 || t == DType::BFloat16);
}

/// Where the scatter combines: out itself, or for half types under a reduction the float32 copy of
/// data in the workspace (widened here, narrowed back by finish()).
void* begin(DType t, ScatterReduction r, const void* data, void* out, int64_t numel, void* ws, cudaStream_t s) {
  if (!widened(t, r)) {
    copy_data(data, out, numel, t, s);
    return out;
  }
  if (numel && !launch_convert_float(data, t, ws, DType::Float32, numel, s))
    internal_error("scatter: no conversion to float32");
  return ws;
}

void finish(DType t, ScatterReduction r, const void* acc, void* out, int64_t numel, cudaStream_t s) {
  if (widened(t, r) && numel && !launch_convert_float(acc, DType::Float32, out, t, numel, s))
    internal_error("scatter: no conversion from float32");
}

}  // namespace

const char* scatter_reduction_name(ScatterReduction r) {
  switch (r) {
    case ScatterReduction::None:
      return "none";
    case ScatterReduction::Add:
      return "add";
    case ScatterReduction::Mul:
      return "mul";
    case ScatterReduction::Max:
      return "max";
    case ScatterReduction::Min:
      return "min";
  }
  return "?";
}

size_t scatter_workspace_bytes(DType t, ScatterReduction r, int64_t data_numel) {
  return widened(t, r) ? static_cast<size_t>(data_numel) * sizeof(float) : 0;
}

namespace {}  // namespace

void launch_scatter_nd(const ScatterNDPlan& p, const void* data, const int64_t* indices, const void* updates, void* out,
                       cudaStream_t s, const DeviceErrorSite& err, void* workspace) {
  const int64_t total = p.count * p.slice;
  if (total == 0) return copy_data(data, out, p.data_numel, p.dtype, s);
  void* acc = begin(p.dtype, p.reduction, data, out, p.data_numel, workspace, s);
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
  auto go = [&](auto acc_tag, auto in_tag, auto red) {
    using T = decltype(acc_tag);
    using In = decltype(in_tag);
    scatter_nd_kernel<T, In, decltype(red)::value>
        <<<grid_for(a.n), kBlock, 0, s>>>(indices, static_cast<const In*>(updates), static_cast<T*>(acc), a);
    check_launch("scatter_nd_kernel");
  };
  if (p.reduction == ScatterReduction::None)
    dispatch_vec(vec,
                 [&](auto tag) { go(tag, tag, std::integral_constant<ScatterReduction, ScatterReduction::None>{}); });
  else
    dispatch_reduction(p.dtype, p.reduction, go);
  finish(p.dtype, p.reduction, acc, out, p.data_numel, s);
}

void launch_scatter_elements(const ScatterElementsPlan& p, const void* data, const void* indices, const void* updates,
                             void* out, cudaStream_t s, const DeviceErrorSite& err, void* workspace) {
  if (p.numel == 0) return copy_data(data, out, p.data_numel, p.dtype, s);
  void* acc = begin(p.dtype, p.reduction, data, out, p.data_numel, workspace, s);
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
  auto go = [&](auto acc_tag, auto in_tag, auto red) {
    using T = decltype(acc_tag);
    using In = decltype(in_tag);
    constexpr ScatterReduction R = decltype(red)::value;
    auto* u = static_cast<const In*>(updates);
    auto* y = static_cast<T*>(acc);
    if (p.index_type == DType::Int32)
      scatter_elements_kernel<T, In, int32_t, R>
          <<<grid_for(a.n), kBlock, 0, s>>>(static_cast<const int32_t*>(indices), u, y, a);
    else
      scatter_elements_kernel<T, In, int64_t, R>
          <<<grid_for(a.n), kBlock, 0, s>>>(static_cast<const int64_t*>(indices), u, y, a);
    check_launch("scatter_elements_kernel");
  };
  if (p.reduction == ScatterReduction::None)
    dispatch_by_size(
        p.dtype, [&](auto tag) { go(tag, tag, std::integral_constant<ScatterReduction, ScatterReduction::None>{}); });
  else
    dispatch_reduction(p.dtype, p.reduction, go);
  finish(p.dtype, p.reduction, acc, out, p.data_numel, s);
}

}  // namespace fusec::cuda
