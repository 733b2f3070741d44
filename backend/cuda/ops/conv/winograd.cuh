// Strict-fp32 Winograd F(4x4, 3x3) for 3x3, stride-1, pad-1 convolutions over NCHW memory, with
// the FusedConv epilogue (bias, residual, ReLU/GELU) in the output transform:
//
//   Y = A^T [ (G g G^T) ⊙ (B^T d B) ] A   per 4x4 output tile, d its 6x6 input window
//
// in three kernels: the input transform writes V[ξ] (36 planes, one per position of the 6x6
// transformed tile), 36 GEMMs on the SGEMM core (sgemm_core.cuh, batched) multiply them with the
// transformed filter U[ξ], and the output transform folds the 36 products back into 4x4 outputs.
// The filter is constant: it is transformed once, in double precision, when the route is
// planned.
//
// Why: cuDNN's non-fused Winograd, which its heuristics and the tuner picked for ResNet-50's 3x3
// stride-1 convs at strict fp32, transforms the filter again on every call: 13 of its 52 kernels
// in the model (fusec profile). With the filter transformed once, the tuner times this route
// (fused) faster than cuDNN's Winograd on each of ResNet-50's four 3x3 stride-1 shapes at batch
// 16 (56x56x64, 28x28x128, 14x14x256, 7x7x512), and the whole model runs faster.
//
// Two layouts, as the tuner finds better per shape: channel-major (V[ξ][C][T], the GEMM
// U[ξ][Cout][C] · V[ξ][C][T], for the early layers' many tiles and few channels) and tile-major
// (V[ξ][T][C], V[ξ][T][C] · U[ξ][C][Cout], for the late layers' few tiles and many channels), T
// being the tiles over the whole batch.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "backend/cuda/ops/gemm/sgemm.cuh"

namespace fusec::cuda {

/// SGEMM arguments repeated over grid z: problem z reads A + z·batch_a, B + z·batch_b and writes
/// C + z·batch_c (no bias, residual or activation; sgemm_core's kBatched form).
struct SgemmBatchedArgs : SgemmArgs {
  int batch = 1;
  int64_t batch_a = 0, batch_b = 0, batch_c = 0;
};

struct WinogradShape {
  int batch = 0, c = 0, h = 0, w = 0, cout = 0;  // the output is cout x h x w (pad 1, stride 1)
  int tiles_h() const { return (h + 3) / 4; }
  int tiles_w() const { return (w + 3) / 4; }
  int64_t tiles() const { return int64_t(batch) * tiles_h() * tiles_w(); }
};

/// Why the kernels cannot take the shape (32-bit indices, the GEMM's N % 4), or null.
const char* winograd_refusal(const WinogradShape& s, bool tile_major);

/// U[ξ] of weights w[cout][c][3][3] (on the device), in double and rounded once, into u: [36][cout][c]
/// channel-major, [36][c][cout] tile-major. False, launching nothing, past 32-bit indices.
bool launch_winograd_filter_f32(const float* w, float* u, int cout, int c, bool tile_major, cudaStream_t s);

/// The batched GEMM's tile configurations.
int winograd_gemm_config_count();
const char* winograd_gemm_config_name(int config);

/// Workspace bytes: V and the GEMM's output, each 256-byte aligned.
size_t winograd_workspace(const WinogradShape& s);

struct WinogradArgs {
  WinogradShape shape;
  bool tile_major = false;
  const float* x = nullptr;         // [batch][c][h][w]
  const float* u = nullptr;         // winograd_filter's, on the device
  const float* bias = nullptr;      // [cout] or null
  const float* residual = nullptr;  // [batch][cout][h][w] or null; may alias y
  float* y = nullptr;               // [batch][cout][h][w]
  SgemmAct act = SgemmAct::None;
  void* workspace = nullptr;  // winograd_workspace bytes, 16-byte aligned
};

/// Launches the three kernels with GEMM configuration `config`; false, launching nothing, when
/// the shape or the configuration does not apply.
bool launch_winograd_f32(const WinogradArgs& a, int config, cudaStream_t s);

}  // namespace fusec::cuda
