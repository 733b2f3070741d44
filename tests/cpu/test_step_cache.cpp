// What the CPU executor keeps from one run of a step to the next (backend/cpu/kernel.h's
// StepCache): constant weights packed once for the GEMM. Kept or not, a run must give the same
// bits. (An If's kept branches: tests/importer/test_control_flow.cpp.)
#include <cstdlib>
#include <cstring>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/gemm.h"
#include "ir/memory_limit.h"
#include "test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

/// Sets FUSEC_CPU_PACKED_WEIGHTS for one scope (each test runs in its own process under ctest).
class PackedSwitch {
 public:
  explicit PackedSwitch(const char* value) {
    if (value)
      setenv("FUSEC_CPU_PACKED_WEIGHTS", value, 1);
    else
      unsetenv("FUSEC_CPU_PACKED_WEIGHTS");
  }
  ~PackedSwitch() { unsetenv("FUSEC_CPU_PACKED_WEIGHTS"); }
};

/// Products with constant weights: a Conv, a grouped Conv and a ConvTranspose (which pack them per
/// call), a MatMul and a Gemm with a transposed B, alpha and a bias (which pack them once).
std::unique_ptr<Graph> weighted_graph() {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, Shape{Dim(2), Dim(6), Dim(9), Dim(9)});
  Value* y = b.input("y", DType::Float32, Shape{Dim(5), Dim(40)});
  const std::vector<int64_t> pad1 = {1, 1, 1, 1};
  b.output(b.node(
      "Conv", {x, b.initializer("w1", uniform_floats({16, 6, 3, 3}, 1)), b.initializer("b1", uniform_floats({16}, 2))},
      {attr("pads", pad1)}));
  b.output(b.node("Conv", {x, b.initializer("w2", uniform_floats({12, 3, 3, 3}, 3))},
                  {attr("group", int64_t{2}), attr("pads", pad1)}));
  b.output(b.node("ConvTranspose", {x, b.initializer("w3", uniform_floats({6, 4, 3, 3}, 4))},
                  {attr("strides", std::vector<int64_t>{2, 2})}));
  b.output(b.node("MatMul", {y, b.initializer("w4", uniform_floats({40, 70}, 5))}));
  b.output(b.node("Gemm",
                  {y, b.initializer("w5", uniform_floats({70, 40}, 6)), b.initializer("b5", uniform_floats({70}, 7))},
                  {attr("transB", int64_t{1}), attr("alpha", 0.5f), attr("beta", 2.0f)}));
  return b.build();
}

std::vector<Tensor> weighted_inputs() { return {uniform_floats({2, 6, 9, 9}, 11), uniform_floats({5, 40}, 12)}; }

/// What the MatMul and the Gemm pack, on this CPU's GEMM (the convs pack per call: see
/// packed_weight.h).
size_t expected_packed_bytes() {
  using P = cpu::PackedOperand<float>;
  return P::bytes_for(P::Side::B, 40, 70) + P::bytes_for(P::Side::B, 40, 70);
}

void expect_same_bits(const std::vector<Tensor>& got, const std::vector<Tensor>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].dims(), want[i].dims()) << "output " << i;
    EXPECT_TRUE(got[i].bytes_equal(want[i])) << "output " << i;
  }
}

}  // namespace

TEST(CpuStepCache, PackedWeightsGiveTheBitsOfPackingOnEveryCall) {
  auto g = weighted_graph();
  std::vector<Tensor> want;
  {
    PackedSwitch off("0");
    auto exe = cpu::CpuBackend().compile(*g);
    want = exe->run(weighted_inputs());
    EXPECT_EQ(exe->memory().packed_weight_bytes, 0u);
  }
  PackedSwitch on(nullptr);
  auto exe = cpu::CpuBackend().compile(*g);
  EXPECT_EQ(exe->memory().packed_weight_bytes, 0u) << "packed on first use, not at compile";
  expect_same_bits(exe->run(weighted_inputs()), want);  // packs
  EXPECT_EQ(exe->memory().packed_weight_bytes, expected_packed_bytes());
  expect_same_bits(exe->run(weighted_inputs()), want);  // reads what it packed
  EXPECT_EQ(exe->memory().packed_weight_bytes, expected_packed_bytes());
}

TEST(CpuStepCache, NoPackingWhereTheHostBudgetCannotHoldTheCopies) {
  auto g = weighted_graph();
  std::vector<Tensor> want;
  {
    PackedSwitch off("0");
    want = cpu::CpuBackend().compile(*g)->run(weighted_inputs());
  }
  MemoryBudget& host = host_memory();
  const size_t saved = host.limit();
  std::unique_ptr<Executable> exe;
  {
    // This graph has no intermediates to plan, so compiling needs no memory; half of what is
    // free (the copies' share) is then less than either weight's packed copy.
    host.set_limit(host.used() + 1024);
    exe = cpu::CpuBackend().compile(*g);
    host.set_limit(saved);
  }
  expect_same_bits(exe->run(weighted_inputs()), want);
  EXPECT_EQ(exe->memory().packed_weight_bytes, 0u);
}

TEST(CpuStepCache, WeightsThatAreGraphInputsAreNotKept) {
  // The same graph with its MatMul weight an input: each run's weight is used, not the first one's.
  GraphBuilder b(17);
  Value* y = b.input("y", DType::Float32, Shape{Dim(5), Dim(40)});
  Value* w = b.input("w", DType::Float32, Shape{Dim(40), Dim(70)});
  b.output(b.node("MatMul", {y, w}));
  auto g = b.build();
  auto exe = cpu::CpuBackend().compile(*g);
  const Tensor y0 = uniform_floats({5, 40}, 1);
  for (unsigned seed : {2u, 3u}) {
    const Tensor w0 = uniform_floats({40, 70}, seed);
    GraphBuilder r(17);
    Value* ry = r.input("y", DType::Float32, Shape{Dim(5), Dim(40)});
    r.output(r.node("MatMul", {ry, r.initializer("w", w0)}));
    auto rg = r.build();
    expect_same_bits(exe->run({y0, w0}), cpu::CpuBackend().compile(*rg)->run({y0}));
  }
  EXPECT_EQ(exe->memory().packed_weight_bytes, 0u);
}
