// ai.fusec ExpertMatMul (docs/ops.md): Y[s] = X[s / repeat] · W[idx[s]] (+ B[idx[s]]), each row
// multiplied by the expert matrix its index picks, read where it is in the weights; float32 sums.
// It runs as a grouped GEMM (expert_grouped.cu: the rows sorted by expert on the device, each
// expert's matrix read once per tile of its rows): on tensor cores at fp16 and bf16 where K (and M,
// for W stored [E, K, M]) are multiples of 8, else on FMA tiles. With FUSEC_EXPERT_GROUPED=0, or
// past 4096 experts, each row is a matrix-vector product: one warp an output value along K where
// W's rows are K long (trans_w), else one thread a column. An index outside [-E, E) writes nothing
// for its row and is reported at `err` (device_error.h).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/core/device_error.h"
#include "ir/dtype.h"

namespace fusec::cuda {

struct ExpertMatMulPlan {
  DType dtype = DType::Undefined;  // X, W, B and Y: float32, float16 or bfloat16
  DType index_type = DType::Int64;
  bool trans = false;  // W is [E, M, K] (else [E, K, M])
  int64_t rows = 0, k = 0, m = 0, experts = 0, repeat = 1;
  bool per_row = false;  // FUSEC_EXPERT_GROUPED=0: the per-row kernels even where the grouped GEMM applies
};

/// Whether the plan runs as a grouped GEMM (float32, float16 or bfloat16; at most 4096 experts).
bool expert_matmul_grouped(const ExpertMatMulPlan& p);

/// Whether that GEMM runs on tensor cores (fp16/bf16, K and, for W stored [E, K, M], M multiples of
/// 8, given 16-byte aligned X and W, as the executor's buffers are), else on FMA tiles.
bool grouped_on_tensor_cores(const ExpertMatMulPlan& p);

/// The workspace the grouped GEMM routes its rows in (0 where the plan does not run grouped).
size_t expert_matmul_workspace_bytes(const ExpertMatMulPlan& p);

/// The grouped GEMM; false, launching nothing, where it does not apply (then the per-row kernels do).
[[nodiscard]] bool launch_expert_matmul_grouped(const ExpertMatMulPlan& p, const void* x, const void* w,
                                                const void* idx, const void* b, void* y, cudaStream_t s,
                                                const DeviceErrorSite& err, void* workspace);

/// The grouped GEMM where it applies, else the per-row kernels. False for a dtype neither takes.
[[nodiscard]] bool launch_expert_matmul(const ExpertMatMulPlan& p, const void* x, const void* w, const void* idx,
                                        const void* b, void* y, cudaStream_t s, const DeviceErrorSite& err,
                                        void* workspace);

}  // namespace fusec::cuda
