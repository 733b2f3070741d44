// Shared test helpers: run a graph on the CPU reference, compare tensors.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "ir/error.h"
#include "ir/graph_builder.h"
#include "passes/infer_shapes.h"

namespace fusec::test {

/// Infers shapes, compiles on the CPU backend and runs once.
inline std::vector<Tensor> run_cpu(Graph& g, const std::vector<Tensor>& inputs) {
  infer_shapes(g);
  cpu::CpuBackend backend;
  return backend.compile(g)->run(inputs);
}

/// Expects `got` to equal `want` elementwise within atol + rtol*|want| (exact for integers).
inline void expect_close(const Tensor& got, const Tensor& want, double rtol = 1e-5, double atol = 1e-6) {
  ASSERT_EQ(got.dtype(), want.dtype());
  ASSERT_EQ(got.dims(), want.dims());
  for (int64_t i = 0; i < want.numel(); ++i) {
    double g = got.as_double(i), w = want.as_double(i);
    if (std::isnan(w)) {
      EXPECT_TRUE(std::isnan(g)) << "element " << i;
      continue;
    }
    EXPECT_LE(std::fabs(g - w), atol + rtol * std::fabs(w)) << "element " << i << ": " << g << " vs " << w;
  }
}

inline Tensor floats(std::vector<float> v, std::vector<int64_t> dims) { return Tensor::from_float(v, std::move(dims)); }
inline Tensor int64s(std::vector<int64_t> v, std::vector<int64_t> dims) {
  return Tensor::from_int64(v, std::move(dims));
}
/// Seeded uniform float32 data in [-1, 1).
inline Tensor uniform_floats(std::vector<int64_t> dims, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  Tensor t(DType::Float32, std::move(dims));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(rng);
  return t;
}

}  // namespace fusec::test
