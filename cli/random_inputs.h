// Made-up inputs for the commands that run a model on data the user did not give (bench, profile,
// and run's inputs without a file).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace fusec {

/// Seeded random inputs for g (passes/verify.h's random_input: floats in [-1, 1), integers in
/// [0, 64)), with which `first_run` runs the model once. Where the model refuses them (a BadInput
/// error, such as an index out of range) and has integer inputs, they are drawn again from {0, 1}
/// and first_run runs again, with a note on stderr once it has run: random integers can be out of the model's own
/// range (OPT's positions are a running sum of its attention_mask, past its position table with
/// values up to 63) where 0/1 are the masks and small ids a model takes. An error on {0, 1} too is
/// the model's own, and propagates. Inputs in `given` (run's files) are used as they are and never
/// drawn.
std::vector<Tensor> random_inputs_that_run(const Graph& g, uint64_t seed,
                                           const std::function<void(const std::vector<Tensor>&)>& first_run,
                                           const std::map<std::string, Tensor>& given = {});

}  // namespace fusec
