// Fused scaled-dot-product attention (ONNX Attention / ai.fusec.Attention): Y = softmax(Q·Kᵀ·scale
// + mask) · V, flash-style, so the [Sq, Skv] score matrix never reaches memory. Layouts are given
// by strides, which covers both the 4-D [B, H, S, D] form and the 3-D [B, S, H·D] form the fusion
// pass writes (no head split or merge transposes).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "ir/dtype.h"

namespace fusec::cuda {

/// Element strides of one of Q, K, V, Y: batch, head, sequence position (the head dim is dense).
struct HeadStrides {
  int64_t batch = 0, head = 0, seq = 0;
};

struct AttentionArgs {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const void* mask = nullptr;  // optional
  void* y = nullptr;
  DType dtype = DType::Undefined;       // storage of Q, K, V and Y
  DType mask_dtype = DType::Undefined;  // Bool (false = excluded) or the float storage type (added)
  int batch = 0, q_heads = 0, kv_heads = 0, q_len = 0, kv_len = 0, head_dim = 0, v_head_dim = 0;
  HeadStrides qs, ks, vs, ys;
  int64_t mask_stride[4] = {0, 0, 0, 0};  // over [B, Hq, Sq, Skv]; 0 where the mask broadcasts
  float scale = 1.0f;
  float softcap = 0.0f;  // > 0: scores become softcap·tanh(score / softcap) before the mask (soft_cap.cuh)
  bool causal = false;  // key j excluded for query i when j > i (upper-left, as ONNX)
  // Packed ai.fusec Attention's rotary tables, or null: Q's and K's heads rotate first, as ai.fusec
  // Rotary does (only attention_mma.cu's kernel takes them). Row (b, s) of a table starts b·batch +
  // s·seq elements in (0 along a broadcast dim), its head_dim values contiguous.
  const void* rot_cos = nullptr;
  const void* rot_sin = nullptr;
  HeadStrides cos_st, sin_st;  // batch and seq used; head unused (the same rotation for every head)
};

/// The largest head size fusec's fast kernels take (tensor-core, grouped, fp32 tiled, and the
/// streaming one's usual tiles). Larger heads, up to kWideMaxHead (Gemma's 256), run on cuDNN's
/// SDPA where it takes the case (fp16/bf16, no bool mask, no soft cap), else on the streaming
/// kernel's 256-wide tile; cuDNN's SDPA takes up to kSdpaMaxHead.
constexpr int kOwnMaxHead = 128;
constexpr int kSdpaMaxHead = 256;
constexpr int kWideMaxHead = 256;

/// Why no CUDA attention kernel can run these arguments ("" when one can).
std::string attention_unsupported(const AttentionArgs& a);

/// Shared memory the kernel asks for (bytes), for the profiler-facing description.
size_t attention_smem_bytes(const AttentionArgs& a);

/// Whether launch_attention runs the tensor-core kernel (attention_mma.cu) for these arguments.
bool attention_on_tensor_cores(const AttentionArgs& a);

/// Which kernel launch_attention runs for these arguments: "fp32 tiled", "tensor-core" (fp16/bf16,
/// attention_mma.cu; unaligned pointers still take the streaming kernel) or "streaming".
const char* attention_variant(const AttentionArgs& a);

void launch_attention(const AttentionArgs& a, cudaStream_t stream);

}  // namespace fusec::cuda
