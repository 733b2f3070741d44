// The GPU's ceilings, measured: what the profiler's "% of peak" divides by.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <random>
#include <vector>

#include "backend/cuda/core/check.h"
#include "backend/cuda/core/context.h"
#include "backend/cuda/core/event_timer.h"
#include "backend/cuda/core/cublaslt_util.h"
#include "ir/half.h"
#include "profiler/cuda/cuda_profiler.h"

namespace fusec::profiler {

namespace {

struct Buffer {
  void* p = nullptr;
  explicit Buffer(size_t bytes) { FUSEC_CUDA_CHECK(cudaMalloc(&p, bytes)); }
  ~Buffer() { cudaFree(p); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

/// Median of `reps` timed calls after `warm` untimed ones, in seconds.
template <typename F>
double median_seconds(cudaStream_t s, int warm, int reps, F&& f) {
  cuda::EventTimer timer;
  for (int i = 0; i < warm; ++i) f();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) t.push_back(timer.time_ms(s, f) * 1e-3);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

/// Random values in [-1, 1) in the GEMM's input type (timing zeros flatters the tensor cores).
void fill_random(void* dst, cudaDataType_t t, size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  if (t == CUDA_R_32F) {
    std::vector<float> h(n);
    for (auto& x : h) x = u(rng);
    FUSEC_CUDA_CHECK(cudaMemcpy(dst, h.data(), n * 4, cudaMemcpyHostToDevice));
  } else {
    std::vector<uint16_t> h(n);
    for (auto& x : h) x = t == CUDA_R_16F ? float_to_half(u(rng)) : float_to_bf16(u(rng));
    FUSEC_CUDA_CHECK(cudaMemcpy(dst, h.data(), n * 2, cudaMemcpyHostToDevice));
  }
}

/// FLOP/s of one n×n×n cuBLASLt GEMM (the heuristic's first algorithm, 64 MiB workspace).
double gemm_flops(cuda::Context& ctx, int64_t n, cudaDataType_t type, cublasComputeType_t compute) {
  const size_t elem = type == CUDA_R_32F ? 4 : 2;
  const size_t count = static_cast<size_t>(n * n);
  Buffer A(count * elem), B(count * elem), C(count * elem);
  const size_t ws_bytes = size_t{64} << 20;
  Buffer ws(ws_bytes);
  fill_random(A.p, type, count, 1);
  fill_random(B.p, type, count, 2);
  cublasLtHandle_t h = ctx.cublaslt();
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t l = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  struct Free {
    cublasLtMatmulDesc_t& d;
    cublasLtMatrixLayout_t& l;
    cublasLtMatmulPreference_t& p;
    ~Free() {
      if (p) cublasLtMatmulPreferenceDestroy(p);
      if (l) cublasLtMatrixLayoutDestroy(l);
      if (d) cublasLtMatmulDescDestroy(d);
    }
  } free_all{desc, l, pref};
  LT_CHECK(cublasLtMatmulDescCreate(&desc, compute, CUDA_R_32F));
  LT_CHECK(cublasLtMatrixLayoutCreate(&l, type, n, n, n));
  LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  LT_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof ws_bytes));
  cublasLtMatmulHeuristicResult_t res{};
  int found = 0;
  LT_CHECK(cublasLtMatmulAlgoGetHeuristic(h, desc, l, l, l, l, pref, 1, &res, &found));
  if (found == 0) internal_error("cuBLASLt offers no algorithm for the peak GEMM");
  const float alpha = 1.f, beta = 0.f;
  cudaStream_t s = ctx.stream();
  double sec = median_seconds(s, 3, 15, [&] {
    LT_CHECK(cublasLtMatmul(h, desc, &alpha, A.p, l, B.p, l, &beta, C.p, l, C.p, l, &res.algo, ws.p, ws_bytes, s));
  });
  return 2.0 * static_cast<double>(n) * n * n / sec;
}

}  // namespace

Peaks measure_cuda_peaks(cuda::Context& ctx) {
  ctx.make_current();
  Peaks p;
  p.device = cuda_device_key(ctx.device());
  size_t free_b = 0, total_b = 0;
  FUSEC_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  // Large enough that the 50 MB L2 plays no part, small enough to fit beside a loaded model.
  size_t bytes = std::min<size_t>(size_t{1} << 30, free_b / 4) & ~size_t{4095};
  {
    Buffer a(bytes), b(bytes);
    FUSEC_CUDA_CHECK(cudaMemset(a.p, 1, bytes));
    cudaStream_t s = ctx.stream();
    double sec = median_seconds(
        s, 3, 20, [&] { FUSEC_CUDA_CHECK(cudaMemcpyAsync(b.p, a.p, bytes, cudaMemcpyDeviceToDevice, s)); });
    p.bandwidth_bytes_per_s = 2.0 * static_cast<double>(bytes) / sec;
  }
  p.flops_per_s["fp32"] = gemm_flops(ctx, 4096, CUDA_R_32F, CUBLAS_COMPUTE_32F);
  p.flops_per_s["tf32"] = gemm_flops(ctx, 4096, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32);
  p.flops_per_s["fp16"] = gemm_flops(ctx, 8192, CUDA_R_16F, CUBLAS_COMPUTE_32F);
  p.flops_per_s["bf16"] = gemm_flops(ctx, 8192, CUDA_R_16BF, CUBLAS_COMPUTE_32F);
  p.method = "bandwidth: cudaMemcpyAsync device-to-device of " + std::to_string(bytes >> 20) +
             " MiB (read + written bytes), median of 20; GEMM: cuBLASLt n x n x n on random data, fp32 and tf32 "
             "n=4096, fp16 and bf16 n=8192 (fp32 accumulation), median of 15";
  return p;
}

}  // namespace fusec::profiler
