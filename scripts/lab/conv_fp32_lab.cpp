// A lab, not production: how fast can each of ResNet-50's convolutions (batch 16, strict fp32,
// TF32 off) run, by every route fusec could take? For each conv shape it times, with CUDA events
// after warm-up (best of 3 rounds of 10 launches, random data):
//   nchw    cuDNN NCHW, every deterministic FMA algorithm (legacy API), best kept
//   nhwc    cuDNN NHWC, the same
//   lt.nhwc 1x1 stride-1 only: one cuBLASLt GEMM over NHWC memory, D[Cout, N·H·W] = Wᵀ·X, with
//           the bias + ReLU epilogue and the residual as C (what the conv needs, nothing after)
//   lt.row  1x1 stride-1 only: NCHW memory as a row-major batched GEMM Y[n] = W·X[n] (bias per
//           output row = per channel), if cuBLASLt takes row-major fp32 layouts
//   lt.col  1x1 stride-1 only: NCHW memory as a column-major batched GEMM; no bias epilogue is
//           possible in this orientation, so this is the GEMM alone (an epilogue pass would add)
// and prints one line per conv with each route's ms and TFLOP/s, then totals per route over the
// whole network (each conv counted as often as ResNet-50 has it).
//   bash scripts/lab/build_conv_fp32_lab.sh   (here; the binary goes to build-gpu/lab/)
//   build-gpu/lab/conv_fp32_lab               (on the GPU machine)
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "lab_util.h"

namespace {

struct Conv {
  const char* name;
  int count;  // how many ResNet-50 has
  int cin, cout, hw, k, stride;
  bool residual;
  bool relu;
};

// torchvision resnet50 (v1.5: stride on the 3x3), batch 16, 224x224; hw is the input size.
const Conv kConvs[] = {
    {"conv1 7x7 s2", 1, 3, 64, 224, 7, 2, false, true},
    {"l1 c1 64>64", 1, 64, 64, 56, 1, 1, false, true},
    {"l1 c1 256>64", 2, 256, 64, 56, 1, 1, false, true},
    {"l1 c2 3x3 64", 3, 64, 64, 56, 3, 1, false, true},
    {"l1 c3 64>256 +z", 3, 64, 256, 56, 1, 1, true, true},
    {"l1 ds 64>256", 1, 64, 256, 56, 1, 1, false, false},
    {"l2.0 c1 256>128", 1, 256, 128, 56, 1, 1, false, true},
    {"l2.0 c2 3x3 s2", 1, 128, 128, 56, 3, 2, false, true},
    {"l2 ds 256>512 s2", 1, 256, 512, 56, 1, 2, false, false},
    {"l2 c1 512>128", 3, 512, 128, 28, 1, 1, false, true},
    {"l2 c2 3x3 128", 3, 128, 128, 28, 3, 1, false, true},
    {"l2 c3 128>512 +z", 4, 128, 512, 28, 1, 1, true, true},
    {"l3.0 c1 512>256", 1, 512, 256, 28, 1, 1, false, true},
    {"l3.0 c2 3x3 s2", 1, 256, 256, 28, 3, 2, false, true},
    {"l3 ds 512>1024 s2", 1, 512, 1024, 28, 1, 2, false, false},
    {"l3 c1 1024>256", 5, 1024, 256, 14, 1, 1, false, true},
    {"l3 c2 3x3 256", 5, 256, 256, 14, 3, 1, false, true},
    {"l3 c3 256>1024 +z", 6, 256, 1024, 14, 1, 1, true, true},
    {"l4.0 c1 1024>512", 1, 1024, 512, 14, 1, 1, false, true},
    {"l4.0 c2 3x3 s2", 1, 512, 512, 14, 3, 2, false, true},
    {"l4 ds 1024>2048 s2", 1, 1024, 2048, 14, 1, 2, false, false},
    {"l4 c1 2048>512", 2, 2048, 512, 7, 1, 1, false, true},
    {"l4 c2 3x3 512", 2, 512, 512, 7, 3, 1, false, true},
    {"l4 c3 512>2048 +z", 3, 512, 2048, 7, 1, 1, true, true},
};
constexpr int kBatch = 16;

struct Buf {
  void* p = nullptr;
  explicit Buf(size_t bytes) { CK(cudaMalloc(&p, std::max<size_t>(bytes, 256))); }
  ~Buf() { cudaFree(p); }
};

template <class F>
float time_ms(F&& f, cudaStream_t s) {
  if (!f() || !f()) return -1;  // warm (and unsupported: -1)
  CK(cudaStreamSynchronize(s));
  return fastest(round_times(f, s, 3, 10));
}

/// Best cuDNN time in one layout: every deterministic FMA algorithm, fused call when it works.
float cudnn_best(cudnnHandle_t h, cudaStream_t s, const Conv& c, bool nhwc, void* x, void* w, void* b, void* z, void* y,
                 int* best_algo, bool* best_fused) {
  int out = (c.hw + 2 * (c.k / 2) - c.k) / c.stride + 1;
  cudnnTensorDescriptor_t xd, yd, bd;
  cudnnFilterDescriptor_t wd;
  cudnnConvolutionDescriptor_t cd;
  cudnnActivationDescriptor_t ad;
  CK(cudnnCreateTensorDescriptor(&xd));
  CK(cudnnCreateTensorDescriptor(&yd));
  CK(cudnnCreateTensorDescriptor(&bd));
  CK(cudnnCreateFilterDescriptor(&wd));
  CK(cudnnCreateConvolutionDescriptor(&cd));
  CK(cudnnCreateActivationDescriptor(&ad));
  auto fmt = nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  CK(cudnnSetTensor4dDescriptor(xd, fmt, CUDNN_DATA_FLOAT, kBatch, c.cin, c.hw, c.hw));
  CK(cudnnSetTensor4dDescriptor(yd, fmt, CUDNN_DATA_FLOAT, kBatch, c.cout, out, out));
  CK(cudnnSetTensor4dDescriptor(bd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, c.cout, 1, 1));
  CK(cudnnSetFilter4dDescriptor(wd, CUDNN_DATA_FLOAT, fmt, c.cout, c.cin, c.k, c.k));
  CK(cudnnSetConvolution2dDescriptor(cd, c.k / 2, c.k / 2, c.stride, c.stride, 1, 1, CUDNN_CROSS_CORRELATION,
                                     CUDNN_DATA_FLOAT));
  CK(cudnnSetConvolutionMathType(cd, CUDNN_FMA_MATH));
  CK(cudnnSetActivationDescriptor(ad, c.relu ? CUDNN_ACTIVATION_RELU : CUDNN_ACTIVATION_IDENTITY,
                                  CUDNN_NOT_PROPAGATE_NAN, 0));
  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int n = 0;
  CK(cudnnGetConvolutionForwardAlgorithm_v7(h, xd, wd, cd, yd, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, perf));
  float best = -1;
  for (int i = 0; i < n; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].determinism != CUDNN_DETERMINISTIC ||
        perf[i].mathType == CUDNN_TENSOR_OP_MATH)
      continue;
    size_t wsb = 0;
    if (cudnnGetConvolutionForwardWorkspaceSize(h, xd, wd, cd, yd, perf[i].algo, &wsb) != CUDNN_STATUS_SUCCESS)
      continue;
    if (wsb > (512u << 20)) continue;
    Buf ws(wsb);
    float one = 1, zero = 0;
    for (bool fused : {true, false}) {
      auto run = [&] {
        if (fused)
          return cudnnConvolutionBiasActivationForward(h, &one, xd, x, wd, w, cd, perf[i].algo, ws.p, wsb,
                                                       c.residual ? &one : &zero, yd, c.residual ? z : y, bd, b, ad, yd,
                                                       y) == CUDNN_STATUS_SUCCESS;
        return cudnnConvolutionForward(h, &one, xd, x, wd, w, cd, perf[i].algo, ws.p, wsb, &zero, yd, y) ==
               CUDNN_STATUS_SUCCESS;
      };
      float ms = time_ms(run, s);
      cudaGetLastError();
      if (ms > 0 && (best < 0 || ms < best)) {
        best = ms;
        *best_algo = perf[i].algo;
        *best_fused = fused;
      }
      if (ms > 0) break;  // fused works: the unfused one would still need an epilogue pass
    }
  }
  cudnnDestroyTensorDescriptor(xd);
  cudnnDestroyTensorDescriptor(yd);
  cudnnDestroyTensorDescriptor(bd);
  cudnnDestroyFilterDescriptor(wd);
  cudnnDestroyConvolutionDescriptor(cd);
  cudnnDestroyActivationDescriptor(ad);
  return best;
}

enum class Lt { Nhwc, Row, Col };

/// Best cuBLASLt time for a 1x1 stride-1 conv in one formulation; -1 when cuBLASLt has nothing.
float lt_best(cublasLtHandle_t h, cudaStream_t s, const Conv& c, Lt form, void* x, void* w, void* b, void* z, void* y,
              void* ws, size_t wsb, int* n_algos) {
  const int64_t HW = int64_t(c.hw) * c.hw, NHW = kBatch * HW;
  cublasLtMatmulDesc_t d;
  CK(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
  int32_t batch = 1;
  if (form == Lt::Nhwc) {
    // D[Cout, NHW] (col-major, ld Cout: NHWC memory) = op(W)[Cout, Cin] · X[Cin, NHW] (NHWC memory).
    cublasOperation_t ta = CUBLAS_OP_T;
    CK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, c.cin, c.cout, c.cin));
    CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, c.cin, NHW, c.cin));
    CK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, c.cout, NHW, c.cout));
    epi = c.relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
  } else if (form == Lt::Row) {
    // Y[n][Cout, HW] (row-major) = W[Cout, Cin] · X[n][Cin, HW] (row-major), batched over n.
    cublasLtOrder_t row = CUBLASLT_ORDER_ROW;
    CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, c.cout, c.cin, c.cin));
    CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, c.cin, HW, HW));
    CK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, c.cout, HW, HW));
    for (auto l : {la, lb, lc}) CK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_ORDER, &row, sizeof row));
    batch = kBatch;
    int64_t sa = 0, sb = int64_t(c.cin) * HW, sc = int64_t(c.cout) * HW;
    for (auto [l, st] : {std::pair{la, sa}, {lb, sb}, {lc, sc}}) {
      CK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch));
      CK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &st, sizeof st));
    }
    epi = c.relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
  } else {
    // Column-major: D[HW, Cout] (NCHW memory of image n) = X[n][HW, Cin] · Wᵀ[Cin, Cout] (W's memory, ld Cin).
    // (An earlier version of this lab read W transposed, op T over [Cin][Cout]: same shapes.)
    CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, HW, c.cin, HW));
    CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, c.cin, c.cout, c.cin));
    CK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, HW, c.cout, HW));
    batch = kBatch;
    int64_t sa = int64_t(c.cin) * HW, sb = 0, sc = int64_t(c.cout) * HW;
    for (auto [l, st] : {std::pair{la, sa}, {lb, sb}, {lc, sc}}) {
      CK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch));
      CK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &st, sizeof st));
    }
    epi = c.relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT;
  }
  CK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  if (epi == CUBLASLT_EPILOGUE_BIAS || epi == CUBLASLT_EPILOGUE_RELU_BIAS) {
    CK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &b, sizeof b));
    int64_t zero_stride = 0;
    CK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &zero_stride, sizeof zero_stride));
  }
  cublasLtMatmulPreference_t pref;
  CK(cublasLtMatmulPreferenceCreate(&pref));
  CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
  cublasLtMatmulHeuristicResult_t r[16] = {};
  int found = 0;
  cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(h, d, la, lb, lc, lc, pref, 16, r, &found);
  *n_algos = st == CUBLAS_STATUS_SUCCESS ? found : -int(st);
  float best = -1;
  float one = 1, beta = c.residual ? 1.0f : 0.0f;
  const void* A = form == Lt::Col ? x : w;
  const void* B = form == Lt::Col ? w : x;
  for (int i = 0; st == CUBLAS_STATUS_SUCCESS && i < found; ++i) {
    auto run = [&] {
      return cublasLtMatmul(h, d, &one, A, la, B, lb, &beta, c.residual ? z : y, lc, y, lc, &r[i].algo, ws,
                            r[i].workspaceSize, s) == CUBLAS_STATUS_SUCCESS;
    };
    float ms = time_ms(run, s);
    if (ms > 0 && (best < 0 || ms < best)) best = ms;
  }
  cublasLtMatmulPreferenceDestroy(pref);
  for (auto l : {la, lb, lc}) cublasLtMatrixLayoutDestroy(l);
  cublasLtMatmulDescDestroy(d);
  return best;
}

}  // namespace

int main() {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("# %s, cuDNN %zu, cuBLASLt %zu, batch %d, strict fp32 (FMA math)\n", prop.name, cudnnGetVersion(),
              cublasLtGetVersion(), kBatch);
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  cudnnHandle_t dnn;
  CK(cudnnCreate(&dnn));
  CK(cudnnSetStream(dnn, s));
  cublasLtHandle_t lt;
  CK(cublasLtCreate(&lt));
  const size_t wsb = 64u << 20;
  Buf ws(wsb);
  const char* routes[] = {"nchw", "nhwc", "lt.nhwc", "lt.row", "lt.col"};
  double total[5] = {}, best_total = 0;
  std::printf("%-20s %6s %9s %9s %9s %9s %9s  (ms; TFLOP/s of the best)\n", "conv", "GFLOP", routes[0], routes[1],
              routes[2], routes[3], routes[4]);
  for (const Conv& c : kConvs) {
    int out = (c.hw + 2 * (c.k / 2) - c.k) / c.stride + 1;
    size_t xn = size_t(kBatch) * c.cin * c.hw * c.hw, yn = size_t(kBatch) * c.cout * out * out,
           wn = size_t(c.cout) * c.cin * c.k * c.k;
    Buf x(xn * 4), w(wn * 4), b(c.cout * 4), z(yn * 4), y(yn * 4);
    fill_random(x.p, xn, 1);
    fill_random(w.p, wn, 2);
    fill_random(b.p, c.cout, 3);
    fill_random(z.p, yn, 4);
    double gflop = 2.0 * yn * c.cin * c.k * c.k / 1e9;
    float ms[5] = {-1, -1, -1, -1, -1};
    int algo[2] = {-1, -1};
    bool fused[2] = {false, false};
    ms[0] = cudnn_best(dnn, s, c, false, x.p, w.p, b.p, z.p, y.p, &algo[0], &fused[0]);
    ms[1] = cudnn_best(dnn, s, c, true, x.p, w.p, b.p, z.p, y.p, &algo[1], &fused[1]);
    int nalg[3] = {0, 0, 0};
    if (c.k == 1 && c.stride == 1) {
      ms[2] = lt_best(lt, s, c, Lt::Nhwc, x.p, w.p, b.p, z.p, y.p, ws.p, wsb, &nalg[0]);
      ms[3] = lt_best(lt, s, c, Lt::Row, x.p, w.p, b.p, z.p, y.p, ws.p, wsb, &nalg[1]);
      ms[4] = lt_best(lt, s, c, Lt::Col, x.p, w.p, b.p, z.p, y.p, ws.p, wsb, &nalg[2]);
    }
    float best = -1;
    for (int i = 0; i < 5; ++i) {
      if (ms[i] > 0) total[i] += ms[i] * c.count;
      if (ms[i] > 0 && (best < 0 || ms[i] < best)) best = ms[i];
    }
    best_total += best * c.count;
    std::printf("%-20s %6.2f", c.name, gflop);
    for (float m : ms) {
      if (m > 0)
        std::printf(" %9.4f", m);
      else
        std::printf(" %9s", "-");
    }
    std::printf("  %5.1f  x%d  algo nchw %d%s nhwc %d%s lt algos %d/%d/%d\n", gflop / best, c.count, algo[0],
                fused[0] ? "f" : "", algo[1], fused[1] ? "f" : "", nalg[0], nalg[1], nalg[2]);
  }
  std::printf("%-20s %6s", "network total", "");
  for (double t : total) std::printf(" %9.4f", t);
  std::printf("\nbest route per conv, summed over the network: %.4f ms\n", best_total);
  return 0;
}
