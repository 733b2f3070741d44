// An activation node as the fused products' `activation` attribute names it (docs/ops.md):
// fuse_matmul_bias takes it into a FusedMatMul, fuse_gated_matmul into a GatedMatMul's gate.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace fusec {

struct ActivationOp {
  Node* node = nullptr;
  std::string name;  // the `activation` attribute's value ("Relu", "GeluTanh", ...)
  std::vector<float> params;
};

/// `n` as an activation, or nullopt with `why` set when it is an activation op with something the
/// attribute cannot express (a computed Clip bound). Returns a nullopt with empty `why` for ops
/// that are not activations at all.
std::optional<ActivationOp> activation_of(Node* n, std::string* why);

}  // namespace fusec
