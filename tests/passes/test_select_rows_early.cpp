// select_rows_early: a constant selection of rows moves above the row-wise ops that feed it (an
// encoder block's tail in front of a [CLS] Gather, a last-token Slice, a Gemm with per-row C), the
// numbers stay the same, and each op it must stop at stops it with the reason.
#include "passes/select_rows_early.h"

#include "passes/pattern.h"
#include "pass_test_util.h"
#include "test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

Outcome run_pass(std::unique_ptr<Graph> g) { return run_one_pass<SelectRowsEarlyPass>(std::move(g)); }

void expect_same_numbers(const Outcome& o) { fusec::test::expect_same_numbers(*o.original, *o.optimized, 7); }

constexpr int64_t kB = 2, kS = 5, kE = 8, kF = 16;

/// The tail of a pre-LN encoder block and its classifier, on tokens [kB, kS, kE]:
///   x1 = a + x;  y = x1 + W2·relu(W1·LN2(x1) + b1) + b2;  out = head(LN(y)[select])
struct Encoder {
  GraphBuilder b;
  Value* x;
  Value* a;
  explicit Encoder(int64_t opset = 17) : b(opset) {
    x = b.input("x", DType::Float32, {kB, kS, kE});
    a = b.input("a", DType::Float32, {kB, kS, kE});
  }
  Value* ln(Value* v, const std::string& name, int64_t axis = -1) {
    Value* g = b.initializer(name + ".gamma", uniform_floats({kE}, 3));
    Value* be = b.initializer(name + ".beta", uniform_floats({kE}, 4));
    return b.node("LayerNormalization", {v, g, be}, {attr("axis", axis)}, name);
  }
  Value* linear(Value* v, int64_t in, int64_t out, const std::string& name, unsigned seed) {
    Value* w = b.initializer(name + ".weight", uniform_floats({in, out}, seed));
    Value* bias = b.initializer(name + ".bias", uniform_floats({out}, seed + 1));
    return b.node("Add", {b.node("MatMul", {v, w}, {}, name + ".matmul"), bias}, {}, name + ".add");
  }
  /// The block's output y [kB, kS, kE].
  Value* block() {
    Value* x1 = b.node("Add", {a, x}, {}, "residual1");
    Value* f = b.node("Relu", {linear(ln(x1, "ln2"), kE, kF, "fc1", 10)}, {}, "act");
    return b.node("Add", {linear(f, kF, kE, "fc2", 20), x1}, {}, "residual2");
  }
  void head(Value* rows) {
    Value* w = b.initializer("head.weight", uniform_floats({kE, 3}, 30));
    b.output(b.node("MatMul", {rows, w}, {}, "head"));
  }
};

/// One Gather/Slice is left, on the first residual's sum: the Add of two graph inputs above it
/// leads to no op whose work the selection would cut. Every op between it and the head sees
/// `rows` rows on axis 1.
void expect_selected_after_first_residual(const Graph& g, const std::string& op, int64_t rows) {
  int selections = 0;
  for (const auto& n : g.nodes()) {
    if (n->op_type == op) {
      ++selections;
      ASSERT_TRUE(n->input(0)->producer) << n->name;
      EXPECT_EQ(n->input(0)->producer->name, "residual1") << n->name;
    }
    if (n->op_type == "LayerNormalization" || n->op_type == "Relu") {
      const Shape* s = known_rank(n->outputs[0]);
      ASSERT_TRUE(s && s->size() == 3) << n->name;
      EXPECT_EQ((*s)[1], Dim(rows)) << n->name;
    }
  }
  EXPECT_EQ(selections, 1) << "the two that the residual's branches brought to x1, merged";
}

}  // namespace

TEST(SelectRowsEarly, ClassTokenGatherMovesAboveTheEncoderTail) {
  Encoder e;
  Value* idx = e.b.initializer("cls", int64s({0}, {}));
  e.head(e.b.node("Gather", {e.ln(e.block(), "ln_final"), idx}, {attr("axis", int64_t{1})}, "cls_token"));
  Outcome o = run_pass(e.b.build());
  EXPECT_TRUE(o.changed);
  expect_same_numbers(o);
  expect_selected_after_first_residual(*o.optimized, "Gather", 1);
  // The scalar index dropped the axis; a Squeeze does that after the last moved op.
  ASSERT_EQ(count(*o.optimized, "Squeeze"), 1);
  const Node* sq = find_op(*o.optimized, "Squeeze");
  EXPECT_EQ(sq->input(0)->producer->name, "ln_final");
  EXPECT_EQ(constant_of(sq->input(1))->to_int64_vector(), (std::vector<int64_t>{1}));
  // The Gather that both of x1's readers brought back to it was merged into one, then moved on.
  bool merged = false;
  for (const auto& r : o.ctx.rewrites) merged |= r.what.find("merged") != std::string::npos;
  EXPECT_TRUE(merged);
  // Where it stopped, and why; while the first Gather at x1 waited for the other branch's, that
  // was not a near-miss.
  EXPECT_NE(find_near_miss(o.ctx.near_misses, "select_rows_early", "would compute fewer rows"), nullptr);
  EXPECT_EQ(find_near_miss(o.ctx.near_misses, "select_rows_early", "read by 2"), nullptr);
  // Every op kept its name, for the profiler.
  for (const char* name : {"residual2", "ln2", "fc1.matmul", "fc1.add", "act", "ln_final"})
    EXPECT_NE(node_named(*o.optimized, name), nullptr) << name;
}

TEST(SelectRowsEarly, LastTokenSliceAndIndexListsMoveToo) {
  {
    SCOPED_TRACE("Slice [-1:] on axis 1");
    Encoder e;
    Value* y = e.ln(e.block(), "ln_final");
    Value* s = e.b.node("Slice",
                        {y, e.b.initializer("st", int64s({-1}, {1})), e.b.initializer("en", int64s({kS}, {1})),
                         e.b.initializer("ax", int64s({1}, {1}))},
                        {}, "last");
    e.head(s);
    Outcome o = run_pass(e.b.build());
    EXPECT_TRUE(o.changed);
    expect_same_numbers(o);
    expect_selected_after_first_residual(*o.optimized, "Slice", 1);
    EXPECT_EQ(count(*o.optimized, "Squeeze"), 0);
  }
  {
    SCOPED_TRACE("Gather [0, 3] on axis -2");
    Encoder e;
    Value* y = e.ln(e.block(), "ln_final");
    e.head(e.b.node("Gather", {y, e.b.initializer("rows", int64s({0, -2}, {2}))}, {attr("axis", int64_t{-2})}, "two"));
    Outcome o = run_pass(e.b.build());
    EXPECT_TRUE(o.changed);
    expect_same_numbers(o);
    expect_selected_after_first_residual(*o.optimized, "Gather", 2);
  }
}

TEST(SelectRowsEarly, BeforeOpset13TheSqueezeTakesAnAttribute) {
  Encoder e(11);
  Value* y = e.b.node("Relu", {e.linear(e.x, kE, kE, "fc", 40)}, {}, "relu");
  e.head(e.b.node("Gather", {y, e.b.initializer("i", int64s({4}, {}))}, {attr("axis", int64_t{1})}, "pick"));
  Outcome o = run_pass(e.b.build());
  EXPECT_TRUE(o.changed);
  expect_same_numbers(o);
  const Node* sq = find_op(*o.optimized, "Squeeze");
  ASSERT_TRUE(sq);
  EXPECT_EQ(sq->num_present_inputs(), 1u);
  EXPECT_EQ(sq->attr_ints("axes"), (std::vector<int64_t>{1}));
}

TEST(SelectRowsEarly, GemmRowsTakeTheirRowsOfC) {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {6, 4});
  Value* c = b.input("c", DType::Float32, {6, 3});
  Value* y =
      b.node("Gemm", {x, b.initializer("w", uniform_floats({3, 4}, 5)), c}, {attr("transB", int64_t{1})}, "gemm");
  b.output(
      b.node("Slice", {y, b.initializer("st", int64s({1}, {1})), b.initializer("en", int64s({3}, {1}))}, {}, "rows"));
  Outcome o = run_pass(b.build());
  EXPECT_TRUE(o.changed);
  expect_same_numbers(o);
  const Node* g = find_op(*o.optimized, "Gemm");
  ASSERT_TRUE(g);
  EXPECT_EQ(g->input(0)->producer->op_type, "Slice");
  EXPECT_EQ(g->input(2)->producer->op_type, "Slice");
  EXPECT_EQ(g->attr_int("transB", 0), 1);
}

TEST(SelectRowsEarly, ReshapesThatRegroupRowsAreCrossed) {
  // torchvision's attention output: [B, S, E] flattened to [B·S, E] for the projection's Gemm, then
  // back to [B, S, F] for the residual: the [CLS] rows are rows b·S of the Gemm.
  GraphBuilder b(17);
  Value* a = b.input("a", DType::Float32, {kB, kS, kE});
  Value* flat = b.node("Reshape", {a, b.initializer("to2", int64s({kB * kS, kE}, {2}))}, {}, "flatten");
  Value* proj = b.node(
      "Gemm", {flat, b.initializer("w", uniform_floats({kF, kE}, 5)), b.initializer("bias", uniform_floats({kF}, 6))},
      {attr("transB", int64_t{1})}, "out_proj");
  Value* back = b.node("Reshape", {proj, b.initializer("to3", int64s({kB, kS, kF}, {3}))}, {}, "unflatten");
  Value* sum = b.node("Add", {back, b.input("r", DType::Float32, {kB, kS, kF})}, {}, "residual");
  b.output(b.node("Gather", {sum, b.initializer("i", int64s({0}, {}))}, {attr("axis", int64_t{1})}, "cls"));
  Outcome o = run_pass(b.build());
  EXPECT_TRUE(o.changed);
  expect_same_numbers(o);
  // Above the Gemm it stops: the flatten's input is a graph input, and nothing more would shrink.
  const Node* proj_node = node_named(*o.optimized, "out_proj");
  ASSERT_TRUE(proj_node);
  const Node* g = proj_node->input(0)->producer;
  ASSERT_TRUE(g && g->op_type == "Gather");
  EXPECT_EQ(g->input(0)->producer->name, "flatten");
  EXPECT_EQ(g->attr_int("axis", 1), 0);
  EXPECT_EQ(constant_of(g->input(1))->to_int64_vector(), (std::vector<int64_t>{0, kS}));
  EXPECT_EQ(known_dims(proj_node->outputs[0]), (std::vector<int64_t>{kB, kF}));
  EXPECT_NE(find_near_miss(o.ctx.near_misses, "select_rows_early", "would compute fewer rows"), nullptr);
}

TEST(SelectRowsEarly, AReshapeThatInterleavesRowsStopsIt) {
  // [2, 3, E] -> [3, 2, E]: row 1 of the output is rows (0, 2) and (1, 0) of the input, no run of one axis.
  GraphBuilder b(17);
  Value* x =
      b.node("MatMul", {b.input("x", DType::Float32, {2, 3, kE}), b.initializer("w", uniform_floats({kE, kE}, 2))}, {},
             "proj");
  Value* y = b.node("Reshape", {x, b.initializer("to", int64s({3, 2, kE}, {3}))}, {}, "regroup");
  b.output(b.node("Gather", {b.node("Relu", {y}, {}, "relu"), b.initializer("i", int64s({1}, {1}))},
                  {attr("axis", int64_t{0})}, "pick"));
  Outcome o = run_pass(b.build());
  EXPECT_TRUE(o.changed);  // above the Relu, on its way to the Reshape
  expect_same_numbers(o);
  EXPECT_NE(find_near_miss(o.ctx.near_misses, "select_rows_early", "whole runs of one axis"), nullptr);
  EXPECT_EQ(node_named(*o.optimized, "proj")->outputs[0]->consumers[0]->op_type, "Reshape");
}

TEST(SelectRowsEarly, BroadcastOperandsAreReadWhole) {
  // pos [1, kS, kE] has the token axis and is selected; bias [kE] and scale [kB, 1, kE] are not.
  GraphBuilder b(17);
  Value* x =
      b.node("MatMul", {b.input("in", DType::Float32, {kB, kS, kE}), b.initializer("w", uniform_floats({kE, kE}, 8))},
             {}, "proj");
  Value* pos = b.initializer("pos", uniform_floats({1, kS, kE}, 1));
  Value* scale = b.input("scale", DType::Float32, {kB, 1, kE});
  Value* y =
      b.node("Mul",
             {b.node("Add", {b.node("Add", {x, pos}, {}, "add_pos"), b.initializer("bias", uniform_floats({kE}, 2))},
                     {}, "add_bias"),
              scale},
             {}, "mul_scale");
  b.output(b.node("Gather", {y, b.initializer("i", int64s({2}, {}))}, {attr("axis", int64_t{1})}, "pick"));
  Outcome o = run_pass(b.build());
  EXPECT_TRUE(o.changed);
  expect_same_numbers(o);
  const Node* mul = node_named(*o.optimized, "mul_scale");
  ASSERT_TRUE(mul);
  EXPECT_EQ(mul->input(1)->name, "scale");
  EXPECT_EQ(node_named(*o.optimized, "add_bias")->input(1)->name, "bias");
  const Node* add_pos = node_named(*o.optimized, "add_pos");
  EXPECT_EQ(add_pos->input(1)->producer->op_type, "Gather");
  EXPECT_EQ(add_pos->input(1)->producer->input(0)->name, "pos");
  EXPECT_EQ(node_named(*o.optimized, "proj")->input(0)->producer->op_type, "Gather");
}

TEST(SelectRowsEarly, StopsWhereRowsAreNotIndependent) {
  auto picked = [](GraphBuilder& b, Value* y) {
    b.output(b.node("Gather", {y, b.initializer("i", int64s({0}, {}))}, {attr("axis", int64_t{1})}, "pick"));
  };
  {
    SCOPED_TRACE("the rows are also a graph output");
    GraphBuilder b(17);
    Value* y = b.node("Relu", {b.input("x", DType::Float32, {kB, kS, kE})}, {}, "relu");
    b.output(y);
    picked(b, y);
    expect_near_miss(run_pass(b.build()), "select_rows_early", "also a graph output");
  }
  {
    SCOPED_TRACE("another reader");
    GraphBuilder b(17);
    Value* y = b.node("Relu", {b.input("x", DType::Float32, {kB, kS, kE})}, {}, "relu");
    b.output(b.node("Neg", {y}, {}, "neg"));
    picked(b, y);
    expect_near_miss(run_pass(b.build()), "select_rows_early", "read by 2 nodes");
  }
  {
    SCOPED_TRACE("a LayerNorm over the selected axis");
    GraphBuilder b(17);
    Value* y = b.node("LayerNormalization",
                      {b.input("x", DType::Float32, {kB, kS, kE}), b.initializer("g", uniform_floats({kS, kE}, 1))},
                      {attr("axis", int64_t{1})}, "ln");
    picked(b, y);
    expect_near_miss(run_pass(b.build()), "select_rows_early", "normalizes over axis 1");
  }
  {
    SCOPED_TRACE("a MatMul whose B has the batch");
    GraphBuilder b(17);
    Value* y =
        b.node("MatMul", {b.input("q", DType::Float32, {kB, kS, kE}), b.input("k", DType::Float32, {kB, kE, kS})}, {},
               "scores");
    picked(b, y);
    expect_near_miss(run_pass(b.build()), "select_rows_early", "B is not 2-D");
  }
  {
    SCOPED_TRACE("elementwise ops with no MatMul above them: the selection would only split a fusion");
    GraphBuilder b(17);
    Value* y = b.node(
        "Relu",
        {b.node("Conv",
                {b.input("x", DType::Float32, {kB, kS, kE, kE}), b.initializer("w", uniform_floats({kS, kS, 1, 1}, 1))},
                {}, "conv")},
        {}, "relu");
    picked(b, y);
    expect_near_miss(run_pass(b.build()), "select_rows_early", "would compute fewer rows");
  }
  {
    SCOPED_TRACE("a selection of every row is no selection");
    GraphBuilder b(17);
    Value* y = b.node("Relu", {b.input("x", DType::Float32, {kB, kS, kE})}, {}, "relu");
    b.output(b.node("Slice",
                    {y, b.initializer("st", int64s({0}, {1})), b.initializer("en", int64s({kS}, {1})),
                     b.initializer("ax", int64s({1}, {1}))},
                    {}, "all"));
    Outcome o = run_pass(b.build());
    EXPECT_FALSE(o.changed);
    expect_unchanged(*o.original, *o.optimized);
  }
}

// Random chains of the ops the pass moves through (elementwise with operands that have the axis,
// broadcast along it or lack it; MatMul; LayerNorm; residual Adds that give a value two readers;
// Reshapes that flatten the rows for a Gemm, or regroup them so that they interleave),
// ended by a random Gather or Slice on a random axis but the last: whatever the pass does, the
// numbers must be the original's, and a second run must change nothing.
TEST(SelectRowsEarly, RandomRowWiseChainsKeepTheirNumbers) {
  std::mt19937 rng(2026);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  int moved = 0;
  for (int trial = 0; trial < 300; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    GraphBuilder b(17);
    const int64_t B = 2, S = 5;
    int64_t E = 3 + pick(3);
    Value* x = b.input("x", DType::Float32, {B, S, E});
    std::vector<Value*> chain = {x};
    std::vector<int64_t> widths = {E};  // each chain value is [B, S, width]
    const int ops = 2 + pick(7);
    for (int i = 0; i < ops; ++i) {
      const std::string id = std::to_string(i);
      Value* v = chain.back();
      Value* out = nullptr;
      switch (pick(8)) {
        case 0:
          out = b.node(std::vector<const char*>{"Relu", "Tanh", "Sigmoid", "Neg"}[pick(4)], {v}, {}, "u" + id);
          break;
        case 1: {  // a binary op with an operand of each broadcast kind
          Value* other;
          switch (pick(5)) {
            case 0:
              other = b.input("in" + id, DType::Float32, {B, S, E});
              break;
            case 1:
              other = b.initializer("c" + id, uniform_floats({E}, 10 + i));
              break;
            case 2:
              other = b.initializer("c" + id, uniform_floats({1, S, E}, 10 + i));
              break;
            case 3:
              other = b.input("in" + id, DType::Float32, {B, 1, E});
              break;
            default:
              other = b.initializer("c" + id, uniform_floats({S, 1}, 10 + i));
              break;
          }
          const char* op = std::vector<const char*>{"Add", "Mul", "Sub"}[pick(3)];
          out = pick(2) ? b.node(op, {v, other}, {}, "b" + id) : b.node(op, {other, v}, {}, "b" + id);
          break;
        }
        case 2: {
          const int64_t f = 3 + pick(3);
          out = b.node("MatMul", {v, b.initializer("w" + id, uniform_floats({E, f}, 20 + i))}, {}, "m" + id);
          E = f;
          break;
        }
        case 3:
          out = b.node("LayerNormalization",
                       {v, b.initializer("g" + id, uniform_floats({E}, 30 + i)),
                        b.initializer("be" + id, uniform_floats({E}, 40 + i))},
                       {}, "ln" + id);
          break;
        case 6: {  // a Linear on the flattened rows, as torchvision's and GPT-2's are written
          const int64_t f = 3 + pick(3);
          Value* flat = b.node("Reshape", {v, b.initializer("to2_" + id, int64s({B * S, E}, {2}))}, {}, "flat" + id);
          Value* m = b.node("Gemm", {flat, b.initializer("w" + id, uniform_floats({f, E}, 20 + i))},
                            {attr("transB", int64_t{1})}, "gemm" + id);
          out = b.node("Reshape", {m, b.initializer("to3_" + id, int64s({B, S, f}, {3}))}, {}, "unflat" + id);
          E = f;
          break;
        }
        case 7: {  // [B, S, E] regrouped as [S, B, E] (rows interleave) and back, a Relu between
          Value* r = b.node("Reshape", {v, b.initializer("sb" + id, int64s({S, B, E}, {3}))}, {}, "sb" + id);
          r = b.node("Relu", {r}, {}, "sbrelu" + id);
          out = b.node("Reshape", {r, b.initializer("bs" + id, int64s({B, S, E}, {3}))}, {}, "bs" + id);
          break;
        }
        default: {  // a residual from an earlier value of the same shape, when there is one
          Value* from = nullptr;
          for (size_t c = 0; c + 1 < chain.size(); ++c)
            if (widths[c] == E && pick(2)) from = chain[c];
          out = from ? b.node("Add", {v, from}, {}, "r" + id) : b.node("Relu", {v}, {}, "u" + id);
          break;
        }
      }
      chain.push_back(out);
      widths.push_back(E);
    }
    const int64_t axis = pick(2);
    const int64_t extent = axis == 0 ? B : S;
    Value* y;
    if (pick(2)) {
      const bool scalar = pick(2);
      std::vector<int64_t> rows = {pick(static_cast<int>(2 * extent)) - extent};
      if (!scalar && pick(2)) rows.push_back(pick(static_cast<int>(extent)));
      Tensor idx = scalar ? int64s(rows, {}) : int64s(rows, {static_cast<int64_t>(rows.size())});
      y = b.node("Gather", {chain.back(), b.initializer("idx", idx)}, {attr("axis", axis - (pick(2) ? 3 : 0))}, "pick");
    } else {
      const int64_t begin = pick(static_cast<int>(extent)), end = begin + 1 + pick(static_cast<int>(extent - begin));
      y = b.node("Slice",
                 {chain.back(), b.initializer("st", int64s({begin - (pick(2) ? extent : 0)}, {1})),
                  b.initializer("en", int64s({end}, {1})), b.initializer("ax", int64s({axis}, {1}))},
                 {}, "pick");
    }
    b.output(y);
    Outcome o = run_pass(b.build());
    moved += o.changed;
    fusec::test::expect_same_numbers(*o.original, *o.optimized, 11 + trial, {1e-5, 1e-6});
  }
  // The chains are random, but most end in something the selection moves above.
  EXPECT_GT(moved, 100);
}
