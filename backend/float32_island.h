// The values a reduced-precision run keeps in float32. fp16 and bf16 storage keep about three
// significant digits, which is harmless where a consumer needs relative precision (a product, an
// activation) and wrong where it needs the absolute value of a number that can be large:
//   - the angle of Sin, Cos or Tan: a rotary embedding's position x frequency, where fp16's step
//     is 2 radians at position 2048;
//   - a GridSample grid or RoiAlign's boxes: coordinates, 0.25 px apart on a 1024-px axis;
//   - a float cast to an integer type: an index, and fp16 has no 2049.
// Such a value stays float32, and so does the cheap arithmetic and data movement that computes it,
// followed back from the consumer to graph inputs, constants, and ops that compute with weights (a
// Conv's or a larger MatMul's output carries a relative error of its own and stays in the run's
// type). The island's nodes run at strict float32: TF32's 10-bit mantissa rounds positions too.
// Where a position is carried forward (an offset added, a scaling) to a difference with another
// position, the carry and the difference join the island: the difference cancels the positions'
// leading digits, and their fp16 rounding becomes its error.
// At fp16 and bf16 it also holds a statistic of squares, from the square to its root: an activation
// past 256 squares past fp16's 65504 (transformers' outlier features reach thousands), and an
// unfused LayerNorm or RMSNorm then divides its row by inf. That part does not extend back from the
// square: the activation being squared is in range.
#pragma once
#include <cstddef>
#include <unordered_set>

#include "backend/precision.h"
#include "ir/graph.h"

namespace fusec {

struct Float32Island {
  std::unordered_set<const Node*> nodes;    // run at float32: float inputs widened, outputs float32
  std::unordered_set<const Value*> values;  // stored float32: island outputs, and the graph inputs and
                                            // constants an absolute value is computed from
  std::unordered_set<const Value*> positions;  // the values among them that hold an absolute size
                                               // (read for it, computing it, or carried forward to a
                                               // difference); not the statistics of squares

  bool empty() const { return nodes.empty() && values.empty(); }
  /// v's device storage type in a run at precision p: float32 in the island, else storage_dtype().
  DType storage(Precision p, const Value& v) const;
};

/// The island of graph g at precision p (empty at fp32). Reads shapes only for MatMul's
/// contraction size: a MatMul over K = 1 (an outer product, as a rotary embedding's positions x
/// frequencies) is cheap; an unknown or larger K is a computation and ends the island.
Float32Island float32_island(const Graph& g, Precision p);

/// In a plan's own copy of a graph: undoes the fusion of a position's sum into a conv or a matmul
/// (FusedConv or FusedMatMul with a residual Z and no activation, Y = product + Z) where the island
/// wants Y or holds Z, as where RAFT's optimized refinement adds each predicted flow to its
/// coordinates in the flow conv's epilogue. The product stays in the run's type and the sum becomes
/// an Add the island holds; nothing changes at fp32. Returns how many sums it split off.
size_t split_position_sums(Graph& g, Precision p);

/// Whether n reads input i for its absolute value (the consumers listed above). Such an input is
/// read as it is stored; every other input of a node outside the island in the run's type.
bool reads_absolute_value(const Node& n, size_t i);

}  // namespace fusec
