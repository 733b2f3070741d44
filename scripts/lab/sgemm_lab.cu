// A lab, not production: can fusec's own strict-fp32 SGEMM (backend/cuda/ops/gemm/sgemm.cu, FFMA only)
// match or beat cuBLASLt on BERT-base's four GEMMs (batch 16 x seq 128, so M = 2048)? For each
// shape, with its FusedMatMul epilogue, it times with CUDA events (warm-up, then the median of 7
// rounds of 20 back-to-back launches, random data):
//   lt          cuBLASLt, CUBLAS_COMPUTE_32F (no TF32), best of its heuristic's top 8; bias through
//               CUBLASLT_EPILOGUE_BIAS, the residual as C with beta = 1 (column-major: Yᵀ = Wᵀ·Xᵀ)
//   lt+erf      FFN1 only: lt, then a separate in-place erf-GELU pass (what fusec runs today)
//   sgemm       legacy cublasSgemm, the product alone (no epilogue)
//   ours:<cfg>  every configuration of launch_sgemm_f32, epilogue fused
// and checks each against a double-precision host reference on every 29th row (all columns):
// error = |y - ref| / max(|ref|, rms(ref)), failing (exit 1) above 1e-4. Before that it checks
// every configuration on odd shapes (edge tiles, K not a multiple of 16, N not a multiple of 4,
// leading dims wider than the matrix, every activation) against the reference on all outputs.
//   bash scripts/lab/build_sgemm_lab.sh          (here; the binary goes to build-sgemm/)
//   build-sgemm/sgemm_lab [--edge-only]          (on the GPU machine; --edge-only for
//                                                 compute-sanitizer runs)
//   build-sgemm/sgemm_lab --resnet               (ResNet-50's 1x1 convs as flat GEMMs instead)
//   build-sgemm/sgemm_lab --profile SHAPE CAND   (for ncu: runs one candidate 3 times, nothing
//                                                 else; SHAPE 0-3, CAND a config id, "lt" or
//                                                 "lt:I", the heuristic's I-th algorithm;
//                                                 scripts/lab/ncu_sgemm.sh compares two)
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "backend/cuda/ops/gemm/sgemm.cuh"
#include "scripts/lab/lab_util.h"

using fusec::cuda::SgemmAct;
using fusec::cuda::SgemmArgs;

namespace {

constexpr double kTolerance = 1e-4;

struct Shape {
  const char* name;
  int M, N, K;
  bool residual;
  SgemmAct act;
};

const Shape kBert[] = {
    {"QKV", 2048, 2304, 768, false, SgemmAct::None},
    {"out", 2048, 768, 768, true, SgemmAct::None},
    {"FFN1+gelu", 2048, 3072, 768, false, SgemmAct::GeluErf},
    {"FFN2", 2048, 768, 3072, true, SgemmAct::None},
};

// ResNet-50's stride-1 1x1 convs at batch 16 as flat GEMMs (--resnet): M = output channels, K =
// input channels, N = 16·H·W. NCHW keeps each image's [K, HW] block apart, so the model runs them
// as a strided batch of 16 (M x HW x K each); the flat form has the same FLOPs and bytes and says
// whether the SGEMM would win there before it learns strided batches. Expands add the residual,
// and all apply ReLU (the bottleneck's).
const Shape kResnet1x1[] = {
    {"l1 64<-64", 64, 50176, 64, false, SgemmAct::Relu},      {"l1 256<-64", 256, 50176, 64, true, SgemmAct::Relu},
    {"l1 64<-256", 64, 50176, 256, false, SgemmAct::Relu},    {"l2 128<-256", 128, 50176, 256, false, SgemmAct::Relu},
    {"l2 512<-128", 512, 12544, 128, true, SgemmAct::Relu},   {"l2 128<-512", 128, 12544, 512, false, SgemmAct::Relu},
    {"l3 256<-512", 256, 12544, 512, false, SgemmAct::Relu},  {"l3 1024<-256", 1024, 3136, 256, true, SgemmAct::Relu},
    {"l3 256<-1024", 256, 3136, 1024, false, SgemmAct::Relu}, {"l4 512<-1024", 512, 3136, 1024, false, SgemmAct::Relu},
    {"l4 2048<-512", 2048, 784, 512, true, SgemmAct::Relu},   {"l4 512<-2048", 512, 784, 2048, false, SgemmAct::Relu},
};

struct Buf {
  float* p = nullptr;
  explicit Buf(size_t n) { CK(cudaMalloc(&p, std::max<size_t>(n, 64) * sizeof(float))); }
  ~Buf() { cudaFree(p); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
};

double act_ref(double x, SgemmAct a) {
  if (a == SgemmAct::Relu) return x > 0 ? x : 0;
  if (a == SgemmAct::GeluErf) return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
  return x;
}

/// Host data of one problem (strided), and the reference of chosen rows in double.
struct Problem {
  int M, N, K;
  int64_t lda, ldb, ldr, ldc;
  std::vector<float> x, w, bias, r;  // x: M x lda, w: K x ldb, r: M x ldr
  std::vector<int> rows;             // checked rows
  std::vector<double> raw, full;     // rows.size() x N: the product, and act(product + bias + r)

  void reference(bool use_bias, bool use_res, SgemmAct act) {
    raw.assign(rows.size() * N, 0);
    full.assign(rows.size() * N, 0);
    std::vector<double> acc(N);
    for (size_t ri = 0; ri < rows.size(); ++ri) {
      const int m = rows[ri];
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int k = 0; k < K; ++k) {
        const double a = x[size_t(m) * lda + k];
        const float* wr = &w[size_t(k) * ldb];
        for (int n = 0; n < N; ++n) acc[n] += a * wr[n];
      }
      for (int n = 0; n < N; ++n) {
        raw[ri * N + n] = acc[n];
        double v = acc[n] + (use_bias ? bias[n] : 0) + (use_res ? r[size_t(m) * ldr + n] : 0);
        full[ri * N + n] = act_ref(v, act);
      }
    }
  }

  /// Max of |y - ref| / max(|ref|, rms(ref)) over the checked rows of y (device, row stride ldc).
  double error(const float* y_dev, bool against_raw) const {
    const std::vector<double>& ref = against_raw ? raw : full;
    double ss = 0;
    for (double v : ref) ss += v * v;
    const double rms = std::sqrt(ss / std::max<size_t>(ref.size(), 1)) + 1e-30;
    double worst = 0;
    std::vector<float> row(N);
    for (size_t ri = 0; ri < rows.size(); ++ri) {
      CK(cudaMemcpy(row.data(), y_dev + size_t(rows[ri]) * ldc, N * sizeof(float), cudaMemcpyDeviceToHost));
      for (int n = 0; n < N; ++n) {
        const double d = std::fabs(double(row[n]) - ref[ri * N + n]) / std::max(std::fabs(ref[ri * N + n]), rms);
        worst = std::max(worst, std::isfinite(d) ? d : 1e30);  // NaN (unwritten) counts as wrong
      }
    }
    return worst;
  }
};

std::vector<float> random_host(size_t n, unsigned seed) {
  std::vector<float> h(n);
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  for (auto& v : h) v = u(g);
  return h;
}

void upload(float* d, const std::vector<float>& h) {
  CK(cudaMemcpy(d, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice));
}

void poison(float* d, size_t n) { CK(cudaMemset(d, 0xff, n * sizeof(float))); }  // NaN everywhere

/// Median over 7 rounds of the mean time of 20 back-to-back launches, after 3 warm-up launches.
/// Returns -1 if f() refuses (returns false).
float time_ms(const std::function<bool()>& f, cudaStream_t s) {
  for (int i = 0; i < 3; ++i)
    if (!f()) return -1;
  CK(cudaStreamSynchronize(s));
  CK(cudaGetLastError());
  std::vector<float> rounds = round_times(f, s, 7, 20);
  CK(cudaGetLastError());
  std::sort(rounds.begin(), rounds.end());
  return rounds[rounds.size() / 2];
}

__global__ void gelu_erf_pass(float4* y, int n4) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += gridDim.x * blockDim.x) {
    float4 v = y[i];
    v.x = 0.5f * v.x * (1.0f + erff(v.x * 0.70710678118654752f));
    v.y = 0.5f * v.y * (1.0f + erff(v.y * 0.70710678118654752f));
    v.z = 0.5f * v.z * (1.0f + erff(v.z * 0.70710678118654752f));
    v.w = 0.5f * v.w * (1.0f + erff(v.w * 0.70710678118654752f));
    y[i] = v;
  }
}

/// cuBLASLt for row-major Y = X·W + bias (+ R): column-major D[N,M] = W[N,K]·X[K,M] + bias (+ C).
struct LtGemm {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t lw = nullptr, lx = nullptr, ly = nullptr;
  cublasLtMatmulHeuristicResult_t algos[8] = {};
  int found = 0;

  LtGemm(cublasLtHandle_t h, int M, int N, int K, const float* bias, size_t ws_bytes, bool relu = false) {
    CK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    // ReLU after bias (+ C): the residual enters as C with beta = 1, so the epilogue applies it
    // to the sum, as the bottleneck does.
    const cublasLtEpilogue_t epi = relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
    CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    CK(cublasLtMatrixLayoutCreate(&lw, CUDA_R_32F, N, K, N));
    CK(cublasLtMatrixLayoutCreate(&lx, CUDA_R_32F, K, M, K));
    CK(cublasLtMatrixLayoutCreate(&ly, CUDA_R_32F, N, M, N));
    cublasLtMatmulPreference_t pref;
    CK(cublasLtMatmulPreferenceCreate(&pref));
    CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                            sizeof ws_bytes));
    CK(cublasLtMatmulAlgoGetHeuristic(h, desc, lw, lx, ly, ly, pref, 8, algos, &found));
    cublasLtMatmulPreferenceDestroy(pref);
  }
  ~LtGemm() {
    for (auto l : {lw, lx, ly}) cublasLtMatrixLayoutDestroy(l);
    cublasLtMatmulDescDestroy(desc);
  }
  bool run(cublasLtHandle_t h, int algo, const float* x, const float* w, const float* r, float* y, void* ws,
           cudaStream_t s) const {
    const float one = 1, beta = r ? 1.0f : 0.0f;
    return cublasLtMatmul(h, desc, &one, w, lw, x, lx, &beta, r ? r : y, ly, y, ly, &algos[algo].algo, ws,
                          algos[algo].workspaceSize, s) == CUBLAS_STATUS_SUCCESS;
  }
};

bool g_failed = false;

void check(const char* what, const char* who, double err) {
  if (err > kTolerance || !std::isfinite(err)) {
    std::printf("  MISMATCH %s %s: max rel err %.3g\n", what, who, err);
    g_failed = true;
  }
}

/// Every configuration on odd shapes and strides, all outputs checked.
void edge_tests(cudaStream_t s) {
  struct Edge {
    int M, N, K, pad;  // pad: extra elements per row of every matrix
    bool bias, res;
    SgemmAct act;
  };
  const Edge edges[] = {
      {1, 4, 1, 0, true, true, SgemmAct::None},          {77, 52, 33, 0, true, false, SgemmAct::Relu},
      {129, 148, 17, 4, false, true, SgemmAct::GeluErf}, {1000, 260, 777, 0, true, true, SgemmAct::GeluErf},
      {300, 400, 200, 8, true, true, SgemmAct::Relu},    {65, 67, 13, 1, true, true, SgemmAct::None},
      {31, 5, 3000, 3, false, false, SgemmAct::GeluErf}, {257, 1000, 64, 0, false, false, SgemmAct::None},
  };
  double worst = 0;
  int runs = 0;
  for (const Edge& e : edges) {
    Problem p;
    p.M = e.M, p.N = e.N, p.K = e.K;
    p.lda = e.K + e.pad, p.ldb = e.N + e.pad, p.ldr = e.N + e.pad, p.ldc = e.N + e.pad;
    p.x = random_host(size_t(p.M) * p.lda, 11);
    p.w = random_host(size_t(p.K) * p.ldb, 12);
    p.bias = random_host(p.N, 13);
    p.r = random_host(size_t(p.M) * p.ldr, 14);
    for (int m = 0; m < p.M; ++m) p.rows.push_back(m);
    p.reference(e.bias, e.res, e.act);
    Buf x(p.x.size()), w(p.w.size()), b(p.N), r(p.r.size()), y(size_t(p.M) * p.ldc);
    upload(x.p, p.x), upload(w.p, p.w), upload(b.p, p.bias), upload(r.p, p.r);
    for (int c = 0; c < fusec::cuda::sgemm_config_count(); ++c) {
      poison(y.p, size_t(p.M) * p.ldc);
      SgemmArgs a;
      a.M = p.M, a.N = p.N, a.K = p.K, a.A = x.p, a.lda = p.lda, a.B = w.p, a.ldb = p.ldb;
      a.bias = e.bias ? b.p : nullptr, a.residual = e.res ? r.p : nullptr, a.ldr = p.ldr, a.C = y.p, a.ldc = p.ldc;
      a.act = e.act;
      if (!fusec::cuda::launch_sgemm_f32(a, c, s)) continue;
      CK(cudaStreamSynchronize(s));
      CK(cudaGetLastError());
      const double err = p.error(y.p, false);
      char what[96];
      std::snprintf(what, sizeof what, "edge %dx%dx%d pad %d", e.M, e.N, e.K, e.pad);
      check(what, fusec::cuda::sgemm_config_name(c), err);
      worst = std::max(worst, err);
      ++runs;
    }
  }
  std::printf("# edge tests: %d runs, max rel err %.3g%s\n", runs, worst, g_failed ? "  FAILED" : "");
}

struct Row {
  std::string shape;
  double flop;
  float lt = -1, lt_erf = -1, legacy = -1, ours = -1;
  std::string ours_cfg;
};

}  // namespace

int main(int argc, char** argv) {
  const bool edge_only = argc > 1 && std::strcmp(argv[1], "--edge-only") == 0;
  const bool profile = argc > 3 && std::strcmp(argv[1], "--profile") == 0;
  const int profile_shape = profile ? std::atoi(argv[2]) : -1;
  const bool profile_lt = profile && std::strncmp(argv[3], "lt", 2) == 0;
  const int profile_cand = profile && !profile_lt ? std::atoi(argv[3]) : -1;
  const int profile_lt_algo = profile_lt && argv[3][2] == ':' ? std::atoi(argv[3] + 3) : 0;
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("# %s, %d SMs, cuBLASLt %zu, strict fp32 (FFMA, no TF32)\n", prop.name, prop.multiProcessorCount,
              cublasLtGetVersion());
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  if (!profile) edge_tests(s);
  if (edge_only) return g_failed ? 1 : 0;

  cublasLtHandle_t lt;
  CK(cublasLtCreate(&lt));
  cublasHandle_t blas;
  CK(cublasCreate(&blas));
  CK(cublasSetStream(blas, s));
  CK(cublasSetMathMode(blas, CUBLAS_PEDANTIC_MATH));  // strict fp32, whatever NVIDIA_TF32_OVERRIDE says
  const size_t ws_bytes = 32u << 20;
  void* ws;
  CK(cudaMalloc(&ws, ws_bytes));

  std::vector<Row> table;
  double worst_ours = 0, worst_lt = 0;
  const bool resnet = argc > 1 && std::strcmp(argv[1], "--resnet") == 0;
  std::vector<Shape> shapes(std::begin(kBert), std::end(kBert));
  if (resnet) shapes.assign(std::begin(kResnet1x1), std::end(kResnet1x1));
  for (const Shape& sh : shapes) {
    if (profile && &sh != &shapes[profile_shape]) continue;
    Problem p;
    p.M = sh.M, p.N = sh.N, p.K = sh.K, p.lda = sh.K, p.ldb = sh.N, p.ldr = sh.N, p.ldc = sh.N;
    p.x = random_host(size_t(p.M) * p.K, 1);
    p.w = random_host(size_t(p.K) * p.N, 2);
    p.bias = random_host(p.N, 3);
    p.r = random_host(size_t(p.M) * p.N, 4);
    for (int m = 0; m < p.M; m += 29) p.rows.push_back(m);
    p.rows.push_back(p.M - 1);
    if (!profile) p.reference(true, sh.residual, sh.act);
    Buf x(p.x.size()), w(p.w.size()), b(p.N), r(p.r.size()), y(size_t(p.M) * p.N);
    upload(x.p, p.x), upload(w.p, p.w), upload(b.p, p.bias), upload(r.p, p.r);
    const float* res = sh.residual ? r.p : nullptr;
    Row row;
    row.shape = sh.name;
    row.flop = 2.0 * p.M * p.N * p.K;
    auto tflops = [&](float ms) { return ms > 0 ? row.flop / ms / 1e9 : 0.0; };
    std::printf("\n%s  M=%d N=%d K=%d  bias%s%s\n", sh.name, p.M, p.N, p.K, sh.residual ? " + residual" : "",
                sh.act == SgemmAct::GeluErf ? " then erf-GELU" : "");

    LtGemm g(lt, p.M, p.N, p.K, b.p, ws_bytes, sh.act == SgemmAct::Relu);
    if (profile) {
      SgemmArgs a;
      a.M = p.M, a.N = p.N, a.K = p.K, a.A = x.p, a.lda = p.lda, a.B = w.p, a.ldb = p.ldb;
      a.bias = b.p, a.residual = res, a.ldr = p.ldr, a.C = y.p, a.ldc = p.ldc, a.act = sh.act;
      if (profile_cand < 0 && (profile_lt_algo < 0 || profile_lt_algo >= g.found)) {
        std::fprintf(stderr, "lab: the heuristic lists %d algorithms for %s\n", g.found, sh.name);
        return 1;
      }
      for (int i = 0; i < 3; ++i)
        CK(profile_cand < 0 ? !g.run(lt, profile_lt_algo, x.p, w.p, res, y.p, ws, s)
                            : !fusec::cuda::launch_sgemm_f32(a, profile_cand, s));
      CK(cudaStreamSynchronize(s));
      if (profile_cand < 0)
        std::printf("profiled %s with lt algo %d\n", sh.name, profile_lt_algo);
      else
        std::printf("profiled %s with %s\n", sh.name, fusec::cuda::sgemm_config_name(profile_cand));
      return 0;
    }
    // cuBLASLt: time each of the heuristic's algorithms, keep the best.
    int best_algo = -1;
    for (int i = 0; i < g.found; ++i) {
      const float ms = time_ms([&] { return g.run(lt, i, x.p, w.p, res, y.p, ws, s); }, s);
      if (ms > 0 && (row.lt < 0 || ms < row.lt)) row.lt = ms, best_algo = i;
    }
    if (best_algo >= 0) {
      poison(y.p, size_t(p.M) * p.N);
      CK(g.run(lt, best_algo, x.p, w.p, res, y.p, ws, s) ? 0 : 1);
      CK(cudaStreamSynchronize(s));
      const bool gelu = sh.act == SgemmAct::GeluErf;
      if (gelu) {
        gelu_erf_pass<<<4 * prop.multiProcessorCount, 256, 0, s>>>(reinterpret_cast<float4*>(y.p), p.M * p.N / 4);
        CK(cudaStreamSynchronize(s));
      }
      const double err = p.error(y.p, false);
      check(sh.name, gelu ? "lt+erf" : "lt", err);
      worst_lt = std::max(worst_lt, err);
      std::printf("  %-30s %8.4f ms %6.2f TFLOP/s  err %.2g  (best of %d algos)\n", "lt", row.lt, tflops(row.lt), err,
                  g.found);
      if (gelu) {
        row.lt_erf = time_ms(
            [&] {
              bool ok = g.run(lt, best_algo, x.p, w.p, res, y.p, ws, s);
              gelu_erf_pass<<<4 * prop.multiProcessorCount, 256, 0, s>>>(reinterpret_cast<float4*>(y.p), p.M * p.N / 4);
              return ok;
            },
            s);
        std::printf("  %-30s %8.4f ms %6.2f TFLOP/s\n", "lt+erf pass", row.lt_erf, tflops(row.lt_erf));
      }
    }

    // Legacy cublasSgemm, product only.
    {
      const float one = 1, zero = 0;
      auto f = [&] {
        return cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, p.N, p.M, p.K, &one, w.p, p.N, x.p, p.K, &zero, y.p, p.N) ==
               CUBLAS_STATUS_SUCCESS;
      };
      poison(y.p, size_t(p.M) * p.N);
      CK(f() ? 0 : 1);
      CK(cudaStreamSynchronize(s));
      const double err = p.error(y.p, true);
      check(sh.name, "cublasSgemm", err);
      row.legacy = time_ms(f, s);
      std::printf("  %-30s %8.4f ms %6.2f TFLOP/s  err %.2g  (product only)\n", "cublasSgemm", row.legacy,
                  tflops(row.legacy), err);
    }

    // Ours, every configuration, epilogue fused.
    for (int c = 0; c < fusec::cuda::sgemm_config_count(); ++c) {
      SgemmArgs a;
      a.M = p.M, a.N = p.N, a.K = p.K, a.A = x.p, a.lda = p.lda, a.B = w.p, a.ldb = p.ldb;
      a.bias = b.p, a.residual = res, a.ldr = p.ldr, a.C = y.p, a.ldc = p.ldc, a.act = sh.act;
      poison(y.p, size_t(p.M) * p.N);
      if (!fusec::cuda::launch_sgemm_f32(a, c, s)) continue;
      CK(cudaStreamSynchronize(s));
      CK(cudaGetLastError());
      const double err = p.error(y.p, false);
      check(sh.name, fusec::cuda::sgemm_config_name(c), err);
      worst_ours = std::max(worst_ours, err);
      const float ms = time_ms([&] { return fusec::cuda::launch_sgemm_f32(a, c, s); }, s);
      std::printf("  ours %-25s %8.4f ms %6.2f TFLOP/s  err %.2g\n", fusec::cuda::sgemm_config_name(c), ms, tflops(ms),
                  err);
      if (ms > 0 && (row.ours < 0 || ms < row.ours)) row.ours = ms, row.ours_cfg = fusec::cuda::sgemm_config_name(c);
    }
    table.push_back(row);
  }

  std::printf("\n# summary, %s: ms (TFLOP/s); lt = cuBLASLt best incl. its epilogue, FFN1's lt adds the erf pass\n",
              prop.name);
  std::printf("%-10s %18s %18s %18s %7s  %s\n", "shape", "lt", "cublasSgemm", "ours best", "lt/ours", "config");
  for (const Row& t : table) {
    const float lt_ms = t.lt_erf > 0 ? t.lt_erf : t.lt;
    std::printf("%-10s %8.4f (%5.1f) %10.4f (%5.1f) %8.4f (%5.1f) %7.3f  %s\n", t.shape.c_str(), lt_ms,
                t.flop / lt_ms / 1e9, t.legacy, t.flop / t.legacy / 1e9, t.ours, t.flop / t.ours / 1e9, lt_ms / t.ours,
                t.ours_cfg.c_str());
  }
  std::printf("# max rel err: ours %.3g, lt %.3g; %s\n", worst_ours, worst_lt, g_failed ? "FAILED" : "all within 1e-4");
  cudaFree(ws);
  cublasDestroy(blas);
  cublasLtDestroy(lt);
  return g_failed ? 1 : 0;
}
