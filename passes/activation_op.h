// An activation node as the fused ops' `activation` attribute names it (docs/ops.md):
// fuse_matmul_bias takes it into a FusedMatMul, fuse_gated_matmul into a GatedMatMul's gate,
// fuse_conv_activation into a FusedConv. One reading of the ops, so the three agree.
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

/// Whether `n` is one of the activation ops (Relu, Clip, LeakyRelu, PRelu, HardSigmoid, Sigmoid,
/// Tanh, HardSwish, Gelu; Gelu also in ai.fusec), whether or not activation_of can express it.
bool is_activation_op(const Node* n);

/// `n` as an activation, or nullopt with `why` set when it is an activation op with something the
/// attribute cannot express (a computed Clip bound, a PRelu slope per channel, an unknown Gelu
/// approximation). Returns a nullopt with empty `why` for ops that are not activations at all.
/// A PRelu with one slope everywhere is LeakyRelu.
std::optional<ActivationOp> activation_of(Node* n, std::string* why);

}  // namespace fusec
