// ai.fusec ExpertMatMul (docs/ops.md): Y[s] = X[s / repeat] · W[idx[s]] (+ B[idx[s]]), each row
// multiplied by the expert matrix its index picks, read where it is in the weights. One warp an
// output value along K where W's rows are K long (trans_w), else one thread a column; float32 sums.
// An index outside [-E, E) writes nothing for its row and is reported at `err` (device_error.h).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/core/device_error.h"
#include "ir/dtype.h"

namespace fusec::cuda {

struct ExpertMatMulPlan {
  DType dtype = DType::Undefined;  // X, W, B and Y: float32, float16 or bfloat16
  DType index_type = DType::Int64;
  bool trans = false;  // W is [E, M, K] (else [E, K, M])
  int64_t rows = 0, k = 0, m = 0, experts = 0, repeat = 1;
};

/// False for a dtype the kernels do not take.
[[nodiscard]] bool launch_expert_matmul(const ExpertMatMulPlan& p, const void* x, const void* w, const void* idx,
                                        const void* b, void* y, cudaStream_t s, const DeviceErrorSite& err);

}  // namespace fusec::cuda
