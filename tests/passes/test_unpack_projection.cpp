// unpack_projection: a projection viewed [B, S, G, C] and cut along C into Q, K and V becomes one
// projection per part with that part's columns of every group, the same numbers; the whole
// pipeline then packs them back into one product read by a 3-D Attention. GPT-NeoX's form (view,
// Transpose, Split of [H, 3·D]), CodeGen's (view as [mp, 3·E/mp], Split into Q, V and K, each
// viewed to its heads), BLOOM's ([H, 3, D], a Gather of each index) and Falcon's (multi-query:
// [H + 2, D] split along the heads into Q's H, then K's and V's one); a cut in two, a cut that
// leaves columns out, and a cut nothing attends over stay as they are.
#include "passes/unpack_projection.h"
#include "passes/pattern.h"
#include "passes/pipeline.h"
#include "pass_test_util.h"
#include "test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

constexpr int64_t kB = 2, kS = 5, kH = 4, kD = 4, kE = kH * kD;

enum class Form { NeoX, CodeGen, Bloom, Falcon, TwoParts, ColumnsLeftOut, NoAttention };

Value* shape_of(GraphBuilder& b, const std::string& n, std::vector<int64_t> d) {
  return b.initializer(n, int64s(d, {static_cast<int64_t>(d.size())}));
}

/// softmax(q·kᵀ / 2)·v over the heads of one projection of x, cut as `f` says; the output merged
/// back to [B, S, E].
std::unique_ptr<Graph> build(Form f) {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {kB, kS, kE});
  const int64_t width = f == Form::Falcon ? kE + 2 * kD : 3 * kE;
  Value* y = b.node("MatMul", {x, b.initializer("w", uniform_floats({kE, width}, 1))}, {}, "qkv_proj");
  if (f != Form::CodeGen) y = b.node("Add", {y, b.initializer("bias", uniform_floats({width}, 2))}, {}, "qkv_bias");
  Value *q = nullptr, *k = nullptr, *v = nullptr;
  auto split = [&](Value* t, std::vector<int64_t> sizes, int64_t axis, const std::string& n) {
    return b.node_n("Split", {t, b.initializer(n + "_sizes", int64s(sizes, {static_cast<int64_t>(sizes.size())}))},
                    sizes.size(), {attr("axis", axis)}, n);
  };
  const std::vector<int64_t> perm = {0, 2, 1, 3};
  if (f == Form::Bloom) {
    Value* grouped = b.node("Reshape", {y, shape_of(b, "bloom_view", {kB, kS, kH, 3, kD})}, {}, "view");
    auto pick = [&](int64_t i, const std::string& n) {
      Value* p =
          b.node("Gather", {grouped, b.initializer(n + "_index", int64s({i}, {}))}, {attr("axis", int64_t{3})}, n);
      return b.node("Transpose", {p}, {attr("perm", perm)}, n + "_bhsd");
    };
    q = pick(0, "q");
    k = pick(1, "k");
    v = pick(2, "v");
  } else if (f == Form::Falcon) {
    Value* grouped = b.node("Reshape", {y, shape_of(b, "falcon_view", {kB, kS, kH + 2, kD})}, {}, "view");
    auto parts = split(grouped, {kH, 1, 1}, 2, "qkv");
    q = b.node("Transpose", {parts[0]}, {attr("perm", perm)}, "q_bhsd");
    k = b.node("Transpose", {parts[1]}, {attr("perm", perm)}, "k_bhsd");  // one head, broadcast
    v = b.node("Transpose", {parts[2]}, {attr("perm", perm)}, "v_bhsd");
  } else if (f == Form::CodeGen) {
    // [B, S, mp = 2, 3·E/2], cut into Q, V, K of E/2 each, each viewed [B, S, H, D] (2 heads per group).
    Value* grouped = b.node("Reshape", {y, shape_of(b, "mp_view", {kB, kS, 2, 3 * kE / 2})}, {}, "mp_view");
    auto parts = split(grouped, {kE / 2, kE / 2, kE / 2}, -1, "qvk");
    auto heads = [&](Value* p, const std::string& n) {
      Value* r = b.node("Reshape", {p, shape_of(b, n + "_heads_shape", {kB, kS, kH, kD})}, {}, n + "_heads");
      return b.node("Transpose", {r}, {attr("perm", perm)}, n + "_bhsd");
    };
    q = heads(parts[0], "q");
    v = heads(parts[1], "v");
    k = heads(parts[2], "k");
  } else {
    // [B, S, H, 3·D] -> [B, H, S, 3·D], cut along the last axis.
    Value* grouped = b.node("Reshape", {y, shape_of(b, "heads", {kB, kS, kH, 3 * kD})}, {}, "view");
    grouped = b.node("Transpose", {grouped}, {attr("perm", perm)}, "bhsd");
    auto cut = [&](int64_t from, int64_t to, const std::string& n) {
      return b.node(
          "Slice",
          {grouped, shape_of(b, n + "_from", {from}), shape_of(b, n + "_to", {to}), shape_of(b, n + "_axis", {3})}, {},
          n);
    };
    if (f == Form::TwoParts) {  // Q, then K and V together, cut again below
      q = cut(0, kD, "q");
      Value* kv = cut(kD, 3 * kD, "kv");
      k = b.node("Slice", {kv, shape_of(b, "k_from", {0}), shape_of(b, "k_to", {kD}), shape_of(b, "k_axis", {3})}, {},
                 "k");
      v = b.node("Slice", {kv, shape_of(b, "v_from", {kD}), shape_of(b, "v_to", {2 * kD}), shape_of(b, "v_axis", {3})},
                 {}, "v");
    } else if (f == Form::ColumnsLeftOut) {  // V's last two columns unused
      q = cut(0, kD, "q");
      k = cut(kD, 2 * kD, "k");
      v = cut(2 * kD, 3 * kD - 2, "v");
    } else {
      auto parts = split(grouped, {kD, kD, kD}, 3, "qkv");
      q = parts[0];
      k = parts[1];
      v = parts[2];
    }
  }
  Value* kt = b.node("Transpose", {k}, {attr("perm", std::vector<int64_t>{0, 1, 3, 2})}, "kt");
  Value* s = b.node("MatMul", {q, kt}, {}, "qk");
  s = b.node("Div", {s, b.initializer("root_d", floats({2.0f}, {}))}, {}, "scale");
  Value* p = f == Form::NoAttention ? b.node("Relu", {s}, {}, "not_softmax")
                                    : b.node("Softmax", {s}, {attr("axis", int64_t{-1})}, "softmax");
  Value* o = b.node("MatMul", {p, v}, {}, "pv");
  o = b.node("Transpose", {o}, {attr("perm", perm)}, "o_bshd");
  b.output(b.node("Reshape", {o, shape_of(b, "merged", {kB, kS, -1})}, {}, "merge"));
  return b.build();
}

}  // namespace

TEST(UnpackProjection, QkvCutPerHeadBecomesThreeProjections) {
  for (Form f : {Form::NeoX, Form::CodeGen, Form::Bloom, Form::Falcon}) {
    SCOPED_TRACE(static_cast<int>(f));
    Outcome o = run_one_pass<UnpackProjectionPass>(build(f));
    EXPECT_TRUE(o.changed);
    EXPECT_EQ(count(*o.optimized, "MatMul"), 3 + 2);  // three projections, Q·Kᵀ and P·V
    EXPECT_EQ(count(*o.optimized, "Split"), 0);
    EXPECT_EQ(count(*o.optimized, "Gather"), 0);
    EXPECT_EQ(count(*o.optimized, "Add"), f == Form::CodeGen ? 0 : 3);
    expect_same_numbers(*o.original, *o.optimized, 61);
    if (f == Form::Falcon) continue;  // K and V broadcast over the heads: not this test's attention

    PipelineOutcome r = run_full_pipeline(build(f));
    EXPECT_EQ(count_any_domain(*r.optimized, "Attention"), 1);
    for (const auto& n : r.optimized->nodes())
      if (n->op_type == "Attention") {
        ASSERT_GE(n->inputs.size(), 3u);
        EXPECT_EQ(n->inputs[1], nullptr);  // packed QKV: K and V read from Q's tensor
        EXPECT_EQ(n->inputs[2], nullptr);
      }
    EXPECT_EQ(count(*r.optimized, "Split"), 0);
    EXPECT_EQ(count(*r.optimized, "Transpose"), 0);
    expect_same_numbers(*r.original, *r.optimized, 62);
  }
}

TEST(UnpackProjection, OtherCutsStay) {
  for (Form f : {Form::TwoParts, Form::ColumnsLeftOut, Form::NoAttention}) {
    SCOPED_TRACE(static_cast<int>(f));
    Outcome o = run_one_pass<UnpackProjectionPass>(build(f));
    EXPECT_FALSE(o.changed);
    expect_unchanged(*o.original, *o.optimized);
  }
}
