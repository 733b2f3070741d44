// Times the row-normalization kernels (backend/cuda/ops/norm/norm.cu) alone, at the zoo's shapes:
// each case is 20 launches captured back to back in a CUDA graph (programmatic dependent launch on,
// as in a model), replayed 100 times; the line gives the median per launch, the bytes it must move
// over that time, and a device-to-device copy of the same bytes for scale. The data sits in L2, as
// a model's activation does right after the kernel that wrote it.
// Not built by default (CI has no GPU):
//   cmake --build build --target fusec_row_norm_bench
//   build/fusec_row_norm_bench [fp16|bf16|fp32]        (default fp16)
// On the lent GPU: BINS="fusec_row_norm_bench" bash scripts/gpu_bundle.sh, then bin/fusec_row_norm_bench.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "backend/cuda/ops/norm/norm.cuh"

using fusec::DType;
using fusec::cuda::RowNormArgs;

namespace {

bool ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "row_norm_bench: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

/// Median microseconds per call of `launch`, over 100 replays of a graph of 20 calls; < 0 on error.
template <typename F>
double time_launches(F&& launch, cudaStream_t s) {
  constexpr int kCalls = 20, kReplays = 100;
  if (!launch() || !ok(cudaStreamSynchronize(s), "warm-up")) return -1;
  cudaGraph_t g = nullptr;
  cudaGraphExec_t exec = nullptr;
  if (!ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "capture")) return -1;
  bool launched = true;
  for (int i = 0; i < kCalls; ++i) launched = launched && launch();
  if (!ok(cudaStreamEndCapture(s, &g), "capture") || !launched) return -1;
  if (!ok(cudaGraphInstantiate(&exec, g, 0), "instantiate")) return -1;
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<double> us;
  for (int r = 0; r < kReplays + 5; ++r) {
    cudaEventRecord(e0, s);
    cudaGraphLaunch(exec, s);
    cudaEventRecord(e1, s);
    if (!ok(cudaEventSynchronize(e1), "replay")) return -1;
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    if (r >= 5) us.push_back(1000.0 * ms / kCalls);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(g);
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
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
  std::printf("%s, %s, %d launches a graph, median of 100 replays\n", prop.name, fusec::dtype_name(dt), 20);
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
    const double moved = static_cast<double>(bytes) * (2 + (c.skip ? 1 : 0) + (c.sum_out ? 1 : 0));
    const double us =
        time_launches([&] { return fusec::cuda::launch_row_norm(a, s) && cudaPeekAtLastError() == cudaSuccess; }, s);
    const double copy_us = time_launches(
        [&] {
          return cudaMemcpyAsync(y, x, static_cast<size_t>(moved / 2), cudaMemcpyDeviceToDevice, s) == cudaSuccess;
        },
        s);
    if (us < 0 || copy_us < 0) {
      status = 1;
    } else {
      std::printf("%-38s %-26s %6.2f us %6.0f GB/s   copy of the same bytes %5.2f us\n", c.name,
                  fusec::cuda::row_norm_variant(a), us, moved / us / 1e3, copy_us);
    }
    for (void* p : {x, skip, sum, y, gamma, beta}) cudaFree(p);
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
