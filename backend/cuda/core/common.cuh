// Shared device-side helpers for the op family .cu files: float conversion for the storage types
// (compute is always float32, or double for float64), dtype dispatch, launch sizing, and the
// fixed-rank index helper used for broadcasting and strided movement.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/core/check.h"
#include "backend/dispatch_bytes.h"
#include "ir/dtype.h"
#include "ir/switches.h"

namespace fusec::cuda {

// ---- storage <-> compute conversion ----
template <typename T>
struct Compute {
  using type = float;
};
template <>
struct Compute<double> {
  using type = double;
};

/// A uniform value in [-1, 1) from a cheap integer hash of (i, seed): timing data for the tuners,
/// random enough that an activation's branches diverge as on real data, and the same every run.
__device__ __forceinline__ float hashed_uniform(int64_t i, uint32_t seed) {
  uint32_t h = static_cast<uint32_t>(i) * 0x9E3779B1u ^ seed;
  h ^= h >> 16, h *= 0x7FEB352Du, h ^= h >> 15, h *= 0x846CA68Bu, h ^= h >> 16;
  return static_cast<float>(h >> 8) * (2.0f / 16777216.0f) - 1.0f;
}

__device__ __forceinline__ float to_compute(float v) { return v; }
__device__ __forceinline__ double to_compute(double v) { return v; }
__device__ __forceinline__ float to_compute(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_compute(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T from_compute(float v);
template <>
__device__ __forceinline__ float from_compute<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ double from_compute<double>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half from_compute<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_compute<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <typename T>
__device__ __forceinline__ T from_compute(double v) {
  return from_compute<T>(static_cast<float>(v));
}
template <>
__device__ __forceinline__ double from_compute<double>(double v) {
  return v;
}

/// Calls f(T{}) for the floating storage types; returns false (no call) for any other dtype.
template <typename F>
bool dispatch_float_storage(DType t, F&& f) {
  switch (t) {
    case DType::Float32:
      f(float{});
      return true;
    case DType::Float16:
      f(__half{});
      return true;
    case DType::BFloat16:
      f(__nv_bfloat16{});
      return true;
    case DType::Float64:
      f(double{});
      return true;
    default:
      return false;
  }
}

/// Calls f(T{}) with an unsigned integer type of the same size as the dtype: for ops that only
/// move bytes (Transpose, Concat, Gather...). Returns false for sizes it does not handle.
template <typename F>
bool dispatch_by_size(DType t, F&& f) {
  return dispatch_bytes(dtype_size(t), std::forward<F>(f));
}

/// Calls f(U{}) with U a type of exactly `bytes` bytes, a vector type for 8 and 16 (uint2, uint4:
/// one 8- or 16-byte access): for kernels that move whole rows of elements at a time.
template <typename F>
void dispatch_vec(int bytes, F&& f) {
  switch (bytes) {
    case 1:
      f(uint8_t{});
      break;
    case 2:
      f(uint16_t{});
      break;
    case 4:
      f(uint32_t{});
      break;
    case 8:
      f(uint2{});
      break;
    case 16:
      f(uint4{});
      break;
    default:
      internal_error("no vector type of " + std::to_string(bytes) + " bytes");
  }
}

/// V values of T for one vector access: p must be sizeof(T)·V aligned.
template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

/// V values of T at p, as floats, in one access.
template <typename T, int V>
__device__ __forceinline__ void load_vec(const T* p, float (&o)[V]) {
  const Pack<T, V> pk = *reinterpret_cast<const Pack<T, V>*>(p);
#pragma unroll
  for (int i = 0; i < V; ++i) o[i] = to_compute(pk.v[i]);
}

/// V floats rounded to T, stored at p in one access.
template <typename T, int V>
__device__ __forceinline__ void store_vec(T* p, const float (&o)[V]) {
  Pack<T, V> pk;
#pragma unroll
  for (int i = 0; i < V; ++i) pk.v[i] = from_compute<T>(o[i]);
  *reinterpret_cast<Pack<T, V>*>(p) = pk;
}

// ---- warp reductions ----

/// The sum of v over the warp's 32 lanes, in every lane (a butterfly: every lane adds in the same
/// order, so all 32 hold the same bits). Every lane must take part.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/// 16 bytes from global src into shared memory (address `smem` in the shared window) with cp.async,
/// through L2 only. With !valid nothing is read, whatever src is, and the 16 bytes are zeros.
__device__ __forceinline__ void cp_async16(uint32_t smem, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async16(void* smem, const void* src, bool valid) {
  cp_async16(static_cast<uint32_t>(__cvta_generic_to_shared(smem)), src, valid);
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
/// Waits until at most N of this thread's committed cp.async groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/// Whether p may be read or written 16 bytes (a float4) at a time.
inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
/// Whether p is a multiple of `bytes` (vector loads and stores of that width).
inline bool aligned_to(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// ---- launch sizing ----
constexpr int kBlock = 256;
inline unsigned grid_for(int64_t n, int block = kBlock, int64_t max_blocks = 65535LL * 32) {
  int64_t g = (n + block - 1) / block;
  if (g < 1) g = 1;
  return static_cast<unsigned>(g > max_blocks ? max_blocks : g);
}

/// Checks the launch that was just enqueued (configuration errors surface here).
inline void check_launch(const char* kernel) {
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) throw_cuda_error(static_cast<int>(err), kernel, __FILE__, __LINE__);
}

// ---- programmatic dependent launch (sm_90) ----
// In a CUDA graph, a kernel that follows another normally starts only after the first has
// finished and its grid is torn down: about a microsecond of idle GPU per boundary. A kernel
// launched with launch_pdl may instead be scheduled before its predecessor has ended, and waits
// in pdl_wait_then_release until the predecessor has completed and its writes are visible. So
// every kernel launched with launch_pdl calls pdl_wait_then_release before it touches global
// memory (a no-op in a kernel launched the ordinary way). FUSEC_PDL=0 launches them the ordinary way.
// Only the short memory-bound kernels use it (row normalizations, the activation epilogue): the
// seed MLP at strict fp32 ran faster with it. Given to our SGEMM and the fp32 attention kernel as
// well, it made BERT-base slower: in profile traces those kernels ran longer from their
// predecessor's end.

/// Waits until the grids this one depends on have completed (their writes visible), then lets
/// the next kernel, if launched with launch_pdl, be scheduled.
__device__ __forceinline__ void pdl_wait_then_release() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

inline bool pdl_enabled() {
  static const bool on = [] {
    const char* e = env_switch("FUSEC_PDL");
    return !(e && std::string(e) == "0");
  }();
  return on;
}

/// kernel<<<grid, block, smem, s>>>(args...) as a programmatic dependent launch (see above);
/// throws on a refused launch, naming `what`.
template <typename... P, typename... A>
void launch_pdl(const char* what, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                A&&... args) {
  cudaLaunchAttribute pdl;
  pdl.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  pdl.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid, cfg.blockDim = block, cfg.dynamicSmemBytes = smem, cfg.stream = s;
  cfg.attrs = &pdl, cfg.numAttrs = pdl_enabled() ? 1 : 0;
  const cudaError_t err = cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...);
  if (err != cudaSuccess) throw_cuda_error(static_cast<int>(err), what, __FILE__, __LINE__);
}

// ---- fixed-rank indexing ----
constexpr int kMaxRank = 8;

/// Dims and per-input strides padded to kMaxRank, passed by value to kernels.
struct IndexMap {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t strides[kMaxRank] = {};  // input strides aligned to the output dims (0 = broadcast)
};

/// Strides of `in_dims` broadcast to `out_dims` (right-aligned, 0 where the input has size 1).
IndexMap broadcast_map(const std::vector<int64_t>& out_dims, const std::vector<int64_t>& in_dims);

/// Offset into the input for linear output index i.
__device__ __forceinline__ int64_t map_offset(const IndexMap& m, int64_t i) {
  int64_t off = 0;
#pragma unroll
  for (int d = kMaxRank - 1; d >= 0; --d) {
    if (d >= m.rank) continue;
    int64_t q = i / m.dims[d];
    off += (i - q * m.dims[d]) * m.strides[d];
    i = q;
  }
  return off;
}

}  // namespace fusec::cuda
