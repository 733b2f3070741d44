// MatMul, Gemm and Einsum on the CPU reference: hand-computed cases, numpy broadcasting rules,
// and Einsum's fast (GEMM) path against a plain loop over every label.
#include <map>
#include <random>
#include <string>

#include "ir/half.h"
#include "test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

Shape shape(const std::vector<int64_t>& d) { return shape_of(d); }

Tensor run_one(const std::string& op, const std::vector<Tensor>& ins, std::vector<NamedAttribute> attrs = {},
               int64_t opset = 17) {
  GraphBuilder b(opset);
  std::vector<Value*> vs;
  for (size_t i = 0; i < ins.size(); ++i)
    vs.push_back(b.input("x" + std::to_string(i), ins[i].dtype(), shape(ins[i].dims())));
  b.output(b.node(op, vs, std::move(attrs)));
  auto g = b.build();
  return run_cpu(*g, ins)[0];
}

/// Reference MatMul for operands already of rank >= 2 with broadcast batch dims.
Tensor naive_matmul(const Tensor& a, const Tensor& b, std::vector<int64_t> out_dims) {
  Tensor y(DType::Float32, out_dims);
  const size_t r = out_dims.size();
  const int64_t M = out_dims[r - 2], N = out_dims[r - 1], K = a.dims().back();
  const int64_t batch = y.numel() / (M * N);
  auto offset = [&](const Tensor& t, int64_t bidx) {  // broadcast batch index -> t's batch offset
    int64_t off = 0, stride = t.dim(t.rank() - 2) * t.dim(t.rank() - 1);
    for (size_t i = r - 2; i-- > 0;) {
      const int64_t od = out_dims[i], idx = bidx % od;
      bidx /= od;
      const int64_t ti = static_cast<int64_t>(i) - static_cast<int64_t>(r - t.rank());
      if (ti < 0) continue;
      const int64_t td = t.dim(static_cast<size_t>(ti));
      off += (td == 1 ? 0 : idx) * stride;
      stride *= td;
    }
    return off;
  };
  for (int64_t bi = 0; bi < batch; ++bi) {
    const float* pa = a.data<float>() + offset(a, bi);
    const float* pb = b.data<float>() + offset(b, bi);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) s += static_cast<double>(pa[i * K + k]) * pb[k * N + j];
        y.data<float>()[(bi * M + i) * N + j] = static_cast<float>(s);
      }
  }
  return y;
}

/// Plain-loop Einsum for letter-only equations with an explicit output.
Tensor naive_einsum(const std::string& eq, const std::vector<Tensor>& ins) {
  const auto arrow = eq.find("->");
  std::vector<std::string> terms;
  std::string lhs = eq.substr(0, arrow), out = eq.substr(arrow + 2);
  for (size_t s = 0;;) {
    size_t c = lhs.find(',', s);
    terms.push_back(lhs.substr(s, c == std::string::npos ? std::string::npos : c - s));
    if (c == std::string::npos) break;
    s = c + 1;
  }
  std::map<char, int64_t> size;
  for (size_t k = 0; k < terms.size(); ++k)
    for (size_t d = 0; d < terms[k].size(); ++d) size[terms[k][d]] = std::max(size[terms[k][d]], ins[k].dim(d));
  std::vector<char> labels;
  for (auto& [ch, n] : size) labels.push_back(ch);
  std::vector<int64_t> out_dims;
  for (char ch : out) out_dims.push_back(size[ch]);
  Tensor y(DType::Float32, out_dims);
  std::vector<double> acc(static_cast<size_t>(y.numel()), 0.0);
  std::map<char, int64_t> idx;
  for (char ch : labels) idx[ch] = 0;
  for (;;) {
    double p = 1;
    for (size_t k = 0; k < terms.size(); ++k) {
      int64_t off = 0;
      for (size_t d = 0; d < terms[k].size(); ++d)
        off = off * ins[k].dim(d) + (ins[k].dim(d) == 1 ? 0 : idx[terms[k][d]]);
      p *= ins[k].data<float>()[off];
    }
    int64_t o = 0;
    for (char ch : out) o = o * size[ch] + idx[ch];
    acc[static_cast<size_t>(o)] += p;
    bool carry = true;
    for (size_t i = labels.size(); carry && i-- > 0;) {
      carry = ++idx[labels[i]] == size[labels[i]];
      if (carry) idx[labels[i]] = 0;
    }
    if (carry) break;
  }
  for (int64_t i = 0; i < y.numel(); ++i) y.data<float>()[i] = static_cast<float>(acc[static_cast<size_t>(i)]);
  return y;
}

}  // namespace

TEST(CpuMatMul, TwoByTwo) {
  auto y = run_one("MatMul", {floats({1, 2, 3, 4}, {2, 2}), floats({5, 6, 7, 8}, {2, 2})});
  expect_close(y, floats({19, 22, 43, 50}, {2, 2}));
}

TEST(CpuMatMul, VectorOperandsFollowNumpy) {
  // [K] x [K, N] -> [N]; [M, K] x [K] -> [M]; [K] x [K] -> scalar.
  expect_close(run_one("MatMul", {floats({1, 2}, {2}), floats({1, 2, 3, 4, 5, 6}, {2, 3})}), floats({9, 12, 15}, {3}));
  expect_close(run_one("MatMul", {floats({1, 2, 3, 4, 5, 6}, {2, 3}), floats({1, 0, -1}, {3})}), floats({-2, -2}, {2}));
  expect_close(run_one("MatMul", {floats({1, 2, 3}, {3}), floats({4, 5, 6}, {3})}), floats({32}, {}));
  // A batched [B, M, K] times a vector [K] -> [B, M].
  expect_close(run_one("MatMul", {floats({1, 2, 3, 4}, {2, 1, 2}), floats({1, 1}, {2})}), floats({3, 7}, {2, 1}));
}

TEST(CpuMatMul, BroadcastsBatchDims) {
  Tensor a = uniform_floats({2, 1, 5, 7}, 1), b = uniform_floats({3, 7, 4}, 2);
  expect_close(run_one("MatMul", {a, b}), naive_matmul(a, b, {2, 3, 5, 4}), 1e-5, 1e-5);
  // Stacked batches against one matrix (the single-GEMM path), and the reverse.
  Tensor c = uniform_floats({4, 33, 17}, 3), d = uniform_floats({17, 9}, 4);
  expect_close(run_one("MatMul", {c, d}), naive_matmul(c, d, {4, 33, 9}), 1e-5, 1e-5);
  Tensor e = uniform_floats({17, 33}, 5), f = uniform_floats({4, 33, 9}, 6);
  expect_close(run_one("MatMul", {e, f}), naive_matmul(e, f, {4, 17, 9}), 1e-5, 1e-5);
  // Many small products (one per thread) and one large.
  Tensor g = uniform_floats({64, 8, 8}, 7), h = uniform_floats({64, 8, 8}, 8);
  expect_close(run_one("MatMul", {g, h}), naive_matmul(g, h, {64, 8, 8}), 1e-5, 1e-5);
  Tensor i = uniform_floats({130, 70}, 9), j = uniform_floats({70, 150}, 10);
  expect_close(run_one("MatMul", {i, j}), naive_matmul(i, j, {130, 150}), 1e-5, 1e-5);
}

TEST(CpuMatMul, IntegersAndDouble) {
  auto y = run_one("MatMul", {int64s({1, 2, 3, 4}, {2, 2}), int64s({5, 6, 7, 8}, {2, 2})});
  expect_close(y, int64s({19, 22, 43, 50}, {2, 2}));
  Tensor a(DType::Float64, {1, 2}), b(DType::Float64, {2, 1});
  a.data<double>()[0] = 0.5;
  a.data<double>()[1] = 0.25;
  b.data<double>()[0] = 2;
  b.data<double>()[1] = 4;
  Tensor want(DType::Float64, {1, 1});
  want.data<double>()[0] = 2;
  expect_close(run_one("MatMul", {a, b}), want);
}

TEST(CpuMatMul, MismatchedInnerDimIsAnError) {
  EXPECT_THROW(run_one("MatMul", {floats({1, 2, 3, 4, 5, 6}, {2, 3}), floats({1, 2, 3, 4}, {2, 2})}), Error);
  EXPECT_THROW(
      run_one("MatMul", {floats({1, 2, 3, 4}, {2, 1, 2}), floats({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {3, 2, 2})}),
      Error);
}

TEST(CpuGemm, AttributesAndBiasBroadcast) {
  // A^T (2x3 stored 3x2), B^T (3x2 stored 2x3), alpha 2, beta 0.5, C a row vector.
  Tensor a = floats({1, 4, 2, 5, 3, 6}, {3, 2});  // A = [[1,2,3],[4,5,6]]
  Tensor b = floats({1, 0, 1, 0, 1, 1}, {2, 3});  // B = [[1,0],[0,1],[1,1]]
  Tensor c = floats({10, 20}, {2});
  auto y = run_one("Gemm", {a, b, c},
                   {attr("transA", int64_t{1}), attr("transB", int64_t{1}), attr("alpha", 2.0f), attr("beta", 0.5f)});
  // A·B = [[4,5],[10,11]] -> 2·AB + 0.5·C
  expect_close(y, floats({13, 20, 25, 32}, {2, 2}));
  // Column bias (M, 1), scalar bias, no bias.
  Tensor a2 = floats({1, 2, 3, 4}, {2, 2}), i2 = floats({1, 0, 0, 1}, {2, 2});
  expect_close(run_one("Gemm", {a2, i2, floats({1, 2}, {2, 1})}), floats({2, 3, 5, 6}, {2, 2}));
  expect_close(run_one("Gemm", {a2, i2, floats({1}, {})}), floats({2, 3, 4, 5}, {2, 2}));
  expect_close(run_one("Gemm", {a2, i2}), floats({1, 2, 3, 4}, {2, 2}));
}

TEST(CpuGemm, LargerAgainstMatMul) {
  Tensor a = uniform_floats({65, 40}, 11), b = uniform_floats({40, 129}, 12);
  Tensor c = uniform_floats({129}, 13);
  Tensor want = naive_matmul(a, b, {65, 129});
  for (int64_t i = 0; i < want.numel(); ++i) want.data<float>()[i] += c.data<float>()[i % 129];
  expect_close(run_one("Gemm", {a, b, c}), want, 1e-5, 1e-5);
}

TEST(CpuGemm, IncompatibleBiasIsAnError) {
  Tensor a2 = floats({1, 2, 3, 4}, {2, 2});
  EXPECT_THROW(run_one("Gemm", {a2, a2, floats({1, 2, 3}, {3})}), Error);
  EXPECT_THROW(run_one("Gemm", {floats({1, 2}, {2}), a2, floats({1}, {1})}), Error);
  // C is required before opset 11.
  EXPECT_THROW(run_one("Gemm", {a2, a2}, {}, 10), Error);
}

TEST(CpuEinsum, MatrixProductsAndTransposes) {
  Tensor a = uniform_floats({3, 4}, 20), b = uniform_floats({4, 5}, 21);
  expect_close(run_one("Einsum", {a, b}, {attr("equation", std::string("ij,jk->ik"))}),
               naive_einsum("ij,jk->ik", {a, b}), 1e-5, 1e-5);
  // Implicit output: labels seen once, in alphabetical order.
  expect_close(run_one("Einsum", {a, b}, {attr("equation", std::string("ij,jk"))}), naive_einsum("ij,jk->ik", {a, b}),
               1e-5, 1e-5);
  expect_close(run_one("Einsum", {a}, {attr("equation", std::string("ij->ji"))}), naive_einsum("ij->ji", {a}));
  expect_close(run_one("Einsum", {a, b}, {attr("equation", std::string("ij,jk->ki"))}),
               naive_einsum("ij,jk->ki", {a, b}), 1e-5, 1e-5);
  Tensor x = uniform_floats({2, 3, 4}, 22), y = uniform_floats({2, 5, 4}, 23), z = uniform_floats({5, 3}, 24);
  for (const char* eq : {"bij,bkj->bik", "bij,bkj->kib", "bij,bkj->ik", "bij,bkj->b"}) {
    SCOPED_TRACE(eq);
    expect_close(run_one("Einsum", {x, y}, {attr("equation", std::string(eq))}), naive_einsum(eq, {x, y}), 1e-5, 1e-5);
  }
  expect_close(run_one("Einsum", {x, y, z}, {attr("equation", std::string("bij,bkj,kl->bil"))}),
               naive_einsum("bij,bkj,kl->bil", {x, y, z}), 1e-5, 1e-5);
}

TEST(CpuEinsum, DiagonalsSumsAndOuterProducts) {
  Tensor m = floats({1, 2, 3, 4, 5, 6, 7, 8, 9}, {3, 3});
  expect_close(run_one("Einsum", {m}, {attr("equation", std::string("ii->i"))}), floats({1, 5, 9}, {3}));
  expect_close(run_one("Einsum", {m}, {attr("equation", std::string("ii"))}), floats({15}, {}));
  expect_close(run_one("Einsum", {m}, {attr("equation", std::string("ij->"))}), floats({45}, {}));
  expect_close(
      run_one("Einsum", {floats({1, 2}, {2}), floats({3, 4, 5}, {3})}, {attr("equation", std::string("i,j->ij"))}),
      floats({3, 4, 5, 6, 8, 10}, {2, 3}));
  expect_close(
      run_one("Einsum", {floats({1, 2, 3}, {3}), floats({4, 5, 6}, {3})}, {attr("equation", std::string("i,i"))}),
      floats({32}, {}));
  // A label summed on one side only, and a diagonal inside a product.
  Tensor a = uniform_floats({3, 4}, 30), b = uniform_floats({3, 3, 2}, 31);
  expect_close(run_one("Einsum", {a, b}, {attr("equation", std::string("ij,iik->k"))}),
               naive_einsum("ij,iik->k", {a, b}), 1e-5, 1e-5);
}

TEST(CpuEinsum, EllipsisBroadcasts) {
  Tensor a = uniform_floats({2, 1, 3, 4}, 40), b = uniform_floats({5, 4, 2}, 41);
  // "...ij,...jk->...ik" with batch dims (2,1) and (5) broadcasting to (2,5).
  Tensor want = naive_einsum("abij,bjk->abik", {a, b});
  auto got = run_one("Einsum", {a, b}, {attr("equation", std::string("...ij,...jk->...ik"))});
  expect_close(got, want, 1e-5, 1e-5);
  // Implicit output puts the ellipsis dims first.
  got = run_one("Einsum", {a, b}, {attr("equation", std::string("...ij,...jk"))});
  expect_close(got, want, 1e-5, 1e-5);
}

TEST(CpuEinsum, Integers) {
  auto y = run_one("Einsum", {int64s({1, 2, 3, 4}, {2, 2}), int64s({5, 6, 7, 8}, {2, 2})},
                   {attr("equation", std::string("ij,jk->ik"))});
  expect_close(y, int64s({19, 22, 43, 50}, {2, 2}));
}

TEST(CpuEinsum, BadEquationsAreErrors) {
  Tensor a = floats({1, 2, 3, 4}, {2, 2});
  EXPECT_THROW(run_one("Einsum", {a}, {attr("equation", std::string("ijk->i"))}), Error);     // rank mismatch
  EXPECT_THROW(run_one("Einsum", {a}, {attr("equation", std::string("ij,jk->ik"))}), Error);  // operand count
  EXPECT_THROW(run_one("Einsum", {a}, {attr("equation", std::string("ij->iz"))}), Error);     // unknown output label
  EXPECT_THROW(run_one("Einsum", {a}, {attr("equation", std::string("i1->i"))}), Error);      // bad character
  EXPECT_THROW(run_one("Einsum", {a, floats({1, 2, 3}, {3})}, {attr("equation", std::string("ij,j->i"))}), Error);
}

TEST(CpuMatMul, HalfTypesComputeInFloat) {
  Tensor a(DType::Float16, {2, 2}), b(DType::BFloat16, {2, 2});
  const float av[] = {1, 2, 3, 4}, bv[] = {5, 6, 7, 8};
  for (int i = 0; i < 4; ++i) a.data<uint16_t>()[i] = float_to_half(av[i]);
  Tensor b16(DType::Float16, {2, 2});
  for (int i = 0; i < 4; ++i) b16.data<uint16_t>()[i] = float_to_half(bv[i]);
  Tensor y = run_one("MatMul", {a, b16});
  ASSERT_EQ(y.dtype(), DType::Float16);
  const float want[] = {19, 22, 43, 50};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(half_to_float(y.data<uint16_t>()[i]), want[i]);
  // Mixed half types are an error.
  for (int i = 0; i < 4; ++i) b.data<uint16_t>()[i] = float_to_bf16(bv[i]);
  EXPECT_THROW(run_one("MatMul", {a, b}), Error);
}

TEST(CpuLinalg, DetPivotsAndBatches) {
  // The first matrix needs a row swap (a zero pivot); the second is singular.
  expect_close(run_one("Det", {floats({0, 2, 1, 1, 1, 1, 2, 0, 3, 1, 2, 3, 2, 4, 6, 0, 1, 1}, {2, 3, 3})}),
               floats({-4, 0}, {2}));
  expect_close(run_one("Det", {floats({4, 7, 2, 6}, {2, 2})}), floats({10}, {}));
  // Empty batch and a 0x0 matrix (whose determinant is 1).
  expect_close(run_one("Det", {floats({}, {0, 2, 2})}), floats({}, {0}));
  expect_close(run_one("Det", {floats({}, {3, 0, 0})}), floats({1, 1, 1}, {3}));
  try {
    run_one("Det", {floats({1, 2, 3, 4, 5, 6}, {2, 3})});
    ADD_FAILURE() << "a 2x3 matrix has no determinant";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("square"), std::string::npos) << e.what();
  }
}
