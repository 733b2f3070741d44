// Numerical verification of an optimization: original and optimized graphs run on the CPU
// reference with the same seeded random inputs; every output is compared.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace fusec {

/// Seeded random data for a graph input (floats uniform in [-1, 1); ints in [0, int_end), 64 by
/// default, small enough for token ids; bools 0/1). The input's name is mixed into the seed so
/// inputs of the same shape differ.
Tensor random_input(const Value& v, uint64_t seed, int64_t int_end = 64);
/// random_input for each of the graph's inputs, in order; an integer input the graph reads only as
/// a float value (mask_input) is drawn from {0, 1} whatever `int_end` is.
std::vector<Tensor> random_inputs(const Graph& g, uint64_t seed, int64_t int_end = 64);

/// Whether the graph reads integer input `v` only as a float value: every path from it passes
/// through views (Unsqueeze, Squeeze, Reshape, Expand, Slice, Transpose, Identity, Flatten) to a
/// Cast to a float type, and none reaches anything else (an index, a comparison, integer
/// arithmetic) but a Shape or Size, which read no value. Such an input is a mask or a flag (transformers'
/// attention_mask as Funnel, BERT and T5 read it): its values are 0 and 1, and random integers in [0, 64) would scale
/// the masks it makes to magnitudes no model sees, where float rounding, not the optimization, decides the output.
bool mask_input(const Value& v);
/// Whether an input of g is an integer tensor: random values in [0, 64) can be out of the model's
/// own range there, and 0/1 (masks, small ids) the values to draw instead.
bool has_integer_input(const Graph& g);

struct Tolerance {
  double rtol = 1e-4, atol = 1e-5;
};

struct OutputCheck {
  std::string name;
  double max_abs = 0;           // max |optimized - original|
  double max_rel = 0;           // max |optimized - original| / max |original| (relative to the output's scale)
  double max_ref = 0;           // max |original|, the scale max_rel divides by
  bool ok = true;               // every element within max(atol, rtol / 10 * max|original|) + rtol * |original|
                                // (NaN matches NaN)
  std::string problem;          // dtype/shape mismatch, or why nothing could be compared
  int64_t elements = 0;         // elements seen over all runs
  int64_t finite_original = 0;  // of them, where the original's value is finite (compared in value)
  /// Every element of the original was NaN or infinite: the check compared nothing, and says so
  /// instead of passing (verify_equivalence sets ok = false).
  bool nothing_compared() const { return elements > 0 && finite_original == 0; }
};

struct VerifyResult {
  int runs = 0;
  std::vector<OutputCheck> outputs;  // per graph output, worst over all runs
  bool ok = true;
  /// Integer inputs were drawn from {0, 1}: in [0, 64) the original gave no finite value for some
  /// output (an attention mask computed as (1 - m) * finfo.min overflows), or refused them (an
  /// index out of range: OPT's positions from its attention_mask), so the check ran again.
  bool binary_ints = false;
  /// Integer inputs drawn from {0, 1} in every run because the graph reads them only as float
  /// values (mask_input).
  std::vector<std::string> mask_inputs;
};

/// Compares two tensors under the tolerance, folding the result into `check`.
void compare_outputs(const Tensor& optimized, const Tensor& original, const Tolerance& tol, OutputCheck& check);

VerifyResult verify_equivalence(const Graph& original, const Graph& optimized, int runs, uint64_t seed,
                                const Tolerance& tol);

struct LayerCheck {
  bool ok = true;
  std::string node, op_type, value;  // the first optimized node whose output diverges
  OutputCheck detail;
  size_t compared = 0;  // values compared (present in both graphs)
};

/// Runs both graphs once exposing every intermediate, and compares the values both graphs share
/// by name, in the optimized graph's order; names the first node whose output diverges.
LayerCheck check_layers(const Graph& original, const Graph& optimized, uint64_t seed, const Tolerance& tol);

}  // namespace fusec
