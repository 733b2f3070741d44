// Softmax, LogSoftmax and Hardmax kernels (softmax.cu) against the CPU reference at fp32 (1e-5),
// fp16 and bf16 (1e-2): row widths that take every variant (warp rows, block rows, scalar and
// vector loads, long rows split across blocks, long rows in registers), BERT's attention-score
// shape, opset < 13 (2-D coercion) and >= 13 (one axis, innermost or strided), negative axes,
// -inf entries, Hardmax ties, and the Hardmax row that must fall back to the CPU.
#include <cmath>

#include "gpu_test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

const Precision kAll[] = {Precision::FP32, Precision::FP16, Precision::BF16};
const char* const kOps[] = {"Softmax", "LogSoftmax"};

/// Random values on a 1/64 grid in [lo, hi] (|lo|, |hi| <= 4): exact in float16 and bfloat16.
Tensor data(std::vector<int64_t> dims, uint64_t seed, double lo = -3, double hi = 3) {
  Tensor t = random_tensor(DType::Float32, dims, seed, lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = std::round(t.data<float>()[i] * 32.0f) / 32.0f;
  return t;
}

OpCase softmax(const std::string& op, Tensor x, int64_t axis, int64_t opset = 13) {
  OpCase c;
  c.op = op;
  c.opset = opset;
  c.inputs = {std::move(x)};
  c.attrs = {attr("axis", axis)};
  return c;
}

void all_precisions(const OpCase& c) {
  for (Precision p : kAll) {
    SCOPED_TRACE(precision_name(p));
    expect_gpu_matches_cpu(c, p);
  }
}

}  // namespace

TEST(GpuSoftmax, RowWidths) {
  FUSEC_REQUIRE_GPU();
  uint64_t seed = 1;
  for (const char* op : kOps)
    for (int64_t w : {1, 7, 64, 127, 128, 768, 1024, 1025, 4096, 8193, 32768, 40000}) {
      for (int64_t rows : {int64_t(3), w >= 32768 ? int64_t(300) : int64_t(1000)}) {
        SCOPED_TRACE(std::string(op) + " rows " + std::to_string(rows) + " width " + std::to_string(w));
        all_precisions(softmax(op, data({rows, w}, ++seed), -1));
      }
    }
}

TEST(GpuSoftmax, AttentionScores) {
  FUSEC_REQUIRE_GPU();
  // BERT-base attention scores [batch, heads, seq, seq] (batch 4 here to keep the CPU side quick).
  for (const char* op : kOps) all_precisions(softmax(op, data({4, 12, 128, 128}, 7, -8, 8), -1));
}

TEST(GpuSoftmax, LongRowsFewRows) {
  FUSEC_REQUIRE_GPU();
  // One or two very long rows: split across blocks, then combined.
  for (const char* op : kOps) {
    all_precisions(softmax(op, data({1, 100000}, 11), -1));
    all_precisions(softmax(op, data({2, 65537}, 12), -1));
  }
}

TEST(GpuSoftmax, AxisVariants) {
  FUSEC_REQUIRE_GPU();
  uint64_t seed = 20;
  for (const char* op : kOps) {
    // opset >= 13: one axis; a non-innermost one is strided.
    all_precisions(softmax(op, data({2, 3, 4, 5}, ++seed), 1));
    all_precisions(softmax(op, data({2, 3, 4, 5}, ++seed), -3));
    all_precisions(softmax(op, data({7, 33}, ++seed), 0));
    all_precisions(softmax(op, data({1000, 3}, ++seed), 0));
    all_precisions(softmax(op, data({4, 1, 9}, ++seed), 1));
    all_precisions(softmax(op, data({2, 5, 7}, ++seed), -1));
    // opset < 13: rows of everything from axis on.
    all_precisions(softmax(op, data({2, 3, 4, 5}, ++seed), 1, 11));
    all_precisions(softmax(op, data({2, 3, 4, 5}, ++seed), -2, 11));
    all_precisions(softmax(op, data({2, 3, 4, 5}, ++seed), 0, 11));
    all_precisions(softmax(op, data({6, 40, 1024}, ++seed), 1, 11));
  }
}

TEST(GpuSoftmax, NegativeInfinity) {
  FUSEC_REQUIRE_GPU();
  // Masked attention: -inf entries give exact zeros, never NaN, on both paths.
  for (const char* op : kOps)
    for (std::vector<int64_t> dims : {std::vector<int64_t>{16, 128}, {3, 50000}}) {
      Tensor x = data(dims, 30);
      for (int64_t i = 0; i < x.numel(); i += 3) x.data<float>()[i] = -INFINITY;
      for (Precision p : kAll) expect_gpu_matches_cpu(softmax(op, x, -1), p);
      for (Precision p : kAll) expect_gpu_matches_cpu(softmax(op, x, 0), p);
    }
}

TEST(GpuSoftmax, Hardmax) {
  FUSEC_REQUIRE_GPU();
  uint64_t seed = 40;
  // Coarse values give ties: the first maximum wins.
  auto ties = [&](std::vector<int64_t> dims) {
    Tensor t = random_tensor(DType::Float32, dims, ++seed, 0, 4);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = std::floor(t.data<float>()[i]);
    return t;
  };
  for (int64_t w : {1, 7, 128, 1025, 4096}) all_precisions(softmax("Hardmax", ties({33, w}), -1));
  all_precisions(softmax("Hardmax", ties({5, 6, 7}), 1));
  all_precisions(softmax("Hardmax", ties({5, 6, 7}), 1, 11));
  all_precisions(softmax("Hardmax", data({300, 768}, ++seed), -1));
  all_precisions(softmax("Hardmax", ties({3, 16001}), -1));
  // Rows longer than 16384 values have no Hardmax kernel: the CPU runs them.
  expect_gpu_matches_cpu(softmax("Hardmax", ties({2, 40000}), -1), Precision::FP32, -1, false);
}
