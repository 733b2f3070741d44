// CPU kernels for NonZero and Unique, copying out what ir/ops/selection.h computes. Their outputs'
// sizes are their data's, so each kernel makes its outputs itself (Writes::Itself): sizing them by
// inference first would run the same computation twice per run.
#include <cstring>

#include "backend/cpu/kernels/common.h"
#include "ir/ops/selection.h"

namespace fusec::cpu {

namespace {

/// The coordinates of x's nonzero elements, in C order: y[axis, k] is element k's index on axis.
/// The coordinates advance with the ascending offsets and divide only where a dim carries into the
/// one before it (a division per element cost more than finding the elements).
void nonzero_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const std::vector<int64_t> at = selection::nonzero_offsets(x);
  const int64_t n = static_cast<int64_t>(at.size()), rank = static_cast<int64_t>(x.rank());
  Tensor& y = ctx.output(0) = Tensor(DType::Int64, {rank, n});
  if (rank == 0) return;
  int64_t* py = y.data<int64_t>();
  std::vector<int64_t> idx(static_cast<size_t>(rank), 0);
  int64_t cur = 0;
  for (int64_t k = 0; k < n; ++k) {
    const int64_t o = at[static_cast<size_t>(k)];
    idx.back() += o - cur;
    cur = o;
    for (size_t a = idx.size() - 1; a > 0 && idx[a] >= x.dim(a); --a) {
      idx[a - 1] += idx[a] / x.dim(a);
      idx[a] %= x.dim(a);
    }
    for (int64_t a = 0; a < rank; ++a) py[a * n + k] = idx[static_cast<size_t>(a)];
  }
}

void unique_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  std::optional<int64_t> axis;
  if (ctx.has_attr("axis")) axis = normalize_axis(ctx.attr_int("axis"), static_cast<int64_t>(x.rank()), ctx);
  const selection::Unique u = selection::unique(x, axis, ctx.attr_int("sorted") != 0);
  const int64_t m = static_cast<int64_t>(u.first.size());
  std::vector<int64_t> ydims{m};
  if (axis) {
    ydims = x.dims();
    ydims[static_cast<size_t>(*axis)] = m;
  }
  ctx.output(0) = Tensor(x.dtype(), ydims);
  // Y: each distinct slice copied from its first appearance.
  const size_t row = static_cast<size_t>(u.inner) * dtype_size(x.dtype());
  const char* src = static_cast<const char*>(x.raw());
  char* dst = static_cast<char*>(ctx.output(0).raw());
  for (int64_t o = 0; o < u.outer; ++o)
    for (int64_t j = 0; j < m; ++j)
      std::memcpy(dst + static_cast<size_t>(o * m + j) * row, src + static_cast<size_t>(o * u.d + u.first[j]) * row,
                  row);
  const std::vector<int64_t>* lists[] = {nullptr, &u.first, &u.inverse, &u.counts};
  for (size_t i = 1; i < 4; ++i) {
    if (!ctx.has_output(i)) continue;
    const std::vector<int64_t>& v = *lists[i];
    Tensor& y = ctx.output(i) = Tensor(DType::Int64, {static_cast<int64_t>(v.size())});
    std::copy(v.begin(), v.end(), y.data<int64_t>());
  }
}

}  // namespace

void register_selection_kernels(KernelRegistry& r) {
  r.add("NonZero", nonzero_kernel, "", Writes::Itself);
  r.add("Unique", unique_kernel, "", Writes::Itself);
}

}  // namespace fusec::cpu
