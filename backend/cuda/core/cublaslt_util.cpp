#include "backend/cuda/core/cublaslt_util.h"

#include <cstdint>

namespace fusec::cuda {

cudaDataType_t lt_type(DType t) {
  switch (t) {
    case DType::Float32:
      return CUDA_R_32F;
    case DType::Float16:
      return CUDA_R_16F;
    case DType::BFloat16:
      return CUDA_R_16BF;
    case DType::Float64:
      return CUDA_R_64F;
    default:
      return CUDA_R_8I;  // never used: callers accept float storage types only
  }
}

std::vector<cublasLtMatmulHeuristicResult_t> lt_heuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                                          cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                                          cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                                          size_t max_workspace, uint32_t min_alignment, int count) {
  cublasLtMatmulPreference_t pref = nullptr;
  LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_workspace,
                                       sizeof max_workspace);
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    cublasLtMatmulPreferenceSetAttribute(pref, attr, &min_alignment, sizeof min_alignment);
  std::vector<cublasLtMatmulHeuristicResult_t> out(static_cast<size_t>(count));
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle, desc, a, b, c, d, pref, count, out.data(), &found);
  cublasLtMatmulPreferenceDestroy(pref);
  out.resize(st == CUBLAS_STATUS_SUCCESS ? static_cast<size_t>(found) : 0);
  return out;
}

std::string lt_algo_identity(const cublasLtMatmulAlgo_t& a) {
  std::string id;
  for (auto attr :
       {CUBLASLT_ALGO_CONFIG_ID, CUBLASLT_ALGO_CONFIG_TILE_ID, CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
        CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION,
        CUBLASLT_ALGO_CONFIG_STAGES_ID, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID}) {
    // Each attribute is an integer of its own width, and must be read at exactly that width.
    uint64_t v = 0;
    size_t need = 0;
    cublasLtMatmulAlgoConfigGetAttribute(&a, attr, nullptr, 0, &need);
    if (need == 0 || need > sizeof v ||
        cublasLtMatmulAlgoConfigGetAttribute(&a, attr, &v, need, &need) != CUBLAS_STATUS_SUCCESS)
      v = ~uint64_t{0};
    id += (id.empty() ? "" : ",") + std::to_string(v);
  }
  return id;
}

}  // namespace fusec::cuda
