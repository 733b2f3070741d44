// MatMul, Gemm and FusedMatMul on cuBLASLt and fusec's SGEMM against the CPU reference.
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/ops/gemm/sgemm.cuh"
#include "backend/cuda/core/tuning_cache.h"
#include "gpu_test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

const Precision kAll[] = {Precision::FP32, Precision::TF32, Precision::FP16, Precision::BF16};

OpCase matmul(std::vector<int64_t> a, std::vector<int64_t> b, bool const_b = false, uint64_t seed = 1) {
  OpCase c;
  c.op = "MatMul";
  c.inputs = {random_tensor(DType::Float32, a, seed), random_tensor(DType::Float32, b, seed + 7)};
  if (const_b) c.constant = {1};
  return c;
}

}  // namespace

TEST(GpuMatMul, LinearLayerFoldsBatchIntoRows) {
  FUSEC_REQUIRE_GPU();
  for (Precision p : kAll) expect_gpu_matches_cpu(matmul({4, 33, 64}, {64, 48}, true), p);
}

TEST(GpuMatMul, OddSizes) {
  FUSEC_REQUIRE_GPU();
  for (Precision p : kAll) {
    expect_gpu_matches_cpu(matmul({7, 13}, {13, 5}), p);
    expect_gpu_matches_cpu(matmul({1, 1}, {1, 1}), p);
    expect_gpu_matches_cpu(matmul({129, 257}, {257, 31}), p);
  }
}

TEST(GpuMatMul, BatchedAndBroadcast) {
  FUSEC_REQUIRE_GPU();
  for (Precision p : kAll) {
    expect_gpu_matches_cpu(matmul({2, 3, 16, 8}, {2, 3, 8, 16}), p);  // attention-like, equal batches
    expect_gpu_matches_cpu(matmul({16, 8}, {5, 8, 4}), p);            // A broadcast (stride 0)
    expect_gpu_matches_cpu(matmul({2, 1, 6, 8}, {1, 3, 8, 5}), p);    // mixed broadcast: looped
  }
}

TEST(GpuMatMul, VectorOperands) {
  FUSEC_REQUIRE_GPU();
  expect_gpu_matches_cpu(matmul({8}, {8, 5}), Precision::FP32);
  expect_gpu_matches_cpu(matmul({3, 6, 8}, {8}), Precision::FP32);
  expect_gpu_matches_cpu(matmul({8}, {8}), Precision::FP32);
}

TEST(GpuGemm, TransposesAlphaBetaAndBias) {
  FUSEC_REQUIRE_GPU();
  for (Precision p : kAll) {
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        OpCase c;
        c.op = "Gemm";
        std::vector<int64_t> a = ta ? std::vector<int64_t>{24, 10} : std::vector<int64_t>{10, 24};
        std::vector<int64_t> b = tb ? std::vector<int64_t>{12, 24} : std::vector<int64_t>{24, 12};
        c.inputs = {random_tensor(DType::Float32, a, 3), random_tensor(DType::Float32, b, 4),
                    random_tensor(DType::Float32, {12}, 5)};
        c.constant = {1, 2};
        c.attrs = {attr("transA", int64_t{ta}), attr("transB", int64_t{tb}), attr("alpha", 0.5f)};
        expect_gpu_matches_cpu(c, p);
      }
    OpCase full;  // C as a full matrix, beta != 1
    full.op = "Gemm";
    full.inputs = {random_tensor(DType::Float32, {9, 17}, 6), random_tensor(DType::Float32, {17, 11}, 7),
                   random_tensor(DType::Float32, {9, 11}, 8)};
    full.attrs = {attr("beta", 0.25f)};
    expect_gpu_matches_cpu(full, p);
  }
}

TEST(GpuGemm, UnusualBiasBroadcastFallsBackCorrectly) {
  FUSEC_REQUIRE_GPU();
  OpCase c;
  c.op = "Gemm";
  c.inputs = {random_tensor(DType::Float32, {6, 4}, 1), random_tensor(DType::Float32, {4, 5}, 2),
              random_tensor(DType::Float32, {6, 1}, 3)};
  expect_gpu_matches_cpu(c, Precision::FP32, -1, /*require_gpu_kernel=*/false);
}

TEST(GpuFusedMatMul, EveryActivationWithBias) {
  FUSEC_REQUIRE_GPU();
  const char* acts[] = {"",          "Relu", "LeakyRelu", "Clip",    "Sigmoid", "Tanh", "HardSigmoid",
                        "HardSwish", "SiLU", "Gelu",      "GeluTanh"};
  for (Precision p : kAll)
    for (const char* act : acts) {
      OpCase c;
      c.op = "FusedMatMul";
      c.domain = "ai.fusec";
      // Pre-activations of order 1: a saturating activation (Tanh, Sigmoid) would otherwise shrink
      // the output's magnitude below the GEMM's rounding and fail a relative check for no reason.
      c.inputs = {random_tensor(DType::Float32, {2, 17, 64}, 11, -0.25, 0.25),
                  random_tensor(DType::Float32, {64, 40}, 12), random_tensor(DType::Float32, {40}, 13, -0.25, 0.25)};
      c.constant = {1, 2};
      c.attrs = {attr("activation", std::string(act))};
      if (std::string(act) == "Clip") c.attrs.push_back(attr("activation_params", std::vector<float>{-1.5f, 1.5f}));
      SCOPED_TRACE(act);
      expect_gpu_matches_cpu(c, p);
    }
}

TEST(GpuFusedMatMul, GeluEpilogueOnOddAndPackedShapes) {
  FUSEC_REQUIRE_GPU();
  // 135 outputs take the scalar epilogue, 1536 the 16-byte one, at every storage width.
  const std::vector<std::vector<int64_t>> shapes[] = {{{3, 5, 64}, {64, 9}}, {{4, 16, 64}, {64, 24}}};
  for (Precision p : kAll)
    for (const auto& s : shapes) {
      OpCase c;
      c.op = "FusedMatMul";
      c.domain = "ai.fusec";
      c.inputs = {random_tensor(DType::Float32, s[0], 21, -0.25, 0.25), random_tensor(DType::Float32, s[1], 22)};
      c.constant = {1};
      c.attrs = {attr("activation", std::string("Gelu"))};
      SCOPED_TRACE(s[1][1]);
      expect_gpu_matches_cpu(c, p);
    }
}

TEST(CudaTuningCache, RemembersAcrossProcessesAndCanBeTurnedOff) {
  // No GPU needed: the cache is a file.
  auto dir = std::filesystem::temp_directory_path() / ("fusec_tuning_" + std::to_string(::getpid()));
  const std::string path = (dir / "t.json").string();
  ::setenv("FUSEC_TUNING_CACHE", path.c_str(), 1);
  std::filesystem::create_directories(dir);
  { std::ofstream(path) << R"({"earlier": "e", "not a string": 3})"; }  // what another process wrote
  auto& cache = cuda::TuningCache::global();
  cache.reload();
  EXPECT_EQ(cache.get("earlier").value_or(""), "e");
  EXPECT_FALSE(cache.get("not a string"));
  cache.put("k1", "v1");
  EXPECT_EQ(cache.get("k1").value_or(""), "v1");
  std::ifstream f(path);
  ASSERT_TRUE(f.good()) << path;
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\"k1\": \"v1\""), std::string::npos) << text;
  EXPECT_NE(text.find("\"earlier\": \"e\""), std::string::npos) << text;  // merged, not overwritten
  { std::ofstream(path) << "{ damaged"; }
  cache.reload();
  EXPECT_FALSE(cache.get("k1"));  // a damaged cache reads as empty
  cache.put("k2", "v2");          // and is written over whole
  cache.reload();
  EXPECT_EQ(cache.get("k2").value_or(""), "v2");
  ::setenv("FUSEC_TUNE", "0", 1);
  EXPECT_FALSE(cache.enabled());
  EXPECT_FALSE(cache.get("k1"));
  ::unsetenv("FUSEC_TUNE");
  ::unsetenv("FUSEC_TUNING_CACHE");
  cache.reload();
  std::filesystem::remove_all(dir);
}

// FusedMatMul's residual Z is cuBLASLt's C: act(A·B + bias + Z), at every precision, with and
// without a bias and an activation, for a folded batch (Linear) and a batched product.
TEST(GpuFusedMatMul, ResidualAsC) {
  FUSEC_REQUIRE_GPU();
  for (Precision p : {Precision::FP32, Precision::TF32, Precision::FP16, Precision::BF16})
    for (bool batched : {false, true})
      for (int form = 0; form < 3; ++form) {
        OpCase c;
        c.op = "FusedMatMul";
        c.domain = "ai.fusec";
        const std::vector<int64_t> a = {2, 9, 24},
                                   w = batched ? std::vector<int64_t>{2, 24, 40} : std::vector<int64_t>{24, 40};
        c.inputs = {random_tensor(DType::Float32, a, 61), random_tensor(DType::Float32, w, 62),
                    form == 1 ? Tensor() : random_tensor(DType::Float32, {40}, 63),
                    random_tensor(DType::Float32, {2, 9, 40}, 64)};
        c.constant = {1};
        if (form != 1) c.constant.insert(2);
        if (form == 2) c.attrs = {attr("activation", std::string("Relu"))};
        SCOPED_TRACE(std::string(precision_name(p)) + (batched ? " batched" : " linear") + " form " +
                     std::to_string(form));
        expect_gpu_matches_cpu(c, p);
      }
}

// Our SGEMM route (FUSEC_SGEMM=force: taken wherever it applies, its configurations timed) for
// strict-fp32 FusedMatMul in every epilogue form, at shapes that hit partial tiles, K tails and
// (N not a multiple of 4) the generic configuration; the plan must say it runs.
TEST(GpuSgemmRoute, EveryEpilogueAndEdgeShapeMatchesTheReference) {
  FUSEC_REQUIRE_GPU();
  ::setenv("FUSEC_SGEMM", "force", 1);
  struct Shape {
    int64_t m, k, n;
  };
  const Shape shapes[] = {{1, 1, 1}, {7, 13, 5}, {33, 64, 36}, {130, 257, 132}, {256, 768, 96}, {300, 40, 516}};
  const char* acts[] = {"", "Relu", "Gelu"};
  for (const Shape& sh : shapes)
    for (int form = 0; form < 3; ++form)  // 0: no bias, 1: bias, 2: bias + residual
      for (const char* act : acts) {
        SCOPED_TRACE("m" + std::to_string(sh.m) + " k" + std::to_string(sh.k) + " n" + std::to_string(sh.n) + " form " +
                     std::to_string(form) + " act '" + act + "'");
        GraphBuilder b;
        b.graph().opsets["ai.fusec"] = 1;
        Value* x = b.input("x", DType::Float32, {Dim(sh.m), Dim(sh.k)});
        std::vector<Value*> ins = {x, b.initializer("w", random_tensor(DType::Float32, {sh.k, sh.n}, 71))};
        ins.push_back(form >= 1 ? b.initializer("bias", random_tensor(DType::Float32, {sh.n}, 72)) : nullptr);
        Value* z = form == 2 ? b.input("z", DType::Float32, {Dim(sh.m), Dim(sh.n)}) : nullptr;
        if (z) ins.push_back(z);
        std::vector<NamedAttribute> attrs;
        if (*act) attrs.push_back(attr("activation", std::string(act)));
        b.output(b.node_n("FusedMatMul", ins, 1, attrs, "mm", "ai.fusec")[0]);
        auto g = b.build();
        std::vector<Tensor> inputs = {random_tensor(DType::Float32, {sh.m, sh.k}, 73)};
        if (z) inputs.push_back(random_tensor(DType::Float32, {sh.m, sh.n}, 74));
        cuda::CudaOptions o;
        o.precision = Precision::FP32;
        auto exe = cuda::CudaBackend(o).compile_cuda(*g);
        auto out = exe->run(inputs);
        bool own = false;
        for (const auto& pl : exe->placement()) own = own || pl.kernel.find("fusec SGEMM") != std::string::npos;
        EXPECT_TRUE(own) << "the SGEMM route was not taken";
        auto ref = cpu::CpuBackend().compile(*g)->run(inputs);
        double mx = 0, err = 0;
        for (int64_t i = 0; i < ref[0].numel(); ++i) {
          mx = std::max(mx, std::fabs(ref[0].as_double(i)));
          err = std::max(err, std::fabs(out[0].as_double(i) - ref[0].as_double(i)));
        }
        EXPECT_LE(err, 1e-5 * std::max(mx, 1.0));
      }
  ::unsetenv("FUSEC_SGEMM");
}

// ONNX Gemm with transB=1 (a weight stored [N,K]) at ResNet-50's classifier shape, through our
// SGEMM (forced): B stored [N,K] reaches it (the skinny configurations, or the generic one).
TEST(GpuSgemmRoute, GemmTransBClassifierMatchesTheReference) {
  FUSEC_REQUIRE_GPU();
  ::setenv("FUSEC_SGEMM", "force", 1);
  constexpr int64_t M = 16, N = 1000, K = 2048;
  GraphBuilder b;
  Value* x = b.input("x", DType::Float32, {Dim(M), Dim(K)});
  Value* w = b.initializer("w", random_tensor(DType::Float32, {N, K}, 81));
  Value* bias = b.initializer("bias", random_tensor(DType::Float32, {N}, 82));
  b.output(b.node("Gemm", {x, w, bias}, {attr("transB", int64_t{1})}, "fc"));
  auto g = b.build();
  const std::vector<Tensor> inputs = {random_tensor(DType::Float32, {M, K}, 83)};
  cuda::CudaOptions o;
  o.precision = Precision::FP32;
  auto exe = cuda::CudaBackend(o).compile_cuda(*g);
  auto out = exe->run(inputs);
  std::string kernel;
  for (const auto& pl : exe->placement())
    if (pl.node == "fc") kernel = pl.kernel;
  EXPECT_NE(kernel.find("fusec SGEMM"), std::string::npos) << "the SGEMM route was not taken: " << kernel;
  auto ref = cpu::CpuBackend().compile(*g)->run(inputs);
  double mx = 0, err = 0;
  for (int64_t i = 0; i < ref[0].numel(); ++i) {
    mx = std::max(mx, std::fabs(ref[0].as_double(i)));
    err = std::max(err, std::fabs(out[0].as_double(i) - ref[0].as_double(i)));
  }
  EXPECT_LE(err, 1e-5 * std::max(mx, 1.0)) << kernel;
  ::unsetenv("FUSEC_SGEMM");
}

namespace {

/// A device copy of host floats, freed on scope exit.
struct DeviceFloats {
  float* p = nullptr;
  explicit DeviceFloats(const std::vector<float>& h) {
    EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(h.size(), 1) * sizeof(float)), cudaSuccess);
    if (p && !h.empty()) {
      EXPECT_EQ(cudaMemcpy(p, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  ~DeviceFloats() { cudaFree(p); }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;
  std::vector<float> download(size_t n) const {
    std::vector<float> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
};

std::vector<float> uniform_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

}  // namespace

// Every configuration of launch_sgemm_f32, called directly, for B stored [K,N] and [N,K], on
// shapes with partial tiles, single rows and columns, K tails, padded leading dims and K % 4 != 0,
// in every epilogue form, against a double-precision reference. A configuration may refuse a
// case (returning false, launching nothing); the generic one must take every case and the skinny
// ones the classifier's (16 x 1000 x 2048, B [N,K]), so that nothing passes by refusing. The
// skinny configurations must also give the same bits on a second run (no atomics).
TEST(GpuSgemmConfigs, EveryConfigurationMatchesTheReference) {
  FUSEC_REQUIRE_GPU();
  struct Case {
    int m, n, k, pad;
  };  // pad: added to every leading dim
  std::vector<Case> cases;
  for (int m : {1, 5, 16, 17, 40})
    for (int n : {1, 7, 1000})
      for (int k : {4, 12}) cases.push_back({m, n, k, 0});
  for (Case c : {Case{16, 1000, 2048, 0}, Case{17, 1024, 2048, 0}, Case{1, 1024, 2048, 0}, Case{5, 1000, 2048, 0},
                 Case{40, 7, 2048, 0}, Case{16, 1024, 1024, 0}, Case{17, 1000, 2048, 8}, Case{16, 1000, 13, 0},
                 Case{5, 7, 13, 4}})
    cases.push_back(c);
  const int configs = cuda::sgemm_config_count(), generic = configs - 1;
  ASSERT_STREQ(cuda::sgemm_config_name(generic), "generic 64x64");
  std::vector<bool> skinny_ran(configs, false);
  cudaStream_t stream = nullptr;  // the legacy default stream
  for (const Case& c : cases) {
    const int lda = c.k + c.pad, ldc = c.n + c.pad;
    const std::vector<float> A = uniform_floats(size_t(c.m) * lda, 91), Bkn = uniform_floats(size_t(c.k) * c.n, 92),
                             bias = uniform_floats(c.n, 93), R = uniform_floats(size_t(c.m) * ldc, 94);
    std::vector<double> prod(size_t(c.m) * c.n);  // A·B, whatever B's layout
    for (int m = 0; m < c.m; ++m)
      for (int n = 0; n < c.n; ++n) {
        double acc = 0;
        for (int k = 0; k < c.k; ++k) acc += double(A[size_t(m) * lda + k]) * Bkn[size_t(k) * c.n + n];
        prod[size_t(m) * c.n + n] = acc;
      }
    for (bool trans_b : {false, true}) {
      const int ldb = (trans_b ? c.k : c.n) + c.pad;
      std::vector<float> B(size_t(trans_b ? c.n : c.k) * ldb);
      for (int k = 0; k < c.k; ++k)
        for (int n = 0; n < c.n; ++n) B[trans_b ? size_t(n) * ldb + k : size_t(k) * ldb + n] = Bkn[size_t(k) * c.n + n];
      DeviceFloats dA(A), dB(B), dbias(bias), dR(R), dC(std::vector<float>(size_t(c.m) * ldc));
      // 0: plain; 1: bias + Relu; 2: bias + residual + erf-GELU; 3: residual in place (C = R).
      for (int form = 0; form < 4; ++form) {
        const cuda::SgemmAct act = form == 1   ? cuda::SgemmAct::Relu
                                   : form == 2 ? cuda::SgemmAct::GeluErf
                                               : cuda::SgemmAct::None;
        std::vector<double> want(size_t(c.m) * c.n);
        double mx = 0;
        for (int m = 0; m < c.m; ++m)
          for (int n = 0; n < c.n; ++n) {
            double v = prod[size_t(m) * c.n + n] + (form == 1 || form == 2 ? bias[n] : 0.0) +
                       (form >= 2 ? R[size_t(m) * ldc + n] : 0.0);
            if (act == cuda::SgemmAct::Relu) v = v > 0 ? v : 0;
            if (act == cuda::SgemmAct::GeluErf) v = 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
            want[size_t(m) * c.n + n] = v;
            mx = std::max(mx, std::fabs(v));
          }
        cuda::SgemmArgs a;
        a.M = c.m, a.N = c.n, a.K = c.k, a.A = dA.p, a.lda = lda, a.B = dB.p, a.ldb = ldb, a.trans_b = trans_b;
        a.bias = form == 1 || form == 2 ? dbias.p : nullptr;
        a.residual = form == 2 ? dR.p : form == 3 ? dC.p : nullptr;
        a.ldr = ldc, a.C = dC.p, a.ldc = ldc, a.act = act;
        for (int cfg = 0; cfg < configs; ++cfg) {
          const std::string what = "m" + std::to_string(c.m) + " n" + std::to_string(c.n) + " k" + std::to_string(c.k) +
                                   " pad" + std::to_string(c.pad) + (trans_b ? " B[N,K]" : " B[K,N]") + " form " +
                                   std::to_string(form) + " [" + cuda::sgemm_config_name(cfg) + "]";
          SCOPED_TRACE(what);
          // The output starts as the residual (form 3) or as NaNs, so that a missed store shows.
          std::vector<float> init = form == 3 ? R : std::vector<float>(R.size(), std::nanf(""));
          ASSERT_EQ(cudaMemcpy(dC.p, init.data(), init.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
          const std::string name = cuda::sgemm_config_name(cfg);
          const bool skinny = name.rfind("skinny", 0) == 0;
          const bool ran = cuda::launch_sgemm_f32(a, cfg, stream);
          if (cfg == generic) {
            EXPECT_TRUE(ran) << "the generic configuration refused";
          }
          // The contract: tiled configurations take B [K,N] only, skinny ones B [N,K] with K % 4 == 0.
          if (cfg != generic && (skinny ? !trans_b || c.k % 4 != 0 : trans_b)) {
            EXPECT_FALSE(ran);
          }
          if (!ran) {
            cudaGetLastError();  // a refused cluster launch leaves its error behind
            continue;
          }
          ASSERT_EQ(cudaGetLastError(), cudaSuccess);
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          const std::vector<float> got = dC.download(init.size());
          double err = 0;
          for (int m = 0; m < c.m; ++m)
            for (int n = 0; n < c.n; ++n) {
              const double d = std::fabs(double(got[size_t(m) * ldc + n]) - want[size_t(m) * c.n + n]);
              err = std::isnan(d) ? INFINITY : std::max(err, d);
            }
          EXPECT_LE(err, 1e-5 * std::max(mx, 1.0));
          // The padding between rows is never written.
          for (int m = 0; m < c.m && c.pad; ++m)
            for (int n = c.n; n < ldc; ++n)
              EXPECT_EQ(std::memcmp(&got[size_t(m) * ldc + n], &init[size_t(m) * ldc + n], sizeof(float)), 0)
                  << "m" << m << " n" << n;
          if (skinny && trans_b && c.m == 16 && c.n == 1000 && c.k == 2048 && c.pad == 0) {
            skinny_ran[cfg] = true;
            if (form == 2) {  // the same bits again
              ASSERT_TRUE(cuda::launch_sgemm_f32(a, cfg, stream));
              ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
              const std::vector<float> again = dC.download(init.size());
              EXPECT_EQ(std::memcmp(got.data(), again.data(), got.size() * sizeof(float)), 0) << "not deterministic";
            }
          }
        }
      }
    }
  }
  int skinny_configs = 0;
  for (int cfg = 0; cfg < configs; ++cfg)
    if (std::string(cuda::sgemm_config_name(cfg)).rfind("skinny", 0) == 0) {
      ++skinny_configs;
      EXPECT_TRUE(skinny_ran[cfg]) << cuda::sgemm_config_name(cfg) << " never ran on 16 x 1000 x 2048 with B [N,K]";
    }
  EXPECT_GT(skinny_configs, 0);
}
