// fuse_expert_matmul: a mixture of experts' product of weights gathered per row -> ai.fusec
// ExpertMatMul with the same numbers, in both exporters' forms (Gather or GatherND, either operand
// order, the token repetition by Expand or Tile, a bias picked by the same index); a computed
// weight is left alone with a near-miss. And the op itself: a bad index is an error naming the node.
#include "backend/cpu/cpu_backend.h"
#include "passes/fuse_expert_matmul.h"

#include "pass_test_util.h"
#include "test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

Outcome run_pass(std::unique_ptr<Graph> g, PassOptions opts = {}) {
  return run_one_pass<FuseExpertMatMulPass>(std::move(g), opts);
}

constexpr int64_t T = 6, K = 8, E = 4, M = 5, Top = 2;

struct Moe {
  bool gather_nd = false;  // GatherND(W, idx [S, 1]) as the dynamo export picks (else Gather axis 0)
  bool trans = true;       // W [E, M, K] and W[idx] · x (else W [E, K, M] and x · W[idx])
  bool tile = false;       // repeat by Tile + Flatten (legacy) instead of Expand + Reshape (dynamo)
  bool bias = false;       // + B[idx]
  bool computed_weight = false;
};

/// Router, top-2 picks, and one expert projection of each token's two picks, as batched_mm
/// exports it: tokens x [T, K], rows [T·2, K], picked weights [T·2, ., .], output [T·2, M].
std::unique_ptr<Graph> moe(const Moe& o = {}) {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {T, K});
  Value* logits = b.node("MatMul", {x, b.initializer("wr", uniform_floats({K, E}, 1))}, {}, "router");
  std::vector<Value*> top =
      b.node_n("TopK", {logits, b.initializer("k", int64s({Top}, {1}))}, 2, {attr("axis", int64_t{-1})}, "topk");
  Value* idx = b.node("Reshape", {top[1], b.initializer("flat", int64s({-1}, {1}))}, {}, "idx");
  Value* unit = b.node("Unsqueeze", {x, b.initializer("ax1", int64s({1}, {1}))}, {}, "unit");
  Value* rows;
  if (o.tile) {
    Value* tiled = b.node("Tile", {unit, b.initializer("reps", int64s({1, Top, 1}, {3}))}, {}, "tile");
    rows = b.node("Flatten", {tiled}, {attr("axis", int64_t{2})}, "merge");
  } else {
    Value* wide = b.node("Expand", {unit, b.initializer("wide", int64s({T, Top, K}, {3}))}, {}, "expand");
    rows = b.node("Reshape", {wide, b.initializer("rows", int64s({T * Top, K}, {2}))}, {}, "merge");
  }
  const std::vector<int64_t> wdims = o.trans ? std::vector<int64_t>{E, M, K} : std::vector<int64_t>{E, K, M};
  Value* w =
      o.computed_weight ? b.input("w", DType::Float32, shape_of(wdims)) : b.initializer("w", uniform_floats(wdims, 2));
  auto pick = [&](Value* table, const std::string& name) {
    if (!o.gather_nd) return b.node("Gather", {table, idx}, {attr("axis", int64_t{0})}, name);
    Value* tuples = b.node("Unsqueeze", {idx, b.initializer(name + ".ax", int64s({1}, {1}))}, {}, name + ".tuples");
    return b.node("GatherND", {table, tuples}, {}, name);
  };
  Value* picked = pick(w, "pick");
  Value* p;
  Value* y;
  if (o.trans) {
    Value* col = b.node("Unsqueeze", {rows, b.initializer("ax2", int64s({2}, {1}))}, {}, "col");
    p = b.node("MatMul", {picked, col}, {}, "bmm");
    y = b.node("Squeeze", {p, b.initializer("sq2", int64s({2}, {1}))}, {}, "squeeze");
  } else {
    Value* row = b.node("Unsqueeze", {rows, b.initializer("ax1b", int64s({1}, {1}))}, {}, "row");
    p = b.node("MatMul", {row, picked}, {}, "bmm");
    y = b.node("Squeeze", {p, b.initializer("sq1", int64s({1}, {1}))}, {}, "squeeze");
  }
  if (o.bias) y = b.node("Add", {y, pick(b.initializer("bias", uniform_floats({E, M}, 3)), "pick_bias")}, {}, "add");
  b.output(y);
  return b.build();
}

}  // namespace

TEST(FuseExpertMatMul, EveryExportFormBecomesOneNodeWithTheSameNumbers) {
  for (bool nd : {false, true})
    for (bool trans : {true, false})
      for (bool tile : {false, true})
        for (bool bias : {false, true}) {
          SCOPED_TRACE(std::string(nd ? "GatherND" : "Gather") + (trans ? ", W[idx]·x" : ", x·W[idx]") +
                       (tile ? ", Tile" : ", Expand") + (bias ? ", bias" : ""));
          Moe o;
          o.gather_nd = nd;
          o.trans = trans;
          o.tile = tile;
          o.bias = bias;
          Outcome r = run_pass(moe(o));
          EXPECT_TRUE(r.changed);
          ASSERT_EQ(count(*r.optimized, "ExpertMatMul", "ai.fusec"), 1);
          const Node* em = find_op(*r.optimized, "ExpertMatMul");
          EXPECT_EQ(em->attr_int("trans_w", 0), trans ? 1 : 0);
          EXPECT_EQ(em->attr_int("repeat", 1), Top);
          EXPECT_EQ(em->input(0)->name, "x");  // the tokens, not their repeated rows
          EXPECT_EQ(em->input(1)->name, "w");
          EXPECT_EQ(em->input(2)->producer->name, "idx");  // the flat index, not its [S, 1] view
          EXPECT_EQ(em->inputs.size(), bias ? 4u : 3u);
          EXPECT_EQ(count(*r.optimized, "MatMul"), 1);  // the router's
          EXPECT_EQ(count(*r.optimized, nd ? "GatherND" : "Gather"), 0);
          expect_same_numbers(*r.original, *r.optimized, 5);
        }
}

TEST(FuseExpertMatMul, ComputedWeightsAreLeftAlone) {
  Moe o;
  o.computed_weight = true;
  expect_near_miss(run_pass(moe(o)), "fuse_expert_matmul", "not a constant");
}

TEST(FuseExpertMatMul, AnIndexOutOfRangeIsAnErrorNamingTheNode) {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {2, 3});
  Value* w = b.initializer("w", uniform_floats({2, 4, 3}, 1));
  Value* idx = b.input("idx", DType::Int64, {2});
  b.output(b.node_n("ExpertMatMul", {x, w, idx}, 1, {attr("trans_w", int64_t{1})}, "experts", "ai.fusec")[0]);
  auto g = b.build();
  infer_shapes(*g);
  auto exe = cpu::CpuBackend().compile(*g);
  const Tensor xs = uniform_floats({2, 3}, 2);
  // In range, negative counting from the end: row 0 takes expert 1, row 1 expert 0.
  std::vector<Tensor> out = exe->run({xs, int64s({-1, 0}, {2})});
  ASSERT_EQ(out[0].dims(), (std::vector<int64_t>{2, 4}));
  const float* wp = w->initializer->data<float>();
  for (int64_t m = 0; m < 4; ++m) {
    float want = 0;
    for (int64_t q = 0; q < 3; ++q) want += wp[(1 * 4 + m) * 3 + q] * xs.data<float>()[q];
    EXPECT_NEAR(out[0].data<float>()[m], want, 1e-5);
  }
  try {
    exe->run({xs, int64s({0, 2}, {2})});
    FAIL() << "index 2 of 2 experts ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("experts"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("index 2 is out of range for an axis of length 2"), std::string::npos)
        << e.what();
  }
}

TEST(FuseExpertMatMul, OneRowBroadcastAgainstEveryPickIsLeftAlone) {
  // W[idx] [S, M, K] · x [1, K, 1]: MatMul broadcasts the one row to every pick; ExpertMatMul
  // takes a row per pick.
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {1, K});
  Value* idx = b.input("idx", DType::Int64, {T});
  Value* picked = b.node("Gather", {b.initializer("w", uniform_floats({E, M, K}, 2)), idx}, {attr("axis", int64_t{0})});
  Value* col = b.node("Unsqueeze", {x, b.initializer("ax2", int64s({2}, {1}))});
  Value* p = b.node("MatMul", {picked, col});
  b.output(b.node("Squeeze", {p, b.initializer("sq2", int64s({2}, {1}))}));
  expect_near_miss(run_pass(b.build()), "fuse_expert_matmul", "not one to one");
}
