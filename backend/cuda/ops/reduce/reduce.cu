// Reduction kernels: Reduce{Sum,Mean,Max,Min,Prod,L1,L2,LogSum,LogSumExp,SumSquare}, ArgMax,
// ArgMin.
//
// The input is viewed without any permutation. After dropping size-1 dims and merging neighbours
// of the same kind, most reductions are [outer, n] rows (n contiguous: a warp or a block per row,
// 16-byte vector loads after a scalar head that reaches alignment) or [outer, n, inner] columns
// (threads on consecutive columns, so each warp reads contiguous memory; a block's thread rows
// split n and combine in shared memory). Few outputs over a long n split n across blocks: their
// partial accumulators go to the workspace and a finishing kernel combines them. Any other axis
// set walks its reduced positions by index decomposition (once per contiguous run), a warp or a
// block per output.
//
// Each reduction is an op object: init, map(x, index along n), an associative and commutative
// comb, and fin(acc, count). Float32 (and float64) sums accumulate in double, like the CPU
// reference (H100's FP64 rate is far above what a memory-bound sum needs); half types in float;
// integers in int64 with wrap-around. Max/Min let NaN win; LogSumExp carries an online
// (max, sum of exp) pair; ArgMax/ArgMin carry (value, index) with NaN as the extreme and ties
// broken by index.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "backend/axis_layout.h"
#include "backend/cuda/core/common.cuh"
#include "backend/cuda/ops/reduce/reduce.cuh"

namespace fusec::cuda {

namespace {

template <typename T>
constexpr bool is_half_v = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;
template <typename T>
constexpr bool is_int_v = std::is_same_v<T, int32_t> || std::is_same_v<T, int64_t>;

// Accumulator of sums: double for float32/float64, float for halves, int64 for integers.
template <typename T>
struct Wide {
  using type = float;
};
template <>
struct Wide<float> {
  using type = double;
};
template <>
struct Wide<double> {
  using type = double;
};
template <>
struct Wide<int32_t> {
  using type = int64_t;
};
template <>
struct Wide<int64_t> {
  using type = int64_t;
};
// Exact carrier of one value (Max/Min/Arg/LogSumExp): float for the float32 and half types.
template <typename T>
struct Narrow {
  using type = float;
};
template <>
struct Narrow<double> {
  using type = double;
};
template <>
struct Narrow<int32_t> {
  using type = int64_t;
};
template <>
struct Narrow<int64_t> {
  using type = int64_t;
};

template <typename A, typename T>
__device__ __forceinline__ A cvt(T v) {
  if constexpr (is_half_v<T>)
    return static_cast<A>(to_compute(v));
  else
    return static_cast<A>(v);
}

template <typename O, typename A>
__device__ __forceinline__ O out_cast(A a) {
  if constexpr (std::is_integral_v<O>)
    return static_cast<O>(a);
  else
    return from_compute<O>(a);
}

template <typename A>
__device__ __forceinline__ A wadd(A a, A b) {
  if constexpr (std::is_integral_v<A>)
    return static_cast<A>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
  else
    return a + b;
}
template <typename A>
__device__ __forceinline__ A wmul(A a, A b) {
  if constexpr (std::is_integral_v<A>)
    return static_cast<A>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
  else
    return a * b;
}
template <typename A>
__device__ __forceinline__ A wabs(A a) {
  if constexpr (std::is_integral_v<A>)
    return a < 0 ? static_cast<A>(0 - static_cast<uint64_t>(a)) : a;
  else
    return a < 0 ? -a : a;
}
template <typename A>
__device__ __forceinline__ bool is_nan(A a) {
  if constexpr (std::is_integral_v<A>)
    return false;
  else
    return a != a;
}

// ---- the reductions ----

template <typename T>
struct RSum {
  using A = typename Wide<T>::type;
  using Out = T;
  __device__ A init() const { return A(0); }
  __device__ A map(T v, int64_t) const { return cvt<A>(v); }
  __device__ A comb(A a, A b) const { return wadd(a, b); }
  __device__ Out fin(A a, int64_t) const { return out_cast<Out>(a); }
};

template <typename T>
struct RMean : RSum<T> {
  using A = typename Wide<T>::type;
  __device__ T fin(A a, int64_t n) const {
    if constexpr (std::is_integral_v<A>)
      return n == 0 ? T(0) : static_cast<T>(a / n);  // truncates, as numpy
    else
      return out_cast<T>(a / static_cast<A>(n));
  }
};

template <typename T, bool IsMax>
struct RExt {
  using A = typename Narrow<T>::type;
  using Out = T;
  __device__ A init() const {
    if constexpr (std::is_integral_v<A>)
      return IsMax ? A(std::numeric_limits<T>::lowest()) : A(std::numeric_limits<T>::max());
    else
      return IsMax ? A(-INFINITY) : A(INFINITY);
  }
  __device__ A map(T v, int64_t) const { return cvt<A>(v); }
  __device__ A comb(A a, A b) const {
    if (is_nan(b)) return b;  // NaN wins once seen
    return (IsMax ? b > a : b < a) ? b : a;
  }
  __device__ Out fin(A a, int64_t) const { return out_cast<Out>(a); }
};

template <typename T>
struct RProd : RSum<T> {
  using A = typename Wide<T>::type;
  __device__ A init() const { return A(1); }
  __device__ A comb(A a, A b) const { return wmul(a, b); }
};

template <typename T>
struct RL1 : RSum<T> {
  using A = typename Wide<T>::type;
  __device__ A map(T v, int64_t) const { return wabs(cvt<A>(v)); }
};

template <typename T>
struct RSumSquare : RSum<T> {
  using A = typename Wide<T>::type;
  __device__ A map(T v, int64_t) const {
    const A a = cvt<A>(v);
    return wmul(a, a);
  }
};

template <typename T>
struct RL2 : RSumSquare<T> {
  using A = typename Wide<T>::type;
  __device__ T fin(A a, int64_t) const { return out_cast<T>(sqrt(a)); }
};

template <typename T>
struct RLogSum : RSum<T> {
  using A = typename Wide<T>::type;
  __device__ T fin(A a, int64_t) const { return out_cast<T>(log(a)); }
};

template <typename N>
struct MaxSum {
  N m, s;  // running maximum, sum of exp(x - m)
};

template <typename T>
struct RLogSumExp {
  using N = typename Narrow<T>::type;
  using A = MaxSum<N>;
  using Out = T;
  __device__ A init() const { return {N(-INFINITY), N(0)}; }
  __device__ A map(T v, int64_t) const { return {cvt<N>(v), N(1)}; }
  __device__ A comb(A a, A b) const {
    const N M = fmax(a.m, b.m);
    // Equal maxima add unscaled: no inf - inf for infinite inputs; NaN poisons the sum.
    const N s = (a.m == M ? a.s : a.s * exp(a.m - M)) + (b.m == M ? b.s : b.s * exp(b.m - M));
    return {M, s};
  }
  __device__ Out fin(A a, int64_t) const { return out_cast<T>(log(a.s) + a.m); }
};

template <typename N>
struct ValIdx {
  N v;
  int64_t i;  // -1: nothing seen yet
};

template <typename T, bool IsMax>
struct RArg {
  using N = typename Narrow<T>::type;
  using A = ValIdx<N>;
  using Out = int64_t;
  bool last = false;
  __device__ A init() const { return {N(0), -1}; }
  __device__ A map(T v, int64_t k) const { return {cvt<N>(v), k}; }
  __device__ A comb(A a, A b) const {
    if (a.i < 0) return b;
    if (b.i < 0) return a;
    const bool an = is_nan(a.v), bn = is_nan(b.v);
    if (an != bn) return an ? a : b;  // NaN is the extreme
    if (an || a.v == b.v) return (last ? b.i > a.i : b.i < a.i) ? b : a;
    return (IsMax ? b.v > a.v : b.v < a.v) ? b : a;
  }
  __device__ Out fin(A a, int64_t) const { return a.i < 0 ? 0 : a.i; }
};

// ---- shuffles of the accumulators ----

__device__ __forceinline__ float shfl(float v, int o) { return __shfl_xor_sync(0xffffffffu, v, o); }
__device__ __forceinline__ double shfl(double v, int o) { return __shfl_xor_sync(0xffffffffu, v, o); }
__device__ __forceinline__ int64_t shfl(int64_t v, int o) {
  return static_cast<int64_t>(__shfl_xor_sync(0xffffffffu, static_cast<long long>(v), o));
}
template <typename N>
__device__ __forceinline__ MaxSum<N> shfl(MaxSum<N> v, int o) {
  return {shfl(v.m, o), shfl(v.s, o)};
}
template <typename N>
__device__ __forceinline__ ValIdx<N> shfl(ValIdx<N> v, int o) {
  return {shfl(v.v, o), shfl(v.i, o)};
}

template <typename Op, typename A>
__device__ __forceinline__ A warp_comb(const Op& op, A v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = op.comb(v, shfl(v, o));
  return v;
}

/// Where a finished group goes: its final value, or its partial for the finishing kernel.
template <typename Op, typename A>
__device__ __forceinline__ void emit(const ReduceArgs& a, const Op& op, int64_t out, A acc) {
  if (a.splits > 1)
    static_cast<A*>(a.workspace)[blockIdx.y * a.outputs + out] = acc;
  else
    static_cast<typename Op::Out*>(a.y)[out] = op.fin(acc, a.reduced);
}

// ---- rows: [outer, n], blockDim (32, rows per block) or (threads, 1) ----

template <typename T, typename Op>
__global__ void __launch_bounds__(256) reduce_rows_kernel(ReduceArgs a, Op op, int64_t seg) {
  using A = typename Op::A;
  __shared__ alignas(16) unsigned char raw[32 * sizeof(A)];
  const int64_t row = blockIdx.x * int64_t(blockDim.y) + threadIdx.y;
  if (row >= a.outer) return;  // a whole warp, or the whole block
  const int tid = threadIdx.x, tpr = blockDim.x;
  const int64_t j0 = blockIdx.y * seg, j1 = j0 + seg < a.n ? j0 + seg : a.n;
  const T* x = static_cast<const T*>(a.x) + row * a.n;
  constexpr int V = 16 / sizeof(T);
  A acc = op.init();
  // Scalar head up to the first 16-byte boundary, vectors, scalar tail.
  int64_t head = static_cast<int64_t>(((16 - (reinterpret_cast<uintptr_t>(x + j0) & 15)) & 15) / sizeof(T));
  if (head > j1 - j0) head = j1 - j0;
  const int64_t b0 = j0 + head, nvec = (j1 - b0) / V;
  if (tid < head) acc = op.comb(acc, op.map(x[j0 + tid], j0 + tid));
#pragma unroll 4
  for (int64_t c = tid; c < nvec; c += tpr) {
    const Pack<T, V> pk = *reinterpret_cast<const Pack<T, V>*>(x + b0 + c * V);
#pragma unroll
    for (int i = 0; i < V; ++i) acc = op.comb(acc, op.map(pk.v[i], b0 + c * V + i));
  }
  for (int64_t j = b0 + nvec * V + tid; j < j1; j += tpr) acc = op.comb(acc, op.map(x[j], j));

  acc = warp_comb(op, acc);
  if (blockDim.x > 32) {
    A* sm = reinterpret_cast<A*>(raw);
    const int lane = tid & 31, w = tid >> 5, nw = tpr >> 5;
    if (lane == 0) sm[w] = acc;
    __syncthreads();
    if (w != 0) return;
    acc = warp_comb(op, lane < nw ? sm[lane] : op.init());
  }
  if (tid == 0) emit(a, op, row, acc);
}

// ---- columns: [outer, n, inner], blockDim (columns, thread rows), 256 threads ----

template <typename T, typename Op>
__global__ void __launch_bounds__(256) reduce_cols_kernel(ReduceArgs a, Op op, int64_t seg, int64_t tiles) {
  using A = typename Op::A;
  __shared__ alignas(16) unsigned char raw[256 * sizeof(A)];
  A* sm = reinterpret_cast<A*>(raw);
  const int64_t tile = blockIdx.x % tiles, o = blockIdx.x / tiles;
  const int64_t i = tile * blockDim.x + threadIdx.x;
  const int64_t k0 = blockIdx.y * seg, k1 = k0 + seg < a.n ? k0 + seg : a.n;
  A acc = op.init();
  if (i < a.inner) {
    const T* p = static_cast<const T*>(a.x) + o * a.n * a.inner + i;
#pragma unroll 4
    for (int64_t k = k0 + threadIdx.y; k < k1; k += blockDim.y) acc = op.comb(acc, op.map(p[k * a.inner], k));
  }
  const int slot = threadIdx.y * blockDim.x + threadIdx.x;
  sm[slot] = acc;
  __syncthreads();
  for (int s = blockDim.y / 2; s > 0; s >>= 1) {
    if (threadIdx.y < s) sm[slot] = op.comb(sm[slot], sm[slot + s * blockDim.x]);
    __syncthreads();
  }
  if (threadIdx.y == 0 && i < a.inner) emit(a, op, o * a.inner + i, sm[threadIdx.x]);
}

// ---- any axis set: a warp or a block per output, grid (output groups, splits) ----
//
// The reduced positions are q * run + j: q enumerates the reduced dims other than an innermost
// reduced run of `run` contiguous values (run = 1 when the innermost dim is kept), decomposed once
// per q; long runs are walked by consecutive threads.

template <typename T, typename Op>
__global__ void __launch_bounds__(256) reduce_general_kernel(ReduceArgs a, Op op, int64_t seg) {
  using A = typename Op::A;
  __shared__ alignas(16) unsigned char raw[32 * sizeof(A)];
  const int64_t out = blockIdx.x * int64_t(blockDim.y) + threadIdx.y;
  if (out >= a.outputs) return;  // a whole warp, or the whole block
  const int tid = threadIdx.x, tpo = blockDim.x;
  int64_t base = 0, r = out;
  for (int d = a.kept_rank - 1; d >= 0; --d) {
    const int64_t q = r / a.kept_dims[d];
    base += (r - q * a.kept_dims[d]) * a.kept_strides[d];
    r = q;
  }
  auto offset_of = [&](int64_t q) {
    int64_t off = 0;
    for (int d = a.red_rank - 1; d >= 0; --d) {
      const int64_t t = q / a.red_dims[d];
      off += (q - t * a.red_dims[d]) * a.red_strides[d];
      q = t;
    }
    return off;
  };
  const T* x = static_cast<const T*>(a.x) + base;
  const int64_t run = a.run, nq = a.reduced / run;
  const int64_t q0 = blockIdx.y * seg, q1 = q0 + seg < nq ? q0 + seg : nq;
  A acc = op.init();
  if (run >= tpo) {
    for (int64_t q = q0; q < q1; ++q) {
      const T* p = x + offset_of(q);
      for (int64_t j = tid; j < run; j += tpo) acc = op.comb(acc, op.map(p[j], q * run + j));
    }
  } else {
    for (int64_t e = q0 * run + tid; e < q1 * run; e += tpo) {
      const int64_t q = e / run;
      acc = op.comb(acc, op.map(x[offset_of(q) + (e - q * run)], e));
    }
  }
  acc = warp_comb(op, acc);
  if (tpo > 32) {
    A* sm = reinterpret_cast<A*>(raw);
    const int lane = tid & 31, w = tid >> 5, nw = tpo >> 5;
    if (lane == 0) sm[w] = acc;
    __syncthreads();
    if (w != 0) return;
    acc = warp_comb(op, lane < nw ? sm[lane] : op.init());
  }
  if (tid == 0) emit(a, op, out, acc);
}

template <typename T, typename Op>
__global__ void reduce_finish_kernel(ReduceArgs a, Op op) {
  using A = typename Op::A;
  const A* part = static_cast<const A*>(a.workspace);
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < a.outputs;
       o += int64_t(gridDim.x) * blockDim.x) {
    A acc = op.init();
    for (int s = 0; s < a.splits; ++s) acc = op.comb(acc, part[s * a.outputs + o]);
    static_cast<typename Op::Out*>(a.y)[o] = op.fin(acc, a.reduced);
  }
}

// ---- launch ----

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

constexpr int64_t kWarpRowMax = 1024;  // rows up to this long get a warp each

/// Column block shape: up to 32 consecutive columns, the rest of 256 threads along n.
int col_block_x(int64_t inner) {
  int bx = 1;
  while (bx < 32 && bx < inner) bx <<= 1;
  return bx;
}

template <typename T, typename Op>
void run(const ReduceArgs& a, Op op, cudaStream_t s) {
  switch (a.path) {
    case ReducePath::None:
      return;
    case ReducePath::Rows: {
      const int64_t seg = ceil_div(a.n, a.splits);
      const bool warp = a.n <= kWarpRowMax;
      const dim3 block(warp ? 32 : 256, warp ? 8 : 1);
      const dim3 grid(static_cast<unsigned>(ceil_div(a.outer, block.y)), static_cast<unsigned>(a.splits));
      reduce_rows_kernel<T, Op><<<grid, block, 0, s>>>(a, op, seg < 1 ? 1 : seg);
      check_launch("reduce_rows_kernel");
      break;
    }
    case ReducePath::Cols: {
      const int bx = col_block_x(a.inner);
      const int64_t tiles = ceil_div(a.inner, bx);
      const int64_t seg = ceil_div(a.n, a.splits);
      const dim3 grid(static_cast<unsigned>(tiles * a.outer), static_cast<unsigned>(a.splits));
      reduce_cols_kernel<T, Op><<<grid, dim3(bx, 256 / bx), 0, s>>>(a, op, seg < 1 ? 1 : seg, tiles);
      check_launch("reduce_cols_kernel");
      break;
    }
    case ReducePath::General: {
      const bool warp = a.reduced <= kWarpRowMax;
      const dim3 block(warp ? 32 : 256, warp ? 8 : 1);
      const int64_t seg = ceil_div(a.reduced / a.run, a.splits);
      const dim3 grid(static_cast<unsigned>(ceil_div(a.outputs, block.y)), static_cast<unsigned>(a.splits));
      reduce_general_kernel<T, Op><<<grid, block, 0, s>>>(a, op, seg < 1 ? 1 : seg);
      check_launch("reduce_general_kernel");
      break;
    }
  }
  if (a.splits > 1) {
    reduce_finish_kernel<T, Op><<<grid_for(a.outputs), kBlock, 0, s>>>(a, op);
    check_launch("reduce_finish_kernel");
  }
}

template <typename T>
bool run_kind(const ReduceArgs& a, cudaStream_t s) {
  constexpr bool flt = !is_int_v<T>;
  constexpr bool all = flt && !std::is_same_v<T, double>;  // every reduction: float32 and halves
  switch (a.kind) {
    case ReduceKind::Sum:
      run<T>(a, RSum<T>{}, s);
      return true;
    case ReduceKind::Mean:
      run<T>(a, RMean<T>{}, s);
      return true;
    case ReduceKind::Max:
      run<T>(a, RExt<T, true>{}, s);
      return true;
    case ReduceKind::Min:
      run<T>(a, RExt<T, false>{}, s);
      return true;
    default:
      break;
  }
  if constexpr (!std::is_same_v<T, double>) {
    switch (a.kind) {
      case ReduceKind::Prod:
        run<T>(a, RProd<T>{}, s);
        return true;
      case ReduceKind::ArgMax:
        run<T>(a, RArg<T, true>{a.select_last}, s);
        return true;
      case ReduceKind::ArgMin:
        run<T>(a, RArg<T, false>{a.select_last}, s);
        return true;
      default:
        break;
    }
  }
  if constexpr (all) {
    switch (a.kind) {
      case ReduceKind::L1:
        run<T>(a, RL1<T>{}, s);
        return true;
      case ReduceKind::L2:
        run<T>(a, RL2<T>{}, s);
        return true;
      case ReduceKind::LogSum:
        run<T>(a, RLogSum<T>{}, s);
        return true;
      case ReduceKind::LogSumExp:
        run<T>(a, RLogSumExp<T>{}, s);
        return true;
      case ReduceKind::SumSquare:
        run<T>(a, RSumSquare<T>{}, s);
        return true;
      default:
        break;
    }
  }
  return false;
}

}  // namespace

bool reduce_supported(ReduceKind k, DType t) {
  const bool arg = k == ReduceKind::ArgMax || k == ReduceKind::ArgMin;
  const bool basic = k == ReduceKind::Sum || k == ReduceKind::Mean || k == ReduceKind::Max || k == ReduceKind::Min;
  switch (t) {
    case DType::Float32:
    case DType::Float16:
    case DType::BFloat16:
      return true;
    case DType::Float64:
      return basic;
    case DType::Int32:
    case DType::Int64:
      return basic || arg || k == ReduceKind::Prod;
    default:
      return false;
  }
}

bool reduce_plan(const std::vector<int64_t>& dims, const std::vector<bool>& reduce, ReduceArgs& a) {
  a.outputs = 1;
  a.reduced = 1;
  for (size_t i = 0; i < dims.size(); ++i) (reduce[i] ? a.reduced : a.outputs) *= dims[i];
  a.splits = 1;
  a.outer = a.n = a.inner = 1;
  if (a.outputs == 0) {
    a.path = ReducePath::None;
    return true;
  }
  if (a.reduced == 0) {  // every output is the empty fold
    a.path = ReducePath::Rows;
    a.outer = a.outputs;
    a.n = 0;
    return true;
  }
  // Drop size-1 dims, merge neighbours of the same kind (as the CPU kernels, reduce_util.h).
  const MergedAxes merged = merge_reduce_axes(dims, reduce);
  const std::vector<int64_t>& md = merged.dims;
  const std::vector<bool>& mr = merged.reduced;
  const size_t r = md.size();
  if (r == 0 || (r == 1 && !mr[0])) {  // nothing left to reduce: one element per output
    a.path = ReducePath::Rows;
    a.outer = a.outputs;
  } else if (r == 1) {
    a.path = ReducePath::Rows;
    a.n = md[0];
  } else if (r == 2 && !mr[0]) {
    a.path = ReducePath::Rows;
    a.outer = md[0];
    a.n = md[1];
  } else if (r == 2) {
    a.path = ReducePath::Cols;
    a.n = md[0];
    a.inner = md[1];
  } else if (r == 3 && !mr[0]) {
    a.path = ReducePath::Cols;
    a.outer = md[0];
    a.n = md[1];
    a.inner = md[2];
  } else {
    a.path = ReducePath::General;
    std::vector<int64_t> strides(r);
    int64_t st = 1;
    for (size_t i = r; i-- > 0;) {
      strides[i] = st;
      st *= md[i];
    }
    a.kept_rank = a.red_rank = 0;
    a.run = mr[r - 1] ? md[r - 1] : 1;
    for (size_t i = 0; i + (mr[r - 1] ? 1 : 0) < r; ++i) {
      if (mr[i]) {
        if (a.red_rank == kReduceMaxRank) return false;
        a.red_dims[a.red_rank] = md[i];
        a.red_strides[a.red_rank++] = strides[i];
      } else {
        if (a.kept_rank == kReduceMaxRank) return false;
        a.kept_dims[a.kept_rank] = md[i];
        a.kept_strides[a.kept_rank++] = strides[i];
      }
    }
  }
  // Split n across blocks when the output groups alone leave the GPU mostly idle.
  const int64_t target = 4 * static_cast<int64_t>(a.multiprocessors);
  if (a.path == ReducePath::Rows && a.n > kWarpRowMax && a.n >= 16384 && a.outer < target) {
    a.splits = static_cast<int>(std::min<int64_t>({ceil_div(target, a.outer), ceil_div(a.n, 8192), 1024}));
  } else if (a.path == ReducePath::General) {
    const int64_t nq = a.reduced / a.run;
    if (a.reduced > kWarpRowMax && a.outputs < target && nq > 1)
      a.splits = static_cast<int>(std::min<int64_t>({ceil_div(target, a.outputs), nq, 1024}));
  } else if (a.path == ReducePath::Cols) {
    const int bx = col_block_x(a.inner);
    const int64_t by = 256 / bx, blocks = ceil_div(a.inner, bx) * a.outer;
    if (blocks < target && a.n >= 8 * by)
      a.splits = static_cast<int>(std::min<int64_t>({ceil_div(target, blocks), ceil_div(a.n, 8 * by), 1024}));
  }
  return true;
}

size_t reduce_workspace_bytes(const ReduceArgs& a) {
  // 16 bytes covers every accumulator (the (double, int64) and (double, double) pairs).
  return a.splits > 1 ? static_cast<size_t>(a.splits) * static_cast<size_t>(a.outputs) * 16 : 0;
}

bool launch_reduce(const ReduceArgs& a, cudaStream_t s) {
  if (a.path == ReducePath::None) return true;
  switch (a.dtype) {
    case DType::Float32:
      return run_kind<float>(a, s);
    case DType::Float16:
      return run_kind<__half>(a, s);
    case DType::BFloat16:
      return run_kind<__nv_bfloat16>(a, s);
    case DType::Float64:
      return run_kind<double>(a, s);
    case DType::Int32:
      return run_kind<int32_t>(a, s);
    case DType::Int64:
      return run_kind<int64_t>(a, s);
    default:
      return false;
  }
}

const char* reduce_variant(const ReduceArgs& a) {
  switch (a.path) {
    case ReducePath::None:
      return "empty";
    case ReducePath::Rows:
      if (a.splits > 1) return "rows, split + finish";
      return a.n <= kWarpRowMax ? "rows, warp/row" : "rows, block/row";
    case ReducePath::Cols:
      return a.splits > 1 ? "columns, split + finish" : "columns";
    default:
      if (a.splits > 1) return "strided, split + finish";
      return a.reduced <= kWarpRowMax ? "strided, warp/output" : "strided, block/output";
  }
}

}  // namespace fusec::cuda
