#pragma once

namespace fusec {

class OpRegistry;

// One function per op family file in ir/ops/; each adds its ops' schemas.
void register_elementwise_schemas(OpRegistry& r);   // ir/ops/elementwise.cpp
void register_activation_schemas(OpRegistry& r);    // ir/ops/activation.cpp
void register_linalg_schemas(OpRegistry& r);        // ir/ops/linalg.cpp (MatMul, Gemm, Einsum)
void register_conv_schemas(OpRegistry& r);          // ir/ops/conv.cpp (Conv, ConvTranspose)
void register_pool_schemas(OpRegistry& r);          // ir/ops/pool.cpp
void register_normalization_schemas(OpRegistry& r); // ir/ops/normalization.cpp
void register_reduce_schemas(OpRegistry& r);        // ir/ops/reduce.cpp (Reduce*, ArgMax/Min)
void register_softmax_schemas(OpRegistry& r);       // ir/ops/softmax.cpp (Softmax, LogSoftmax, losses)
void register_shape_schemas(OpRegistry& r);         // ir/ops/shape_ops.cpp (Reshape, Squeeze...)
void register_movement_schemas(OpRegistry& r);      // ir/ops/movement.cpp (Concat, Slice, Gather...)
void register_generator_schemas(OpRegistry& r);     // ir/ops/generator.cpp (Constant, Range...)
void register_resize_schemas(OpRegistry& r);        // ir/ops/resize.cpp
void register_attention_schemas(OpRegistry& r);     // ir/ops/attention.cpp (Attention, ai.onnx and ai.fusec)
void register_fused_schemas(OpRegistry& r);         // ir/ops/fused.cpp (ai.fusec domain)
void register_fused_elementwise_schemas(OpRegistry& r);  // ir/ops/fused_elementwise.cpp (ai.fusec)

inline void register_all_op_schemas(OpRegistry& r) {
  register_elementwise_schemas(r);
  register_activation_schemas(r);
  register_linalg_schemas(r);
  register_conv_schemas(r);
  register_pool_schemas(r);
  register_normalization_schemas(r);
  register_reduce_schemas(r);
  register_softmax_schemas(r);
  register_shape_schemas(r);
  register_movement_schemas(r);
  register_generator_schemas(r);
  register_resize_schemas(r);
  register_attention_schemas(r);
  register_fused_schemas(r);  // last: the fused ops borrow the standard ones' inference and cost
  register_fused_elementwise_schemas(r);
}

}  // namespace fusec
