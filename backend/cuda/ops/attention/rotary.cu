// Rotary position embedding (rotary.cuh). Memory-bound: each thread loads V values from both
// halves of one head's rotated part of X (or 2·V adjacent values, interleaved) and of its cos/sin
// rows, and writes them to Y, so every access is a full vector and each value is read once. Finding a head's table row
// takes a division per dim of the head view, done as 32-bit multiply-shifts (X under 2^31 values; a larger X runs on
// the CPU): with 64-bit divisions Llama's rotation ran below the copy rate.
#include "backend/cuda/ops/attention/rotary.cuh"

#include <type_traits>

#include "backend/cuda/core/common.cuh"
#include "backend/cuda/ops/movement/movement.cuh"

namespace fusec::cuda {

namespace {

/// RotaryArgs' geometry as 32-bit indices and precomputed divisors (every offset < 2^31). A unit
/// is 2·V values of one head: V pairs to rotate, or two vectors to copy.
struct RotaryIndex {
  int rank = 0;
  FastDiv per_head;  // units per head
  FastDiv dims[kRotaryMaxRank];
  uint32_t cos_stride[kRotaryMaxRank] = {}, sin_stride[kRotaryMaxRank] = {};
  uint32_t n = 0, heads = 0, head = 0, rot = 0, rot_units = 0, heads_per_row = 1, rotated_heads = 1;
  bool copy_rest = true;
  FastDiv heads_per_row_div;
};

/// Offsets (in values) of head `row`'s cos and sin rows.
__device__ __forceinline__ void table_rows(const RotaryIndex& q, uint32_t row, uint32_t& co, uint32_t& so) {
  co = 0, so = 0;
  uint32_t rem = row;
  for (int d = q.rank - 1; d >= 0; --d) {
    const uint32_t quot = q.dims[d].div(rem);
    const uint32_t idx = rem - quot * q.dims[d].d;
    co += idx * q.cos_stride[d];
    so += idx * q.sin_stride[d];
    rem = quot;
  }
  co *= q.rot;
  so *= q.rot;
}

/// The unit's 2·V values z, rotated by their table values c and sv into out.
template <int V, bool kInterleaved>
__device__ __forceinline__ void rotate_unit(const float (&z)[2][V], const float (&c)[2][V], const float (&sv)[2][V],
                                            float (&out)[2][V]) {
#pragma unroll
  for (int k = 0; k < V; ++k) {
    // The pair (lo, hi) among the unit's 2·V values: (2k, 2k + 1) interleaved, (k, k + V)
    // half-split; value i is [i / V][i % V] (constant indices once unrolled: registers).
    const int lo = kInterleaved ? 2 * k : k, hi = kInterleaved ? 2 * k + 1 : k + V;
    const int lr = lo / V, lc = lo % V, hr = hi / V, hc = hi % V;
    out[lr][lc] = z[lr][lc] * c[lr][lc] + (-z[hr][hc]) * sv[lr][lc];
    out[hr][hc] = z[hr][hc] * c[hr][hc] + z[lr][lc] * sv[hr][hc];
  }
}

/// The unit's values z at p1 and p2 of a head, rotated by the head's table rows cs and sn, stored
/// at the same places of its output row y.
template <typename T, int V, bool kInterleaved>
__device__ __forceinline__ void rotate_store(const float (&z)[2][V], const T* cs, const T* sn, T* y, uint32_t p1,
                                             uint32_t p2) {
  float c[2][V], sv[2][V], out[2][V];
  load_vec<T, V>(cs + p1, c[0]);
  load_vec<T, V>(cs + p2, c[1]);
  load_vec<T, V>(sn + p1, sv[0]);
  load_vec<T, V>(sn + p2, sv[1]);
  rotate_unit<V, kInterleaved>(z, c, sv, out);
  store_vec<T, V>(y + p1, out[0]);
  store_vec<T, V>(y + p2, out[1]);
}

/// Where unit u of a head keeps its two vectors: a pair of vectors to rotate, or (past the
/// rotated part) two adjacent vectors to copy. The units of a head cover its values once.
template <int V, bool kInterleaved>
__device__ __forceinline__ bool unit_at(const RotaryIndex& q, uint32_t u, uint32_t& p1, uint32_t& p2) {
  if (u >= q.rot_units) {
    p1 = q.rot + (u - q.rot_units) * 2 * V;
    p2 = p1 + V;
    return false;
  }
  p1 = kInterleaved ? u * 2 * V : u * V;
  p2 = kInterleaved ? p1 + V : p1 + q.rot / 2;
  return true;
}

template <typename T, int V, bool kInterleaved>
__global__ void __launch_bounds__(kBlock)
    rotary_kernel(const __grid_constant__ RotaryArgs a, const __grid_constant__ RotaryIndex q) {
  pdl_wait_then_release();
  const T* x = static_cast<const T*>(a.x);
  const T* cs = static_cast<const T*>(a.cos);
  const T* sn = static_cast<const T*>(a.sin);
  T* y = static_cast<T*>(a.y);
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < q.n; i += gridDim.x * blockDim.x) {
    const uint32_t row = q.per_head.div(i);
    const uint32_t u = i - row * q.per_head.d;
    const uint32_t xo = row * q.head;
    // z holds the unit's 2·V values: the vectors at p1 and p2 of the head.
    float z[2][V];
    const bool rest_head =
        q.rotated_heads < q.heads_per_row && row - q.heads_per_row_div.div(row) * q.heads_per_row >= q.rotated_heads;
    if (rest_head || u >= q.rot_units) {
      if (rest_head && !q.copy_rest) continue;
      // Copy: the head's values past the rotated ones (or all of a head that does not rotate).
      const uint32_t p1 = rest_head ? u * 2 * V : q.rot + (u - q.rot_units) * 2 * V;
      load_vec<T, V>(x + xo + p1, z[0]);
      load_vec<T, V>(x + xo + p1 + V, z[1]);
      store_vec<T, V>(y + xo + p1, z[0]);
      store_vec<T, V>(y + xo + p1 + V, z[1]);
      continue;
    }
    const uint32_t p1 = kInterleaved ? u * 2 * V : u * V;
    const uint32_t p2 = kInterleaved ? p1 + V : p1 + q.rot / 2;
    load_vec<T, V>(x + xo + p1, z[0]);
    load_vec<T, V>(x + xo + p2, z[1]);
    uint32_t co, so;
    table_rows(q, row, co, so);
    rotate_store<T, V, kInterleaved>(z, cs + co, sn + so, y + xo, p1, p2);
  }
}

/// Sum of v over the `group` lanes (a power of two up to 32, aligned in the warp) that `mask` names.
__device__ __forceinline__ float group_sum(float v, unsigned mask, uint32_t group) {
  for (uint32_t off = group / 2; off > 0; off /= 2) v += __shfl_xor_sync(mask, v, off);
  return v;
}

/// Sum over unit u of the head at xh of (x - mean), or of (x - mean)² where `square`.
template <typename T, int V, bool kInterleaved>
__device__ __forceinline__ float unit_sum(const RotaryIndex& q, const T* xh, uint32_t u, float mean, bool square) {
  uint32_t p1, p2;
  unit_at<V, kInterleaved>(q, u, p1, p2);
  float z[2][V];
  load_vec<T, V>(xh + p1, z[0]);
  load_vec<T, V>(xh + p2, z[1]);
  float s = 0.0f;
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int k = 0; k < V; ++k) s += square ? (z[h][k] - mean) * (z[h][k] - mean) : z[h][k] - mean;
  return s;
}

/// Unit u of the head at xh normalized ((x - mean)·inv, then the norm's scale and bias rows at
/// gamma and beta, or null), then rotated by the head's table rows cs and sn (or copied past the
/// rotated part) into the head at yh.
template <typename T, int V, bool kInterleaved>
__device__ __forceinline__ void norm_rotate_unit(const RotaryIndex& q, const T* xh, const T* gamma, const T* beta,
                                                 const T* cs, const T* sn, T* yh, uint32_t u, float mean, float inv) {
  uint32_t p1, p2;
  const bool rotates = unit_at<V, kInterleaved>(q, u, p1, p2);
  float z[2][V], g[2][V], b[2][V] = {};
  load_vec<T, V>(xh + p1, z[0]);
  load_vec<T, V>(xh + p2, z[1]);
  load_vec<T, V>(gamma + p1, g[0]);
  load_vec<T, V>(gamma + p2, g[1]);
  if (beta) {
    load_vec<T, V>(beta + p1, b[0]);
    load_vec<T, V>(beta + p2, b[1]);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int k = 0; k < V; ++k) z[h][k] = (z[h][k] - mean) * inv * g[h][k] + b[h][k];
  if (rotates) {
    rotate_store<T, V, kInterleaved>(z, cs, sn, yh, p1, p2);
  } else {
    store_vec<T, V>(yh + p1, z[0]);
    store_vec<T, V>(yh + p2, z[1]);
  }
}

/// Copies `units` units of 2·V contiguous values from x to y, lane `lane` of `group` taking
/// every group-th.
template <typename T, int V>
__device__ __forceinline__ void copy_units(const T* x, T* y, uint32_t units, uint32_t lane, uint32_t group) {
  for (uint32_t u = lane; u < units; u += group) {
    float z[2][V];
    load_vec<T, V>(x + u * 2 * V, z[0]);
    load_vec<T, V>(x + u * 2 * V + V, z[1]);
    store_vec<T, V>(y + u * 2 * V, z[0]);
    store_vec<T, V>(y + u * 2 * V + V, z[1]);
  }
}

/// QK-norm then rotation (RotaryArgs::norm): a group of G lanes (a power of two up to 32) takes
/// one head, each lane its units u = lane, lane + G, ...: the head's mean (LayerNorm) and its sum
/// of squares come from a shuffle sum over the group, then each lane loads its units again (from
/// L1), normalizes, scales and rotates them. Heads that do not rotate are copied unnormalized.
template <typename T, int V, bool kInterleaved>
__global__ void __launch_bounds__(kBlock)
    rotary_norm_kernel(const __grid_constant__ RotaryArgs a, const __grid_constant__ RotaryIndex q,
                       uint32_t group_shift) {
  pdl_wait_then_release();
  const T* x = static_cast<const T*>(a.x);
  const T* cs = static_cast<const T*>(a.cos);
  const T* sn = static_cast<const T*>(a.sin);
  const T* gamma = static_cast<const T*>(a.norm_scale);
  const T* beta = static_cast<const T*>(a.norm_bias);
  T* y = static_cast<T*>(a.y);
  const uint32_t group = 1u << group_shift, lane = threadIdx.x & 31u, lg = lane & (group - 1);
  const unsigned mask = group == 32 ? 0xffffffffu : ((1u << group) - 1) << (lane & ~(group - 1));
  const uint32_t per_head = q.per_head.d, groups = (gridDim.x * blockDim.x) >> group_shift;
  const float inv_n = 1.0f / static_cast<float>(q.head);
  for (uint32_t row = (blockIdx.x * blockDim.x + threadIdx.x) >> group_shift; row < q.heads; row += groups) {
    const uint32_t xo = row * q.head;
    const uint32_t in_row = q.heads_per_row > 1 ? row - q.heads_per_row_div.div(row) * q.heads_per_row : 0;
    if (q.rotated_heads < q.heads_per_row && in_row >= q.rotated_heads) {
      if (q.copy_rest) copy_units<T, V>(x + xo, y + xo, per_head, lg, group);
      continue;
    }
    float mean = 0.0f;
    if (a.norm == 2) {
      float s = 0.0f;
      for (uint32_t u = lg; u < per_head; u += group) s += unit_sum<T, V, kInterleaved>(q, x + xo, u, 0.0f, false);
      mean = group_sum(s, mask, group) * inv_n;
    }
    float ss = 0.0f;
    for (uint32_t u = lg; u < per_head; u += group) ss += unit_sum<T, V, kInterleaved>(q, x + xo, u, mean, true);
    const float inv = rsqrtf(group_sum(ss, mask, group) * inv_n + a.norm_epsilon);
    const uint32_t go = a.norm_rows ? in_row * q.head : 0;
    uint32_t co, so;
    table_rows(q, row, co, so);
    for (uint32_t u = lg; u < per_head; u += group)
      norm_rotate_unit<T, V, kInterleaved>(q, x + xo, gamma + go, beta ? beta + go : nullptr, cs + co, sn + so, y + xo,
                                           u, mean, inv);
  }
}

/// QK-norm over runs of heads (RotaryArgs::norm_groups: OLMo 2 normalizes Q's and K's whole
/// projections), then rotation: a warp takes one run of one row of the view, its lanes the run's
/// units in turn (t = lane, lane + 32, ...: head t / units-a-head of the run), with the run's mean
/// and sum of squares from warp sums; then each unit is loaded again, normalized, scaled and
/// rotated as above. A row's last item copies its heads that do not rotate (V's), where copy_rest.
template <typename T, int V, bool kInterleaved>
__global__ void __launch_bounds__(kBlock)
    rotary_span_norm_kernel(const __grid_constant__ RotaryArgs a, const __grid_constant__ RotaryIndex q,
                            uint32_t items) {
  pdl_wait_then_release();
  const T* x = static_cast<const T*>(a.x);
  const T* cs = static_cast<const T*>(a.cos);
  const T* sn = static_cast<const T*>(a.sin);
  const T* gamma = static_cast<const T*>(a.norm_scale);
  const T* beta = static_cast<const T*>(a.norm_bias);
  T* y = static_cast<T*>(a.y);
  const uint32_t lane = threadIdx.x & 31u, warps = (gridDim.x * blockDim.x) >> 5;
  const uint32_t per_head = q.per_head.d, total = q.heads / q.heads_per_row * items;
  for (uint32_t w = (blockIdx.x * blockDim.x + threadIdx.x) >> 5; w < total; w += warps) {
    const uint32_t xrow = w / items, item = w - xrow * items, row0 = xrow * q.heads_per_row;
    if (item == static_cast<uint32_t>(a.norm_groups)) {  // the heads that do not rotate
      const uint32_t xo = (row0 + q.rotated_heads) * q.head;
      copy_units<T, V>(x + xo, y + xo, (q.heads_per_row - q.rotated_heads) * per_head, lane, 32);
      continue;
    }
    const uint32_t h0 = static_cast<uint32_t>(a.norm_group_first[item]);
    const uint32_t units = static_cast<uint32_t>(a.norm_group_heads[item]) * per_head;
    const T* xs = x + (row0 + h0) * q.head;  // the run's first head
    const float inv_n = 1.0f / static_cast<float>(units * 2 * V);
    float mean = 0.0f;
    if (a.norm == 2) {
      float s = 0.0f;
      for (uint32_t t = lane; t < units; t += 32) {
        const uint32_t hh = q.per_head.div(t);
        s += unit_sum<T, V, kInterleaved>(q, xs + hh * q.head, t - hh * per_head, 0.0f, false);
      }
      mean = group_sum(s, 0xffffffffu, 32) * inv_n;
    }
    float ss = 0.0f;
    for (uint32_t t = lane; t < units; t += 32) {
      const uint32_t hh = q.per_head.div(t);
      ss += unit_sum<T, V, kInterleaved>(q, xs + hh * q.head, t - hh * per_head, mean, true);
    }
    const float inv = rsqrtf(group_sum(ss, 0xffffffffu, 32) * inv_n + a.norm_epsilon);
    for (uint32_t t = lane; t < units; t += 32) {
      const uint32_t hh = q.per_head.div(t), row = row0 + h0 + hh;
      const uint32_t go = a.norm_rows ? (h0 + hh) * q.head : 0;
      uint32_t co, so;
      table_rows(q, row, co, so);
      norm_rotate_unit<T, V, kInterleaved>(q, x + row * q.head, gamma + go, beta ? beta + go : nullptr, cs + co,
                                           sn + so, y + row * q.head, t - hh * per_head, mean, inv);
    }
  }
}

template <typename T>
void launch_typed(const RotaryArgs& a, cudaStream_t s) {
  const int64_t rot = a.rot > 0 ? a.rot : a.head;
  // A unit of 2·V values must tile the rotated part and the rest of each head, and each of its two
  // vectors must start at a multiple of V.
  auto fits = [&](int v) {
    const int bytes = v * static_cast<int>(sizeof(T));
    const bool tiles = a.interleaved ? rot % (2 * v) == 0 : (rot / 2) % v == 0;
    return tiles && (a.head - rot) % (2 * v) == 0 && a.head % v == 0 && aligned_to(a.x, bytes) &&
           aligned_to(a.y, bytes) && aligned_to(a.cos, bytes) && aligned_to(a.sin, bytes) &&
           aligned_to(a.norm_scale, bytes) && aligned_to(a.norm_bias, bytes);
  };
  // 32-bit offsets (make_rotary refuses larger X): a table broadcasts to the head view, so its
  // offsets are bounded by X's.
  auto go = [&](auto v_tag) {
    constexpr int V = decltype(v_tag)::value;
    const int64_t per_head = a.head / (2 * V);
    const int64_t n = a.heads * per_head;
    RotaryIndex q;
    q.rank = a.rank;
    q.per_head = FastDiv(static_cast<uint32_t>(per_head));
    for (int d = 0; d < a.rank; ++d) {
      q.dims[d] = FastDiv(static_cast<uint32_t>(a.dims[d]));
      q.cos_stride[d] = static_cast<uint32_t>(a.cos_stride[d]);
      q.sin_stride[d] = static_cast<uint32_t>(a.sin_stride[d]);
    }
    q.n = static_cast<uint32_t>(n);
    q.heads = static_cast<uint32_t>(a.heads);
    q.head = static_cast<uint32_t>(a.head);
    q.rot = static_cast<uint32_t>(rot);
    q.rot_units = static_cast<uint32_t>(rot / (2 * V));
    q.heads_per_row = static_cast<uint32_t>(a.heads_per_row);
    q.rotated_heads = static_cast<uint32_t>(a.rotated_heads);
    q.copy_rest = a.copy_rest;
    q.heads_per_row_div = FastDiv(q.heads_per_row);
    if (a.norm && a.norm_groups) {
      // A warp a run of heads of a row, and one for the row's heads that do not rotate.
      const uint32_t items =
          static_cast<uint32_t>(a.norm_groups) + (a.copy_rest && a.rotated_heads < a.heads_per_row ? 1 : 0);
      const int64_t threads = a.heads / a.heads_per_row * items * 32;
      if (a.interleaved)
        launch_pdl("rotary with norm", rotary_span_norm_kernel<T, V, true>, dim3(grid_for(threads)), dim3(kBlock), 0, s,
                   a, q, items);
      else
        launch_pdl("rotary with norm", rotary_span_norm_kernel<T, V, false>, dim3(grid_for(threads)), dim3(kBlock), 0,
                   s, a, q, items);
    } else if (a.norm) {
      // A group of lanes a head, as many as its units up to a warp.
      uint32_t shift = 0;
      while ((int64_t{1} << shift) < per_head && shift < 5) ++shift;
      const int64_t threads = a.heads << shift;
      if (a.interleaved)
        launch_pdl("rotary with norm", rotary_norm_kernel<T, V, true>, dim3(grid_for(threads)), dim3(kBlock), 0, s, a,
                   q, shift);
      else
        launch_pdl("rotary with norm", rotary_norm_kernel<T, V, false>, dim3(grid_for(threads)), dim3(kBlock), 0, s, a,
                   q, shift);
    } else if (a.interleaved) {
      launch_pdl("rotary", rotary_kernel<T, V, true>, dim3(grid_for(n)), dim3(kBlock), 0, s, a, q);
    } else {
      launch_pdl("rotary", rotary_kernel<T, V, false>, dim3(grid_for(n)), dim3(kBlock), 0, s, a, q);
    }
  };
  constexpr int kWide = 16 / sizeof(T);
  if (fits(kWide))
    go(std::integral_constant<int, kWide>{});
  else if (fits(kWide / 2))
    go(std::integral_constant<int, kWide / 2>{});
  else
    go(std::integral_constant<int, 1>{});
}

}  // namespace

bool launch_rotary(const RotaryArgs& a, cudaStream_t s) {
  if (a.heads == 0 || a.head == 0) return true;
  switch (a.dtype) {
    case DType::Float32:
      launch_typed<float>(a, s);
      return true;
    case DType::Float16:
      launch_typed<__half>(a, s);
      return true;
    case DType::BFloat16:
      launch_typed<__nv_bfloat16>(a, s);
      return true;
    default:
      return false;
  }
}

}  // namespace fusec::cuda
