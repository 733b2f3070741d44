// Relative-position terms added to a finer view of the attention scores: ViTDet's decomposed
// relative positions (transformers' VitDet, detectron2's and SAM-style image encoders) view the
// [N, S, S] scores as [N, qh, qw, kh, kw], add a term over the key rows and one over the key
// columns (each computed from Q), and view the sum back before the Softmax. A view that its second
// view undoes is the identity on the positions, so R2(R1(s) + t) = s + R2(expand(t)): the terms
// are a bias on the scores themselves, an added mask that fuse_attention takes.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"

namespace fusec::attention {

/// If `softmax` reads Reshape(Add(...Add(Reshape(s), t1)..., tn)) where the outer Reshape gives s
/// back its static shape, s is Q·Kᵀ (a MatMul, or one scaled by a constant scalar), every Add keeps
/// the finer view's shape and no term depends on s, rewrites it as Add(s, Reshape(Expand(t1 + ... +
/// tn))) and returns true, with `what` (if given) describing it for --explain and `gone` naming the
/// nodes it removed. Changes nothing and returns false otherwise.
bool hoist_view_bias(Graph& g, Node* softmax, std::string* what = nullptr, std::vector<std::string>* gone = nullptr);

}  // namespace fusec::attention
