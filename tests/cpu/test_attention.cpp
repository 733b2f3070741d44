// Attention (ai.onnx opsets 23-25 and ai.fusec) on the CPU reference: against a naive
// recomputation written out loop by loop here (double precision, one score at a time), in both
// layouts, with GQA, causal masking with Sq != Skv, bool and float masks that broadcast, fp16/bf16,
// the KV cache; plus shape inference errors and the cost. ONNX's own node tests (expected values
// from onnx.reference) run in the conformance_newer_ops ctest.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>

#include "ir/cost.h"
#include "ir/half.h"
#include "test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

/// [B, S, H·D] -> [B, H, S, D] (the head split the 3-D form stands for).
Tensor split_heads(const Tensor& x, int64_t heads) {
  const int64_t b = x.dim(0), s = x.dim(1), d = x.dim(2) / heads;
  Tensor out(DType::Float32, {b, heads, s, d});
  for (int64_t i = 0; i < b; ++i)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t j = 0; j < s; ++j)
        for (int64_t k = 0; k < d; ++k)
          out.data<float>()[((i * heads + h) * s + j) * d + k] = x.data<float>()[(i * s + j) * heads * d + h * d + k];
  return out;
}

/// [B, H, S, D] -> [B, S, H·D].
Tensor merge_heads(const Tensor& x) {
  const int64_t b = x.dim(0), heads = x.dim(1), s = x.dim(2), d = x.dim(3);
  Tensor out(DType::Float32, {b, s, heads * d});
  for (int64_t i = 0; i < b; ++i)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t j = 0; j < s; ++j)
        for (int64_t k = 0; k < d; ++k)
          out.data<float>()[(i * s + j) * heads * d + h * d + k] = x.data<float>()[((i * heads + h) * s + j) * d + k];
  return out;
}

using BiasFn = std::function<double(int64_t b, int64_t h, int64_t i, int64_t j)>;

/// Y = softmax(scale·Q·Kᵀ + bias)·V on 4-D float32 tensors, query head h on kv head h/(Hq/Hkv),
/// in double; a row with no finite bias is zero.
Tensor naive(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const BiasFn& bias) {
  const int64_t B = q.dim(0), Hq = q.dim(1), Sq = q.dim(2), D = q.dim(3);
  const int64_t Hkv = k.dim(1), Skv = k.dim(2), Dv = v.dim(3);
  Tensor y(DType::Float32, {B, Hq, Sq, Dv});
  auto at = [](const Tensor& t, int64_t a, int64_t b, int64_t c, int64_t d) {
    return static_cast<double>(t.data<float>()[((a * t.dim(1) + b) * t.dim(2) + c) * t.dim(3) + d]);
  };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t g = h / (Hq / Hkv);
      for (int64_t i = 0; i < Sq; ++i) {
        std::vector<double> s(Skv);
        double m = kNegInf;
        bool any = false;
        for (int64_t j = 0; j < Skv; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += at(q, b, h, i, d) * at(k, b, g, j, d);
          const double bj = bias ? bias(b, h, i, j) : 0.0;
          any |= bj != kNegInf;
          s[j] = dot * scale + bj;
          m = std::max(m, s[j]);
        }
        double sum = 0;
        for (double& x : s) sum += (x = any ? std::exp(x - m) : 0.0);
        for (int64_t e = 0; e < Dv; ++e) {
          double acc = 0;
          for (int64_t j = 0; j < Skv; ++j) acc += any ? s[j] / sum * at(v, b, g, j, e) : 0.0;
          y.data<float>()[((b * Hq + h) * Sq + i) * Dv + e] = static_cast<float>(acc);
        }
      }
    }
  return y;
}

/// One Attention node over `inputs` (nullptr-free, in schema order), returning output 0.
Tensor run_attention(const std::vector<Tensor>& inputs, std::vector<NamedAttribute> attrs,
                     const std::string& domain = "ai.fusec", int64_t opset = 23) {
  GraphBuilder b(opset);
  const char* names[] = {"Q", "K", "V", "attn_mask", "past_key", "past_value", "nonpad_kv_seqlen"};
  std::vector<Value*> ins;
  for (size_t i = 0; i < inputs.size(); ++i)
    ins.push_back(b.input(names[i], inputs[i].dtype(), shape_of(inputs[i].dims())));
  b.output(b.node_n("Attention", ins, 1, std::move(attrs), "attn", domain)[0]);
  auto g = b.build();
  return run_cpu(*g, inputs)[0];
}

Tensor bools(std::vector<int> v, std::vector<int64_t> dims) {
  Tensor t(DType::Bool, std::move(dims));
  for (size_t i = 0; i < v.size(); ++i) t.data<uint8_t>()[i] = static_cast<uint8_t>(v[i]);
  return t;
}

Tensor to_half(const Tensor& x, DType t) {
  Tensor out(t, x.dims());
  for (int64_t i = 0; i < x.numel(); ++i) {
    const float f = x.data<float>()[i];
    out.data<uint16_t>()[i] = t == DType::Float16 ? float_to_half(f) : float_to_bf16(f);
  }
  return out;
}

Tensor to_float(const Tensor& x) {
  Tensor out(DType::Float32, x.dims());
  for (int64_t i = 0; i < x.numel(); ++i) out.data<float>()[i] = static_cast<float>(x.as_double(i));
  return out;
}

NamedAttribute heads(const char* name, int64_t n) { return attr(name, n); }

/// Q [B, S, Hq·D], K and V [B, S, Hkv·D] -> packed QKV [B, S, (Hq + 2·Hkv)·D], each row [Q | K | V].
Tensor pack_qkv(const Tensor& q, const Tensor& k, const Tensor& v) {
  const int64_t b = q.dim(0), s = q.dim(1), nq = q.dim(2), nk = k.dim(2), nv = v.dim(2), w = nq + nk + nv;
  Tensor out(DType::Float32, {b, s, w});
  for (int64_t r = 0; r < b * s; ++r) {
    float* row = out.data<float>() + r * w;
    std::copy_n(q.data<float>() + r * nq, nq, row);
    std::copy_n(k.data<float>() + r * nk, nk, row + nq);
    std::copy_n(v.data<float>() + r * nv, nv, row + nq + nk);
  }
  return out;
}

/// ai.fusec Attention(qkv, "", "" [, mask]): the packed form.
Tensor run_packed(const Tensor& qkv, const Tensor* mask, std::vector<NamedAttribute> attrs) {
  GraphBuilder b(17);
  std::vector<Value*> ins = {b.input("QKV", qkv.dtype(), shape_of(qkv.dims())), nullptr, nullptr};
  std::vector<Tensor> feeds = {qkv};
  if (mask) {
    ins.push_back(b.input("attn_mask", mask->dtype(), shape_of(mask->dims())));
    feeds.push_back(*mask);
  }
  b.output(b.node_n("Attention", ins, 1, std::move(attrs), "attn", "ai.fusec")[0]);
  auto g = b.build();
  return run_cpu(*g, feeds)[0];
}

void expect_bit_identical(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.dtype(), want.dtype());
  ASSERT_EQ(got.dims(), want.dims());
  EXPECT_EQ(std::memcmp(got.raw(), want.raw(), want.nbytes()), 0) << "packed and unpacked Y differ";
}

}  // namespace

TEST(CpuAttention, OneQueryByHand) {
  // q·k = (0, ln 3) with scale 1: probabilities (1/4, 3/4), so y = v0/4 + 3·v1/4.
  const float l3 = std::log(3.0f);
  const Tensor q = floats({1, 0}, {1, 1, 1, 2});
  const Tensor k = floats({0, 0, l3, 0}, {1, 1, 2, 2});
  const Tensor v = floats({4, 8, 0, 4}, {1, 1, 2, 2});
  expect_close(run_attention({q, k, v}, {attr("scale", 1.0f)}), floats({1, 5}, {1, 1, 1, 2}));
}

TEST(CpuAttention, FourDMatchesNaiveWithDefaultScale) {
  const Tensor q = uniform_floats({2, 3, 4, 8}, 1), k = uniform_floats({2, 3, 5, 8}, 2),
               v = uniform_floats({2, 3, 5, 6}, 3);
  const Tensor want = naive(q, k, v, 1 / std::sqrt(8.0), nullptr);
  expect_close(run_attention({q, k, v}, {}), want);
  // scale 0 on ai.fusec means the default; on the standard op it is taken literally (uniform weights).
  expect_close(run_attention({q, k, v}, {attr("scale", 0.0f)}), want);
  expect_close(run_attention({q, k, v}, {attr("scale", 0.0f)}, ""), naive(q, k, v, 0, nullptr));
  expect_close(run_attention({q, k, v}, {attr("scale", 0.3f)}, ""), naive(q, k, v, 0.3f, nullptr));
}

TEST(CpuAttention, ThreeDSplitsHeadsLikeFourD) {
  // Q [2, 4, 3·8], K [2, 5, 3·8], V [2, 5, 3·6]: Y [2, 4, 3·6] equals the 4-D result merged.
  const Tensor q = uniform_floats({2, 4, 24}, 4), k = uniform_floats({2, 5, 24}, 5), v = uniform_floats({2, 5, 18}, 6);
  const Tensor want =
      merge_heads(naive(split_heads(q, 3), split_heads(k, 3), split_heads(v, 3), 1 / std::sqrt(8.0), nullptr));
  const auto h = {heads("q_num_heads", 3), heads("kv_num_heads", 3)};
  expect_close(run_attention({q, k, v}, h), want);
  expect_close(run_attention({q, k, v}, h, ""), want);
}

TEST(CpuAttention, GroupedQueryHeadsShareKvHeads) {
  // 6 query heads over 2 kv heads: heads 0-2 read kv head 0, heads 3-5 kv head 1.
  const Tensor q = uniform_floats({1, 6, 3, 4}, 7), k = uniform_floats({1, 2, 5, 4}, 8),
               v = uniform_floats({1, 2, 5, 4}, 9);
  const Tensor want = naive(q, k, v, 0.5, nullptr);
  expect_close(run_attention({q, k, v}, {attr("scale", 0.5f)}), want);
  // The same in 3-D.
  const auto h = {heads("q_num_heads", 6), heads("kv_num_heads", 2), attr("scale", 0.5f)};
  expect_close(run_attention({merge_heads(q), merge_heads(k), merge_heads(v)}, h), merge_heads(want));
}

TEST(CpuAttention, LargeHeadsTakeTheGemmPath) {
  // 100 queries x 80 keys x 16 dims per head is past the kernel's plain-loop size: the blocked GEMM
  // computes both products, in two blocks of query rows (64 + 36), reading 3-D rows in place (row
  // stride H·D) and a GQA kv head.
  const Tensor q = uniform_floats({2, 4, 100, 16}, 40), k = uniform_floats({2, 2, 80, 16}, 41),
               v = uniform_floats({2, 2, 80, 8}, 42);
  const Tensor mask = uniform_floats({2, 1, 100, 80}, 43);
  const BiasFn bias = [&](int64_t b, int64_t, int64_t i, int64_t j) {
    return j > i ? kNegInf : static_cast<double>(mask.data<float>()[(b * 100 + i) * 80 + j]);
  };
  const Tensor want = naive(q, k, v, 0.25, bias);
  expect_close(run_attention({q, k, v, mask}, {attr("is_causal", int64_t{1})}), want, 1e-4, 1e-5);
  const auto h = {heads("q_num_heads", 4), heads("kv_num_heads", 2), attr("is_causal", int64_t{1})};
  expect_close(run_attention({merge_heads(q), merge_heads(k), merge_heads(v), mask}, h), merge_heads(want), 1e-4, 1e-5);
}

TEST(CpuAttention, SmallHeadsInSeveralRowBlocks) {
  // 150 queries over 3 keys: the plain-loop path, three blocks of query rows.
  const Tensor q = uniform_floats({1, 2, 150, 4}, 47), k = uniform_floats({1, 2, 3, 4}, 48),
               v = uniform_floats({1, 2, 3, 4}, 49);
  const BiasFn causal = [](int64_t, int64_t, int64_t i, int64_t j) { return j > i ? kNegInf : 0.0; };
  expect_close(run_attention({q, k, v}, {attr("is_causal", int64_t{1})}), naive(q, k, v, 0.5, causal));
}

TEST(CpuAttention, CausalIsUpperLeftAlignedWithoutCache) {
  // Query i sees keys j <= i, whichever of Sq and Skv is longer.
  const BiasFn causal = [](int64_t, int64_t, int64_t i, int64_t j) { return j > i ? kNegInf : 0.0; };
  for (auto [sq, skv] : {std::pair<int64_t, int64_t>{3, 5}, {5, 3}, {4, 4}}) {
    const Tensor q = uniform_floats({2, 2, sq, 4}, 10), k = uniform_floats({2, 2, skv, 4}, 11),
                 v = uniform_floats({2, 2, skv, 3}, 12);
    expect_close(run_attention({q, k, v}, {attr("is_causal", int64_t{1})}), naive(q, k, v, 0.5, causal));
    expect_close(run_attention({q, k, v}, {attr("is_causal", int64_t{1})}, ""), naive(q, k, v, 0.5, causal));
  }
}

TEST(CpuAttention, BoolMaskBroadcastsOverHeadsAndQueries) {
  // Padding mask [B, 1, 1, Skv]: batch 0 attends keys 0-2, batch 1 keys 0-3.
  const Tensor q = uniform_floats({2, 2, 3, 4}, 13), k = uniform_floats({2, 2, 4, 4}, 14),
               v = uniform_floats({2, 2, 4, 4}, 15);
  const Tensor mask = bools({1, 1, 1, 0, 1, 1, 1, 1}, {2, 1, 1, 4});
  const BiasFn bias = [&](int64_t b, int64_t, int64_t, int64_t j) {
    return mask.data<uint8_t>()[b * 4 + j] ? 0.0 : kNegInf;
  };
  expect_close(run_attention({q, k, v, mask}, {}), naive(q, k, v, 0.5, bias));
}

TEST(CpuAttention, FloatMaskAddsAndCombinesWithCausal) {
  // A 2-D float mask [Sq, Skv] (shared by batches and heads) plus is_causal.
  const Tensor q = uniform_floats({2, 2, 3, 4}, 16), k = uniform_floats({2, 2, 5, 4}, 17),
               v = uniform_floats({2, 2, 5, 2}, 18);
  const Tensor mask = uniform_floats({3, 5}, 19);
  const BiasFn add = [&](int64_t, int64_t, int64_t i, int64_t j) {
    return static_cast<double>(mask.data<float>()[i * 5 + j]);
  };
  const BiasFn both = [&](int64_t b, int64_t h, int64_t i, int64_t j) { return j > i ? kNegInf : add(b, h, i, j); };
  expect_close(run_attention({q, k, v, mask}, {}), naive(q, k, v, 0.5, add));
  expect_close(run_attention({q, k, v, mask}, {attr("is_causal", int64_t{1})}), naive(q, k, v, 0.5, both));
  // [B, 1, Sq, Skv] in 3-D with GQA: per-batch masks.
  const Tensor mb = uniform_floats({2, 1, 3, 5}, 20);
  const BiasFn per_batch = [&](int64_t b, int64_t, int64_t i, int64_t j) {
    return static_cast<double>(mb.data<float>()[(b * 3 + i) * 5 + j]);
  };
  const Tensor q4 = uniform_floats({2, 4, 3, 4}, 21);
  const auto h = {heads("q_num_heads", 4), heads("kv_num_heads", 2)};
  expect_close(run_attention({merge_heads(q4), merge_heads(k), merge_heads(v), mb}, h),
               merge_heads(naive(q4, k, v, 0.5, per_batch)));
}

TEST(CpuAttention, FullyMaskedRowIsZero) {
  const Tensor q = uniform_floats({1, 1, 2, 4}, 22), k = uniform_floats({1, 1, 3, 4}, 23),
               v = uniform_floats({1, 1, 3, 4}, 24);
  const Tensor y = run_attention({q, k, v, bools({0, 0, 0, 1, 0, 1}, {2, 3})}, {});
  for (int64_t e = 0; e < 4; ++e) EXPECT_EQ(y.data<float>()[e], 0.0f);
  const BiasFn bias = [](int64_t, int64_t, int64_t i, int64_t j) { return i == 0 || j == 1 ? kNegInf : 0.0; };
  expect_close(y, naive(q, k, v, 0.5, bias));
}

TEST(CpuAttention, HalfTypesComputeInFloat32) {
  const Tensor q = uniform_floats({1, 2, 3, 8}, 25), k = uniform_floats({1, 2, 4, 8}, 26),
               v = uniform_floats({1, 2, 4, 8}, 27);
  const Tensor mask = uniform_floats({1, 1, 3, 4}, 28);
  for (DType t : {DType::Float16, DType::BFloat16}) {
    // Reference on the inputs as rounded to t; the result is rounded to t once.
    const Tensor qh = to_half(q, t), kh = to_half(k, t), vh = to_half(v, t), mh = to_half(mask, t);
    const Tensor mf = to_float(mh);
    const BiasFn bias = [&](int64_t, int64_t, int64_t i, int64_t j) {
      return static_cast<double>(mf.data<float>()[i * 4 + j]);
    };
    const Tensor want = naive(to_float(qh), to_float(kh), to_float(vh), 1 / std::sqrt(8.0), bias);
    const Tensor got = run_attention({qh, kh, vh, mh}, {attr("is_causal", int64_t{0})});
    ASSERT_EQ(got.dtype(), t);
    expect_close(to_float(got), want, t == DType::Float16 ? 2e-3 : 1e-2, 1e-3);
  }
}

TEST(CpuAttention, PastKeyValueExtendTheKeysAndShiftTheCausalFrontier) {
  // Standard op: K' = concat(past_key, K); with is_causal, query i sees keys j <= i + Sp.
  const Tensor q = uniform_floats({1, 2, 2, 4}, 29), k = uniform_floats({1, 2, 2, 4}, 30),
               v = uniform_floats({1, 2, 2, 4}, 31);
  const Tensor pk = uniform_floats({1, 2, 3, 4}, 32), pv = uniform_floats({1, 2, 3, 4}, 33);
  GraphBuilder b(23);
  std::vector<Value*> ins = {
      b.input("Q", DType::Float32, shape_of(q.dims())),   b.input("K", DType::Float32, shape_of(k.dims())),
      b.input("V", DType::Float32, shape_of(v.dims())),   nullptr,
      b.input("pk", DType::Float32, shape_of(pk.dims())), b.input("pv", DType::Float32, shape_of(pv.dims()))};
  for (Value* o : b.node_n("Attention", ins, 3, {attr("is_causal", int64_t{1})}, "attn")) b.output(o);
  auto g = b.build();
  const auto outs = run_cpu(*g, {q, k, v, pk, pv});
  // present_key / present_value: the concatenations.
  Tensor kk(DType::Float32, {1, 2, 5, 4}), vv(DType::Float32, {1, 2, 5, 4});
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t j = 0; j < 5; ++j)
      for (int64_t d = 0; d < 4; ++d) {
        const Tensor &ks = j < 3 ? pk : k, &vs = j < 3 ? pv : v;
        const int64_t s = j < 3 ? 3 : 2, jj = j < 3 ? j : j - 3;
        kk.data<float>()[(h * 5 + j) * 4 + d] = ks.data<float>()[(h * s + jj) * 4 + d];
        vv.data<float>()[(h * 5 + j) * 4 + d] = vs.data<float>()[(h * s + jj) * 4 + d];
      }
  expect_close(outs[1], kk);
  expect_close(outs[2], vv);
  const BiasFn causal = [](int64_t, int64_t, int64_t i, int64_t j) { return j > i + 3 ? kNegInf : 0.0; };
  expect_close(outs[0], naive(q, kk, vv, 0.5, causal));
  // Without the present outputs the concatenation goes to scratch: the same Y.
  GraphBuilder b1(23);
  std::vector<Value*> ins1 = {
      b1.input("Q", DType::Float32, shape_of(q.dims())),   b1.input("K", DType::Float32, shape_of(k.dims())),
      b1.input("V", DType::Float32, shape_of(v.dims())),   nullptr,
      b1.input("pk", DType::Float32, shape_of(pk.dims())), b1.input("pv", DType::Float32, shape_of(pv.dims()))};
  b1.output(b1.node_n("Attention", ins1, 1, {attr("is_causal", int64_t{1})}, "attn")[0]);
  auto g1 = b1.build();
  expect_close(run_cpu(*g1, {q, k, v, pk, pv})[0], outs[0]);
}

TEST(CpuAttention, NonpadLengthsAtTheInt64LimitsMeanAllOrNoKeys) {
  // Opset 24's nonpad_kv_seqlen: INT64_MAX keeps every key (even with is_causal, whose frontier
  // i + nonpad − Sq is then past the last key), INT64_MIN none (a zero row), without overflow.
  const Tensor q = uniform_floats({2, 1, 3, 4}, 44), k = uniform_floats({2, 1, 5, 4}, 45),
               v = uniform_floats({2, 1, 5, 4}, 46);
  const Tensor lengths = int64s({std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()}, {2});
  GraphBuilder b(24);
  std::vector<Value*> ins = {b.input("Q", DType::Float32, shape_of(q.dims())),
                             b.input("K", DType::Float32, shape_of(k.dims())),
                             b.input("V", DType::Float32, shape_of(v.dims())),
                             nullptr,
                             nullptr,
                             nullptr,
                             b.input("n", DType::Int64, {2})};
  b.output(b.node_n("Attention", ins, 1, {attr("is_causal", int64_t{1})}, "attn")[0]);
  auto g = b.build();
  const Tensor y = run_cpu(*g, {q, k, v, lengths})[0];
  const Tensor want = naive(q, k, v, 0.5, [](int64_t b, int64_t, int64_t, int64_t) { return b == 0 ? 0.0 : kNegInf; });
  expect_close(y, want);
}

TEST(CpuAttention, ShapeErrorsNameTheProblem) {
  const Tensor q = uniform_floats({1, 2, 3, 4}, 34), k = uniform_floats({1, 2, 3, 4}, 35);
  auto fails_with = [](const std::vector<Tensor>& in, std::vector<NamedAttribute> a, const std::string& what) {
    try {
      run_attention(in, std::move(a));
      ADD_FAILURE() << "no error, expected: " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("node 'attn'"), std::string::npos) << e.what();
    }
  };
  fails_with({q, k, uniform_floats({1, 2, 3}, 1)}, {}, "same rank");
  fails_with({q, uniform_floats({1, 2, 3, 5}, 1), k}, {}, "head size");
  fails_with({uniform_floats({1, 3, 3, 4}, 1), k, k}, {}, "not a multiple");
  fails_with({q, k, k, uniform_floats({3, 2}, 1)}, {}, "does not broadcast");
  fails_with({q, k, k, uniform_floats({1, 3, 3, 3}, 1)}, {}, "does not broadcast");
  fails_with({q, k, k, int64s({1}, {1})}, {}, "attn_mask has type int64");
  const Tensor q3 = uniform_floats({1, 3, 8}, 36);
  fails_with({q3, q3, q3}, {heads("q_num_heads", 2)}, "kv_num_heads");
  fails_with({q3, q3, q3}, {heads("q_num_heads", 3), heads("kv_num_heads", 1)}, "not a multiple of its 3 heads");
  fails_with({q, k, k}, {heads("q_num_heads", 4)}, "contradicts");
}

TEST(CpuAttention, CostCountsBothProductsAndNotTheScores) {
  // B 2, Hq 4, Sq 8, Skv 16, D 8, Dv 4 (3-D, Hkv 2): FLOPs = 2·2·4·8·16·(8+4) + 5·2·4·8·16.
  GraphBuilder b(17);
  Value* q = b.input("Q", DType::Float32, {2, 8, 32});
  Value* k = b.input("K", DType::Float32, {2, 16, 16});
  Value* v = b.input("V", DType::Float32, {2, 16, 8});
  b.output(
      b.node_n("Attention", {q, k, v}, 1, {heads("q_num_heads", 4), heads("kv_num_heads", 2)}, "attn", "ai.fusec")[0]);
  auto g = b.build();
  infer_shapes(*g);
  const auto c = node_cost(*g, *g->nodes()[0]);
  ASSERT_TRUE(c);
  EXPECT_DOUBLE_EQ(c->flops, 2.0 * 2 * 4 * 8 * 16 * (8 + 4) + 5.0 * 2 * 4 * 8 * 16);
  EXPECT_DOUBLE_EQ(c->bytes_read, 4.0 * (2 * 8 * 32 + 2 * 16 * 16 + 2 * 16 * 8));
  EXPECT_DOUBLE_EQ(c->bytes_written, 4.0 * 2 * 8 * 16);  // Y [2, 8, 4·4]
}

TEST(CpuAttention, PackedQkvIsBitIdenticalToSeparateInputs) {
  // ai.fusec Attention with K and V omitted reads Q, K and V as column blocks of one
  // [B, S, (Hq + 2·Hkv)·D] tensor: the same Y, bit for bit, as the three tensors given apart; with
  // and without a mask (bool and float), causal, GQA, and heads large enough for the GEMM path.
  struct Case {
    int64_t batch, seq, hq, hkv, d;
    const char* what;
  };
  for (const Case& c : {Case{2, 5, 3, 3, 4, "MHA"}, Case{2, 6, 6, 2, 4, "GQA 6/2"}, Case{1, 7, 4, 1, 8, "MQA 4/1"},
                        Case{2, 100, 4, 2, 16, "GEMM path, GQA"}}) {
    SCOPED_TRACE(c.what);
    const Tensor q = uniform_floats({c.batch, c.seq, c.hq * c.d}, 60);
    const Tensor k = uniform_floats({c.batch, c.seq, c.hkv * c.d}, 61);
    const Tensor v = uniform_floats({c.batch, c.seq, c.hkv * c.d}, 62);
    const Tensor qkv = pack_qkv(q, k, v);
    const Tensor float_mask = uniform_floats({c.batch, 1, c.seq, c.seq}, 63);
    Tensor bool_mask(DType::Bool, {c.batch, 1, 1, c.seq});
    for (int64_t i = 0; i < bool_mask.numel(); ++i) bool_mask.data<uint8_t>()[i] = (i % c.seq) != 1;  // key 1 masked
    for (int causal : {0, 1})
      for (const Tensor* mask : std::vector<const Tensor*>{nullptr, &float_mask, &bool_mask}) {
        SCOPED_TRACE(std::string(causal ? "causal" : "not causal") +
                     (mask ? mask == &bool_mask ? ", bool mask" : ", float mask" : ""));
        std::vector<NamedAttribute> a = {heads("q_num_heads", c.hq), heads("kv_num_heads", c.hkv),
                                         attr("is_causal", int64_t{causal})};
        std::vector<Tensor> separate = {q, k, v};
        if (mask) separate.push_back(*mask);
        const Tensor want = run_attention(separate, a);
        expect_bit_identical(run_packed(qkv, mask, a), want);
      }
  }
  // An explicit scale, and the result against the naive reference too.
  const Tensor q = uniform_floats({2, 4, 8}, 64), k = uniform_floats({2, 4, 8}, 65), v = uniform_floats({2, 4, 8}, 66);
  const auto a = {heads("q_num_heads", 2), heads("kv_num_heads", 2), attr("scale", 0.3f)};
  const Tensor y = run_packed(pack_qkv(q, k, v), nullptr, a);
  expect_bit_identical(y, run_attention({q, k, v}, a));
  expect_close(y, merge_heads(naive(split_heads(q, 2), split_heads(k, 2), split_heads(v, 2), 0.3, nullptr)));
}

TEST(CpuAttention, PackedQkvShapeErrorsNameTheProblem) {
  auto fails_with = [](const std::function<void()>& f, const std::string& what) {
    try {
      f();
      ADD_FAILURE() << "no error, expected: " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("node 'attn'"), std::string::npos) << e.what();
    }
  };
  const Tensor qkv = uniform_floats({1, 3, 24}, 67);  // 2 + 2·2 = 6 parts of 4
  const auto h = [](int64_t q, int64_t kv) {
    return std::vector<NamedAttribute>{heads("q_num_heads", q), heads("kv_num_heads", kv)};
  };
  fails_with([&] { run_packed(uniform_floats({1, 2, 3, 24}, 1), nullptr, h(2, 2)); }, "must be 3-D");
  fails_with([&] { run_packed(qkv, nullptr, h(5, 1)); }, "not a multiple of q_num_heads + 2·kv_num_heads = 7");
  fails_with([&] { run_packed(qkv, nullptr, h(3, 2)); }, "not a multiple of K/V's");
  fails_with([&] { run_packed(qkv, nullptr, {heads("q_num_heads", 2)}); }, "needs the attribute 'kv_num_heads'");
  const Tensor wide = uniform_floats({1, 1, 3, 4}, 2);
  fails_with([&] { run_packed(qkv, &wide, h(2, 2)); }, "does not broadcast");
  // Only one of K and V omitted, and the standard op without K and V.
  auto run_with = [&](std::vector<Value*> (*ins)(GraphBuilder&), const std::string& domain, int64_t opset) {
    GraphBuilder b(opset);
    b.output(b.node_n("Attention", ins(b), 1, h(2, 2), "attn", domain)[0]);
    auto g = b.build();
    std::vector<Tensor> feeds;
    for (Value* v : g->inputs) feeds.push_back(v->name == "QKV" ? qkv : uniform_floats({1, 3, 8}, 3));
    run_cpu(*g, feeds);
  };
  fails_with(
      [&] {
        run_with(
            [](GraphBuilder& b) {
              return std::vector<Value*>{b.input("QKV", DType::Float32, {1, 3, 24}),
                                         b.input("K", DType::Float32, {1, 3, 8}), nullptr};
            },
            "ai.fusec", 17);
      },
      "K and V must both be given, or both omitted");
  fails_with(
      [&] {
        run_with(
            [](GraphBuilder& b) {
              return std::vector<Value*>{b.input("QKV", DType::Float32, {1, 3, 24}), nullptr, nullptr,
                                         b.input("M", DType::Float32, {1, 3, 8})};
            },
            "", 23);
      },
      "required input 1 is empty");
}

TEST(CpuAttention, RotaryTablesRotateQAndKHeadsAsRotaryDoes) {
  // ai.fusec Attention(qkv, "", "", mask, cos, sin) is Rotary(qkv, cos, sin; head_size D, rotated
  // (Hq + Hkv)·D) then the packed attention, bit for bit: tables per position ([1, S, 1, D]) and
  // per batch and position ([B, S, 1, D]), GQA, causal, a mask, the GEMM path.
  struct Case {
    int64_t batch, seq, hq, hkv, d;
    bool per_batch;
    const char* what;
  };
  for (const Case& c :
       {Case{2, 5, 4, 2, 4, false, "GQA 4/2, [1, S, 1, D]"}, Case{2, 6, 3, 3, 8, true, "MHA, [B, S, 1, D]"},
        Case{1, 100, 4, 1, 16, false, "GEMM path, MQA"}}) {
    SCOPED_TRACE(c.what);
    const int64_t w = (c.hq + 2 * c.hkv) * c.d;
    const Tensor qkv = uniform_floats({c.batch, c.seq, w}, 70);
    const std::vector<int64_t> tdims = {c.per_batch ? c.batch : 1, c.seq, 1, c.d};
    const Tensor cs = uniform_floats(tdims, 71), sn = uniform_floats(tdims, 72);
    const Tensor mask = uniform_floats({c.batch, 1, 1, c.seq}, 73);
    for (int causal : {0, 1}) {
      SCOPED_TRACE(causal ? "causal" : "not causal");
      const std::vector<NamedAttribute> a = {heads("q_num_heads", c.hq), heads("kv_num_heads", c.hkv),
                                             attr("is_causal", int64_t{causal})};
      // Two nodes: the rotation, then the attention reading its output.
      GraphBuilder two(17);
      Value* x = two.input("QKV", DType::Float32, shape_of(qkv.dims()));
      Value* m = two.input("attn_mask", DType::Float32, shape_of(mask.dims()));
      Value* cv = two.initializer("cos", cs);
      Value* sv = two.initializer("sin", sn);
      Value* r = two.node_n("Rotary", {x, cv, sv}, 1, {attr("head_size", c.d), attr("rotated", (c.hq + c.hkv) * c.d)},
                            "rope", "ai.fusec")[0];
      two.output(two.node_n("Attention", {r, nullptr, nullptr, m}, 1, a, "attn", "ai.fusec")[0]);
      // One node with the tables.
      GraphBuilder one(17);
      Value* x1 = one.input("QKV", DType::Float32, shape_of(qkv.dims()));
      Value* m1 = one.input("attn_mask", DType::Float32, shape_of(mask.dims()));
      one.output(one.node_n("Attention",
                            {x1, nullptr, nullptr, m1, one.initializer("cos", cs), one.initializer("sin", sn)}, 1, a,
                            "attn", "ai.fusec")[0]);
      const Tensor want = run_cpu(*two.build(), {qkv, mask})[0];
      const Tensor got = run_cpu(*one.build(), {qkv, mask})[0];
      expect_bit_identical(got, want);
    }
  }
}

TEST(CpuAttention, RotaryTableErrorsNameTheProblem) {
  const Tensor qkv = uniform_floats({2, 3, 24}, 74);  // 2 + 2·2 = 6 heads of 4
  auto fails_with = [&](std::vector<int64_t> cos_dims, std::vector<int64_t> sin_dims, bool packed,
                        const std::string& what) {
    try {
      GraphBuilder b(17);
      std::vector<Value*> ins;
      std::vector<Tensor> feeds;
      if (packed) {
        ins = {b.input("QKV", DType::Float32, {2, 3, 24}), nullptr, nullptr, nullptr};
        feeds = {qkv};
      } else {
        ins = {b.input("Q", DType::Float32, {2, 3, 8}), b.input("K", DType::Float32, {2, 3, 8}),
               b.input("V", DType::Float32, {2, 3, 8}), nullptr};
        feeds = {uniform_floats({2, 3, 8}, 1), uniform_floats({2, 3, 8}, 2), uniform_floats({2, 3, 8}, 3)};
      }
      ins.push_back(cos_dims.empty() ? nullptr : b.initializer("cos", uniform_floats(cos_dims, 5)));
      ins.push_back(sin_dims.empty() ? nullptr : b.initializer("sin", uniform_floats(sin_dims, 6)));
      b.output(
          b.node_n("Attention", ins, 1, {heads("q_num_heads", 2), heads("kv_num_heads", 2)}, "attn", "ai.fusec")[0]);
      run_cpu(*b.build(), feeds);
      ADD_FAILURE() << "no error, expected: " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("node 'attn'"), std::string::npos) << e.what();
    }
  };
  fails_with({1, 3, 1, 4}, {}, true, "cos and sin must be given together");
  fails_with({1, 3, 1, 4}, {1, 3, 1, 4}, false, "need packed QKV");
  fails_with({1, 3, 1, 8}, {1, 3, 1, 8}, true, "does not broadcast to [B, S, 1, D]");
  fails_with({1, 3, 6, 4}, {1, 3, 6, 4}, true, "does not broadcast to [B, S, 1, D]");  // per head
  fails_with({3, 3, 1, 4}, {1, 3, 1, 4}, true, "does not broadcast to [B, S, 1, D]");  // batch 3 of 2
}

TEST(CpuAttention, PackedQkvCost) {
  // B 2, S 8, Hq 4, Hkv 2, D 8: packed [2, 8, (4 + 2·2)·8 = 64]; FLOPs as for Q, K, V apart
  // (2·B·Hq·S·S·(D + D) + 5·B·Hq·S·S), bytes read = the packed tensor, written = Y [2, 8, 32].
  GraphBuilder b(17);
  Value* qkv = b.input("QKV", DType::Float32, {2, 8, 64});
  b.output(b.node_n("Attention", {qkv, nullptr, nullptr}, 1, {heads("q_num_heads", 4), heads("kv_num_heads", 2)},
                    "attn", "ai.fusec")[0]);
  auto g = b.build();
  infer_shapes(*g);
  EXPECT_EQ(g->outputs[0]->type.shape, (Shape{2, 8, 32}));
  const auto c = node_cost(*g, *g->nodes()[0]);
  ASSERT_TRUE(c);
  EXPECT_DOUBLE_EQ(c->flops, 2.0 * 2 * 4 * 8 * 8 * (8 + 8) + 5.0 * 2 * 4 * 8 * 8);
  EXPECT_DOUBLE_EQ(c->bytes_read, 4.0 * 2 * 8 * 64);
  EXPECT_DOUBLE_EQ(c->bytes_written, 4.0 * 2 * 8 * 32);
}
