// CPU kernels for NonZero and Unique, copying out what ir/ops/selection.h computes. Their outputs'
// sizes are their data's, so each kernel makes its outputs itself (Writes::Itself): sizing them by
// inference first would run the same computation twice per run.
#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cpu/kernels/common.h"
#include "ir/ops/selection.h"

namespace fusec::cpu {

namespace {

/// The coordinates of x's nonzero elements, in C order: y[axis, k] is element k's index on axis.
/// The coordinates advance with the ascending offsets and divide only where a dim carries into the
/// one before it (a division per element cost more than finding the elements). The flat input is
/// cut into pieces, each counted, then scanned again and written, on its own thread: the counts of
/// every piece first, so that each knows where its coordinates start. A detector's score test can
/// select most of a million elements (RetinaNet with random weights: 10 of its tail's 13 ms were
/// three NonZeros, on one thread).
void nonzero_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t total = x.numel(), rank = static_cast<int64_t>(x.rank());
  constexpr int64_t kPiece = int64_t{1} << 16;
  const int64_t pieces = std::max<int64_t>(1, (total + kPiece - 1) / kPiece);
  auto piece = [&](int64_t p) { return std::pair(p * kPiece, std::min(total, (p + 1) * kPiece)); };
  std::vector<int64_t> start(static_cast<size_t>(pieces) + 1, 0);
  parallel_for(pieces, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      int64_t count = 0;
      const auto [b, e] = piece(p);
      selection::for_each_nonzero(x, b, e, [&](int64_t) { ++count; });
      start[static_cast<size_t>(p) + 1] = count;
    }
  });
  for (size_t p = 1; p < start.size(); ++p) start[p] += start[p - 1];
  const int64_t n = start.back();
  Tensor& y = ctx.output(0) = Tensor::uninitialized(DType::Int64, {rank, n});
  if (rank == 0 || n == 0) return;
  int64_t* py = y.data<int64_t>();
  parallel_for(pieces, 1, [&](int64_t p0, int64_t p1) {
    std::vector<int64_t> idx(static_cast<size_t>(rank));
    for (int64_t p = p0; p < p1; ++p) {
      const auto [b, e] = piece(p);
      // The coordinates of the piece's first element, then carried from offset to offset.
      int64_t cur = b, col = start[static_cast<size_t>(p)];
      for (int64_t a = rank - 1, rest = cur; a >= 0; --a) {
        idx[static_cast<size_t>(a)] = rest % x.dim(static_cast<size_t>(a));
        rest /= x.dim(static_cast<size_t>(a));
      }
      selection::for_each_nonzero(x, b, e, [&](int64_t o) {
        idx.back() += o - cur;
        cur = o;
        for (size_t a = idx.size() - 1; a > 0 && idx[a] >= x.dim(a); --a) {
          idx[a - 1] += idx[a] / x.dim(a);
          idx[a] %= x.dim(a);
        }
        for (int64_t a = 0; a < rank; ++a) py[a * n + col] = idx[static_cast<size_t>(a)];
        ++col;
      });
    }
  });
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
