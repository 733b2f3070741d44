// What the labs in scripts/lab/ share: a check that ends the lab on any CUDA/cuDNN/cuBLASLt error,
// and seeded random device data (timings on zeros mislead).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#define CK(x)                                                                          \
  do {                                                                                 \
    auto e_ = (x);                                                                     \
    if (e_ != 0) {                                                                     \
      std::fprintf(stderr, "lab: %s failed (%d) at line %d\n", #x, int(e_), __LINE__); \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

/// n floats uniform in [-1, 1) from `seed`, copied to device memory at p.
inline void fill_random(void* p, size_t n, unsigned seed) {
  std::vector<float> h(n);
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  for (auto& v : h) v = u(g);
  CK(cudaMemcpy(p, h.data(), n * 4, cudaMemcpyHostToDevice));
}
