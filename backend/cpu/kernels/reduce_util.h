// Reduction layout shared by the Reduce* kernels and the normalizations that reduce over arbitrary
// axes (MeanVarianceNormalization, BatchNormalization in training mode).
//
// A tensor reduced over a set of axes is viewed, after dropping size-1 dims and merging neighbours
// of the same kind, as
//
//     [kept/reduced dims ...] x inner
//
// where `inner` is the innermost merged dim, a contiguous run that is either reduced (each output
// folds one or more contiguous runs) or kept (each group of `inner` outputs is updated by one
// contiguous run per reduced position, so the inner loop stays unit-stride and vectorizes).
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "backend/axis_layout.h"
#include "backend/cpu/kernels/common.h"

namespace fusec::cpu {

struct ReduceLayout {
  std::vector<int64_t> kept_dims;     // outer kept dims, row-major (the inner run excluded)
  std::vector<int64_t> kept_strides;  // their input strides
  std::vector<int64_t> red_offsets;   // input offset of every reduced position (inner run excluded)
  int64_t inner = 1;                  // length of the innermost contiguous run
  bool inner_reduced = false;

  /// Number of rows: one output (inner reduced) or `inner` outputs (inner kept) per row.
  int64_t rows() const {
    int64_t n = 1;
    for (int64_t d : kept_dims) n *= d;
    return n;
  }
  int64_t outputs() const { return rows() * (inner_reduced ? 1 : inner); }
  /// Elements folded into each output.
  int64_t reduced_count() const { return static_cast<int64_t>(red_offsets.size()) * (inner_reduced ? inner : 1); }
  /// Input offset where row r starts.
  int64_t row_offset(int64_t r) const {
    int64_t off = 0;
    for (size_t i = kept_dims.size(); i-- > 0;) {
      off += (r % kept_dims[i]) * kept_strides[i];
      r /= kept_dims[i];
    }
    return off;
  }
};

/// Layout of a row-major tensor of `dims` reduced over the axes flagged in `reduce`.
inline ReduceLayout make_reduce_layout(const std::vector<int64_t>& dims, const std::vector<bool>& reduce) {
  // Drop size-1 dims, merge neighbours of the same kind (as the CUDA planner, reduce.cu).
  const MergedAxes merged = merge_reduce_axes(dims, reduce);
  const std::vector<int64_t>& md = merged.dims;
  const std::vector<bool>& mr = merged.reduced;
  ReduceLayout L;
  if (md.empty()) {  // a single element (or a scalar)
    L.red_offsets = {0};
    return L;
  }
  std::vector<int64_t> strides(md.size());
  int64_t s = 1;
  for (size_t i = md.size(); i-- > 0;) {
    strides[i] = s;
    s *= md[i];
  }
  L.inner = md.back();
  L.inner_reduced = mr.back();
  std::vector<int64_t> red_dims, red_strides;
  for (size_t i = 0; i + 1 < md.size(); ++i) {
    if (mr[i]) {
      red_dims.push_back(md[i]);
      red_strides.push_back(strides[i]);
    } else {
      L.kept_dims.push_back(md[i]);
      L.kept_strides.push_back(strides[i]);
    }
  }
  // No outputs (a kept dim is 0): nothing will be read, so the reduced positions are not listed;
  // over an empty input there can be billions of them.
  if (L.outputs() == 0) return L;
  // A reduced innermost run of length 0 empties every output's reduction whatever the other
  // reduced dims hold (their product can pass 2^31): reduced_count() is 0 with or without them.
  if (L.inner_reduced && L.inner == 0) return L;
  // Enumerate the reduced positions in row-major order (at most the input's element count).
  int64_t n_red = 1;
  for (int64_t d : red_dims) n_red *= d;
  L.red_offsets.resize(static_cast<size_t>(n_red));
  std::vector<int64_t> idx(red_dims.size(), 0);
  int64_t off = 0;
  for (int64_t k = 0; k < n_red; ++k) {
    L.red_offsets[static_cast<size_t>(k)] = off;
    for (size_t i = red_dims.size(); i-- > 0;) {
      ++idx[i];
      off += red_strides[i];
      if (idx[i] < red_dims[i]) break;
      off -= red_strides[i] * red_dims[i];
      idx[i] = 0;
    }
  }
  return L;
}

/// Generic reduction over a layout: out[o] = fin(fold(comb, init, map(x, o)), o) for every output o.
///   map(T x, int64_t o) -> A     (per-element transform; o lets it use a per-output shift)
///   comb(A, A) -> A              (must be associative: partial results are combined)
///   fin(A acc, int64_t o) -> O   (finishing step: divide by the count, sqrt, log, cast...)
template <typename A, typename T, typename O, typename Map, typename Comb, typename Fin>
void reduce_generic(const ReduceLayout& L, const T* x, O* y, A init, Map map, Comb comb, Fin fin) {
  const int64_t rows = L.rows();
  const int64_t inner = L.inner;
  const int64_t n_red = static_cast<int64_t>(L.red_offsets.size());
  const int64_t* red = L.red_offsets.data();
  if (rows == 0) return;
  if (!L.inner_reduced && inner == 0) return;  // an empty kept inner dim: no outputs to fill
  if (L.inner_reduced) {
    // One output per row; fold n_red contiguous runs of `inner`. Four accumulators let the
    // contiguous loop overlap its latency (comb is associative).
    auto fold = [&](int64_t row, int64_t base, int64_t k0, int64_t k1, int64_t j0, int64_t j1) {
      A a0 = init, a1 = init, a2 = init, a3 = init;
      for (int64_t k = k0; k < k1; ++k) {
        const T* p = x + base + red[k];
        int64_t jb = k == k0 ? j0 : 0, je = k == k1 - 1 ? j1 : inner;
        int64_t j = jb;
        for (; j + 4 <= je; j += 4) {
          a0 = comb(a0, map(p[j], row));
          a1 = comb(a1, map(p[j + 1], row));
          a2 = comb(a2, map(p[j + 2], row));
          a3 = comb(a3, map(p[j + 3], row));
        }
        for (; j < je; ++j) a0 = comb(a0, map(p[j], row));
      }
      return comb(comb(a0, a1), comb(a2, a3));
    };
    const int64_t work = n_red * inner;
    if (rows >= num_threads() || work * rows < 65536 || work == 0) {
      int64_t min_rows = std::max<int64_t>(1, 16384 / std::max<int64_t>(work, 1));
      parallel_for(rows, min_rows, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          A a = work == 0 ? init : fold(r, L.row_offset(r), 0, n_red, 0, inner);
          y[r] = fin(a, r);
        }
      });
      return;
    }
    // Few long rows (reduce-all and the like): split each row's elements into chunks, fold the
    // chunks in parallel, then combine the partial results in order.
    const int64_t chunks = std::min<int64_t>(num_threads() * 4, (work + 16383) / 16384);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t base = L.row_offset(r);
      std::vector<A> part(static_cast<size_t>(chunks), init);
      parallel_for(chunks, 1, [&](int64_t c0, int64_t c1) {
        for (int64_t c = c0; c < c1; ++c) {
          int64_t e0 = work * c / chunks, e1 = work * (c + 1) / chunks;
          if (e0 == e1) continue;
          int64_t k0 = e0 / inner, j0 = e0 % inner;
          int64_t k1 = (e1 - 1) / inner + 1, j1 = (e1 - 1) % inner + 1;
          part[static_cast<size_t>(c)] = fold(r, base, k0, k1, j0, j1);
        }
      });
      A a = init;
      for (const A& p : part) a = comb(a, p);
      y[r] = fin(a, r);
    }
    return;
  }
  // Inner kept: `inner` outputs per row, each reduced position adds one contiguous run. Tasks are
  // (row, column block) pairs so a single wide row still runs in parallel.
  const int64_t block = std::min<int64_t>(inner, 1024);
  const int64_t col_blocks = (inner + block - 1) / block;
  const int64_t tasks = rows * col_blocks;
  const int64_t work_per_task = std::max<int64_t>(1, n_red * block);
  parallel_for(tasks, std::max<int64_t>(1, 16384 / work_per_task), [&](int64_t t0, int64_t t1) {
    std::vector<A> acc(static_cast<size_t>(block));
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t r = t / col_blocks;
      const int64_t c0 = (t % col_blocks) * block;
      const int64_t n = std::min(block, inner - c0);
      const int64_t base = L.row_offset(r) + c0;
      const int64_t o0 = r * inner + c0;
      std::fill(acc.begin(), acc.begin() + n, init);
      for (int64_t k = 0; k < n_red; ++k) {
        const T* p = x + base + red[k];
        for (int64_t j = 0; j < n; ++j) acc[j] = comb(acc[j], map(p[j], o0 + j));
      }
      for (int64_t j = 0; j < n; ++j) y[o0 + j] = fin(acc[j], o0 + j);
    }
  });
}

/// Calls fn(in_offset, out_index) for every input element of the layout (in parallel over rows):
/// the second pass of normalizations that write one output per input from per-group statistics.
template <typename Fn>
void reduce_layout_for_each(const ReduceLayout& L, Fn fn) {
  const int64_t rows = L.rows();
  const int64_t inner = L.inner;
  const int64_t n_red = static_cast<int64_t>(L.red_offsets.size());
  const int64_t work = std::max<int64_t>(1, n_red * inner);
  parallel_for(rows, std::max<int64_t>(1, 16384 / work), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t base = L.row_offset(r);
      for (int64_t k = 0; k < n_red; ++k) {
        const int64_t off = base + L.red_offsets[static_cast<size_t>(k)];
        if (L.inner_reduced)
          for (int64_t j = 0; j < inner; ++j) fn(off + j, r);
        else
          for (int64_t j = 0; j < inner; ++j) fn(off + j, r * inner + j);
      }
    }
  });
}

}  // namespace fusec::cpu
