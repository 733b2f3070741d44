// Broadcasting as binary ops did it before opset 7 (Add, Mul, Pow, Equal, And... with the
// `broadcast`/`axis` attributes), shared by their schemas and CPU kernels.
//
//   A: 2x3x4x5    B: 3x4   axis=1   ->  B is read as 1x3x4x1, output is A's shape
//   A: 2x3x4x5    B: 5     (no axis) -> B lines up with A's trailing dims
//
// broadcast=0 means the shapes must be equal. Numpy broadcasting of A with the padded B then
// gives exactly the old semantics, so kernels only reshape B and reuse the modern loop.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ir/op_schema.h"

namespace fusec {

/// True when the node's schema is a pre-opset-7 entry (it declares `broadcast`) and the node
/// sets broadcast=1.
inline bool legacy_broadcast_enabled(const NodeAttrs& n) {
  return n.schema().find_attr("broadcast") != nullptr && n.attr_int("broadcast") != 0;
}

/// Where B's first dim lines up in A; fails naming the node when B does not fit inside A.
inline int64_t legacy_broadcast_axis(size_t rank_a, size_t rank_b, const NodeAttrs& n) {
  const auto ra = static_cast<int64_t>(rank_a), rb = static_cast<int64_t>(rank_b);
  if (rb > ra) n.fail("legacy broadcast: B has rank " + std::to_string(rb) + ", more than A's " + std::to_string(ra));
  int64_t axis = n.has_attr("axis") ? n.attr_int("axis") : ra - rb;
  if (axis < 0) axis += ra;
  if (axis < 0 || axis > ra - rb)  // not axis + rb > ra: axis comes from the file and may be huge
    n.fail("legacy broadcast: axis " + std::to_string(n.attr_int("axis")) + " does not fit B's rank " +
           std::to_string(rb) + " into A's rank " + std::to_string(ra));
  return axis;
}

/// B's dims padded with 1s to A's rank so that they start at `axis`.
template <typename D>
std::vector<D> legacy_padded_dims(const std::vector<D>& b, size_t rank_a, int64_t axis) {
  std::vector<D> out(rank_a, D(1));
  for (size_t i = 0; i < b.size(); ++i) out[static_cast<size_t>(axis) + i] = b[i];
  return out;
}

}  // namespace fusec
