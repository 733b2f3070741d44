// ai.fusec ExpertMatMul on CUDA against the CPU reference: both orientations of the experts'
// weights, rows read once or repeated per pick, a bias, int64 and int32 indices (negative ones
// counting from the end), sizes that are not multiples of a warp, a block or a tile, at fp32, fp16
// and bf16; the grouped GEMM on tensor cores and on FMA tiles, and the per-row kernels, with
// routings that leave experts empty or give one expert many tiles. Bad indices:
// test_device_errors_gpu.cpp.
#include "gpu_test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

OpCase expert_case(bool trans, int64_t repeat, bool bias, DType index_type, int64_t n, int64_t k, int64_t m,
                   int64_t experts) {
  OpCase c;
  c.op = "ExpertMatMul";
  c.domain = "ai.fusec";
  c.inputs = {random_tensor(DType::Float32, {n, k}, 1),
              random_tensor(DType::Float32,
                            trans ? std::vector<int64_t>{experts, m, k} : std::vector<int64_t>{experts, k, m}, 2),
              random_tensor(index_type, {n * repeat}, 3, static_cast<double>(-experts), static_cast<double>(experts))};
  c.constant = {1};
  if (bias) {
    c.inputs.push_back(random_tensor(DType::Float32, {experts, m}, 4));
    c.constant.insert(3);
  }
  c.attrs = {attr("trans_w", int64_t{trans}), attr("repeat", repeat)};
  return c;
}

}  // namespace

TEST(GpuExpertMatMul, BothOrientationsRepeatsBiasAndEveryPrecision) {
  FUSEC_REQUIRE_GPU();
  for (bool trans : {true, false})
    for (int64_t repeat : {1, 2})
      for (bool bias : {false, true})
        for (DType it : {DType::Int64, DType::Int32}) {
          SCOPED_TRACE(std::string(trans ? "W[e] [M, K]" : "W[e] [K, M]") + ", repeat " + std::to_string(repeat) +
                       (bias ? ", bias, " : ", ") + dtype_name(it));
          const OpCase c = expert_case(trans, repeat, bias, it, 7, 37, 45, 5);
          expect_gpu_matches_cpu(c, Precision::FP32, 1e-5, true, "ExpertMatMul");
          expect_gpu_matches_cpu(c, Precision::FP16);
          expect_gpu_matches_cpu(c, Precision::BF16);
        }
}

TEST(GpuExpertMatMul, LongRowsAndWideOutputs) {
  FUSEC_REQUIRE_GPU();
  // K past a warp's many strides, M past a block, more rows than experts.
  for (bool trans : {true, false}) {
    SCOPED_TRACE(trans ? "W[e] [M, K]" : "W[e] [K, M]");
    const OpCase c = expert_case(trans, 2, true, DType::Int64, 33, 1000, 700, 8);
    expect_gpu_matches_cpu(c, Precision::FP32, 1e-5);
    expect_gpu_matches_cpu(c, Precision::FP16);
  }
}

TEST(GpuExpertMatMul, GroupedByExpertOnTensorCores) {
  FUSEC_REQUIRE_GPU();
  // K a multiple of 8 but not of the 32-wide K tile, M past one 64-column block and not a multiple
  // of it, about 75 rows an expert: the 64 x 64 tile (two a expert, the second partial).
  for (bool trans : {true, false})
    for (bool bias : {false, true}) {
      SCOPED_TRACE(std::string(trans ? "W[e] [M, K]" : "W[e] [K, M]") + (bias ? ", bias" : ""));
      const OpCase c = expert_case(trans, 2, bias, DType::Int64, 300, 200, 136, 8);
      expect_gpu_matches_cpu(c, Precision::FP16, -1, true, "grouped");
      expect_gpu_matches_cpu(c, Precision::BF16, -1, true, "grouped");
      // 200 rows an expert: the 128 x 128 tile (two a expert, the second partial; a column block
      // partly past M).
      const OpCase big = expert_case(trans, 1, bias, DType::Int64, 600, 200, 136, 3);
      expect_gpu_matches_cpu(big, Precision::FP16, -1, true, "grouped");
      expect_gpu_matches_cpu(big, Precision::BF16, -1, true, "grouped");
    }
  // W stored [E, M, K] takes any M: 45 outputs, a column block mostly past the edge.
  expect_gpu_matches_cpu(expert_case(true, 1, true, DType::Int32, 70, 40, 45, 3), Precision::FP16, -1, true, "grouped");
  // Without trans_w, M must be a multiple of 8 (whole 16-byte chunks) for tensor cores: 45 takes the
  // FMA tiles, as float32 does.
  expect_gpu_matches_cpu(expert_case(false, 1, true, DType::Int32, 70, 40, 45, 3), Precision::FP16, -1, true,
                         "FMA tiles");
}

TEST(GpuExpertMatMul, Float32GroupedOnFmaTilesAndThePerRowKernels) {
  FUSEC_REQUIRE_GPU();
  // Odd K and M, a K edge inside the 16-deep slice, about 40 rows an expert; then the same cases
  // with FUSEC_EXPERT_GROUPED=0 on the per-row kernels, which must agree.
  for (bool trans : {true, false}) {
    SCOPED_TRACE(trans ? "W[e] [M, K]" : "W[e] [K, M]");
    const OpCase c = expert_case(trans, 2, true, DType::Int64, 100, 37, 99, 5);
    expect_gpu_matches_cpu(c, Precision::FP32, 1e-5, true, "FMA tiles");
    expect_gpu_matches_cpu(c, Precision::FP16, -1, true, "FMA tiles");
    const ScopedEnv per_row("FUSEC_EXPERT_GROUPED", "0");
    expect_gpu_matches_cpu(c, Precision::FP32, 1e-5, true, trans ? "a warp an output" : "a thread a column");
    expect_gpu_matches_cpu(c, Precision::BF16, -1, true, trans ? "a warp an output" : "a thread a column");
  }
}

TEST(GpuExpertMatMul, GroupedRoutingsEmptyAndCrowdedExperts) {
  FUSEC_REQUIRE_GPU();
  // 6 experts: 0 and 4 picked by no row, 5 (given as -1) by 200 rows (four tiles), the rest by one
  // or two; rows of X repeated in pairs.
  const int64_t experts = 6, tokens = 103, k = 64, m = 72;
  std::vector<int64_t> picks;
  for (int64_t t = 0; t < tokens; ++t) {
    picks.push_back(t % 2 ? -1 : 5);
    picks.push_back(t == 3 ? 1 : t == 50 ? 2 : t == 51 ? 2 : t == 90 ? 3 : (t % 2 ? 5 : -1));
  }
  for (bool trans : {true, false}) {
    SCOPED_TRACE(trans ? "W[e] [M, K]" : "W[e] [K, M]");
    OpCase c = expert_case(trans, 2, true, DType::Int64, tokens, k, m, experts);
    c.inputs[2] = Tensor::from_int64(picks, {tokens * 2});
    expect_gpu_matches_cpu(c, Precision::FP16, -1, true, "grouped");
    expect_gpu_matches_cpu(c, Precision::BF16, -1, true, "grouped");
    expect_gpu_matches_cpu(c, Precision::FP32, 1e-5, true, "FMA tiles");
    // 2 experts, 260 rows, all on expert 1: the 128-row tile, three of one expert, none of the other.
    OpCase one = expert_case(trans, 2, true, DType::Int64, 130, k, m, 2);
    one.inputs[2] = Tensor::from_int64(std::vector<int64_t>(260, 1), {260});
    expect_gpu_matches_cpu(one, Precision::FP16, -1, true, "grouped");
  }
}
