// Times cuBLASLt's heuristic candidates for one fp16 GEMM two ways: as the GEMM tuner does (10
// calls captured into a CUDA graph, replayed behind a hold kernel, best of 3 rounds: a burst at
// whatever clock the GPU has) and sustained (the same graph replayed for `secs` seconds, timed over
// the last quarter, once the board has settled at its power limit, as it does through a model whose
// GEMMs dominate). The question it answers: does the candidate that wins a burst also win under the
// power limit, where energy per product, not issue rate, sets the clock. After cuBLASLt's
// candidates come fusec's wgmma GEMM's configurations (hgemm.cuh), then cuBLASLt's first with a
// SiLU pass after it against fusec's GEMM with the SiLU inside (the tuner's race for an activation
// cuBLASLt cannot fuse), then, where N is a whole number of gated blocks (gated_layout.h), the
// same race for SwiGLU over N / 2 outputs: cuBLASLt's first and the gated pass against fusec's
// gated configurations.
// Not built by default (CI has no GPU):
//   cmake --build build --target fusec_gemm_sustained
//   build/fusec_gemm_sustained M N K [candidates=8] [secs=0.6]     (row-major [M,K] x [K,N], fp16)
#include <cublasLt.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "backend/cuda/core/captured_reps.h"
#include "backend/cuda/core/cublaslt_util.h"
#include "backend/cuda/ops/gemm/gated_pass.cuh"
#include "backend/cuda/ops/gemm/hgemm.cuh"

namespace {

bool ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "gemm_sustained: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

/// Uniform values in [-0.05, 0.05): the tensor cores' power depends on the data they see.
bool fill_random(__half* p, size_t n, uint32_t seed) {
  std::vector<__half> h(n);
  uint32_t x = seed;
  for (auto& v : h) {
    x = x * 1664525u + 1013904223u;
    v = __float2half((static_cast<float>(x >> 16) / 65535.0f - 0.5f) * 0.1f);
  }
  return ok(cudaMemcpy(p, h.data(), n * sizeof(__half), cudaMemcpyHostToDevice), "upload");
}

}  // namespace

int run(int argc, char** argv) {
  using namespace fusec::cuda;
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s M N K [candidates=8] [secs=0.6]\n", argv[0]);
    return 2;
  }
  const int64_t M = std::atoll(argv[1]), N = std::atoll(argv[2]), K = std::atoll(argv[3]);
  const int want = argc > 4 ? std::atoi(argv[4]) : 8;
  const double secs = argc > 5 ? std::atof(argv[5]) : 0.6;
  if (M <= 0 || N <= 0 || K <= 0 || want <= 0 || secs <= 0) {
    std::fprintf(stderr, "gemm_sustained: M, N, K, candidates and secs must be positive\n");
    return 2;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "gemm_sustained: no usable GPU\n");
    return 2;
  }
  cudaStream_t s;
  if (!ok(cudaStreamCreate(&s), "stream")) return 1;
  __half *x = nullptr, *w = nullptr, *d = nullptr, *y = nullptr;
  void* ws = nullptr;
  if (!ok(cudaMalloc(&x, M * K * 2), "malloc") || !ok(cudaMalloc(&w, K * N * 2), "malloc") ||
      !ok(cudaMalloc(&d, M * N * 2), "malloc") || !ok(cudaMalloc(&y, M * N), "malloc") ||
      !ok(cudaMalloc(&ws, kLtWorkspace), "malloc"))
    return 1;
  if (!fill_random(x, M * K, 1) || !fill_random(w, K * N, 2)) return 1;

  // Row-major D[M,N] = X[M,K] W[K,N] is column-major Dᵀ (N x M) = Wᵀ (N x K) · Xᵀ (K x M).
  cublasLtHandle_t h;
  LT_CHECK(cublasLtCreate(&h));
  cublasLtMatmulDesc_t desc;
  LT_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasLtMatrixLayout_t la, lb, ld;
  LT_CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16F, N, K, N));
  LT_CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16F, K, M, K));
  LT_CHECK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16F, N, M, N));
  auto cands = lt_heuristic(h, desc, la, lb, ld, ld, kLtWorkspace, 16, want);
  if (cands.empty()) {
    std::fprintf(stderr, "gemm_sustained: cuBLASLt offers no algorithm\n");
    return 1;
  }
  const float alpha = 1.0f, beta = 0.0f;
  auto lt_call = [&](size_t i) {
    return cublasLtMatmul(h, desc, &alpha, w, la, x, lb, &beta, d, ld, d, ld, &cands[i].algo, ws,
                          cands[i].workspaceSize, s) == CUBLAS_STATUS_SUCCESS;
  };
  // Candidates: cuBLASLt's, then fusec's configurations, then the two SiLU routes.
  std::vector<std::string> names;
  for (const auto& c : cands) names.push_back("cuBLASLt " + lt_algo_identity(c.algo));
  HgemmArgs g;
  g.M = static_cast<int>(M);
  g.N = static_cast<int>(N);
  g.K = static_cast<int>(K);
  g.A = x;
  g.lda = K;
  g.B = w;
  g.ldb = N;
  g.C = d;
  g.ldc = N;
  const int own = hgemm_available(0) && hgemm_applies(g) ? hgemm_config_count() : 0;
  for (int i = 0; i < own; ++i) names.push_back(std::string("fusec ") + hgemm_config_name(i));
  const size_t lt = cands.size(), silu_lt = names.size();
  if (own) {
    names.push_back("cuBLASLt 0 + SiLU pass");
    for (int i = 0; i < own; ++i) names.push_back(std::string("fusec ") + hgemm_config_name(i) + " + SiLU inside");
  }
  const size_t gated_lt = names.size();
  const bool gated = own && N % (2 * kGatedBlock) == 0;
  if (gated) {
    names.push_back("cuBLASLt 0 + gated SiLU pass (N/2 out)");
    for (int i = 0; i < own; ++i) names.push_back(std::string("fusec ") + hgemm_config_name(i) + " gated SiLU");
  }
  ActParams silu;
  silu.act = Act::SiLU;
  auto call = [&](size_t i) {
    if (i < lt) return lt_call(i);
    if (i < silu_lt) return launch_hgemm(g, static_cast<int>(i - lt), s) && cudaPeekAtLastError() == cudaSuccess;
    if (i == silu_lt) return lt_call(0) && launch_epilogue(d, nullptr, fusec::DType::Float16, M * N, silu, s);
    HgemmArgs ga = g;
    ga.act = silu;
    if (i < gated_lt)
      return launch_hgemm(ga, static_cast<int>(i - silu_lt - 1), s) && cudaPeekAtLastError() == cudaSuccess;
    if (i == gated_lt) return lt_call(0) && launch_gated_pass(y, d, fusec::DType::Float16, M, N / 2, silu, s);
    ga.gated_n = static_cast<int>(N / 2);
    ga.C = y;
    ga.ldc = N / 2;
    return launch_hgemm(ga, static_cast<int>(i - gated_lt - 1), s) && cudaPeekAtLastError() == cudaSuccess;
  };
  const size_t n = names.size();
  std::vector<float> burst(n, 0.0f);
  for (size_t i = 0; i < n; ++i)
    if (!call(i)) burst[i] = -1.0f;
  TimingPlan plan;
  time_candidates(
      s, burst, plan, [](size_t) {}, call);

  // Sustained: 10 calls a graph, replayed back to back; two passes in opposite orders, each
  // candidate's figure the mean of its two.
  std::vector<CapturedReps> graphs(n);
  for (size_t i = 0; i < n; ++i)
    graphs[i].capture(s, [&] {
      for (int k = 0; k < 10; ++k)
        if (!call(i)) return false;
      return true;
    });
  std::vector<float> sustained(n, 0.0f);
  EventTimer timer;
  for (int pass = 0; pass < 2; ++pass)
    for (size_t j = 0; j < n; ++j) {
      const size_t i = pass == 0 ? j : n - 1 - j;
      if (burst[i] <= 0) continue;
      const double per_graph_ms = 10.0 * burst[i];
      const int total = std::max(8, static_cast<int>(secs * 1000.0 / per_graph_ms));
      const int timed = std::max(4, total / 4);
      for (int k = 0; k < total - timed; ++k)
        if (!graphs[i].replay(s)) return 1;
      const float ms = timer.time_ms(s, [&] {
        for (int k = 0; k < timed; ++k) graphs[i].replay(s);
      });
      sustained[i] += ms / (10.0f * timed) / 2.0f;
    }
  if (!ok(cudaStreamSynchronize(s), "run")) return 1;
  const double flops = 2.0 * M * N * K;
  std::printf("gemm %lld x %lld x %lld fp16: cuBLASLt's %zu candidates in heuristic order, then fusec's\n",
              static_cast<long long>(M), static_cast<long long>(N), static_cast<long long>(K), lt);
  size_t best_b = 0, best_s = 0;
  for (size_t i = 0; i < silu_lt; ++i) {  // the plain products' best
    if (burst[i] > 0 && (burst[best_b] <= 0 || burst[i] < burst[best_b])) best_b = i;
    if (sustained[i] > 0 && (sustained[best_s] <= 0 || sustained[i] < sustained[best_s])) best_s = i;
  }
  for (size_t i = 0; i < n; ++i)
    std::printf("  %2zu %-52s burst %.4f ms (%4.0f TFLOP/s)%s  sustained %.4f ms (%4.0f TFLOP/s)%s\n", i,
                names[i].c_str(), burst[i], flops / burst[i] / 1e9, i == best_b ? " *" : "  ", sustained[i],
                flops / sustained[i] / 1e9, i == best_s ? " *" : "");
  return 0;
}

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gemm_sustained: %s\n", e.what());
    return 1;
  }
}
