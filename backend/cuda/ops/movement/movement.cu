// Data movement kernels. Every view-like op (Transpose, Slice, Expand, Tile, DepthToSpace,
// SpaceToDepth) is planned on the host into one strided copy; Concat/Split move several parts in
// one launch; Pad, Trilu and CumSum have their own kernels. Kernels move raw bytes (an unsigned
// type as wide as an element, or a 16-byte vector when whole rows allow it), so one instantiation
// serves every dtype of that size.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "backend/cuda/core/common.cuh"
#include "backend/cuda/ops/movement/movement.cuh"

namespace fusec::cuda {

namespace {

bool aligned(const void* p, int bytes) { return reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(bytes) == 0; }

// ---------------------------------------------------------------- strided gather

struct GatherArgs {
  int rank;
  int64_t dims[kMoveMaxRank], strides[kMoveMaxRank];
  FastDiv fd[kMoveMaxRank];
  int64_t base, n;
};

template <typename U, bool kNarrow>
__global__ void __launch_bounds__(kBlock)
    strided_gather_kernel(const U* __restrict__ src, U* __restrict__ dst, const __grid_constant__ GatherArgs a) {
  if constexpr (kNarrow) {
    const uint32_t n = static_cast<uint32_t>(a.n);
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
      uint32_t rem = i;
      int32_t off = static_cast<int32_t>(a.base);
#pragma unroll
      for (int d = kMoveMaxRank - 1; d > 0; --d) {
        if (d >= a.rank) continue;
        const uint32_t q = a.fd[d].div(rem);
        off += static_cast<int32_t>(rem - q * a.fd[d].d) * static_cast<int32_t>(a.strides[d]);
        rem = q;
      }
      off += static_cast<int32_t>(rem) * static_cast<int32_t>(a.strides[0]);
      dst[i] = src[off];
    }
  } else {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < a.n; i += int64_t(gridDim.x) * blockDim.x) {
      int64_t rem = i, off = a.base;
#pragma unroll
      for (int d = kMoveMaxRank - 1; d > 0; --d) {
        if (d >= a.rank) continue;
        const int64_t q = rem / a.dims[d];
        off += (rem - q * a.dims[d]) * a.strides[d];
        rem = q;
      }
      off += rem * a.strides[0];
      dst[i] = src[off];
    }
  }
}

void run_gather_view(const StridedCopyPlan::View& v, const void* src, void* dst, cudaStream_t s) {
  GatherArgs a{};
  a.rank = v.rank;
  for (int d = 0; d < v.rank; ++d) {
    a.dims[d] = v.dims[d];
    a.strides[d] = v.strides[d];
    if (v.narrow) a.fd[d] = FastDiv(static_cast<uint32_t>(v.dims[d]));
  }
  a.base = v.base;
  a.n = v.numel;
  dispatch_vec(v.vec, [&](auto tag) {
    using U = decltype(tag);
    if (v.narrow)
      strided_gather_kernel<U, true>
          <<<grid_for(v.numel), kBlock, 0, s>>>(static_cast<const U*>(src), static_cast<U*>(dst), a);
    else
      strided_gather_kernel<U, false>
          <<<grid_for(v.numel), kBlock, 0, s>>>(static_cast<const U*>(src), static_cast<U*>(dst), a);
    check_launch("strided_gather_kernel");
  });
}

// ---------------------------------------------------------------- tiled transpose

constexpr int kTile = 32, kTileRows = 8;

struct TileArgs {
  int64_t K, L;    // lengths of the input-contiguous dim and of the output's last dim
  int64_t in_sl;   // input stride of the last output dim
  int64_t out_sk;  // output stride of the input-contiguous dim
  int nb;
  int64_t bdims[kMoveMaxRank], bin[kMoveMaxRank], bout[kMoveMaxRank];
  int64_t batches, base;
};

// Reads a 32×32 tile along the input's contiguous dim and writes it along the output's, so both
// sides are coalesced; the +1 column keeps the transposed reads free of bank conflicts.
template <typename U>
__global__ void __launch_bounds__(kTile* kTileRows)
    tiled_transpose_kernel(const U* __restrict__ src, U* __restrict__ dst, const __grid_constant__ TileArgs a) {
  __shared__ U tile[kTile][kTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (int64_t b = blockIdx.z; b < a.batches; b += gridDim.z) {
    int64_t rem = b, ib = a.base, ob = 0;
    for (int q = a.nb - 1; q >= 0; --q) {
      const int64_t i = rem % a.bdims[q];
      rem /= a.bdims[q];
      ib += i * a.bin[q];
      ob += i * a.bout[q];
    }
    for (int64_t k0 = int64_t(blockIdx.y) * kTile; k0 < a.K; k0 += int64_t(gridDim.y) * kTile) {
      for (int64_t l0 = int64_t(blockIdx.x) * kTile; l0 < a.L; l0 += int64_t(gridDim.x) * kTile) {
        for (int r = ty; r < kTile; r += kTileRows) {
          const int64_t l = l0 + r, k = k0 + tx;
          if (l < a.L && k < a.K) tile[r][tx] = src[ib + k + l * a.in_sl];
        }
        __syncthreads();
        for (int r = ty; r < kTile; r += kTileRows) {
          const int64_t k = k0 + r, l = l0 + tx;
          if (k < a.K && l < a.L) dst[ob + k * a.out_sk + l] = tile[tx][r];
        }
        __syncthreads();
      }
    }
  }
}

void run_tiled(const StridedCopyPlan& p, const void* src, void* dst, cudaStream_t s) {
  TileArgs a{};
  const int r = p.rank, k = p.tile_k;
  int64_t out_strides[kMoveMaxRank];
  int64_t st = 1;
  for (int d = r - 1; d >= 0; --d) {
    out_strides[d] = st;
    st *= p.dims[d];
  }
  a.K = p.dims[k];
  a.L = p.dims[r - 1];
  a.in_sl = p.strides[r - 1];
  a.out_sk = out_strides[k];
  a.batches = 1;
  for (int d = 0; d < r - 1; ++d) {
    if (d == k) continue;
    a.bdims[a.nb] = p.dims[d];
    a.bin[a.nb] = p.strides[d];
    a.bout[a.nb] = out_strides[d];
    a.batches *= p.dims[d];
    ++a.nb;
  }
  a.base = p.base;
  const int64_t gx = std::min<int64_t>((a.L + kTile - 1) / kTile, 1 << 20);
  const int64_t gy = std::min<int64_t>((a.K + kTile - 1) / kTile, 65535);
  const int64_t gz = std::min<int64_t>(a.batches, 65535);
  const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(gy), static_cast<unsigned>(gz));
  dispatch_vec(p.esize, [&](auto tag) {
    using U = decltype(tag);
    tiled_transpose_kernel<U>
        <<<grid, dim3(kTile, kTileRows), 0, s>>>(static_cast<const U*>(src), static_cast<U*>(dst), a);
    check_launch("tiled_transpose_kernel");
  });
}

/// Whether every partial offset |base| + Σ (d-1)·|stride| stays below 2^31.
bool offsets_fit32(const int64_t* dims, const int64_t* strides, int rank, int64_t base) {
  double span = std::fabs(static_cast<double>(base));
  for (int d = 0; d < rank; ++d) span += static_cast<double>(dims[d] - 1) * std::fabs(static_cast<double>(strides[d]));
  return span < 2147483647.0;
}

// ---------------------------------------------------------------- Concat / Split

constexpr int kMaxParts = 32;

struct PartsArgs {
  void* part[kMaxParts];
  int64_t width[kMaxParts], offset[kMaxParts];
  FastDiv wdiv[kMaxParts];
  int64_t rows, wide;
};

// blockIdx.y picks the part, so each block streams one part contiguously and writes (or reads)
// its column band of the wide rows.
template <typename U, bool kSplit, bool kNarrow>
__global__ void __launch_bounds__(kBlock) parts_kernel(U* __restrict__ whole, const __grid_constant__ PartsArgs a) {
  const int p = blockIdx.y;
  const int64_t w = a.width[p];
  const int64_t n = a.rows * w;
  U* part = static_cast<U*>(a.part[p]);
  const int64_t off = a.offset[p];
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    int64_t row;
    if constexpr (kNarrow)
      row = a.wdiv[p].div(static_cast<uint32_t>(e));
    else
      row = e / w;
    const int64_t wi = row * a.wide + off + (e - row * w);
    if constexpr (kSplit)
      part[e] = whole[wi];
    else
      whole[wi] = part[e];
  }
}

template <bool kSplit>
void run_parts(const PartsPlan& p, void* whole, void* const* parts, size_t n, cudaStream_t s) {
  int vec = p.vec;
  if (!aligned(whole, vec)) vec = p.esize;
  for (size_t i = 0; i < n; ++i)
    if (parts[i] && !aligned(parts[i], vec)) vec = p.esize;
  const int64_t scale = vec / p.esize;
  const int64_t wide = p.wide / scale;
  const bool narrow = fits32(p.rows * wide);
  for (size_t g0 = 0; g0 < n; g0 += kMaxParts) {
    PartsArgs a{};
    a.rows = p.rows;
    a.wide = wide;
    int count = 0;
    int64_t most = 0;
    for (size_t i = g0; i < std::min(n, g0 + kMaxParts); ++i) {
      if (!parts[i] || p.width[i] == 0) continue;
      a.part[count] = parts[i];
      a.width[count] = p.width[i] / scale;
      a.offset[count] = p.offset[i] / scale;
      if (narrow) a.wdiv[count] = FastDiv(static_cast<uint32_t>(a.width[count]));
      most = std::max(most, p.rows * a.width[count]);
      ++count;
    }
    if (count == 0 || most == 0) continue;
    const dim3 grid(grid_for(most), static_cast<unsigned>(count));
    dispatch_vec(vec, [&](auto tag) {
      using U = decltype(tag);
      if (narrow)
        parts_kernel<U, kSplit, true><<<grid, kBlock, 0, s>>>(static_cast<U*>(whole), a);
      else
        parts_kernel<U, kSplit, false><<<grid, kBlock, 0, s>>>(static_cast<U*>(whole), a);
      check_launch("parts_kernel");
    });
  }
}

// ---------------------------------------------------------------- Pad

struct PadArgs {
  int rank, mode;
  int64_t out_dims[kMoveMaxRank], in_dims[kMoveMaxRank], in_strides[kMoveMaxRank], pb[kMoveMaxRank];
  FastDiv fd[kMoveMaxRank];
  int64_t n;
};

/// Source coordinate of x (already shifted by the begin pad) along a dim of n, or -1 for the
/// constant: numpy's edge / reflect (mirror about the end elements, period 2(n-1)) / wrap.
template <typename I>
__device__ __forceinline__ I pad_coord(I x, I n, int mode) {
  if (x >= 0 && x < n) return x;
  switch (mode) {
    case 0:
      return -1;
    case 1:
      return x < 0 ? 0 : n - 1;
    case 3:
      return ((x % n) + n) % n;
    default: {
      if (n == 1) return 0;
      const I period = 2 * (n - 1);
      const I m = (x < 0 ? -x : x) % period;
      return m < n ? m : period - m;
    }
  }
}

// Narrow: every index and offset fits 32 bits (checked on the host), so no 64-bit arithmetic.
template <typename U, bool kNarrow>
__global__ void __launch_bounds__(kBlock)
    pad_kernel(const U* __restrict__ src, U* __restrict__ dst, const U* __restrict__ value, U cval,
               const __grid_constant__ PadArgs a) {
  using I = std::conditional_t<kNarrow, int32_t, int64_t>;
  const U c = value ? *value : cval;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < a.n; i += int64_t(gridDim.x) * blockDim.x) {
    I rem = static_cast<I>(i), off = 0;
    bool constant = false;
#pragma unroll
    for (int d = kMoveMaxRank - 1; d >= 0; --d) {
      if (d >= a.rank) continue;
      I q;
      if constexpr (kNarrow)
        q = static_cast<I>(a.fd[d].div(static_cast<uint32_t>(rem)));
      else
        q = rem / a.out_dims[d];
      const I o = rem - q * static_cast<I>(a.out_dims[d]);
      rem = q;
      const I x = pad_coord<I>(o - static_cast<I>(a.pb[d]), static_cast<I>(a.in_dims[d]), a.mode);
      if (x < 0) constant = true;
      off += x * static_cast<I>(a.in_strides[d]);
    }
    dst[i] = constant ? c : src[off];
  }
}

// ---------------------------------------------------------------- Trilu

template <typename U, bool kNarrow>
__global__ void __launch_bounds__(kBlock)
    trilu_kernel(const U* __restrict__ src, U* __restrict__ dst, int64_t total, FastDiv fn, FastDiv fm, int64_t m,
                 int64_t n, bool upper, int64_t k, const int64_t* __restrict__ k_dev) {
  if (k_dev) k = *k_dev;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t row, col;
    if constexpr (kNarrow) {
      const uint32_t r = fn.div(static_cast<uint32_t>(i));
      col = i - int64_t(r) * n;
      row = r - int64_t(fm.div(r)) * m;
    } else {
      const int64_t r = i / n;
      col = i - r * n;
      row = r % m;
    }
    // j - i is in [-m, n], so comparing it with k cannot overflow whatever k is.
    const int64_t diag = col - row;
    const bool keep = upper ? diag >= k : diag <= k;
    dst[i] = keep ? src[i] : U{};
  }
}

// ---------------------------------------------------------------- CumSum

template <typename T>
struct Acc {
  using type = typename Compute<T>::type;
};
template <>
struct Acc<int32_t> {
  using type = int32_t;
};
template <>
struct Acc<int64_t> {
  using type = int64_t;
};

template <typename T>
__device__ __forceinline__ typename Acc<T>::type acc_load(T v) {
  return to_compute(v);
}
template <>
__device__ __forceinline__ int32_t acc_load<int32_t>(int32_t v) {
  return v;
}
template <>
__device__ __forceinline__ int64_t acc_load<int64_t>(int64_t v) {
  return v;
}
template <typename T, typename A>
__device__ __forceinline__ T acc_store(A v) {
  return from_compute<T>(v);
}
template <>
__device__ __forceinline__ int32_t acc_store<int32_t, int32_t>(int32_t v) {
  return v;
}
template <>
__device__ __forceinline__ int64_t acc_store<int64_t, int64_t>(int64_t v) {
  return v;
}

/// The scan's operation: a sum (CumSum) or a product (CumProd), and its identity.
template <bool P, typename A>
__device__ __forceinline__ A scan_op(A a, A b) {
  if constexpr (P)
    return a * b;
  else
    return a + b;
}
template <bool P, typename A>
__device__ __forceinline__ A scan_identity() {
  return A(P ? 1 : 0);
}

// Rows along the innermost dim: one warp per row, 32 elements per step, a shuffle scan plus the
// carried total of the previous steps.
template <typename T, bool P>
__global__ void __launch_bounds__(kBlock) scan_rows_kernel(const T* __restrict__ src, T* __restrict__ dst, int64_t rows,
                                                           int64_t len, bool exclusive, bool reverse) {
  using A = typename Acc<T>::type;
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t row = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32; row < rows; row += warps) {
    const T* x = src + row * len;
    T* y = dst + row * len;
    A carry = scan_identity<P, A>();
    for (int64_t c0 = 0; c0 < len; c0 += 32) {
      const int64_t step = c0 + lane;
      const int64_t k = reverse ? len - 1 - step : step;
      A v = step < len ? acc_load(x[k]) : scan_identity<P, A>();
      A incl = v;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const A t = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl = scan_op<P>(incl, t);
      }
      A before = __shfl_up_sync(0xffffffffu, incl, 1);
      if (lane == 0) before = scan_identity<P, A>();
      if (step < len) y[k] = acc_store<T>(scan_op<P>(carry, exclusive ? before : incl));
      carry = scan_op<P>(carry, __shfl_sync(0xffffffffu, incl, 31));
    }
  }
}

// Any other axis: one thread per (outer, inner) lane walks the axis; neighbouring threads take
// neighbouring inner positions, so every step is a coalesced row.
template <typename T, bool P>
__global__ void __launch_bounds__(kBlock)
    scan_lanes_kernel(const T* __restrict__ src, T* __restrict__ dst, int64_t outer, int64_t len, int64_t inner,
                      bool exclusive, bool reverse) {
  using A = typename Acc<T>::type;
  const int64_t lanes = outer * inner;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < lanes; t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = t / inner, j = t - o * inner;
    const T* x = src + o * len * inner + j;
    T* y = dst + o * len * inner + j;
    A acc = scan_identity<P, A>();
    for (int64_t step = 0; step < len; ++step) {
      const int64_t k = reverse ? len - 1 - step : step;
      const A v = acc_load(x[k * inner]);
      if (exclusive) {
        y[k * inner] = acc_store<T>(acc);
        acc = scan_op<P>(acc, v);
      } else {
        acc = scan_op<P>(acc, v);
        y[k * inner] = acc_store<T>(acc);
      }
    }
  }
}

}  // namespace

// ---------------------------------------------------------------- strided copy plan

std::string StridedCopyPlan::describe() const {
  switch (kind) {
    case Empty:
      return "empty";
    case Memcpy:
      return "copy (cudaMemcpyAsync)";
    case Tiled:
      return "tiled transpose 32x32";
    case Gather:
      if (wide.vec > 0) return "row gather " + std::to_string(wide.vec) + "B vectors";
      return "element gather";
  }
  return "";
}

StridedCopyPlan plan_strided_copy(const std::vector<int64_t>& dims, const std::vector<int64_t>& strides, int64_t base,
                                  size_t esize_in, int64_t in_numel, bool* ok) {
  StridedCopyPlan p;
  if (ok) *ok = true;
  const int esize = static_cast<int>(esize_in);
  p.esize = esize;
  // Merge dims that are contiguous in the source; size-1 dims vanish.
  std::vector<int64_t> d, s;
  int64_t numel = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    numel *= dims[i];
    if (dims[i] == 1) continue;
    if (!d.empty() && s.back() == strides[i] * dims[i]) {
      d.back() *= dims[i];
      s.back() = strides[i];
    } else {
      d.push_back(dims[i]);
      s.push_back(strides[i]);
    }
  }
  p.numel = numel;
  if (numel == 0) return p;  // Empty
  if (d.empty() || (d.size() == 1 && s[0] == 1)) {
    p.kind = StridedCopyPlan::Memcpy;
    p.memcpy_offset = base * esize;
    return p;
  }
  const int r = static_cast<int>(d.size());
  if (r > kMoveMaxRank) {
    if (ok) {
      *ok = false;
      return p;
    }
    internal_error("strided copy of rank " + std::to_string(r) + " after merging");
  }
  p.rank = r;
  for (int i = 0; i < r; ++i) {
    p.dims[i] = d[i];
    p.strides[i] = s[i];
  }
  p.base = base;
  (void)in_numel;

  auto fill_view = [&](StridedCopyPlan::View& v, int vec) {
    const int64_t scale = vec / esize;
    v.vec = vec;
    v.rank = r;
    for (int i = 0; i < r; ++i) {
      v.dims[i] = d[i];
      v.strides[i] = s[i] / (i == r - 1 ? 1 : scale);
    }
    v.dims[r - 1] = d[r - 1] / scale;
    v.base = base / scale;
    v.numel = numel / scale;
    v.narrow = fits32(v.numel) && offsets_fit32(v.dims, v.strides, r, v.base);
    for (int i = 0; i < r && v.narrow; ++i) v.narrow = v.dims[i] < (int64_t{1} << 31);
  };
  fill_view(p.elem, esize);
  p.wide.vec = 0;

  if (s[r - 1] == 1) {
    // Whole rows move: pick the widest vector that divides the row, its start and every stride.
    p.kind = StridedCopyPlan::Gather;
    for (int vec : {16, 8, 4, 2}) {
      if (vec <= esize) break;
      bool fits = (d[r - 1] * esize) % vec == 0 && (base * esize) % vec == 0;
      for (int i = 0; i < r - 1 && fits; ++i) fits = (s[i] * esize) % vec == 0;
      if (fits) {
        fill_view(p.wide, vec);
        break;
      }
    }
    return p;
  }
  // A transpose: tile when some other dim is the contiguous one and both sides are long enough
  // for a tile to pay off.
  int k = -1;
  for (int i = 0; i < r - 1; ++i)
    if (s[i] == 1) k = i;
  if (k >= 0 && d[k] >= 8 && d[r - 1] >= 8) {
    p.kind = StridedCopyPlan::Tiled;
    p.tile_k = k;
    return p;
  }
  p.kind = StridedCopyPlan::Gather;
  return p;
}

void launch_strided_copy(const StridedCopyPlan& p, const void* src, void* dst, cudaStream_t s) {
  switch (p.kind) {
    case StridedCopyPlan::Empty:
      return;
    case StridedCopyPlan::Memcpy:
      FUSEC_CUDA_CHECK(cudaMemcpyAsync(dst, static_cast<const char*>(src) + p.memcpy_offset,
                                       static_cast<size_t>(p.numel) * p.esize, cudaMemcpyDeviceToDevice, s));
      return;
    case StridedCopyPlan::Tiled:
      run_tiled(p, src, dst, s);
      return;
    case StridedCopyPlan::Gather:
      if (p.wide.vec > 0 && aligned(src, p.wide.vec) && aligned(dst, p.wide.vec))
        run_gather_view(p.wide, src, dst, s);
      else
        run_gather_view(p.elem, src, dst, s);
      return;
  }
}

// ---------------------------------------------------------------- Concat / Split

PartsPlan plan_parts(int64_t rows, int64_t wide, const std::vector<int64_t>& width, size_t esize) {
  PartsPlan p;
  p.esize = static_cast<int>(esize);
  p.rows = rows;
  p.wide = wide;
  p.width = width;
  int64_t off = 0;
  for (int64_t w : width) {
    p.offset.push_back(off);
    off += w;
  }
  p.vec = p.esize;
  for (int vec : {16, 8, 4, 2}) {
    if (vec <= p.esize) break;
    bool fits = (wide * p.esize) % vec == 0;
    for (size_t i = 0; i < width.size() && fits; ++i)
      fits = (width[i] * p.esize) % vec == 0 && (p.offset[i] * p.esize) % vec == 0;
    if (fits) {
      p.vec = vec;
      break;
    }
  }
  return p;
}

void launch_concat(const PartsPlan& p, const void* const* parts, size_t n, void* whole, cudaStream_t s) {
  if (p.rows == 0 || p.wide == 0) return;
  run_parts<false>(p, whole, const_cast<void* const*>(parts), n, s);
}

void launch_split(const PartsPlan& p, const void* whole, void* const* parts, size_t n, cudaStream_t s) {
  if (p.rows == 0 || p.wide == 0) return;
  run_parts<true>(p, const_cast<void*>(whole), parts, n, s);
}

// ---------------------------------------------------------------- Pad

void launch_pad(const PadPlan& p, const void* src, void* dst, const void* value, cudaStream_t s) {
  if (p.numel == 0) return;
  PadArgs a{};
  a.rank = p.rank;
  a.mode = static_cast<int>(p.mode);
  int64_t in_numel = 1;
  bool narrow = fits32(p.numel);
  for (int d = 0; d < p.rank; ++d) {
    in_numel *= p.in_dims[d];
    narrow = narrow && p.out_dims[d] + (p.pad_begin[d] < 0 ? -p.pad_begin[d] : p.pad_begin[d]) < (int64_t{1} << 30);
  }
  narrow = narrow && fits32(in_numel);
  for (int d = 0; d < p.rank; ++d) {
    a.out_dims[d] = p.out_dims[d];
    a.in_dims[d] = p.in_dims[d];
    a.in_strides[d] = p.in_strides[d];
    a.pb[d] = p.pad_begin[d];
    if (narrow) a.fd[d] = FastDiv(static_cast<uint32_t>(p.out_dims[d]));
  }
  a.n = p.numel;
  dispatch_vec(p.esize, [&](auto tag) {
    using U = decltype(tag);
    U c;
    std::memcpy(&c, &p.value_bits, sizeof(U));
    auto* x = static_cast<const U*>(src);
    auto* y = static_cast<U*>(dst);
    auto* v = static_cast<const U*>(value);
    if (narrow)
      pad_kernel<U, true><<<grid_for(p.numel), kBlock, 0, s>>>(x, y, v, c, a);
    else
      pad_kernel<U, false><<<grid_for(p.numel), kBlock, 0, s>>>(x, y, v, c, a);
    check_launch("pad_kernel");
  });
}

// ---------------------------------------------------------------- Trilu

void launch_trilu(const void* src, void* dst, size_t esize, int64_t batches, int64_t m, int64_t n, bool upper,
                  int64_t k, const int64_t* k_dev, cudaStream_t s) {
  const int64_t total = batches * m * n;
  if (total == 0) return;
  const bool narrow = fits32(total);
  const FastDiv fn(narrow ? static_cast<uint32_t>(n) : 1), fm(narrow ? static_cast<uint32_t>(m) : 1);
  dispatch_vec(static_cast<int>(esize), [&](auto tag) {
    using U = decltype(tag);
    auto* x = static_cast<const U*>(src);
    auto* y = static_cast<U*>(dst);
    if (narrow)
      trilu_kernel<U, true><<<grid_for(total), kBlock, 0, s>>>(x, y, total, fn, fm, m, n, upper, k, k_dev);
    else
      trilu_kernel<U, false><<<grid_for(total), kBlock, 0, s>>>(x, y, total, fn, fm, m, n, upper, k, k_dev);
    check_launch("trilu_kernel");
  });
}

// ---------------------------------------------------------------- CumSum, CumProd

bool launch_scan(const void* src, void* dst, DType t, int64_t outer, int64_t len, int64_t inner, bool exclusive,
                 bool reverse, bool product, cudaStream_t s) {
  auto run = [&](auto tag) {
    using T = decltype(tag);
    if (outer * len * inner == 0) return;
    auto* x = static_cast<const T*>(src);
    auto* y = static_cast<T*>(dst);
    auto launch = [&](auto p) {
      constexpr bool P = decltype(p)::value;
      if (inner == 1) {
        scan_rows_kernel<T, P><<<grid_for(outer * 32), kBlock, 0, s>>>(x, y, outer, len, exclusive, reverse);
        check_launch("scan_rows_kernel");
      } else {
        scan_lanes_kernel<T, P><<<grid_for(outer * inner), kBlock, 0, s>>>(x, y, outer, len, inner, exclusive, reverse);
        check_launch("scan_lanes_kernel");
      }
    };
    if (product)
      launch(std::true_type{});
    else
      launch(std::false_type{});
  };
  if (t == DType::Int32) {
    run(int32_t{});
    return true;
  }
  if (t == DType::Int64) {
    run(int64_t{});
    return true;
  }
  return dispatch_float_storage(t, run);
}

// ---------------------------------------------------------------- host scalar conversion

bool scalar_bits(double v, int64_t iv, bool is_int, DType t, uint64_t* bits) {
  *bits = 0;
  auto put = [&](auto x) { std::memcpy(bits, &x, sizeof(x)); };
  const double f = is_int ? static_cast<double>(iv) : v;
  const int64_t i = is_int ? iv : static_cast<int64_t>(std::isfinite(v) ? std::trunc(v) : 0);
  switch (t) {
    case DType::Float32:
      put(static_cast<float>(f));
      return true;
    case DType::Float64:
      put(f);
      return true;
    case DType::Float16:
      put(__float2half_rn(static_cast<float>(f)));
      return true;
    case DType::BFloat16:
      put(__float2bfloat16_rn(static_cast<float>(f)));
      return true;
    case DType::Bool:
      put(static_cast<uint8_t>(f != 0));
      return true;
    case DType::Int8:
      put(static_cast<int8_t>(i));
      return true;
    case DType::UInt8:
      put(static_cast<uint8_t>(i));
      return true;
    case DType::Int16:
      put(static_cast<int16_t>(i));
      return true;
    case DType::Int32:
      put(static_cast<int32_t>(i));
      return true;
    case DType::Int64:
      put(i);
      return true;
    default:
      return false;
  }
}

}  // namespace fusec::cuda
