// What shape inference knows of a small integer tensor whose value is not known: one Dim per
// element, static, a named symbol or unknown. Exporters build Reshape and Expand targets out of
// the input's own shape (Shape -> Gather -> Unsqueeze -> Concat); with the batch dim left open the
// target's value is never known, and before this every dim of the Reshape's output was lost,
// the head count and head size with it, so the attention and rotary fusions could not match a
// model whose batch was not bound (--batch). Carried element by element, the target reads
// [batch, 128, -1, 64] and the output [batch, 128, 32, 64].
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ir/shape.h"
#include "ir/tensor.h"

namespace fusec {

class InferContext;

/// One element: a known integer (negative ones too: a Reshape target's -1), or a named symbol
/// (the dim of that name), or neither (unknown).
struct DimValue {
  std::optional<int64_t> value;
  std::string symbol;

  DimValue() = default;
  explicit DimValue(int64_t v) : value(v) {}
  /// A tensor dim as an element: its size, its symbol, or unknown.
  static DimValue of(const Dim& d);
  bool known() const { return value.has_value(); }
  bool named() const { return !value && !symbol.empty(); }
  bool operator==(const DimValue& o) const { return value == o.value && symbol == o.symbol; }
};

/// A dim as a product: a coefficient times open dims by name (sorted), which a Dim writes as one
/// canonical symbol, "12·batch" (U+00B7 between factors). A view that merges an open batch with a
/// static dim ([B, H, S, D] -> [B·H, S, D], dynamo's Kᵀ; GPT-2's [B·S, E] before its Gemms) then
/// keeps a name the view back can divide out again.
struct DimProduct {
  int64_t coef = 1;
  std::vector<std::string> names;
  bool operator==(const DimProduct& o) const { return coef == o.coef && names == o.names; }
};
/// d as a product: its size, or its symbol's factors; nullopt for an unknown (unnamed) dim.
std::optional<DimProduct> product_of(const Dim& d);
/// The product as a Dim: static when no name is left, else the canonical symbol.
Dim dim_of(const DimProduct& p);
/// a·b, or nullopt on int64 overflow.
std::optional<DimProduct> times(const DimProduct& a, const DimProduct& b);
/// a / b when b divides a exactly (its names among a's, its coefficient dividing a's), else nullopt.
std::optional<DimProduct> divided(const DimProduct& a, const DimProduct& b);

/// The elements of a known int32/int64 tensor of rank 0 or 1 with at most kMaxDimsValue elements,
/// nullopt otherwise.
std::optional<std::vector<DimValue>> dims_value_of(const Tensor& t);

/// The elements of node c's output 0 from what is known of its inputs' values, for the ops that
/// carry shapes around (Shape, Gather, Slice, Concat, Unsqueeze, Squeeze, Reshape, Cast, Identity,
/// and Add/Sub/Mul/Div/Equal/Max/Min/Where element by element); nullopt where nothing is known.
std::optional<std::vector<DimValue>> infer_dims_value(const InferContext& c);

/// Larger integer tensors are not shape vectors.
inline constexpr size_t kMaxDimsValue = 64;

}  // namespace fusec
