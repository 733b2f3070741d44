// Times the row-normalization kernels (backend/cuda/ops/norm/norm.cu) alone, at the zoo's shapes,
// as the tuners time a candidate (captured_reps.h: 20 calls captured into a CUDA graph, replayed
// behind a hold kernel, best of 20 rounds); the line gives the time per launch, the bytes it must
// move over that time, and a device-to-device copy of the same bytes for scale. The data sits in
// L2, as a model's activation does right after the kernel that wrote it.
// Not built by default (CI has no GPU):
//   cmake --build build --target fusec_row_norm_bench
//   build/fusec_row_norm_bench [fp16|bf16|fp32]        (default fp16)
// On the lent GPU: BINS="fusec_row_norm_bench" bash scripts/gpu_bundle.sh, then bin/fusec_row_norm_bench.
#include <cuda_runtime.h>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "backend/cuda/core/captured_reps.h"
#include "backend/cuda/ops/norm/norm.cuh"

using fusec::DType;
using fusec::cuda::RowNormArgs;

namespace {

bool ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "row_norm_bench: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

struct Case {
  const char* name;
  int64_t rows, n;
  bool skip, sum_out, rms, beta;
};

}  // namespace

int run(int argc, char** argv) {
  DType dt = DType::Float16;
  if (argc > 1) {
    const std::string a = argv[1];
    if (a == "fp32")
      dt = DType::Float32;
    else if (a == "bf16")
      dt = DType::BFloat16;
    else if (a != "fp16") {
      std::fprintf(stderr, "usage: %s [fp16|bf16|fp32]\n", argv[0]);
      return 2;
    }
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "row_norm_bench: no usable GPU\n");
    return 2;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  cudaStream_t s;
  if (!ok(cudaStreamCreate(&s), "stream")) return 1;
  const size_t esize = dt == DType::Float32 ? 4 : 2;
  std::printf("%s, %s, 20 launches a graph, best of 20 rounds\n", prop.name, fusec::dtype_name(dt));
  const Case cases[] = {
      {"BERT-base LayerNorm 2048 x 768", 2048, 768, false, false, false, true},
      {"LayerNorm without beta 2048 x 768", 2048, 768, false, false, false, false},
      {"GPT-2 SkipLayerNorm + sum 2048 x 768", 2048, 768, true, true, false, true},
      {"ViT-B/16 LayerNorm 3152 x 768", 3152, 768, false, false, false, true},
      {"BERT-large LayerNorm 2048 x 1024", 2048, 1024, false, false, false, true},
      {"Llama RMSNorm 2048 x 2048", 2048, 2048, false, false, true, false},
      {"Llama SkipRMSNorm 2048 x 2048", 2048, 2048, true, false, true, false},
      {"ConvNeXt-T LayerNorm 50176 x 96", 50176, 96, false, false, false, true},
  };
  int status = 0;
  for (const Case& c : cases) {
    const size_t bytes = static_cast<size_t>(c.rows * c.n) * esize;
    void *x = nullptr, *skip = nullptr, *sum = nullptr, *y = nullptr, *gamma = nullptr, *beta = nullptr;
    if (!ok(cudaMalloc(&x, bytes), "cudaMalloc") || !ok(cudaMalloc(&skip, bytes), "cudaMalloc") ||
        !ok(cudaMalloc(&sum, bytes), "cudaMalloc") || !ok(cudaMalloc(&y, bytes), "cudaMalloc") ||
        !ok(cudaMalloc(&gamma, c.n * esize), "cudaMalloc") || !ok(cudaMalloc(&beta, c.n * esize), "cudaMalloc"))
      return 1;
    // 0x3c bytes: 1.0-ish halves and small finite floats; the values do not change the work.
    cudaMemset(x, 0x3c, bytes);
    cudaMemset(skip, 0x3c, bytes);
    cudaMemset(gamma, 0x3c, c.n * esize);
    cudaMemset(beta, 0, c.n * esize);
    RowNormArgs a;
    a.dtype = dt;
    a.rows = c.rows;
    a.n = c.n;
    a.x = x;
    a.skip = c.skip ? skip : nullptr;
    a.sum_out = c.sum_out ? sum : nullptr;
    a.gamma = gamma;
    a.beta = c.beta ? beta : nullptr;
    a.y = y;
    a.rms = c.rms;
    a.eps = 1e-5f;
    a.multiprocessors = prop.multiProcessorCount;
    const size_t moved = bytes * (2 + (c.skip ? 1 : 0) + (c.sum_out ? 1 : 0));
    // The copy reads and writes half of what the norm moves each (a skip norm reads and writes more
    // than one activation's bytes): buffers of its own.
    void *copy_src = nullptr, *copy_dst = nullptr;
    if (!ok(cudaMalloc(&copy_src, moved / 2), "cudaMalloc") || !ok(cudaMalloc(&copy_dst, moved / 2), "cudaMalloc"))
      return 1;
    // Candidate 0 is the row norm, 1 the copy; each makes one warm-up call first.
    auto call = [&](size_t i) {
      if (i == 0) return fusec::cuda::launch_row_norm(a, s) && cudaPeekAtLastError() == cudaSuccess;
      return cudaMemcpyAsync(copy_dst, copy_src, moved / 2, cudaMemcpyDeviceToDevice, s) == cudaSuccess;
    };
    std::vector<float> ms(2);
    for (size_t i = 0; i < ms.size(); ++i) ms[i] = call(i) && ok(cudaStreamSynchronize(s), "warm-up") ? 0.f : -1.f;
    fusec::cuda::TimingPlan plan;
    plan.reps = 20;
    plan.rounds = 20;
    fusec::cuda::time_candidates(
        s, ms, plan, [](size_t) {}, call);
    if (ms[0] < 0 || ms[1] < 0) {
      std::fprintf(stderr, "row_norm_bench: %s: a call failed\n", c.name);
      status = 1;
    } else {
      const double us = 1000.0 * ms[0];
      std::printf("%-38s %-26s %6.2f us %6.0f GB/s   copy of the same bytes %5.2f us\n", c.name,
                  fusec::cuda::row_norm_variant(a), us, static_cast<double>(moved) / us / 1e3, 1000.0 * ms[1]);
    }
    for (void* p : {x, skip, sum, y, gamma, beta, copy_src, copy_dst}) cudaFree(p);
  }
  cudaStreamDestroy(s);
  return status;
}

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "row_norm_bench: %s\n", e.what());
    return 1;
  }
}
