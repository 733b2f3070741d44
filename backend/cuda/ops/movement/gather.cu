// Gather family kernels. An index outside [-dim, dim) writes a zero instead of reading outside the
// data, and is reported through the executable's device error record (device_error.h), which the
// executor turns into the CPU reference's error after the run.
#include "backend/cuda/core/common.cuh"
#include "backend/cuda/ops/movement/gather.cuh"

namespace fusec::cuda {

namespace {

template <typename F>
void dispatch_index(DType t, F&& f) {
  if (t == DType::Int32)
    f(int32_t{});
  else
    f(int64_t{});
}

bool aligned(const void* p, int bytes) { return reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(bytes) == 0; }

// ---------------------------------------------------------------- Gather

struct GatherAxisArgs {
  int64_t dim, nidx, inner, n;  // inner in vectors
  FastDiv f_inner, f_nidx;
  DeviceErrorSite err;
};

// Neighbouring threads copy neighbouring vectors of one gathered row, so an embedding lookup
// ([vocab, hidden] rows) moves whole rows in 16-byte pieces.
template <typename U, typename I, bool kNarrow>
__global__ void __launch_bounds__(kBlock)
    gather_axis_kernel(const U* __restrict__ src, const I* __restrict__ idx, U* __restrict__ dst,
                       const __grid_constant__ GatherAxisArgs a) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < a.n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t t, o, q;
    if constexpr (kNarrow) {
      const uint32_t tt = a.f_inner.div(static_cast<uint32_t>(i));
      const uint32_t oo = a.f_nidx.div(tt);
      t = tt;
      o = oo;
      q = int64_t(tt) - int64_t(oo) * a.nidx;
    } else {
      t = i / a.inner;
      o = t / a.nidx;
      q = t - o * a.nidx;
    }
    const int64_t j = i - t * a.inner;
    const int64_t given = static_cast<int64_t>(idx[q]);
    const int64_t v = given < 0 ? given + a.dim : given;
    const bool ok = v >= 0 && v < a.dim;
    dst[i] = ok ? src[(o * a.dim + v) * a.inner + j] : U{};
    if (!ok) report_device_error(a.err, kIndexOutOfAxis, q, given, a.dim);
  }
}

// ---------------------------------------------------------------- GatherElements

struct GatherElementsArgs {
  int rank;
  int64_t out_dims[kMoveMaxRank], strides[kMoveMaxRank];
  FastDiv fd[kMoveMaxRank];
  int64_t axis_stride, axis_dim, n;
  DeviceErrorSite err;
};

template <typename U, typename I, bool kNarrow>
__global__ void __launch_bounds__(kBlock)
    gather_elements_kernel(const U* __restrict__ src, const I* __restrict__ idx, U* __restrict__ dst,
                           const __grid_constant__ GatherElementsArgs a) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < a.n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t rem = i, off = 0;
#pragma unroll
    for (int d = kMoveMaxRank - 1; d >= 0; --d) {
      if (d >= a.rank) continue;
      int64_t q;
      if constexpr (kNarrow)
        q = a.fd[d].div(static_cast<uint32_t>(rem));
      else
        q = rem / a.out_dims[d];
      off += (rem - q * a.out_dims[d]) * a.strides[d];
      rem = q;
    }
    const int64_t given = static_cast<int64_t>(idx[i]);
    const int64_t v = given < 0 ? given + a.axis_dim : given;
    const bool ok = v >= 0 && v < a.axis_dim;
    dst[i] = ok ? src[off + v * a.axis_stride] : U{};
    if (!ok) report_device_error(a.err, kIndexOutOfAxis, i, given, a.axis_dim);
  }
}

// ---------------------------------------------------------------- GatherND

struct GatherNDArgs {
  int k;
  int64_t dims[kMoveMaxRank], strides[kMoveMaxRank];  // strides in vectors
  int64_t per_batch, batch_stride, slice, n;          // batch_stride and slice in vectors
  FastDiv f_slice, f_batch;
  DeviceErrorSite err;
};

template <typename U, bool kNarrow>
__global__ void __launch_bounds__(kBlock)
    gather_nd_kernel(const U* __restrict__ src, const int64_t* __restrict__ idx, U* __restrict__ dst,
                     const __grid_constant__ GatherNDArgs a) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < a.n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t t, b;
    if constexpr (kNarrow) {
      const uint32_t tt = a.f_slice.div(static_cast<uint32_t>(i));
      t = tt;
      b = a.f_batch.div(tt);
    } else {
      t = i / a.slice;
      b = t / a.per_batch;
    }
    const int64_t* q = idx + t * a.k;
    int64_t off = b * a.batch_stride;
    bool ok = true;
    for (int j = 0; j < a.k; ++j) {
      const int64_t given = q[j];
      const int64_t v = given < 0 ? given + a.dims[j] : given;
      if (ok && !(v >= 0 && v < a.dims[j])) {  // the first bad entry of the tuple, as the CPU reads them
        ok = false;
        report_device_error(a.err, kIndexOutOfDim, t * a.k + j, given, a.dims[j]);
      }
      off += v * a.strides[j];
    }
    dst[i] = ok ? src[off + (i - t * a.slice)] : U{};
  }
}

}  // namespace

GatherPlan plan_gather(int64_t outer, int64_t dim, int64_t nidx, int64_t inner, size_t esize, DType index_type) {
  GatherPlan p;
  p.esize = static_cast<int>(esize);
  p.outer = outer;
  p.dim = dim;
  p.nidx = nidx;
  p.inner = inner;
  p.index_type = index_type;
  p.vec = p.esize;
  for (int vec : {16, 8, 4, 2}) {
    if (vec <= p.esize) break;
    if ((inner * p.esize) % vec == 0) {
      p.vec = vec;
      break;
    }
  }
  return p;
}

void launch_gather(const GatherPlan& p, const void* data, const void* indices, void* out, cudaStream_t s,
                   const DeviceErrorSite& err) {
  const int64_t total = p.outer * p.nidx * p.inner;
  if (total == 0) return;
  const int vec = aligned(data, p.vec) && aligned(out, p.vec) ? p.vec : p.esize;
  GatherAxisArgs a{};
  a.dim = p.dim;
  a.nidx = p.nidx;
  a.inner = p.inner * p.esize / vec;
  a.n = total * p.esize / vec;
  a.err = err;
  const bool narrow = fits32(a.n);
  if (narrow) {
    a.f_inner = FastDiv(static_cast<uint32_t>(a.inner));
    a.f_nidx = FastDiv(static_cast<uint32_t>(a.nidx));
  }
  dispatch_vec(vec, [&](auto utag) {
    using U = decltype(utag);
    dispatch_index(p.index_type, [&](auto itag) {
      using I = decltype(itag);
      auto* x = static_cast<const U*>(data);
      auto* ix = static_cast<const I*>(indices);
      auto* y = static_cast<U*>(out);
      if (narrow)
        gather_axis_kernel<U, I, true><<<grid_for(a.n), kBlock, 0, s>>>(x, ix, y, a);
      else
        gather_axis_kernel<U, I, false><<<grid_for(a.n), kBlock, 0, s>>>(x, ix, y, a);
      check_launch("gather_axis_kernel");
    });
  });
}

void launch_gather_elements(const GatherElementsPlan& p, const void* data, const void* indices, void* out,
                            cudaStream_t s, const DeviceErrorSite& err) {
  if (p.numel == 0) return;
  GatherElementsArgs a{};
  a.rank = p.rank;
  const bool narrow = fits32(p.numel);
  for (int d = 0; d < p.rank; ++d) {
    a.out_dims[d] = p.out_dims[d];
    a.strides[d] = p.data_strides[d];
    if (narrow) a.fd[d] = FastDiv(static_cast<uint32_t>(p.out_dims[d]));
  }
  a.axis_stride = p.axis_stride;
  a.axis_dim = p.axis_dim;
  a.n = p.numel;
  a.err = err;
  dispatch_vec(p.esize, [&](auto utag) {
    using U = decltype(utag);
    dispatch_index(p.index_type, [&](auto itag) {
      using I = decltype(itag);
      auto* x = static_cast<const U*>(data);
      auto* ix = static_cast<const I*>(indices);
      auto* y = static_cast<U*>(out);
      if (narrow)
        gather_elements_kernel<U, I, true><<<grid_for(a.n), kBlock, 0, s>>>(x, ix, y, a);
      else
        gather_elements_kernel<U, I, false><<<grid_for(a.n), kBlock, 0, s>>>(x, ix, y, a);
      check_launch("gather_elements_kernel");
    });
  });
}

void launch_gather_nd(const GatherNDPlan& p, const void* data, const int64_t* indices, void* out, cudaStream_t s,
                      const DeviceErrorSite& err) {
  const int64_t total = p.count * p.slice;
  if (total == 0) return;
  // Every offset is a multiple of the slice (the indexed dims' strides are), so whole slices can
  // move as vectors.
  int vec = p.esize;
  for (int v : {16, 8, 4, 2}) {
    if (v <= p.esize) break;
    if ((p.slice * p.esize) % v == 0 && aligned(data, v) && aligned(out, v)) {
      vec = v;
      break;
    }
  }
  const int64_t scale = vec / p.esize;
  GatherNDArgs a{};
  a.k = p.k;
  for (int j = 0; j < p.k; ++j) {
    a.dims[j] = p.dims[j];
    a.strides[j] = p.strides[j] / scale;
  }
  a.per_batch = p.per_batch;
  a.batch_stride = p.batch_stride / scale;
  a.slice = p.slice / scale;
  a.n = total / scale;
  a.err = err;
  const bool narrow = fits32(a.n);
  if (narrow) {
    a.f_slice = FastDiv(static_cast<uint32_t>(a.slice));
    a.f_batch = FastDiv(static_cast<uint32_t>(a.per_batch));
  }
  dispatch_vec(vec, [&](auto utag) {
    using U = decltype(utag);
    auto* x = static_cast<const U*>(data);
    auto* y = static_cast<U*>(out);
    if (narrow)
      gather_nd_kernel<U, true><<<grid_for(a.n), kBlock, 0, s>>>(x, indices, y, a);
    else
      gather_nd_kernel<U, false><<<grid_for(a.n), kBlock, 0, s>>>(x, indices, y, a);
    check_launch("gather_nd_kernel");
  });
}

}  // namespace fusec::cuda
