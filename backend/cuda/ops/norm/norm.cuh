// Launchers of the normalization kernels (norm.cu): one row-normalization family for
// LayerNormalization, SkipLayerNorm, LayerNormGelu, SimplifiedLayerNorm and RMSNormalization,
// InstanceNormalization and GroupNormalization, plus BatchNormalization in inference mode.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "ir/dtype.h"

namespace fusec::cuda {

enum class NormAct : int { None = 0, GeluErf = 1, GeluTanh = 2 };

/// Normalizes `rows` contiguous rows of `n` values. x, skip, gamma, beta, y and sum_out share the
/// storage dtype `dtype` (float32, float16 or bfloat16); statistics are float32.
struct RowNormArgs {
  DType dtype = DType::Undefined;
  int64_t rows = 0, n = 0;
  const void* x = nullptr;
  const void* skip = nullptr;  // optional: added to x first (SkipLayerNorm)
  int64_t skip_rows = 1;       // skip holds skip_rows rows of n; row r adds skip row r % skip_rows
  void* sum_out = nullptr;     // optional: x + skip
  const void* gamma = nullptr;
  const void* beta = nullptr;   // optional
  int64_t affine_channels = 0;  // 0: gamma/beta hold n values (per column); C > 0: C values, row r uses r % C
  // With affine_channels C: the values of a channel within a row (GroupNormalization's rows hold
  // n / span channels); element j of row r uses channel (r · (n / span) + j / span) % C. 0: the whole row.
  int64_t affine_span = 0;
  void* y = nullptr;
  void* mean_out = nullptr;     // optional: one value per row, in stat_dtype
  void* inv_std_out = nullptr;  // optional
  DType stat_dtype = DType::Float32;
  float eps = 1e-5f;
  bool rms = false;  // y = x / sqrt(mean(x^2) + eps) * gamma (no centring, no beta)
  NormAct act = NormAct::None;  // after LayerNorm only (LayerNormGelu), never with rms
  int multiprocessors = 132;  // for the rows-per-block choice
};

/// Enqueues the row normalization; false when the dtype is not one it handles.
[[nodiscard]] bool launch_row_norm(const RowNormArgs& a, cudaStream_t s);
/// The kernel variant launch_row_norm picks for these sizes ("warp/row x4 vec" ...), for kernel_name().
const char* row_norm_variant(const RowNormArgs& a);

/// y = (x - mean[c]) * scale[c] / sqrt(var[c] + eps) + bias[c] over x of shape [N, C, S], stored
/// [N, S, C] when channels_last; every tensor in `dtype` (float32, float16, bfloat16).
[[nodiscard]] bool launch_batchnorm_inference(DType dtype, const void* x, const void* scale, const void* bias,
                                              const void* mean, const void* var, void* y, int64_t N, int64_t C,
                                              int64_t S, float eps, bool channels_last, cudaStream_t s);

}  // namespace fusec::cuda
