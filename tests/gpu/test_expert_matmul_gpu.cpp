// ai.fusec ExpertMatMul on CUDA against the CPU reference: both orientations of the experts'
// weights (a warp an output along W's rows; a thread a column), rows read once or repeated per
// pick, a bias, int64 and int32 indices (negative ones counting from the end), sizes that are not
// multiples of a warp or a block, at fp32, fp16 and bf16. Bad indices: test_device_errors_gpu.cpp.
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
