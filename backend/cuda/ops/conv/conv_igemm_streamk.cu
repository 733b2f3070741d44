// The stream-K configurations' kernel instances (conv_igemm.cu's table points at them): compiled
// here, apart from the others, so that a parallel build splits the conv's kernels over two cores.
#include "backend/cuda/ops/conv/conv_igemm_launch.cuh"

namespace fusec::cuda::conv_igemm_detail {

FUSEC_CONV_IGEMM_STREAMK_INSTANCES(template)

}  // namespace fusec::cuda::conv_igemm_detail
