#pragma once
#include "passes/pass.h"

namespace fusec {

/// Folds an inference BatchNormalization, or a per-channel constant Mul/Add, into the weight and
/// bias of the Conv/Gemm/MatMul before it (see fold_batchnorm.cpp). Writes standard ONNX only.
class FoldBatchNormPass : public Pass {
 public:
  std::string name() const override { return "fold_batchnorm"; }
  bool run(Graph& g, PassContext& ctx) override;
};

}  // namespace fusec
