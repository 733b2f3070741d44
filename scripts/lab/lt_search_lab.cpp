// Does cuBLASLt have a faster strict-fp32 configuration than the ones its heuristic lists, for
// BERT-base's four GEMMs at batch 16 x seq 128? fusec's tuner times the heuristic's top 8; this lab
// walks cuBLASLt's whole configuration space per algorithm (tile, stages, split-K count and its
// reduction scheme, CTA swizzle, custom option), keeps what cublasLtMatmulAlgoCheck accepts, and
// times every one as fusec's tuner does: random data, the weight operand rotated through copies
// that overflow L2 twice, three rounds, the best kept.
//
//   bash scripts/lab/build_lt_search_lab.sh here; build-lab/lt_search_lab [seconds per shape] there
#include <cublasLt.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "scripts/lab/lab_util.h"

namespace {

struct Shape {
  const char* name;
  int M, N, K;
  bool residual;  // C = the residual, beta 1 (out, FFN2), as FusedMatMul runs them
};

struct Config {
  cublasLtMatmulAlgo_t algo;
  size_t ws;
  std::string id;
  float ms = -1;
};

std::string identity(const cublasLtMatmulAlgo_t& a) {
  std::string id;
  for (auto attr : {CUBLASLT_ALGO_CONFIG_ID, CUBLASLT_ALGO_CONFIG_TILE_ID, CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
                    CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING,
                    CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, CUBLASLT_ALGO_CONFIG_STAGES_ID}) {
    uint64_t v = 0;
    size_t need = 0;
    cublasLtMatmulAlgoConfigGetAttribute(&a, attr, nullptr, 0, &need);
    if (need == 0 || need > sizeof v ||
        cublasLtMatmulAlgoConfigGetAttribute(&a, attr, &v, need, &need) != CUBLAS_STATUS_SUCCESS)
      v = ~uint64_t{0};
    id += (id.empty() ? "" : ",") + std::to_string(static_cast<long long>(v));
  }
  return id;
}

/// A capability that is an array of uint32 ids (tiles, stages); {0} (undefined) when it lists none.
std::vector<uint32_t> cap_ids(const cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoCapAttributes_t attr) {
  size_t bytes = 0;
  cublasLtMatmulAlgoCapGetAttribute(&a, attr, nullptr, 0, &bytes);
  std::vector<uint32_t> ids(bytes / sizeof(uint32_t));
  if (!ids.empty()) cublasLtMatmulAlgoCapGetAttribute(&a, attr, ids.data(), bytes, &bytes);
  if (ids.empty()) ids.push_back(0);
  return ids;
}

template <class T>
T cap(const cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoCapAttributes_t attr) {
  T v{};
  size_t bytes = 0;
  if (cublasLtMatmulAlgoCapGetAttribute(&a, attr, &v, sizeof v, &bytes) != CUBLAS_STATUS_SUCCESS) return T{};
  return v;
}

template <class T>
void set(cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoConfigAttributes_t attr, T v) {
  CK(cublasLtMatmulAlgoConfigSetAttribute(&a, attr, &v, sizeof v));
}

}  // namespace

int main(int argc, char** argv) {
  const double budget_s = argc > 1 ? std::atof(argv[1]) : 60.0;
  const Shape shapes[] = {{"QKV", 2048, 2304, 768, false},
                          {"out", 2048, 768, 768, true},
                          {"FFN1", 2048, 3072, 768, false},
                          {"FFN2", 2048, 768, 3072, true}};
  const size_t kWorkspace = 32u << 20;  // fusec's cap (cublaslt_util.h kLtWorkspace)
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("# %s (%d SMs), cuBLASLt %zu, strict fp32 (CUBLAS_COMPUTE_32F), bias epilogue, weights cold\n", prop.name,
              prop.multiProcessorCount, cublasLtGetVersion());
  cublasLtHandle_t lt;
  CK(cublasLtCreate(&lt));
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  void* ws;
  CK(cudaMalloc(&ws, kWorkspace));

  for (const Shape& sh : shapes) {
    const size_t a_n = size_t(sh.M) * sh.K, b_n = size_t(sh.K) * sh.N, c_n = size_t(sh.M) * sh.N;
    float *A, *C, *D, *bias;
    CK(cudaMalloc(reinterpret_cast<void**>(&A), a_n * 4));
    CK(cudaMalloc(reinterpret_cast<void**>(&C), c_n * 4));
    CK(cudaMalloc(reinterpret_cast<void**>(&D), c_n * 4));
    CK(cudaMalloc(reinterpret_cast<void**>(&bias), sh.N * 4));
    const int copies = std::min<int>(32, int((2 * size_t(prop.l2CacheSize) + b_n * 4 - 1) / (b_n * 4)));
    std::vector<float*> Bs(copies);
    for (int i = 0; i < copies; ++i) {
      CK(cudaMalloc(reinterpret_cast<void**>(&Bs[i]), b_n * 4));
      fill_random(Bs[i], b_n, 100 + i);
    }
    fill_random(A, a_n, 1);
    fill_random(C, c_n, 2);
    fill_random(bias, sh.N, 3);

    // fusec's swapped column-major form: "A" = the weight [K, N] row-major (N x K, ld N), "B" = the
    // activation [M, K] row-major (K x M, ld K), D = N x M.
    cublasLtMatmulDesc_t desc;
    CK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    cublasLtMatrixLayout_t la, lb, lc;
    CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, sh.N, sh.K, sh.N));
    CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, sh.K, sh.M, sh.K));
    CK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, sh.N, sh.M, sh.N));
    const float alpha = 1, beta = sh.residual ? 1 : 0;
    int turn = 0;
    auto run = [&](const Config& c) {
      return cublasLtMatmul(lt, desc, &alpha, Bs[turn++ % copies], la, A, lb, &beta, sh.residual ? C : D, lc, D, lc,
                            &c.algo, ws, c.ws, s) == CUBLAS_STATUS_SUCCESS;
    };
    auto time = [&](Config& c) {
      if (!run(c) || !run(c)) return;
      c.ms = fastest(round_times([&] { run(c); }, s, 3, 5));
    };

    // The heuristic's list, as fusec's tuner sees it (top 8), and deeper.
    cublasLtMatmulPreference_t pref;
    CK(cublasLtMatmulPreferenceCreate(&pref));
    CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &kWorkspace,
                                            sizeof kWorkspace));
    std::vector<cublasLtMatmulHeuristicResult_t> heur(64);
    int found = 0;
    CK(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, 64, heur.data(), &found));
    std::vector<Config> hconf;
    for (int i = 0; i < found; ++i) {
      Config c{heur[i].algo, heur[i].workspaceSize, identity(heur[i].algo)};
      time(c);
      hconf.push_back(c);
    }
    float top8 = -1, top64 = -1;
    int top8_at = -1, top64_at = -1;
    for (int i = 0; i < found; ++i) {
      if (hconf[i].ms <= 0) continue;
      if (i < 8 && (top8 < 0 || hconf[i].ms < top8)) top8 = hconf[i].ms, top8_at = i;
      if (top64 < 0 || hconf[i].ms < top64) top64 = hconf[i].ms, top64_at = i;
    }

    // Every configuration of every algorithm.
    int ids[256], nids = 0;
    CK(cublasLtMatmulAlgoGetIds(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, 256,
                                ids, &nids));
    std::vector<Config> all;
    int checked = 0, accepted = 0;
    const auto t0 = std::chrono::steady_clock::now();
    bool out_of_time = false;
    for (int k = 0; k < nids && !out_of_time; ++k) {
      cublasLtMatmulAlgo_t base;
      if (cublasLtMatmulAlgoInit(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F,
                                 ids[k], &base) != CUBLAS_STATUS_SUCCESS)
        continue;
      const auto tiles = cap_ids(base, CUBLASLT_ALGO_CAP_TILE_IDS);
      const auto stages = cap_ids(base, CUBLASLT_ALGO_CAP_STAGES_IDS);
      const int32_t splitk_ok = cap<int32_t>(base, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT);
      const uint32_t schemes = cap<uint32_t>(base, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK);
      const uint32_t swizzle = cap<uint32_t>(base, CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT);
      const int32_t custom_max = cap<int32_t>(base, CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX);
      std::printf("# algo %d: %zu tiles, %zu stages, splitK %d, schemes 0x%x, swizzle %u, custom %d\n", ids[k],
                  tiles.size(), stages.size(), splitk_ok, schemes, swizzle, custom_max);
      const uint32_t splits[] = {1, 2, 3, 4, 6, 8};
      for (uint32_t tile : tiles)
        for (uint32_t stage : stages)
          for (uint32_t sk : splits) {
            if (sk > 1 && !splitk_ok) continue;
            std::vector<uint32_t> red{CUBLASLT_REDUCTION_SCHEME_NONE};
            if (sk > 1) {
              red.clear();
              for (uint32_t bit = 1; bit <= CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE; bit <<= 1)
                if (schemes & bit) red.push_back(bit);
            }
            for (uint32_t r : red)
              for (uint32_t sw = 0; sw <= (swizzle ? 1u : 0u); ++sw)
                for (int32_t co = 0; co <= std::min(custom_max, 3); ++co) {
                  if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > budget_s) {
                    out_of_time = true;
                    break;
                  }
                  cublasLtMatmulAlgo_t a = base;
                  set<uint32_t>(a, CUBLASLT_ALGO_CONFIG_TILE_ID, tile);
                  set<uint32_t>(a, CUBLASLT_ALGO_CONFIG_STAGES_ID, stage);
                  set<int32_t>(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, int32_t(sk));
                  set<uint32_t>(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, r);
                  set<uint32_t>(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, sw);
                  set<uint32_t>(a, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, uint32_t(co));
                  cublasLtMatmulHeuristicResult_t res{};
                  ++checked;
                  if (cublasLtMatmulAlgoCheck(lt, desc, la, lb, lc, lc, &a, &res) != CUBLAS_STATUS_SUCCESS ||
                      res.workspaceSize > kWorkspace)
                    continue;
                  ++accepted;
                  Config c{a, res.workspaceSize, identity(a)};
                  time(c);
                  if (c.ms > 0) all.push_back(c);
                }
          }
    }
    cudaGetLastError();
    std::sort(all.begin(), all.end(), [](const Config& x, const Config& y) { return x.ms < y.ms; });
    const double gflop = 2.0 * sh.M * sh.N * sh.K / 1e9;
    std::printf("\n%s  M %d N %d K %d%s  (%.2f GFLOP, %d weight copies)\n", sh.name, sh.M, sh.N, sh.K,
                sh.residual ? " +residual" : "", gflop, copies);
    std::printf("  heuristic top 8 best:  %.4f ms (%.1f TFLOP/s) #%d [%s]\n", top8, gflop / top8, top8_at,
                top8_at >= 0 ? hconf[top8_at].id.c_str() : "-");
    std::printf("  heuristic top %d best: %.4f ms #%d [%s]\n", found, top64, top64_at,
                top64_at >= 0 ? hconf[top64_at].id.c_str() : "-");
    std::printf(
        "  search: %d configurations checked, %d accepted, %zu ran%s; fastest "
        "(id,tile,splitK,scheme,swizzle,custom,stages):\n",
        checked, accepted, all.size(), out_of_time ? " (time budget reached)" : "");
    for (size_t i = 0; i < all.size() && i < 12; ++i)
      std::printf("    %.4f ms (%.1f TFLOP/s, %.3fx top-8) [%s] ws %zu\n", all[i].ms, gflop / all[i].ms,
                  top8 / all[i].ms, all[i].id.c_str(), all[i].ws);
    std::fflush(stdout);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(desc);
    for (float* b : Bs) cudaFree(b);
    cudaFree(A), cudaFree(C), cudaFree(D), cudaFree(bias);
  }
  return 0;
}
