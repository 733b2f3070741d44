// The op families, listed once. Each family F has its schemas in ir/ops/<F>.cpp (shape: shape_ops.cpp)
// (register_F_schemas) and its CPU reference kernels in backend/cpu/kernels/<F>.cpp
// (register_F_kernels); both registries are filled from this list, in this order. A new family is
// one line here plus its two files (tests/ir/test_registry_agreement.cpp checks that every schema
// has a kernel and every kernel a schema). The CUDA backend's op families are grouped by kernel,
// not by schema (one GEMM family runs MatMul, Gemm and FusedMatMul): its list is
// backend/cuda/core/cuda_op_registry.cpp.
//
// The order matters once: `fused` comes after the standard families, whose inference and cost
// its ops borrow.
#pragma once

#define FUSEC_OP_FAMILIES(X) \
  X(elementwise)             \
  X(activation)              \
  X(linalg)                  \
  X(conv)                    \
  X(pool)                    \
  X(normalization)           \
  X(reduce)                  \
  X(softmax)                 \
  X(shape)                   \
  X(movement)                \
  X(generator)               \
  X(resize)                  \
  X(grid_sample)             \
  X(recurrent)               \
  X(quantize)                \
  X(selection)               \
  X(detection)               \
  X(signal)                  \
  X(control_flow)            \
  X(attention)               \
  X(fused)                   \
  X(fused_elementwise)
