// Helpers shared by the Conv and pool kernels: window geometry padded to three spatial dims, so
// one loop nest serves 1-D, 2-D and 3-D.
#pragma once
#include <algorithm>
#include <cstdint>

#include "backend/cpu/kernel.h"
#include "ir/ops/conv_geometry.h"

namespace fusec::cpu {

/// Spatial geometry with leading dims filled in (size 1, kernel 1, stride 1, no padding).
struct Geo3 {
  int64_t in[3], k[3], s[3], d[3], pb[3], pe[3], out[3];
  int64_t in_size() const { return in[0] * in[1] * in[2]; }
  int64_t out_size() const { return out[0] * out[1] * out[2]; }
  int64_t kernel_size() const { return k[0] * k[1] * k[2]; }
};

/// False if the geometry has more than three spatial dims.
inline bool to_geo3(const WindowGeometry& g, Geo3& o) {
  const size_t n = g.rank();
  if (n > 3) return false;
  for (size_t i = 0; i < 3; ++i) {
    const bool real = i >= 3 - n;
    const size_t j = real ? i - (3 - n) : 0;
    o.in[i] = real ? g.in[j] : 1;
    o.k[i] = real ? g.kernel[j] : 1;
    o.s[i] = real ? g.stride[j] : 1;
    o.d[i] = real ? g.dilation[j] : 1;
    o.pb[i] = real ? g.pad_begin[j] : 0;
    o.pe[i] = real ? g.pad_end[j] : 0;
    o.out[i] = real ? g.out[j] : 1;
  }
  return true;
}

/// The positions o in [0, count) with 0 <= o*s + off < limit, as [lo, hi).
inline void valid_range(int64_t count, int64_t limit, int64_t s, int64_t off, int64_t& lo, int64_t& hi) {
  lo = off >= 0 ? 0 : ceil_div(-off, s);
  hi = off >= limit ? 0 : floor_div(limit - 1 - off, s) + 1;
  lo = std::min(lo, count);
  hi = std::clamp(hi, lo, count);
}

/// Fails unless `t` has the dims the kernel computed (the executor allocates outputs from
/// inference; a mismatch must be an error, never a write past the end).
inline void require_dims(const KernelContext& ctx, const Tensor& t, const std::vector<int64_t>& want) {
  if (t.dims() != want) ctx.fail("output has shape " + dims_str(t.dims()) + ", expected " + dims_str(want));
}

/// [N, C, spatial out...] for a window geometry.
inline std::vector<int64_t> nc_and_out(int64_t n, int64_t c, const WindowGeometry& g) {
  std::vector<int64_t> d{n, c};
  d.insert(d.end(), g.out.begin(), g.out.end());
  return d;
}

}  // namespace fusec::cpu
