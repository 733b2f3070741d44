// Flash attention on tensor cores for fp16/bf16 (attention_mma.cu): the own kernel at half
// precision, timed against cuDNN's SDPA per shape (attention_tune.cpp).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "backend/cuda/ops/attention/attention.cuh"

namespace fusec::cuda {

/// Whether the tensor-core kernel takes these arguments, pointers aside: fp16 or bf16, head sizes
/// multiples of 8 up to 128, every batch/head/sequence stride a multiple of 8 elements.
bool attention_mma_ok(const AttentionArgs& a);

/// Whether the pointers allow it too (16-byte aligned Q, K, V, Y and any rotary tables).
bool attention_mma_aligned(const AttentionArgs& a);

/// Whether the kernel also takes the rotary tables' geometry (AttentionArgs::rot_cos): head sizes a
/// multiple of 16 (whole 16-byte chunks in each half), table rows 16-byte aligned.
bool attention_mma_rotates(const AttentionArgs& a);

/// Shared memory one block of the kernel asks for (bytes).
size_t attention_mma_smem_bytes(const AttentionArgs& a);

void launch_attention_mma(const AttentionArgs& a, cudaStream_t stream);

}  // namespace fusec::cuda
