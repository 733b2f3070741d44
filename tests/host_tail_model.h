// The model both host-tail suites run (tests/cpu/test_host_tail.cpp on the CPU reference alone,
// tests/gpu/test_host_tail_gpu.cpp with the GPU part on CUDA): x [4, 6] -> MatMul by `w` ->
// Relu ("relu", an output) -> NonZero (its output's shape is the data's) -> Transpose ->
// GatherND of the positive entries -> ReduceSum over an axes initializer to a scalar, whose shape
// is known again but which reads the tail. Sigmoid(x), an output, reads nothing of the tail.
#pragma once
#include <memory>
#include <vector>

#include "ir/graph_builder.h"
#include "passes/infer_shapes.h"

namespace fusec::test {

inline std::unique_ptr<Graph> nonzero_tail_model(Tensor w) {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {Dim(4), Dim(6)});
  Value* m = b.node("MatMul", {x, b.initializer("w", std::move(w))}, {}, "matmul");
  Value* r = b.node("Relu", {m}, {}, "relu");
  Value* nz = b.node("NonZero", {r}, {}, "nonzero");
  Value* t = b.node("Transpose", {nz}, {attr("perm", std::vector<int64_t>{1, 0})}, "indices");
  Value* picked = b.node("GatherND", {r, t}, {}, "picked");
  Value* axes = b.initializer("axes", Tensor::from_int64({0}, {1}));
  Value* sum = b.node("ReduceSum", {picked, axes}, {attr("keepdims", int64_t{0})}, "sum");
  b.output(r);
  b.output(t);
  b.output(sum);
  b.output(b.node("Sigmoid", {x}, {}, "sigmoid"));
  auto g = b.build();
  infer_shapes(*g);
  return g;
}

}  // namespace fusec::test
