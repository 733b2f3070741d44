// verify_equivalence / compare_outputs: what the optimizer's numerical check reports. An output
// that is NaN or infinite everywhere in the original compared nothing and must not pass (unless
// integer inputs as 0/1 make it finite: a mask); NaN matching NaN where other elements are finite
// still passes; a real difference is a mismatch.
#include <cmath>
#include <limits>

#include "passes/infer_shapes.h"
#include "passes/verify.h"
#include "test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

/// softmax((1 - float(m)) * scale) over 8 keys, m an int64 [2, 8] input. With scale = float's
/// lowest, as transformers builds its extended mask, every row holds +inf on random values in
/// [0, 64) (m >= 2) and the softmax is NaN everywhere; with -10000 every value is finite. With
/// `squared`, float(m·m): the graph also does integer arithmetic on m, so m is not a pure mask
/// (mask_input) and is drawn in [0, 64) first.
std::unique_ptr<Graph> mask_softmax(float scale, bool squared = false) {
  GraphBuilder b(17);
  Value* m = b.input("attention_mask", DType::Int64, {2, 8});
  Value* one = b.initializer("one", Tensor::from_float({1.0f}, {}));
  Value* s = b.initializer("scale", Tensor::from_float({scale}, {}));
  if (squared) m = b.node("Mul", {m, m}, {}, "square");
  Value* f = b.node("Cast", {m}, {attr("to", int64_t{1})}, "cast");
  Value* inv = b.node("Sub", {one, f}, {}, "sub");
  Value* mask = b.node("Mul", {inv, s}, {}, "mul");
  b.output(b.node("Softmax", {mask}, {attr("axis", int64_t{-1})}, "softmax"));
  auto g = b.build();
  infer_shapes(*g);
  return g;
}

/// Gather(table [rows, 4], positions) with positions = CumSum(ids) over an int64 [2, 8] input, as
/// OPT builds its positions from the attention mask: random ids in [0, 64) run past a table of
/// 9 rows (the original model refuses them), ids in {0, 1} stay inside it. A table of 2 rows is
/// past even for 0/1 ids.
std::unique_ptr<Graph> positions_from_mask(int64_t rows) {
  GraphBuilder b(17);
  Value* m = b.input("attention_mask", DType::Int64, {2, 8});
  Value* axis = b.initializer("axis", Tensor::from_int64({1}, {}));
  Value* pos = b.node("CumSum", {m, axis}, {}, "cumsum");
  std::vector<float> t(static_cast<size_t>(rows * 4));
  for (size_t i = 0; i < t.size(); ++i) t[i] = 0.25f * static_cast<float>(i);
  Value* table = b.initializer("table", Tensor::from_float(t, {rows, 4}));
  b.output(b.node("Gather", {table, pos}, {attr("axis", int64_t{0})}, "positions"));
  auto g = b.build();
  infer_shapes(*g);
  return g;
}

}  // namespace

// Random ints in [0, 64) index past the model's own table: the original refuses them, so the check
// runs on 0/1 ints (masks), which it takes, instead of failing optimize with the model's error.
TEST(Verify, InputsTheOriginalRefusesRetryWithBinaryIntegers) {
  auto g = positions_from_mask(9);
  VerifyResult r = verify_equivalence(*g, *g, 2, 7, {});
  ASSERT_EQ(r.outputs.size(), 1u);
  EXPECT_TRUE(r.binary_ints);
  EXPECT_TRUE(r.ok) << r.outputs[0].problem;
  EXPECT_EQ(r.outputs[0].elements, 2 * 2 * 8 * 4);
}

// Refused both ways: not verified, and the problem names the model's own error.
TEST(Verify, InputsRefusedEitherWayAreNotVerified) {
  auto g = positions_from_mask(2);
  VerifyResult r = verify_equivalence(*g, *g, 2, 7, {});
  ASSERT_EQ(r.outputs.size(), 1u);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.outputs[0].problem.find("refuses the random inputs"), std::string::npos) << r.outputs[0].problem;
  EXPECT_NE(r.outputs[0].problem.find("0/1 ones"), std::string::npos) << r.outputs[0].problem;
  EXPECT_NE(r.outputs[0].problem.find("--no-check"), std::string::npos) << r.outputs[0].problem;
}

// A (1 - m·m)·finfo.min mask on random ints in [0, 64) makes the original NaN everywhere; the
// check runs again with the integer inputs as 0/1, which a mask means, and compares real values.
TEST(Verify, MaskOverflowRetriesWithBinaryIntegers) {
  auto g = mask_softmax(std::numeric_limits<float>::lowest(), true);
  EXPECT_FALSE(mask_input(*g->inputs[0]));
  VerifyResult r = verify_equivalence(*g, *g, 2, 7, {});
  ASSERT_EQ(r.outputs.size(), 1u);
  EXPECT_TRUE(r.binary_ints);
  EXPECT_TRUE(r.mask_inputs.empty());
  EXPECT_TRUE(r.ok) << r.outputs[0].problem;
  EXPECT_EQ(r.outputs[0].elements, 2 * 16);
  EXPECT_GT(r.outputs[0].finite_original, 0);
}

// An integer input the graph reads only as a float value (through views, then a Cast) is a mask:
// drawn 0/1 in every run, so its (1 - m)·finfo.min mask is finite from the first run, and the
// report names it. One read as an index (OPT's positions) or through integer arithmetic is not.
TEST(Verify, InputsReadOnlyAsFloatValuesAreDrawnAsMasks) {
  auto g = mask_softmax(std::numeric_limits<float>::lowest());
  EXPECT_TRUE(mask_input(*g->inputs[0]));
  VerifyResult r = verify_equivalence(*g, *g, 2, 7, {});
  ASSERT_EQ(r.outputs.size(), 1u);
  EXPECT_FALSE(r.binary_ints);
  EXPECT_EQ(r.mask_inputs, std::vector<std::string>{"attention_mask"});
  EXPECT_TRUE(r.ok) << r.outputs[0].problem;
  EXPECT_EQ(r.outputs[0].finite_original, 2 * 2 * 8);
  for (const Tensor& t : random_inputs(*g, 3))
    for (int64_t i = 0; i < t.numel(); ++i) EXPECT_LE(t.data<int64_t>()[i], 1);
  EXPECT_FALSE(mask_input(*positions_from_mask(9)->inputs[0]));
}

// x·inf − x·inf is NaN for every x: nothing to compare, whatever the inputs, so not verified.
TEST(Verify, AllNanOriginalComparesNothingAndFails) {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {2, 8});
  Value* inf = b.initializer("inf", Tensor::from_float({std::numeric_limits<float>::infinity()}, {}));
  Value* p = b.node("Mul", {x, inf}, {}, "mul");
  b.output(b.node("Sub", {p, p}, {}, "sub"));
  auto g = b.build();
  infer_shapes(*g);
  VerifyResult r = verify_equivalence(*g, *g, 2, 7, {});
  ASSERT_EQ(r.outputs.size(), 1u);
  EXPECT_FALSE(r.binary_ints);
  EXPECT_TRUE(r.outputs[0].nothing_compared());
  EXPECT_FALSE(r.outputs[0].ok);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.outputs[0].problem.find("nothing compared"), std::string::npos) << r.outputs[0].problem;
  EXPECT_EQ(r.outputs[0].finite_original, 0);
}

TEST(Verify, FiniteOriginalPassesAndCountsWhatItCompared) {
  auto g = mask_softmax(-10000.0f);
  VerifyResult r = verify_equivalence(*g, *g, 3, 7, {});
  EXPECT_TRUE(r.ok) << r.outputs[0].problem;
  EXPECT_FALSE(r.binary_ints);
  EXPECT_FALSE(r.outputs[0].nothing_compared());
  EXPECT_EQ(r.outputs[0].finite_original, 3 * 16);
}

TEST(Verify, NanWhereBothAreNanStillComparesTheRest) {
  Tensor want = Tensor::from_float({1.0f, std::nanf(""), 3.0f}, {3});
  Tensor same = Tensor::from_float({1.0f, std::nanf(""), 3.0f}, {3});
  OutputCheck c{"y"};
  compare_outputs(same, want, {}, c);
  EXPECT_TRUE(c.ok);
  EXPECT_EQ(c.finite_original, 2);
  EXPECT_FALSE(c.nothing_compared());
  Tensor off = Tensor::from_float({1.0f, std::nanf(""), 3.5f}, {3});
  OutputCheck d{"y"};
  compare_outputs(off, want, {}, d);
  EXPECT_FALSE(d.ok);
  EXPECT_DOUBLE_EQ(d.max_abs, 0.5);
  Tensor nan_where_finite = Tensor::from_float({1.0f, std::nanf(""), std::nanf("")}, {3});
  OutputCheck e{"y"};
  compare_outputs(nan_where_finite, want, {}, e);
  EXPECT_FALSE(e.ok);
}

TEST(Verify, ElementsNearZeroOfALargeOutputCarryItsScalesRounding) {
  // An output of magnitude 5: an element near zero off by 1.5e-5 (3e-6 of the scale) is float32
  // rounding the fused model moved, within max(atol, rtol / 10 * 5) = 5e-5.
  Tensor want = Tensor::from_float({5.0f, -4.0f, 1e-4f, 0.0f}, {4});
  Tensor got = Tensor::from_float({5.0f, -4.0f, 1e-4f + 1.5e-5f, -1.5e-5f}, {4});
  OutputCheck c{"flow"};
  compare_outputs(got, want, {}, c);
  EXPECT_TRUE(c.ok);
  // Twice the floor is beyond it.
  Tensor far = Tensor::from_float({5.0f, -4.0f, 1e-4f, 1e-4f}, {4});
  OutputCheck d{"flow"};
  compare_outputs(far, want, {}, d);
  EXPECT_FALSE(d.ok);
  // An output of magnitude 1 keeps atol: the same 1.5e-5 near zero is a mismatch.
  Tensor unit = Tensor::from_float({1.0f, -0.5f, 0.0f}, {3});
  Tensor unit_off = Tensor::from_float({1.0f, -0.5f, 1.5e-5f}, {3});
  OutputCheck e{"probs"};
  compare_outputs(unit_off, unit, {}, e);
  EXPECT_FALSE(e.ok);
  // A non-finite original does not set the scale.
  Tensor inf_want = Tensor::from_float({INFINITY, 1.0f, 0.0f}, {3});
  Tensor inf_got = Tensor::from_float({INFINITY, 1.0f, 1.5e-5f}, {3});
  OutputCheck f{"y"};
  compare_outputs(inf_got, inf_want, {}, f);
  EXPECT_FALSE(f.ok);
}
