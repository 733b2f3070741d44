// NonMaxSuppression's selection, shared by its inference (the count of selected boxes sizes the
// output; the values are known at run time) and its CPU kernel (backend/cpu/kernels/detection.cpp).
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "ir/op_schema.h"
#include "ir/tensor.h"

namespace fusec::detection {

/// The selected boxes as (batch, class, box) rows: per batch and class, boxes whose score is above
/// score_threshold (when given), best score first (ties: lower index first), each kept unless its
/// IoU with a box already kept exceeds iou_threshold, at most max_output_boxes_per_class of them.
/// Inputs: boxes [B, N, 4], scores [B, C, N], then the three optional scalars (nullptr if absent).
std::vector<std::array<int64_t, 3>> non_max_suppression(const NodeAttrs& where, const Tensor& boxes,
                                                        const Tensor& scores, const Tensor* max_output,
                                                        const Tensor* iou_threshold, const Tensor* score_threshold);

}  // namespace fusec::detection
