// What the labs in scripts/lab/ share: a check that ends the lab on any CUDA/cuDNN/cuBLASLt error,
// seeded random device data (timings on zeros mislead), and rounds of back-to-back launches timed
// with CUDA events.
#pragma once
#include <cuda_runtime_api.h>

#include <algorithm>
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

/// The time of one launch of f, already warm, in each of `rounds` rounds of `reps` back-to-back
/// launches on stream s (each lab keeps the best or the median round).
template <class F>
std::vector<float> round_times(F&& f, cudaStream_t s, int rounds, int reps) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<float> out;
  for (int r = 0; r < rounds; ++r) {
    CK(cudaEventRecord(a, s));
    for (int i = 0; i < reps; ++i) f();
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    out.push_back(ms / reps);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return out;
}

inline float fastest(const std::vector<float>& v) { return *std::min_element(v.begin(), v.end()); }
