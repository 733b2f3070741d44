// cleanup: each rule removes what computes nothing (a Constant node, a no-op, a duplicate, a dead
// node, an unread initializer) with the same numbers, bit for bit; what only looks like one (a real
// cast, reshape, slice or transpose, a training Dropout, nodes that differ or draw random numbers,
// a node with one output still read) is left alone.
#include "passes/cleanup.h"

#include <climits>
#include <functional>

#include "pass_test_util.h"
#include "test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

Outcome run_pass(std::unique_ptr<Graph> g) { return run_one_pass<CleanupPass>(std::move(g)); }

void expect_cleaned_exactly(const Outcome& o) {
  EXPECT_TRUE(o.changed);
  expect_same_numbers(*o.original, *o.optimized, 11, {0, 0});  // bit for bit
}

void expect_left_alone(const Outcome& o) {
  EXPECT_FALSE(o.changed);
  expect_unchanged(*o.original, *o.optimized);
  EXPECT_TRUE(o.ctx.rewrites.empty());
}

/// The op types of the graph's nodes, in order.
std::vector<std::string> ops(const Graph& g) {
  std::vector<std::string> out;
  for (const auto& n : g.nodes()) out.push_back(n->op_type);
  return out;
}

/// True when some rewrite's `what` is exactly `what`.
bool rewrote(const Outcome& o, const std::string& what) {
  for (const auto& r : o.ctx.rewrites)
    if (r.what == what) return true;
  return false;
}

std::vector<float> values_of(const Tensor& t) {
  std::vector<float> v;
  for (int64_t i = 0; i < t.numel(); ++i) v.push_back(static_cast<float>(t.as_double(i)));
  return v;
}

Value* ints(GraphBuilder& b, const std::string& name, std::vector<int64_t> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return b.initializer(name, int64s(std::move(v), {n}));
}

Tensor scalar_bool(bool v) {
  Tensor t(DType::Bool, {});
  t.data<uint8_t>()[0] = v;
  return t;
}

}  // namespace

// ---- Constant -> initializer ----

TEST(Cleanup, ConstantNodesBecomeInitializers) {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {2, 3});
  Value* c = b.node("Constant", {}, {attr("value", floats({1, 2, 3, 4, 5, 6}, {2, 3}))}, "c");
  Value* k = b.node("Constant", {}, {attr("value_float", 2.5f)}, "k");
  b.output(b.node("Mul", {b.node("Add", {x, c}, {}, "add"), k}, {}, "mul"));
  const std::string c_name = c->name;
  Outcome o = run_pass(b.build());
  expect_cleaned_exactly(o);
  EXPECT_EQ(ops(*o.optimized), (std::vector<std::string>{"Add", "Mul"}));
  const Value* cv = node_named(*o.optimized, "add")->inputs[1];
  ASSERT_TRUE(cv->is_initializer());
  EXPECT_EQ(cv->name, c_name);  // the value keeps its name; only its producer is gone
  EXPECT_EQ(values_of(*cv->initializer), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  const Value* kv = node_named(*o.optimized, "mul")->inputs[1];
  ASSERT_TRUE(kv->is_initializer());
  EXPECT_EQ(kv->initializer->numel(), 1);
  EXPECT_EQ(kv->initializer->as_double(0), 2.5);
}

TEST(Cleanup, ConstantThatIsAGraphOutputStaysANode) {
  // Some runtimes reject an initializer listed as a graph output.
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {3});
  b.output(b.node("Relu", {x}, {}, "relu"));
  b.output(b.node("Constant", {}, {attr("value", floats({1, 2, 3}, {3}))}, "c"));
  expect_left_alone(run_pass(b.build()));
}

// ---- no-ops ----

TEST(Cleanup, IdentityAndInferenceDropoutAreRemoved) {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {2, 4});
  Value* h = b.node("Relu", {b.node("Identity", {x}, {}, "id")}, {}, "relu");
  h = b.node("Dropout", {h}, {}, "drop");  // no training_mode: inference
  Value* off = b.initializer("off", scalar_bool(false));
  h = b.node("Dropout", {h, b.initializer("ratio", Tensor::scalar_float(0.5f)), off}, {}, "drop_off");
  b.output(b.node("Neg", {h}, {}, "neg"));
  Outcome o = run_pass(b.build());
  expect_cleaned_exactly(o);
  EXPECT_EQ(ops(*o.optimized), (std::vector<std::string>{"Relu", "Neg"}));
  EXPECT_EQ(node_named(*o.optimized, "relu")->inputs[0]->name, "x");
  EXPECT_EQ(node_named(*o.optimized, "neg")->inputs[0], node_named(*o.optimized, "relu")->outputs[0]);
  EXPECT_TRUE(rewrote(o, "removed Identity 'id' (Identity)"));
  EXPECT_TRUE(rewrote(o, "removed Dropout 'drop' (inference-mode Dropout)"));
  EXPECT_TRUE(rewrote(o, "removed Dropout 'drop_off' (inference-mode Dropout)"));
}

TEST(Cleanup, DropoutThatTrainsOrWhoseMaskIsReadStays) {
  {  // training_mode = true: it drops elements (the ratio is computed, so fusec can load it)
    GraphBuilder b(17);
    Value* x = b.input("x", DType::Float32, {2, 4});
    Value* ratio = b.input("ratio", DType::Float32, {});
    b.output(b.node("Dropout", {x, ratio, b.initializer("on", scalar_bool(true))}, {}, "drop"));
    expect_left_alone(run_pass(b.build()));
  }
  {  // training_mode computed: unknown
    GraphBuilder b(17);
    Value* x = b.input("x", DType::Float32, {2, 4});
    Value* t = b.input("t", DType::Bool, {});
    b.output(b.node("Dropout", {x, b.initializer("ratio", Tensor::scalar_float(0.5f)), t}, {}, "drop"));
    expect_left_alone(run_pass(b.build()));
  }
  {  // the mask is read
    GraphBuilder b(17);
    Value* x = b.input("x", DType::Float32, {2, 4});
    auto outs = b.node_n("Dropout", {x}, 2, {}, "drop");
    b.output(b.node("Relu", {outs[0]}, {}, "relu"));
    b.output(outs[1]);
    expect_left_alone(run_pass(b.build()));
  }
}

TEST(Cleanup, CastToTheSameTypeIsRemovedACastToAnotherStays) {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {3});
  Value* same = b.node("Cast", {x}, {attr("to", int64_t{1})}, "same");          // FLOAT -> FLOAT
  Value* dbl = b.node("Cast", {same}, {attr("to", int64_t{11})}, "to_double");  // FLOAT -> DOUBLE
  b.output(b.node("Relu", {dbl}, {}, "relu"));
  Outcome o = run_pass(b.build());
  expect_cleaned_exactly(o);
  ASSERT_EQ(ops(*o.optimized), (std::vector<std::string>{"Cast", "Relu"}));
  EXPECT_EQ(o.optimized->nodes()[0]->name, "to_double");
  EXPECT_EQ(o.optimized->nodes()[0]->inputs[0]->name, "x");
  EXPECT_TRUE(rewrote(o, "removed Cast 'same' (Cast to the same type)"));
}

TEST(Cleanup, ViewsToTheirOwnShapeAreRemoved) {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {2, 3});
  Value* h = b.node("Reshape", {x, ints(b, "shape", {2, 3})}, {}, "reshape");
  h = b.node("Flatten", {h}, {attr("axis", int64_t{1})}, "flatten");
  h = b.node("Expand", {h, ints(b, "to", {2, 3})}, {}, "expand");
  h = b.node("Unsqueeze", {h, ints(b, "none", {})}, {}, "unsqueeze");
  h = b.node("Squeeze", {h, ints(b, "none2", {})}, {}, "squeeze");
  h = b.node("Pad", {h, ints(b, "pads", {0, 0, 0, 0})}, {}, "pad");
  h = b.node("Slice", {h, ints(b, "starts", {0}), ints(b, "ends", {3}), ints(b, "axes", {1}), ints(b, "steps", {1})},
             {}, "slice");
  h = b.node("Transpose", {h}, {attr("perm", std::vector<int64_t>{0, 1})}, "transpose");
  b.output(b.node("Relu", {h}, {}, "relu"));
  Outcome o = run_pass(b.build());
  expect_cleaned_exactly(o);
  ASSERT_EQ(ops(*o.optimized), (std::vector<std::string>{"Relu"}));
  EXPECT_EQ(o.optimized->nodes()[0]->inputs[0]->name, "x");
  EXPECT_TRUE(o.optimized->initializers().empty());  // the shape operands went with their readers
  for (const char* what :
       {"removed Reshape 'reshape' (Reshape to the same shape)",
        "removed Flatten 'flatten' (Flatten to the same shape)", "removed Expand 'expand' (Expand to the same shape)",
        "removed Pad 'pad' (Pad by zero)", "removed Slice 'slice' (Slice of everything)",
        "removed Transpose 'transpose' (Transpose with identity perm)"})
    EXPECT_TRUE(rewrote(o, what)) << what;
}

TEST(Cleanup, EmptyConcatOperandsAreDroppedAndAConcatOfOneGoes) {
  // Phi-3's rotary embedding as the legacy exporter writes it: Concat(rotated, x[..., 16:]) with
  // x's last dim 16, so the pass-through part is empty.
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {2, 3, 16});
  Value* rest = b.node("Slice", {x, ints(b, "st", {16}), ints(b, "en", {INT64_MAX}), ints(b, "ax", {-1})}, {}, "rest");
  Value* r = b.node("Relu", {x}, {}, "rotated");
  b.output(b.node("Concat", {r, rest}, {attr("axis", int64_t{-1})}, "cat"));
  // A Concat with two non-empty operands and one empty one keeps the two.
  Value* y = b.input("y", DType::Float32, {2, 3, 4});
  Value* none = b.node("Slice", {y, ints(b, "st2", {4}), ints(b, "en2", {8}), ints(b, "ax2", {2})}, {}, "none");
  b.output(b.node("Concat", {y, none, y}, {attr("axis", int64_t{2})}, "cat2"));
  Outcome o = run_pass(b.build());
  EXPECT_TRUE(o.changed);
  EXPECT_EQ(count(*o.optimized, "Slice"), 0);
  ASSERT_EQ(count(*o.optimized, "Concat"), 1);
  EXPECT_EQ(node_named(*o.optimized, "cat2")->inputs.size(), 2u);
  EXPECT_EQ(o.optimized->outputs[0]->producer->op_type, "Relu");
  EXPECT_TRUE(rewrote(o, "removed Concat 'cat' (Concat of one input)"));
  expect_same_numbers(*o.original, *o.optimized, 12, {0, 0});
}

TEST(Cleanup, ViewsThatMoveOrReorderAnythingStay) {
  // Each view feeds a Relu: a no-op between a graph input and a graph output could not go anyway.
  auto view_then_relu = [](Shape in, const std::function<Value*(GraphBuilder&, Value*)>& view) {
    GraphBuilder b(17);
    Value* x = b.input("x", DType::Float32, std::move(in));
    b.output(b.node("Relu", {view(b, x)}, {}, "relu"));
    return b.build();
  };
  // A real reshape.
  expect_left_alone(run_pass(view_then_relu({2, 3}, [](GraphBuilder& b, Value* x) {
    return b.node("Reshape", {x, ints(b, "shape", {3, 2})}, {}, "reshape");
  })));
  // The same shape, but the dims are swapped.
  expect_left_alone(run_pass(view_then_relu({3, 3}, [](GraphBuilder& b, Value* x) {
    return b.node("Transpose", {x}, {attr("perm", std::vector<int64_t>{1, 0})}, "transpose");
  })));
  // No perm: the default reverses the dims.
  expect_left_alone(run_pass(
      view_then_relu({3, 3}, [](GraphBuilder& b, Value* x) { return b.node("Transpose", {x}, {}, "transpose"); })));
  // The same shape, reversed: steps -1.
  expect_left_alone(run_pass(view_then_relu({4}, [](GraphBuilder& b, Value* x) {
    return b.node(
        "Slice",
        {x, ints(b, "starts", {3}), ints(b, "ends", {INT64_MIN}), ints(b, "axes", {0}), ints(b, "steps", {-1})}, {},
        "reverse");
  })));
  // A pad that adds a row.
  expect_left_alone(run_pass(view_then_relu({2, 3}, [](GraphBuilder& b, Value* x) {
    return b.node("Pad", {x, ints(b, "pads", {1, 0, 0, 0})}, {}, "pad");
  })));
  // An unnamed open dim: "the same shape" cannot be proven.
  expect_left_alone(run_pass(view_then_relu({Dim(), 3}, [](GraphBuilder& b, Value* x) {
    return b.node("Reshape", {x, ints(b, "shape", {-1, 3})}, {}, "reshape");
  })));
}

TEST(Cleanup, AViewOverAnOpenBatchToItsOwnShapeIsRemoved) {
  // [N, 3] -> [-1, 3] is [N, 3] for every N.
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {Dim::sym("N"), 3});
  Value* h = b.node("Reshape", {x, ints(b, "shape", {-1, 3})}, {}, "reshape");
  b.output(b.node("Relu", {h}, {}, "relu"));
  Outcome o = run_pass(b.build());
  EXPECT_TRUE(o.changed);
  ASSERT_EQ(ops(*o.optimized), (std::vector<std::string>{"Relu"}));
  EXPECT_TRUE(rewrote(o, "removed Reshape 'reshape' (Reshape to the same shape)"));
  bind_open_dims(*o.original);
  bind_open_dims(*o.optimized);
  expect_same_numbers(*o.original, *o.optimized, 3, {0, 0});
}

TEST(Cleanup, NoOpBeforeAGraphOutputHandsTheOutputToItsProducer) {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {2, 3});
  Value* y = b.node("Identity", {b.node("Relu", {x}, {}, "relu")}, {}, "id");
  b.output(y);
  const std::string y_name = y->name;
  Outcome o = run_pass(b.build());
  expect_cleaned_exactly(o);
  ASSERT_EQ(ops(*o.optimized), (std::vector<std::string>{"Relu"}));
  const Node* relu = o.optimized->nodes()[0].get();
  EXPECT_EQ(relu->name, "relu");
  EXPECT_EQ(relu->outputs[0]->name, y_name);  // the output's name survives
  EXPECT_EQ(o.optimized->outputs[0], relu->outputs[0]);
}

TEST(Cleanup, NoOpFromAGraphInputToAGraphOutputIsANearMiss) {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {2, 3});
  b.output(b.node("Identity", {x}, {}, "id"));
  Outcome o = run_pass(b.build());
  expect_near_miss(o, "cleanup", "both graph inputs/outputs");
  EXPECT_NE(find_near_miss(o.ctx.near_misses, "cleanup", "Identity 'id' not removed"), nullptr);
}

// ---- duplicates ----

TEST(Cleanup, EqualConstantsShareOneInitializer) {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {4});
  Value* c1 = b.initializer("c1", floats({1, 2, 3, 4}, {4}));
  Value* c2 = b.initializer("c2", floats({1, 2, 3, 4}, {4}));
  b.output(b.node("Add", {x, c1}, {}, "add"));
  b.output(b.node("Mul", {x, c2}, {}, "mul"));
  Outcome o = run_pass(b.build());
  expect_cleaned_exactly(o);
  ASSERT_EQ(o.optimized->initializers().size(), 1u);
  EXPECT_EQ(o.optimized->initializers()[0]->name, "c1");
  EXPECT_EQ(node_named(*o.optimized, "mul")->inputs[1]->name, "c1");
  EXPECT_TRUE(rewrote(o, "removed 1 unused initializer(s)"));
}

TEST(Cleanup, ConstantsThatDifferInTypeShapeOrValueStay) {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {1, 2});
  Value* xi = b.input("xi", DType::Int32, {1, 2});
  Tensor zi(DType::Int32, {2});  // the same bytes as zeros_f
  b.output(b.node("Add", {x, b.initializer("zeros_f", floats({0, 0}, {2}))}, {}, "a"));
  b.output(b.node("Sub", {x, b.initializer("zeros_f_2d", floats({0, 0}, {1, 2}))}, {}, "b"));  // other dims
  b.output(b.node("Add", {xi, b.initializer("zeros_i", std::move(zi))}, {}, "c"));             // other type
  b.output(b.node("Mul", {x, b.initializer("one_two", floats({1, 2}, {2}))}, {}, "d"));
  b.output(b.node("Div", {x, b.initializer("one_three", floats({1, 3}, {2}))}, {}, "e"));  // other value
  expect_left_alone(run_pass(b.build()));
}

TEST(Cleanup, ConstantsOverOneMebibyteAreNotCompared) {
  const int64_t n = (1 << 18) + 1;  // 4 bytes each: just over 1 MiB
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {n});
  b.output(b.node("Add", {x, b.initializer("big1", floats(std::vector<float>(n, 1.0f), {n}))}, {}, "a"));
  b.output(b.node("Mul", {x, b.initializer("big2", floats(std::vector<float>(n, 1.0f), {n}))}, {}, "m"));
  expect_left_alone(run_pass(b.build()));
}

TEST(Cleanup, IdenticalNodesAreMergedAndTheirReadersWithThem) {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {2, 3});
  Value* n1 = b.node("Neg", {b.node("LeakyRelu", {x}, {attr("alpha", 0.1f)}, "act1")}, {}, "neg1");
  Value* n2 = b.node("Neg", {b.node("LeakyRelu", {x}, {attr("alpha", 0.1f)}, "act2")}, {}, "neg2");
  b.output(b.node("Add", {n1, n2}, {}, "add"));
  Outcome o = run_pass(b.build());
  expect_cleaned_exactly(o);
  EXPECT_EQ(ops(*o.optimized), (std::vector<std::string>{"LeakyRelu", "Neg", "Add"}));
  const Node* add = node_named(*o.optimized, "add");
  EXPECT_EQ(add->inputs[0], add->inputs[1]);
  EXPECT_EQ(add->inputs[0]->producer->name, "neg1");
  EXPECT_TRUE(rewrote(o, "merged LeakyRelu 'act2' into identical LeakyRelu 'act1'"));
  EXPECT_TRUE(rewrote(o, "merged Neg 'neg2' into identical Neg 'neg1'"));
}

TEST(Cleanup, NodesThatDifferInAttributesOrInputsStay) {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {2, 3});
  Value* y = b.input("y", DType::Float32, {2, 3});
  Value* a = b.node("LeakyRelu", {x}, {attr("alpha", 0.1f)}, "a");
  Value* c = b.node("LeakyRelu", {x}, {attr("alpha", 0.2f)}, "c");
  Value* r1 = b.node("Relu", {x}, {}, "r1");
  Value* r2 = b.node("Relu", {y}, {}, "r2");
  b.output(b.node("Sum", {a, c, r1, r2}, {}, "sum"));
  expect_left_alone(run_pass(b.build()));
}

TEST(Cleanup, NodesThatDrawRandomNumbersAreNeverMerged) {
  // Two Dropouts that may train (or two random ops) with the same inputs draw different numbers.
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {2, 3});
  Value* ratio = b.initializer("ratio", Tensor::scalar_float(0.5f));
  Value* training = b.input("training", DType::Bool, {});
  Value* d1 = b.node("Dropout", {x, ratio, training}, {}, "drop1");
  Value* d2 = b.node("Dropout", {x, ratio, training}, {}, "drop2");
  Value* r1 = b.node("RandomUniformLike", {x}, {attr("seed", 1.0f)}, "rand1");
  Value* r2 = b.node("RandomUniformLike", {x}, {attr("seed", 1.0f)}, "rand2");
  b.output(b.node("Sum", {d1, d2, r1, r2}, {}, "sum"));
  expect_left_alone(run_pass(b.build()));
}

TEST(Cleanup, NodesWithATensorAttributeAreNotMerged) {
  // The merge key spells ints, floats and strings; a node it cannot spell is never merged.
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {2, 3});
  Value* shape = ints(b, "shape", {2, 3});
  Value* c1 = b.node("ConstantOfShape", {shape}, {attr("value", floats({2}, {1}))}, "fill1");
  Value* c2 = b.node("ConstantOfShape", {shape}, {attr("value", floats({2}, {1}))}, "fill2");
  b.output(b.node("Sum", {x, c1, c2}, {}, "sum"));
  expect_left_alone(run_pass(b.build()));
}

TEST(Cleanup, ADuplicateWritingAGraphOutputStays) {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {2, 3});
  b.output(b.node("Relu", {x}, {}, "r1"));
  b.output(b.node("Relu", {x}, {}, "r2"));  // its output name must survive
  expect_left_alone(run_pass(b.build()));
}

// ---- dead nodes, unread initializers ----

TEST(Cleanup, DeadNodesAndUnreadInitializersAreRemoved) {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {2, 3});
  b.output(b.node("Relu", {x}, {}, "live"));
  Value* d = b.node("Neg", {x}, {}, "dead1");
  d = b.node("Mul", {d, b.initializer("w", floats({1, 2, 3}, {3}))}, {}, "dead2");
  b.node("Exp", {d}, {}, "dead3");
  b.initializer("never_read", floats({4}, {1}));
  Outcome o = run_pass(b.build());
  expect_cleaned_exactly(o);
  EXPECT_EQ(ops(*o.optimized), (std::vector<std::string>{"Relu"}));
  EXPECT_TRUE(o.optimized->initializers().empty());
  for (const char* what :
       {"removed Exp 'dead3' (its outputs are never read)", "removed Mul 'dead2' (its outputs are never read)",
        "removed Neg 'dead1' (its outputs are never read)", "removed 2 unused initializer(s)"})
    EXPECT_TRUE(rewrote(o, what)) << what;
}

TEST(Cleanup, ANodeWithOneOutputReadStaysAndUnreadInputsStay) {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {4});
  b.input("unused", DType::Float32, {4});  // the model's interface: not cleanup's to change
  auto halves = b.node_n("Split", {x}, 2, {attr("axis", int64_t{0})}, "split");
  b.output(b.node("Relu", {halves[0]}, {}, "relu"));
  Outcome o = run_pass(b.build());
  expect_left_alone(o);
  EXPECT_EQ(o.optimized->inputs.size(), 2u);
}

TEST(Cleanup, AReshapeThatUndoesAnotherViewReadsThatViewsInput) {
  // [2,4,6] -> Reshape [8,6] (Relu reads it too) -> Reshape [2,4,6]: the second undoes the first.
  // [2,4,6] -> Unsqueeze [1,2,4,6] -> Reshape [2,4,6]: the same with an Unsqueeze first.
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {2, 4, 6});
  Value* flat = b.node("Reshape", {x, ints(b, "flat", {-1, 6})}, {}, "flatten");
  b.output(b.node("Relu", {flat}, {}, "relu"));
  b.output(b.node("Tanh", {b.node("Reshape", {flat, ints(b, "back", {2, 4, 6})}, {}, "unflatten")}, {}, "tanh"));
  Value* u = b.node("Unsqueeze", {x, ints(b, "ax", {0})}, {}, "unsqueeze");
  b.output(b.node("Sigmoid", {b.node("Reshape", {u, ints(b, "to", {2, 4, 6})}, {}, "drop_one")}, {}, "sigmoid"));
  Outcome o = run_pass(b.build());
  expect_cleaned_exactly(o);
  EXPECT_EQ(node_named(*o.optimized, "tanh")->inputs[0]->name, "x");
  EXPECT_EQ(node_named(*o.optimized, "sigmoid")->inputs[0]->name, "x");
  EXPECT_NE(node_named(*o.optimized, "flatten"), nullptr) << "Relu still reads it";
  EXPECT_EQ(node_named(*o.optimized, "unsqueeze"), nullptr) << "nobody reads it any more";
  EXPECT_TRUE(rewrote(o, "removed Reshape 'unflatten' (Reshape to the same shape)"));
}

TEST(Cleanup, AViewChainThatRegroupsFurtherStays) {
  // [2,4,6] -> Reshape [4,12] -> Reshape [2,24]: not back to x's shape (GPT-2's head merge, then a
  // flatten for the projection, is such a chain, and fuse_attention reads the merge).
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {2, 4, 6});
  Value* mid = b.node("Reshape", {x, ints(b, "mid", {4, 12})}, {}, "regroup");
  b.output(b.node("Relu", {b.node("Reshape", {mid, ints(b, "to", {2, 24})}, {}, "flatten")}, {}, "relu"));
  expect_left_alone(run_pass(b.build()));
}

TEST(Cleanup, TwoTransposesComposeAndCancel) {
  // Transpose(Transpose(x, p), q) reads x with p then q; where that is the identity both go.
  for (bool cancel : {true, false}) {
    SCOPED_TRACE(cancel ? "composing to the identity" : "composing to another perm");
    GraphBuilder b(17);
    Value* x = b.node("Relu", {b.input("in", DType::Float32, {2, 3, 4, 5})}, {}, "relu");
    Value* t = b.node("Transpose", {x}, {attr("perm", std::vector<int64_t>{2, 1, 0, 3})}, "t1");
    const std::vector<int64_t> q = cancel ? std::vector<int64_t>{2, 1, 0, 3} : std::vector<int64_t>{0, 3, 1, 2};
    b.output(b.node("Transpose", {t}, {attr("perm", q)}, "t2"));
    Outcome o = run_pass(b.build());
    expect_cleaned_exactly(o);
    EXPECT_EQ(count(*o.optimized, "Transpose"), cancel ? 0 : 1);
    if (!cancel) {
      const Node* only = find_op(*o.optimized, "Transpose");
      ASSERT_TRUE(only);
      ASSERT_TRUE(only->input(0)->producer);
      EXPECT_EQ(only->input(0)->producer->op_type, "Relu");
      EXPECT_EQ(only->attr_ints("perm"), (std::vector<int64_t>{2, 3, 1, 0}));
    }
  }
}
