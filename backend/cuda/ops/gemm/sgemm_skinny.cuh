// The skinny SGEMM's launchers, for sgemm.cu's configuration table; sgemm_skinny.cu has the design.
#pragma once
#include <cuda_runtime.h>

#include "backend/cuda/ops/gemm/sgemm.cuh"

namespace fusec::cuda {

/// Launches the skinny kernel for a weight B stored [N,K] (trans_b): CTAs of 16 rows x 4·CT
/// columns of C (CT 2 or 4), each over a 1/SPLIT share of K through a STAGES-deep cp.async ring;
/// SPLIT > 1 runs the shares as a cluster that adds its ranks' partial sums. Returns false,
/// launching nothing, unless trans_b, K, lda and ldb are multiples of 4, A and B are 16-byte
/// aligned and ceil(M / 16) fits the grid; also false when the shared memory cannot be raised or
/// the cluster launch fails (its error is left for the caller's cudaGetLastError).
template <int CT, int SPLIT, int STAGES>
[[nodiscard]] bool launch_sgemm_skinny(const SgemmArgs& a, cudaStream_t s);

// The forms sgemm_skinny.cu instantiates.
extern template bool launch_sgemm_skinny<2, 1, 2>(const SgemmArgs&, cudaStream_t);
extern template bool launch_sgemm_skinny<4, 1, 3>(const SgemmArgs&, cudaStream_t);
extern template bool launch_sgemm_skinny<4, 2, 3>(const SgemmArgs&, cudaStream_t);

}  // namespace fusec::cuda
