// The packed GEMM against a naive triple loop: odd sizes that leave ragged register tiles and
// cross the cache blocks, every transpose, alpha/beta, padded leading dimensions, and every
// instruction set this CPU can run.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/gemm.h"
#include "ir/error.h"

using namespace fusec::cpu;

namespace {

struct Case {
  int64_t M, N, K;
  bool ta, tb;
  double alpha, beta;
  int64_t pad;  // extra leading-dimension elements
};

std::vector<GemmIsa> isas() {
  std::vector<GemmIsa> out;
  for (GemmIsa i : {GemmIsa::Generic, GemmIsa::Avx2, GemmIsa::Avx512})
    if (gemm_isa_supported(i)) out.push_back(i);
  return out;
}

/// A case's leading dimensions and operands (A, B, and C as it is before the product), seeded
/// uniform in [-1, 1).
template <typename T>
struct Operands {
  int64_t lda, ldb, ldc;
  std::vector<T> A, B, C0;
};

template <typename T>
Operands<T> operands(const Case& c, unsigned seed) {
  Operands<T> o{(c.ta ? c.M : c.K) + c.pad, (c.tb ? c.K : c.N) + c.pad, c.N + c.pad, {}, {}, {}};
  const int64_t a_rows = c.ta ? c.K : c.M, b_rows = c.tb ? c.N : c.K;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  o.A.resize(static_cast<size_t>(a_rows * o.lda));
  o.B.resize(static_cast<size_t>(b_rows * o.ldb));
  o.C0.resize(static_cast<size_t>(c.M * o.ldc));
  for (auto& x : o.A) x = static_cast<T>(u(rng));
  for (auto& x : o.B) x = static_cast<T>(u(rng));
  for (auto& x : o.C0) x = static_cast<T>(u(rng));
  return o;
}

/// Runs the case on every supported instruction set (and, with `via_default`, through `gemm`)
/// and compares each result with one double-precision reference.
template <typename T>
void check(const Case& c, bool via_default = false) {
  Operands<T> o = operands<T>(c, static_cast<unsigned>(c.M * 131 + c.N * 17 + c.K));
  const int64_t lda = o.lda, ldb = o.ldb, ldc = o.ldc;
  const std::vector<T>&A = o.A, &B = o.B;
  std::vector<T>& C0 = o.C0;
  // beta == 0 must not read C: poison it.
  if (c.beta == 0)
    for (auto& x : C0) x = std::numeric_limits<T>::quiet_NaN();
  auto a_at = [&](int64_t i, int64_t k) { return static_cast<double>(c.ta ? A[k * lda + i] : A[i * lda + k]); };
  auto b_at = [&](int64_t k, int64_t j) { return static_cast<double>(c.tb ? B[j * ldb + k] : B[k * ldb + j]); };
  std::vector<double> want(static_cast<size_t>(c.M * c.N)), tol(want.size());
  const double eps = std::is_same_v<T, float> ? 1e-5 : 1e-12;
  for (int64_t i = 0; i < c.M; ++i)
    for (int64_t j = 0; j < c.N; ++j) {
      double w = 0, mag = 0;
      for (int64_t k = 0; k < c.K; ++k) {
        const double p = a_at(i, k) * b_at(k, j);
        w += p;
        mag += std::fabs(p);
      }
      w *= c.alpha;
      mag *= std::fabs(c.alpha);
      if (c.beta != 0) {
        w += c.beta * static_cast<double>(C0[i * ldc + j]);
        mag += std::fabs(c.beta * static_cast<double>(C0[i * ldc + j]));
      }
      want[i * c.N + j] = w;
      tol[i * c.N + j] = eps * (mag + 1);
    }
  std::vector<GemmIsa> runs = via_default ? std::vector<GemmIsa>{gemm_default_isa()} : isas();
  for (GemmIsa isa : runs) {
    std::vector<T> C = C0;
    if (via_default)
      gemm(c.ta, c.tb, c.M, c.N, c.K, static_cast<T>(c.alpha), A.data(), lda, B.data(), ldb, static_cast<T>(c.beta),
           C.data(), ldc);
    else
      gemm_with_isa(isa, c.ta, c.tb, c.M, c.N, c.K, static_cast<T>(c.alpha), A.data(), lda, B.data(), ldb,
                    static_cast<T>(c.beta), C.data(), ldc);
    for (int64_t i = 0; i < c.M; ++i)
      for (int64_t j = 0; j < c.N + c.pad; ++j) {
        const double got = C[i * ldc + j], old = C0[i * ldc + j];
        if (j >= c.N) {  // padding columns are untouched
          ASSERT_TRUE(got == old || (std::isnan(got) && std::isnan(old)));
          continue;
        }
        ASSERT_NEAR(got, want[i * c.N + j], tol[i * c.N + j])
            << gemm_isa_name(isa) << " M=" << c.M << " N=" << c.N << " K=" << c.K << " ta=" << c.ta << " tb=" << c.tb
            << " alpha=" << c.alpha << " beta=" << c.beta << " at (" << i << "," << j << ")";
      }
  }
}

std::vector<Case> small_cases() {
  std::vector<Case> out;
  const int64_t sizes[] = {1, 7, 33};
  const double ab[][2] = {{1, 0}, {0.5, 2}, {-1, 1}};
  int n = 0;
  for (int64_t M : sizes)
    for (int64_t N : sizes)
      for (int64_t K : sizes)
        for (int t = 0; t < 4; ++t) {
          const auto& p = ab[n % 3];
          out.push_back({M, N, K, (t & 1) != 0, (t & 2) != 0, p[0], p[1], (n % 2) * 3});
          ++n;
        }
  return out;
}

// Sizes that cross the KC/MC/NC blocks and the task grid.
std::vector<Case> large_cases() {
  std::vector<Case> out;
  for (int t = 0; t < 4; ++t) {
    const bool ta = t & 1, tb = t & 2;
    out.push_back({129, 129, 129, ta, tb, 1, 0, 0});
    out.push_back({200, 65, 300, ta, tb, 0.5, 1, 5});
    out.push_back({9, 1600, 20, ta, tb, 1, 0.25, 0});
    out.push_back({1, 513, 257, ta, tb, 2, 0, 1});
    out.push_back({257, 3, 129, ta, tb, 1, 1, 0});
    out.push_back({1, 2500, 300, ta, tb, 1, 0.5, 3});  // one row / one column (GEMV shortcut)
    out.push_back({2100, 1, 70, ta, tb, 0.5, 0, 2});
  }
  return out;
}

}  // namespace

TEST(Gemm, SmallSizesEveryTransposeFloat) {
  for (const Case& c : small_cases()) check<float>(c);
}

TEST(Gemm, SmallSizesEveryTransposeDouble) {
  for (const Case& c : small_cases()) check<double>(c);
}

TEST(Gemm, BlockCrossingSizesFloat) {
  for (const Case& c : large_cases()) check<float>(c);
}

TEST(Gemm, BlockCrossingSizesDouble) {
  for (const Case& c : large_cases()) check<double>(c);
}

TEST(Gemm, DefaultEntryPointIncludingSmallShortcut) {
  for (const Case& c : small_cases()) check<float>(c, true);
  for (const Case& c : large_cases()) check<float>(c, true);
}

TEST(Gemm, DegenerateSizes) {
  // K == 0: C = beta·C; alpha == 0 likewise; M or N == 0: nothing happens.
  std::vector<float> C = {1, 2, 3, 4};
  gemm(false, false, 2, 2, 0, 1.f, nullptr, 1, nullptr, 2, 2.f, C.data(), 2);
  EXPECT_EQ(C, (std::vector<float>{2, 4, 6, 8}));
  gemm(false, false, 2, 2, 0, 1.f, nullptr, 1, nullptr, 2, 0.f, C.data(), 2);
  EXPECT_EQ(C, (std::vector<float>{0, 0, 0, 0}));
  std::vector<float> A = {1, 2}, B = {3, 4};
  C = {5, 5, 5, 5};
  gemm(false, false, 2, 2, 1, 0.f, A.data(), 1, B.data(), 2, 1.f, C.data(), 2);
  EXPECT_EQ(C, (std::vector<float>{5, 5, 5, 5}));
  gemm(false, false, 0, 2, 1, 1.f, A.data(), 1, B.data(), 2, 0.f, C.data(), 2);
  EXPECT_EQ(C, (std::vector<float>{5, 5, 5, 5}));
}

namespace {

/// A product with one operand packed ahead must give what `gemm` gives with the source, bit for
/// bit: same kernels, same blocks, same order of additions. Cases the shortcuts take (one row, one
/// column, tiny) run only on the default instruction set, where `gemm` takes them too.
template <typename T>
void check_packed(const Case& c) {
  const Operands<T> o = operands<T>(c, static_cast<unsigned>(c.M * 7 + c.N * 131 + c.K * 3));
  const int64_t lda = o.lda, ldb = o.ldb, ldc = o.ldc;
  const std::vector<T>&A = o.A, &B = o.B, &C0 = o.C0;
  const bool shortcut = !gemm_packs(c.M, c.N, c.K);
  for (GemmIsa isa : isas()) {
    if (shortcut && isa != gemm_default_isa()) continue;
    for (bool side_a : {false, true}) {
      const T alpha = side_a ? T(1) : static_cast<T>(c.alpha), beta = static_cast<T>(c.beta);
      std::vector<T> want = C0, got = C0;
      if (shortcut)
        gemm(c.ta, c.tb, c.M, c.N, c.K, alpha, A.data(), lda, B.data(), ldb, beta, want.data(), ldc);
      else
        gemm_with_isa(isa, c.ta, c.tb, c.M, c.N, c.K, alpha, A.data(), lda, B.data(), ldb, beta, want.data(), ldc);
      using P = PackedOperand<T>;
      if (side_a) {
        const P pa(P::Side::A, c.ta, c.M, c.K, A.data(), lda, isa);
        ASSERT_EQ(pa.bytes(), P::bytes_for(P::Side::A, c.M, c.K, isa));
        gemm(pa, c.tb, c.N, B.data(), ldb, beta, got.data(), ldc);
      } else {
        const P pb(P::Side::B, c.tb, c.K, c.N, B.data(), ldb, isa);
        gemm(c.ta, c.M, alpha, A.data(), lda, pb, beta, got.data(), ldc);
      }
      ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(T)))
          << gemm_isa_name(isa) << (side_a ? " packed A" : " packed B") << " M=" << c.M << " N=" << c.N << " K=" << c.K
          << " ta=" << c.ta << " tb=" << c.tb << " alpha=" << alpha << " beta=" << beta;
    }
  }
}

}  // namespace

TEST(Gemm, PackedOperandGivesTheSameBitsFloat) {
  for (const Case& c : small_cases()) check_packed<float>(c);
  for (const Case& c : large_cases()) check_packed<float>(c);
  // Several K blocks and a ragged last one, wider than one NC panel.
  for (int t = 0; t < 4; ++t) check_packed<float>({70, 3100, 530, (t & 1) != 0, (t & 2) != 0, 1, 0, 2});
}

TEST(Gemm, PackedOperandGivesTheSameBitsDouble) {
  for (const Case& c : small_cases()) check_packed<double>(c);
  for (const Case& c : large_cases()) check_packed<double>(c);
}

TEST(Gemm, PackedOperandOnTheWrongSideIsAnInternalError) {
  std::vector<float> A(64, 1.f), C(64);
  using P = PackedOperand<float>;
  const P pa(P::Side::A, false, 8, 8, A.data(), 8);
  EXPECT_THROW(gemm(false, 8, 1.f, A.data(), 8, pa, 0.f, C.data(), 8), fusec::Error);
}
