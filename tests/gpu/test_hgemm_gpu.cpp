// fusec's fp16/bf16 wgmma GEMM (hgemm.cuh): every configuration called directly against a
// double-precision reference, and FusedMatMul routed through it inside a model.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/ops/gemm/gated_pass.cuh"
#include "backend/cuda/ops/gemm/hgemm.cuh"
#include "gpu_test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

#define FUSEC_REQUIRE_HGEMM()                                                                     \
  do {                                                                                            \
    FUSEC_REQUIRE_GPU();                                                                          \
    if (!cuda::hgemm_available(0)) GTEST_SKIP() << "the wgmma GEMM needs compute capability 9.0"; \
  } while (0)

// Values rounded to the storage type, kept as the 16-bit patterns and as doubles.
struct Half16 {
  std::vector<uint16_t> bits;
  std::vector<double> value;
};

Half16 random_half(size_t n, bool bf16, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Half16 h;
  h.bits.resize(n);
  h.value.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const float f = u(rng);
    if (bf16) {
      const __nv_bfloat16 b = __float2bfloat16(f);
      std::memcpy(&h.bits[i], &b, 2);
      h.value[i] = __bfloat162float(b);
    } else {
      const __half x = __float2half(f);
      std::memcpy(&h.bits[i], &x, 2);
      h.value[i] = __half2float(x);
    }
  }
  return h;
}

double to_double(uint16_t bits, bool bf16) {
  if (bf16) {
    __nv_bfloat16 b;
    std::memcpy(&b, &bits, 2);
    return __bfloat162float(b);
  }
  __half x;
  std::memcpy(&x, &bits, 2);
  return __half2float(x);
}

struct DeviceBuf {
  void* p = nullptr;
  explicit DeviceBuf(const std::vector<uint16_t>& v) {
    EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(v.size(), 8) * 2), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p, v.data(), v.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceBuf() { cudaFree(p); }
  std::vector<uint16_t> download(size_t n) const {
    std::vector<uint16_t> v(n);
    EXPECT_EQ(cudaMemcpy(v.data(), p, n * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }
  DeviceBuf(const DeviceBuf&) = delete;
  DeviceBuf& operator=(const DeviceBuf&) = delete;
};

double act_ref(cuda::Act a, double v) {
  switch (a) {
    case cuda::Act::Gelu:
      return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
    case cuda::Act::SiLU:
      return v / (1 + std::exp(-v));
    case cuda::Act::HardSwish:
      return v * std::clamp(v / 6 + 0.5, 0.0, 1.0);
    case cuda::Act::GeluTanh:
      return 0.5 * v * (1 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
    default:
      return v;
  }
}

// Checks C (rows x ldc of the storage type, downloaded) against `want` (rows x n): within one
// rounding of the output relative to the largest output, and its padding columns still `init`.
void expect_output(const std::vector<uint16_t>& got, const std::vector<uint16_t>& init, const std::vector<double>& want,
                   int rows, int n, int ldc, bool bf16, double mx) {
  double err = 0;
  for (int m = 0; m < rows; ++m)
    for (int j = 0; j < n; ++j) {
      const double d = std::fabs(to_double(got[size_t(m) * ldc + j], bf16) - want[size_t(m) * n + j]);
      err = std::isnan(d) ? INFINITY : std::max(err, d);
    }
  EXPECT_LE(err, (bf16 ? 8e-3 : 1e-3) * std::max(mx, 1.0));
  for (int m = 0; m < rows; ++m)
    for (int j = n; j < ldc; ++j)
      ASSERT_EQ(got[size_t(m) * ldc + j], init[size_t(m) * ldc + j]) << "padding written at m" << m;
}

}  // namespace

// Every configuration, both storage types and both weight layouts, on shapes with partial tiles in
// M, N and K (K from one 16-byte chunk to several slices with a tail), single rows, padded leading
// dims, and each epilogue form: plain; bias + erf-GELU; bias + residual + SiLU; the residual read
// in place (C = R) + HardSwish. The output starts as NaN (or the residual), so a missed store shows,
// and padding between rows must stay untouched.
TEST(GpuHgemmConfigs, EveryConfigurationMatchesTheReference) {
  FUSEC_REQUIRE_HGEMM();
  struct Case {
    int m, n, k, pad;
  };
  const Case cases[] = {
      {1, 8, 8, 0},       {17, 24, 24, 0},     {130, 136, 72, 8},  {128, 256, 64, 0},
      {300, 392, 200, 0}, {129, 264, 136, 16}, {64, 520, 1032, 0}, {257, 128, 8, 0},
      {33, 96, 96, 0},    {4100, 1032, 72, 0}};  // more tiles than SMs: the persistent kernel's CTAs walk several
  const int configs = cuda::hgemm_config_count();
  ASSERT_GT(configs, 0);
  for (bool bf16 : {false, true})
    for (const Case& c : cases) {
      const int lda = c.k + c.pad, ldc = c.n + c.pad;
      const Half16 A = random_half(size_t(c.m) * lda, bf16, 91), Bkn = random_half(size_t(c.k) * c.n, bf16, 92),
                   bias = random_half(c.n, bf16, 93), R = random_half(size_t(c.m) * ldc, bf16, 94);
      std::vector<double> prod(size_t(c.m) * c.n);
      for (int m = 0; m < c.m; ++m)
        for (int n = 0; n < c.n; ++n) {
          double acc = 0;
          for (int k = 0; k < c.k; ++k) acc += A.value[size_t(m) * lda + k] * Bkn.value[size_t(k) * c.n + n];
          prod[size_t(m) * c.n + n] = acc;
        }
      for (bool trans_b : {false, true}) {
        const int ldb = (trans_b ? c.k : c.n) + c.pad;
        std::vector<uint16_t> B(size_t(trans_b ? c.n : c.k) * ldb, 0);
        for (int k = 0; k < c.k; ++k)
          for (int n = 0; n < c.n; ++n)
            B[trans_b ? size_t(n) * ldb + k : size_t(k) * ldb + n] = Bkn.bits[size_t(k) * c.n + n];
        DeviceBuf dA(A.bits), dB(B), dbias(bias.bits), dR(R.bits), dC(std::vector<uint16_t>(size_t(c.m) * ldc));
        for (int form = 0; form < 4; ++form) {
          const cuda::Act act = form == 1   ? cuda::Act::Gelu
                                : form == 2 ? cuda::Act::SiLU
                                : form == 3 ? cuda::Act::HardSwish
                                            : cuda::Act::None;
          std::vector<double> want(size_t(c.m) * c.n);
          double mx = 0;
          for (int m = 0; m < c.m; ++m)
            for (int n = 0; n < c.n; ++n) {
              double v = prod[size_t(m) * c.n + n] + (form == 1 || form == 2 ? bias.value[n] : 0.0) +
                         (form >= 2 ? R.value[size_t(m) * ldc + n] : 0.0);
              v = act_ref(act, v);
              want[size_t(m) * c.n + n] = v;
              mx = std::max(mx, std::fabs(v));
            }
          cuda::HgemmArgs a;
          a.M = c.m, a.N = c.n, a.K = c.k, a.A = dA.p, a.lda = lda, a.B = dB.p, a.ldb = ldb, a.trans_b = trans_b;
          a.bias = form == 1 || form == 2 ? dbias.p : nullptr;
          a.residual = form == 2 ? dR.p : form == 3 ? dC.p : nullptr;
          a.ldr = ldc, a.C = dC.p, a.ldc = ldc, a.act.act = act, a.bf16 = bf16;
          ASSERT_TRUE(cuda::hgemm_applies(a));
          for (int cfg = 0; cfg < configs; ++cfg) {
            SCOPED_TRACE("m" + std::to_string(c.m) + " n" + std::to_string(c.n) + " k" + std::to_string(c.k) + " pad" +
                         std::to_string(c.pad) + (bf16 ? " bf16" : " fp16") + (trans_b ? " B[N,K]" : " B[K,N]") +
                         " form " + std::to_string(form) + " [" + cuda::hgemm_config_name(cfg) + "]");
            std::vector<uint16_t> init = form == 3 ? R.bits : std::vector<uint16_t>(R.bits.size(), 0x7E00);  // NaN
            if (bf16 && form != 3) std::fill(init.begin(), init.end(), uint16_t{0x7FC0});
            ASSERT_EQ(cudaMemcpy(dC.p, init.data(), init.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
            ASSERT_TRUE(cuda::launch_hgemm(a, cfg, nullptr));
            ASSERT_EQ(cudaGetLastError(), cudaSuccess);
            ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
            expect_output(dC.download(init.size()), init, want, c.m, c.n, ldc, bf16, mx);
          }
        }
      }
    }
}

// A gated product (gated_layout.h): the gate's and the value's [K, n] weights packed into blocks
// with pack_gated, and C = act(X·Wg + bg) · (X·Wv + bv) over n outputs. n not a whole
// number of blocks (zero padding), partial row tiles, K with a tail, with and without a bias, every
// gated activation, both storage types. The configurations that take no gated product refuse it;
// the ones that do must match, and leave the padding of C alone.
TEST(GpuHgemmConfigs, GatedProductMatchesTheReference) {
  FUSEC_REQUIRE_HGEMM();
  struct Case {
    int m, n, k, pad;
  };
  const Case cases[] = {{1, 8, 8, 0}, {130, 136, 72, 8}, {300, 392, 200, 0}, {257, 128, 64, 0}, {64, 256, 1032, 16}};
  int ran = 0;
  for (bool bf16 : {false, true})
    for (const Case& c : cases) {
      const int ldc = c.n + c.pad;
      const int64_t np = cuda::gated_packed_n(c.n);
      const Half16 A = random_half(size_t(c.m) * c.k, bf16, 81), Wg = random_half(size_t(c.k) * c.n, bf16, 82),
                   Wv = random_half(size_t(c.k) * c.n, bf16, 84), bias = random_half(size_t(2) * c.n, bf16, 83);
      std::vector<uint16_t> wpb(size_t(c.k) * np), bpb(np);
      cuda::pack_gated(Wg.bits.data(), Wv.bits.data(), c.k, c.n, 2, wpb.data());
      cuda::pack_gated(bias.bits.data(), bias.bits.data() + c.n, 1, c.n, 2, bpb.data());
      DeviceBuf dA(A.bits), dW(wpb), dbias(bpb), dC(std::vector<uint16_t>(size_t(c.m) * ldc));
      for (bool with_bias : {false, true})
        for (cuda::Act act : {cuda::Act::SiLU, cuda::Act::Gelu, cuda::Act::GeluTanh}) {
          std::vector<double> want(size_t(c.m) * c.n);
          double mx = 0;
          for (int m = 0; m < c.m; ++m)
            for (int n = 0; n < c.n; ++n) {
              double g = with_bias ? bias.value[n] : 0.0, v = with_bias ? bias.value[c.n + n] : 0.0;
              for (int k = 0; k < c.k; ++k) {
                g += A.value[size_t(m) * c.k + k] * Wg.value[size_t(k) * c.n + n];
                v += A.value[size_t(m) * c.k + k] * Wv.value[size_t(k) * c.n + n];
              }
              want[size_t(m) * c.n + n] = act_ref(act, g) * v;
              mx = std::max(mx, std::fabs(want[size_t(m) * c.n + n]));
            }
          cuda::HgemmArgs a;
          a.M = c.m, a.N = static_cast<int>(np), a.K = c.k, a.A = dA.p, a.lda = c.k, a.B = dW.p, a.ldb = np;
          a.bias = with_bias ? dbias.p : nullptr;
          a.C = dC.p, a.ldc = ldc, a.act.act = act, a.bf16 = bf16, a.gated_n = c.n;
          ASSERT_TRUE(cuda::hgemm_applies(a));
          for (int cfg = 0; cfg < cuda::hgemm_config_count(); ++cfg) {
            SCOPED_TRACE("m" + std::to_string(c.m) + " n" + std::to_string(c.n) + " k" + std::to_string(c.k) +
                         (bf16 ? " bf16" : " fp16") + (with_bias ? " bias " : " ") + cuda::activation_name(act) + " [" +
                         cuda::hgemm_config_name(cfg) + "]");
            const std::vector<uint16_t> init(size_t(c.m) * ldc, bf16 ? uint16_t{0x7FC0} : uint16_t{0x7E00});  // NaN
            ASSERT_EQ(cudaMemcpy(dC.p, init.data(), init.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
            if (!cuda::launch_hgemm(a, cfg, nullptr)) continue;
            ++ran;
            ASSERT_EQ(cudaGetLastError(), cudaSuccess);
            ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
            expect_output(dC.download(init.size()), init, want, c.m, c.n, ldc, bf16, mx);
          }
        }
    }
  // The TMA 128 x 128 and the ping-pong configurations (a tile is one gate block and its value
  // block) take every case.
  EXPECT_EQ(ran, 2 * 2 * 5 * 2 * 3) << "a gated configuration refused a case";
}

// The pass after a library GEMM of packed gate and value columns: fp16 and bf16, n a multiple of
// 8 (16-byte packs) and not (one element a thread), a block's tail padded.
TEST(GpuHgemmConfigs, GatedPassMatchesTheReference) {
  FUSEC_REQUIRE_GPU();
  for (bool bf16 : {false, true})
    for (int n : {8, 136, 300, 389})
      for (cuda::Act act : {cuda::Act::SiLU, cuda::Act::Gelu}) {
        const int rows = 37;
        const int64_t np = cuda::gated_packed_n(n);
        const Half16 P = random_half(size_t(rows) * np, bf16, 71);
        DeviceBuf dP(P.bits), dY(std::vector<uint16_t>(size_t(rows) * n, 0x7E00));
        cuda::ActParams ap;
        ap.act = act;
        ASSERT_TRUE(cuda::launch_gated_pass(dY.p, dP.p, bf16 ? DType::BFloat16 : DType::Float16, rows, n, ap, nullptr));
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        const std::vector<uint16_t> got = dY.download(size_t(rows) * n);
        double err = 0;
        for (int r = 0; r < rows; ++r)
          for (int j = 0; j < n; ++j) {
            const int64_t at = r * np + cuda::gated_packed_col(j);
            const double want = act_ref(act, P.value[at]) * P.value[at + cuda::kGatedBlock];
            const double d = std::fabs(to_double(got[size_t(r) * n + j], bf16) - want);
            err = std::isnan(d) ? INFINITY : std::max(err, d / std::max(1.0, std::fabs(want)));
          }
        EXPECT_LE(err, bf16 ? 8e-3 : 1e-3) << "n " << n << (bf16 ? " bf16" : " fp16");
      }
}

// What the kernels cannot take is refused, launching nothing: K or N not a multiple of 8 (a
// 16-byte chunk), a misaligned operand, an unknown configuration.
TEST(GpuHgemmConfigs, RefusesWhatItCannotTake) {
  FUSEC_REQUIRE_HGEMM();
  DeviceBuf buf(std::vector<uint16_t>(4096, 0));
  cuda::HgemmArgs a;
  a.M = 16, a.N = 16, a.K = 16, a.A = buf.p, a.lda = 16, a.B = buf.p, a.ldb = 16, a.C = buf.p, a.ldc = 16;
  EXPECT_TRUE(cuda::hgemm_applies(a));
  auto refused = [](cuda::HgemmArgs x) { return !cuda::hgemm_applies(x) && !cuda::launch_hgemm(x, 0, nullptr); };
  cuda::HgemmArgs b = a;
  b.K = 12, b.lda = 12;
  EXPECT_TRUE(refused(b));
  b = a;
  b.N = 20, b.ldb = 20, b.ldc = 20;
  EXPECT_TRUE(refused(b));
  b = a;
  b.A = static_cast<const char*>(buf.p) + 2;
  EXPECT_TRUE(refused(b));
  EXPECT_FALSE(cuda::launch_hgemm(a, cuda::hgemm_config_count(), nullptr));
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// FusedMatMul with the activations cuBLASLt cannot fuse, forced onto the wgmma GEMM
// (FUSEC_HGEMM=force), inside a model at fp16 and bf16, against the CPU reference: a Linear over a
// 3-D input (its rows folded into M, 201 of them: a partial tile), without and with a bias, and
// with a residual.
TEST(GpuHgemmRoute, FusedMatMulRunsOnItAgainstTheReference) {
  FUSEC_REQUIRE_HGEMM();
  ::setenv("FUSEC_HGEMM", "force", 1);
  for (Precision p : {Precision::FP16, Precision::BF16})
    for (const char* act : {"Gelu", "SiLU", "HardSwish", "Sigmoid"})
      for (int form = 0; form < 3; ++form) {
        OpCase c;
        c.op = "FusedMatMul";
        c.domain = "ai.fusec";
        c.inputs = {random_tensor(DType::Float32, {3, 67, 96}, 31, -0.5, 0.5),
                    random_tensor(DType::Float32, {96, 136}, 32, -0.5, 0.5)};
        c.constant = {1};
        if (form >= 1) {
          c.inputs.push_back(random_tensor(DType::Float32, {136}, 33, -0.25, 0.25));
          c.constant.insert(2);
        }
        if (form == 2) c.inputs.push_back(random_tensor(DType::Float32, {3, 67, 136}, 34, -0.5, 0.5));
        c.attrs = {attr("activation", std::string(act))};
        SCOPED_TRACE(std::string(act) + " form " + std::to_string(form) + " " + precision_name(p));
        expect_gpu_matches_cpu(c, p, -1, true, "fusec HGEMM");
      }
  ::unsetenv("FUSEC_HGEMM");
}

// GatedMatMul inside a model against the CPU reference, on each route: fusec's GEMM with the gating
// inside (FUSEC_HGEMM=force; fp16 and bf16) and cuBLASLt's product plus the gating pass
// (FUSEC_HGEMM=0; every precision). Rows folded from a 3-D input (201: a partial tile), N = 136
// (a partial packed block), without a bias, with both, and with the value's alone.
TEST(GpuHgemmRoute, GatedMatMulRunsOnEitherRouteAgainstTheReference) {
  FUSEC_REQUIRE_GPU();
  for (const char* mode : {"force", "0"}) {
    ScopedEnv env{"FUSEC_HGEMM", mode};
    const bool own = std::string(mode) == "force";
    if (own && !cuda::hgemm_available(0)) continue;
    for (Precision p : {Precision::FP16, Precision::BF16, Precision::FP32})
      for (const char* act : {"SiLU", "GeluTanh", "Gelu"})
        for (int form = 0; form < 3; ++form) {
          if (own && p == Precision::FP32) continue;
          OpCase c;
          c.op = "GatedMatMul";
          c.domain = "ai.fusec";
          c.inputs = {random_tensor(DType::Float32, {3, 67, 96}, 41, -0.5, 0.5),
                      random_tensor(DType::Float32, {96, 136}, 42, -0.5, 0.5),
                      random_tensor(DType::Float32, {96, 136}, 43, -0.5, 0.5)};
          c.constant = {1, 2};
          if (form >= 1) {
            c.inputs.push_back(form == 1 ? random_tensor(DType::Float32, {136}, 44, -0.25, 0.25) : Tensor());
            c.inputs.push_back(random_tensor(DType::Float32, {136}, 45, -0.25, 0.25));
            if (form == 1) c.constant.insert(3);
            c.constant.insert(4);
          }
          c.attrs = {attr("activation", std::string(act))};
          SCOPED_TRACE(std::string(act) + " form " + std::to_string(form) + " " + precision_name(p) + " HGEMM=" + mode);
          expect_gpu_matches_cpu(c, p, -1, true, own ? "fusec HGEMM" : "gated");
        }
  }
}
