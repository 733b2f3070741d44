// fuse_rotary: transformers' rotate_half rotation -> ai.fusec Rotary with the same numbers, the
// head split in front of it moved behind it; other rotations and guarded cases are left alone.
#include "passes/fuse_rotary.h"
#include "passes/infer_shapes.h"

#include "pass_test_util.h"
#include "test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

Outcome run_pass(std::unique_ptr<Graph> g, PassOptions opts = {}) {
  return run_one_pass<FuseRotaryPass>(std::move(g), opts);
}

constexpr int64_t B = 2, S = 5, H = 3, D = 8, E = H * D;

Value* ints(GraphBuilder& b, const std::string& name, std::vector<int64_t> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return b.initializer(name, int64s(std::move(v), {n}));
}

/// Seeded cos/sin-like tables of `dims`: values in [-1, 1).
Tensor table(std::vector<int64_t> dims, unsigned seed) { return uniform_floats(std::move(dims), seed); }

struct Rope {
  bool swap_concat = false;      // Concat(x1, Neg(x2)): a different rotation
  bool read_neg_elsewhere = false;
  bool portable = false;
  bool mul_order_swapped = false;  // Mul(cos, x), Add(sin-term, cos-term)
};

/// y = x·cos + rotate_half(x)·sin on x of `x_dims` (last dim D), as transformers' exporters write it.
Value* rotate_half_of(GraphBuilder& b, Value* x, const std::vector<int64_t>& table_dims, const Rope& o,
                      std::vector<Value*>* extra_outputs) {
  Value* cos = b.initializer("cos", table(table_dims, 1));
  Value* sin = b.initializer("sin", table(table_dims, 2));
  Value* axis = ints(b, "axis", {-1});
  Value* x1 = b.node("Slice", {x, ints(b, "zero", {0}), ints(b, "half", {D / 2}), axis}, {}, "slice_lo");
  Value* x2 = b.node("Slice", {x, ints(b, "half2", {D / 2}), ints(b, "big", {INT64_MAX}), axis}, {}, "slice_hi");
  Value* neg = b.node("Neg", {x2}, {}, "neg");
  if (o.read_neg_elsewhere) extra_outputs->push_back(neg);
  Value* cat = o.swap_concat ? b.node("Concat", {x1, neg}, {attr("axis", int64_t{-1})}, "cat")
                             : b.node("Concat", {neg, x1}, {attr("axis", int64_t{-1})}, "cat");
  Value* xc = o.mul_order_swapped ? b.node("Mul", {cos, x}, {}, "mul_cos") : b.node("Mul", {x, cos}, {}, "mul_cos");
  Value* rs = b.node("Mul", {cat, sin}, {}, "mul_sin");
  return o.mul_order_swapped ? b.node("Add", {rs, xc}, {}, "rope") : b.node("Add", {xc, rs}, {}, "rope");
}

/// Llama's query path: p [B, S, E] -> Reshape [B, S, H, D] -> Transpose(0, 2, 1, 3) -> rotation
/// with [1, 1, S, D] tables -> output [B, H, S, D].
std::unique_ptr<Graph> llama_query(const Rope& o = {}) {
  GraphBuilder b(17);
  Value* p = b.input("p", DType::Float32, {B, S, E});
  Value* v = b.node("Reshape", {p, ints(b, "heads", {B, S, H, D})}, {}, "view");
  v = b.node("Transpose", {v}, {attr("perm", std::vector<int64_t>{0, 2, 1, 3})}, "transpose");
  std::vector<Value*> extra;
  b.output(rotate_half_of(b, v, {1, 1, S, D}, o, &extra));
  for (Value* e : extra) b.output(e);
  return b.build();
}

}  // namespace

TEST(FuseRotary, RotateHalfBecomesOneRotaryAfterTheProjection) {
  for (bool swapped : {false, true}) {
    SCOPED_TRACE(swapped ? "operands swapped" : "exporter order");
    Rope o;
    o.mul_order_swapped = swapped;
    Outcome r = run_pass(llama_query(o));
    EXPECT_TRUE(r.changed);
    ASSERT_EQ(count(*r.optimized, "Rotary", "ai.fusec"), 1);
    for (const char* gone : {"Slice", "Neg", "Concat", "Mul", "Add"}) EXPECT_EQ(count(*r.optimized, gone), 0) << gone;
    const Node* rot = find_op(*r.optimized, "Rotary");
    // The head split moved behind the rotation: it reads the projection [B, S, E] per head of D.
    EXPECT_EQ(rot->input(0)->name, "p");
    EXPECT_EQ(rot->attr_int("head_size", 0), D);
    ASSERT_EQ(rot->outputs[0]->consumers.size(), 1u);
    const Node* reshape = rot->outputs[0]->consumers[0];
    EXPECT_EQ(reshape->op_type, "Reshape");
    ASSERT_EQ(reshape->outputs[0]->consumers.size(), 1u);
    EXPECT_EQ(reshape->outputs[0]->consumers[0]->op_type, "Transpose");
    EXPECT_EQ(rot->fused_from,
              (std::vector<std::string>{"slice_lo", "slice_hi", "neg", "cat", "mul_sin", "mul_cos", "rope"}));
    expect_same_numbers(*r.original, *r.optimized, 7);
  }
}

TEST(FuseRotary, ABatchLeftOpenStillFusesAndSinksTheHeadSplit) {
  // As `fusec optimize` sees a dynamic-batch export: p [N, S, E] with N symbolic, the head split a
  // Reshape to [-1, S, H, D].
  GraphBuilder b(17);
  Value* p = b.input("p", DType::Float32, {Dim::sym("N"), S, E});
  Value* v = b.node("Reshape", {p, ints(b, "heads", {-1, S, H, D})}, {}, "view");
  v = b.node("Transpose", {v}, {attr("perm", std::vector<int64_t>{0, 2, 1, 3})}, "transpose");
  std::vector<Value*> extra;
  b.output(rotate_half_of(b, v, {1, 1, S, D}, {}, &extra));
  auto g = b.build();
  infer_shapes(*g);
  Outcome r = run_pass(std::move(g));
  ASSERT_EQ(count(*r.optimized, "Rotary", "ai.fusec"), 1);
  for (const char* gone : {"Slice", "Neg", "Concat", "Mul", "Add"}) EXPECT_EQ(count(*r.optimized, gone), 0) << gone;
  const Node* rot = find_op(*r.optimized, "Rotary");
  EXPECT_EQ(rot->input(0)->name, "p");
  EXPECT_EQ(rot->attr_int("head_size", 0), D);
  ASSERT_TRUE(rot->outputs[0]->type.shape);
  EXPECT_EQ(shape_str(*rot->outputs[0]->type.shape), "Nx5x24");
  r.original->inputs[0]->type.shape = Shape{B, S, E};
  r.optimized->inputs[0]->type.shape = Shape{B, S, E};
  expect_same_numbers(*r.original, *r.optimized, 9);
}

TEST(FuseRotary, ATableThatWidensAnOpenDimIsLeftAlone) {
  // x [N, H, S, D] with N open and tables of [2, 1, S, D]: the sum would be [2, ...] only for N = 1
  // or 2, so the rotation cannot stand for it.
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {Dim::sym("N"), H, S, D});
  std::vector<Value*> extra;
  b.output(rotate_half_of(b, x, {B, 1, S, D}, {}, &extra));
  expect_near_miss(run_pass(b.build()), "fuse_rotary", "does not broadcast to x");
}

TEST(FuseRotary, ARotationWithoutAHeadSplitStaysWhereItIs) {
  // Tables per batch and position ([B, 1, S, D] against x [B, H, S, D]) and x a graph input.
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {B, H, S, D});
  std::vector<Value*> extra;
  b.output(rotate_half_of(b, x, {B, 1, S, D}, {}, &extra));
  Outcome r = run_pass(b.build());
  const Node* rot = find_op(*r.optimized, "Rotary");
  ASSERT_TRUE(rot);
  EXPECT_EQ(rot->input(0)->name, "x");
  EXPECT_EQ(rot->attr_int("head_size", 0), 0);
  EXPECT_EQ(r.optimized->nodes().size(), 1u);
  expect_same_numbers(*r.original, *r.optimized, 8);
}

TEST(FuseRotary, OtherRotationsAndGuardedCasesAreLeftAlone) {
  {  // Concat(x1, -x2) is not rotate_half: no match at all
    Rope o;
    o.swap_concat = true;
    Outcome r = run_pass(llama_query(o));
    EXPECT_FALSE(r.changed);
    expect_unchanged(*r.original, *r.optimized);
  }
  {
    Rope o;
    o.read_neg_elsewhere = true;
    expect_near_miss(run_pass(llama_query(o)), "fuse_rotary", "is read outside the rotation");
  }
  {  // a table without the head's values along its last axis (a scalar here) is not a rotation table
    GraphBuilder g2(17);
    Value* x2 = g2.input("x", DType::Float32, {B, H, S, D});
    Value* one = g2.initializer("one", table({1}, 3));
    Value* axis = ints(g2, "axis", {-1});
    Value* lo = g2.node("Slice", {x2, ints(g2, "zero", {0}), ints(g2, "half", {D / 2}), axis}, {}, "lo");
    Value* hi = g2.node("Slice", {x2, ints(g2, "h2", {D / 2}), ints(g2, "big", {D}), axis}, {}, "hi");
    Value* cat = g2.node("Concat", {g2.node("Neg", {hi}, {}, "neg"), lo}, {attr("axis", int64_t{-1})}, "cat");
    g2.output(g2.node("Add", {g2.node("Mul", {x2, one}, {}, "mc"), g2.node("Mul", {cat, one}, {}, "ms")}, {}, "rope"));
    expect_near_miss(run_pass(g2.build()), "fuse_rotary", "does not hold the head's 8 values");
  }
  {
    PassOptions portable;
    portable.portable = true;
    expect_near_miss(run_pass(llama_query(), portable), "fuse_rotary", "--portable");
  }
}

namespace {

struct EveryTwo {
  bool neg_after_unsqueeze = false;  // Neg(Unsqueeze(x2)) instead of Unsqueeze(Neg(x2))
  bool swap_stack = false;           // stack(x1, -x2): a different rotation
  int64_t rotary_dim = D;            // < D: GPT-J's partial rotation, the rest concatenated after
};

/// GPT-J's query path as transformers writes it: p [B, S, E] -> Reshape [B, S, H, D] -> (the first
/// rotary_dim values) y = x·cos + rotate_every_two(x)·sin with [1, S, 1, R] tables -> Concat with
/// the rest -> Transpose(0, 2, 1, 3).
std::unique_ptr<Graph> gptj_query(const EveryTwo& o) {
  GraphBuilder b(17);
  const int64_t R = o.rotary_dim;
  Value* p = b.input("p", DType::Float32, {B, S, E});
  Value* q = b.node("Reshape", {p, ints(b, "heads", {B, S, H, D})}, {}, "view");
  Value* axis = ints(b, "axis", {-1});
  Value* x = q;
  if (R < D) x = b.node("Slice", {q, ints(b, "zero0", {0}), ints(b, "rd", {R}), axis}, {}, "q_rot");
  Value* cos = b.initializer("cos", table({1, S, 1, R}, 11));
  Value* sin = b.initializer("sin", table({1, S, 1, R}, 12));
  Value* two = ints(b, "two", {2});
  Value* x1 = b.node("Slice", {x, ints(b, "zero", {0}), ints(b, "big", {INT64_MAX}), axis, two}, {}, "even");
  Value* x2 = b.node("Slice", {x, ints(b, "one", {1}), ints(b, "big2", {INT64_MAX}), axis, two}, {}, "odd");
  Value* last = ints(b, "last", {-1});
  Value* neg = o.neg_after_unsqueeze ? b.node("Neg", {b.node("Unsqueeze", {x2, last}, {}, "u_odd")}, {}, "neg")
                                     : b.node("Unsqueeze", {b.node("Neg", {x2}, {}, "neg"), last}, {}, "u_odd");
  Value* ue = b.node("Unsqueeze", {x1, last}, {}, "u_even");
  Value* stacked = o.swap_stack ? b.node("Concat", {ue, neg}, {attr("axis", int64_t{-1})}, "stack")
                                : b.node("Concat", {neg, ue}, {attr("axis", int64_t{-1})}, "stack");
  Value* flat = b.node("Reshape", {stacked, ints(b, "flat", {B, S, H, R})}, {}, "flatten");
  Value* y =
      b.node("Add", {b.node("Mul", {x, cos}, {}, "mul_cos"), b.node("Mul", {flat, sin}, {}, "mul_sin")}, {}, "rope");
  if (R < D) {
    Value* rest = b.node("Slice", {q, ints(b, "rd2", {R}), ints(b, "big3", {INT64_MAX}), axis}, {}, "q_pass");
    y = b.node("Concat", {y, rest}, {attr("axis", int64_t{-1})}, "q_cat");
  }
  b.output(b.node("Transpose", {y}, {attr("perm", std::vector<int64_t>{0, 2, 1, 3})}, "transpose"));
  return b.build();
}

}  // namespace

TEST(FuseRotary, RotateEveryTwoBecomesAnInterleavedRotary) {
  for (bool after : {false, true})
    for (int64_t rd : {D, int64_t{4}}) {
      SCOPED_TRACE(std::string(after ? "Neg after Unsqueeze" : "Neg first") + ", rotary_dim " + std::to_string(rd));
      EveryTwo o;
      o.neg_after_unsqueeze = after;
      o.rotary_dim = rd;
      Outcome r = run_pass(gptj_query(o));
      ASSERT_EQ(count(*r.optimized, "Rotary", "ai.fusec"), 1);
      for (const char* gone : {"Slice", "Neg", "Unsqueeze", "Concat", "Mul", "Add"})
        EXPECT_EQ(count(*r.optimized, gone), 0) << gone;
      const Node* rot = find_op(*r.optimized, "Rotary");
      // The head split moved behind the rotation, which reads the projection per head of D.
      EXPECT_EQ(rot->input(0)->name, "p");
      EXPECT_EQ(rot->attr_int("head_size", 0), D);
      EXPECT_EQ(rot->attr_int("interleaved", 0), 1);
      EXPECT_EQ(rot->attr_int("rotary_dim", 0), rd < D ? rd : 0);
      expect_same_numbers(*r.original, *r.optimized, 21);
    }
}

namespace {

constexpr int64_t R = 4;  // the rotated values of each head, in the partial rotations below

/// Phi's and StableLM's query path: rotate_half of q[..., :R] with [1, 1, S, R] tables,
/// concatenated with q[..., R:] (after it, or with `rest_first` before it), q the head split
/// [B, H, S, D] of p [B, S, E].
std::unique_ptr<Graph> phi_query(bool rest_first) {
  GraphBuilder b(17);
  Value* p = b.input("p", DType::Float32, {B, S, E});
  Value* v = b.node("Reshape", {p, ints(b, "heads", {B, S, H, D})}, {}, "view");
  v = b.node("Transpose", {v}, {attr("perm", std::vector<int64_t>{0, 2, 1, 3})}, "transpose");
  Value* axis = ints(b, "axis", {-1});
  Value* x = b.node("Slice", {v, ints(b, "z", {0}), ints(b, "r", {R}), axis}, {}, "q_rot");
  Value* cos = b.initializer("cos", table({1, 1, S, R}, 1));
  Value* sin = b.initializer("sin", table({1, 1, S, R}, 2));
  Value* x1 = b.node("Slice", {x, ints(b, "zero", {0}), ints(b, "half", {R / 2}), axis}, {}, "slice_lo");
  Value* x2 = b.node("Slice", {x, ints(b, "half2", {R / 2}), ints(b, "big", {INT64_MAX}), axis}, {}, "slice_hi");
  Value* cat = b.node("Concat", {b.node("Neg", {x2}, {}, "neg"), x1}, {attr("axis", int64_t{-1})}, "cat");
  Value* y =
      b.node("Add", {b.node("Mul", {x, cos}, {}, "mul_cos"), b.node("Mul", {cat, sin}, {}, "mul_sin")}, {}, "rope");
  Value* rest = b.node("Slice", {v, ints(b, "r2", {R}), ints(b, "big2", {INT64_MAX}), axis}, {}, "q_pass");
  b.output(b.node("Concat", rest_first ? std::vector<Value*>{rest, y} : std::vector<Value*>{y, rest},
                  {attr("axis", int64_t{-1})}, "q_cat"));
  return b.build();
}

}  // namespace

TEST(FuseRotary, APartialHalfSplitRotationBecomesOneRotaryOverTheHead) {
  Outcome r = run_pass(phi_query(false));
  ASSERT_EQ(count(*r.optimized, "Rotary", "ai.fusec"), 1);
  for (const char* gone : {"Slice", "Neg", "Concat", "Mul", "Add"}) EXPECT_EQ(count(*r.optimized, gone), 0) << gone;
  const Node* rot = find_op(*r.optimized, "Rotary");
  EXPECT_EQ(rot->input(0)->name, "p");
  EXPECT_EQ(rot->attr_int("head_size", 0), D);
  EXPECT_EQ(rot->attr_int("rotary_dim", 0), R);
  EXPECT_EQ(rot->attr_int("interleaved", 0), 0);
  expect_same_numbers(*r.original, *r.optimized, 22);
}

TEST(FuseRotary, OtherInterleavedRotationsAreLeftAlone) {
  {  // stack(x1, -x2) pairs the other way round: not a rotation fuse_rotary knows
    EveryTwo o;
    o.swap_stack = true;
    Outcome r = run_pass(gptj_query(o));
    EXPECT_EQ(count(*r.optimized, "Rotary", "ai.fusec"), 0);
    expect_unchanged(*r.original, *r.optimized);
  }
  {  // the rest concatenated in front of the rotated values: the Rotary fuses, the Concat stays
    Outcome r = run_pass(phi_query(true));
    ASSERT_EQ(count(*r.optimized, "Rotary", "ai.fusec"), 1);
    EXPECT_EQ(find_op(*r.optimized, "Rotary")->attr_int("rotary_dim", 0), 0);
    EXPECT_EQ(count(*r.optimized, "Concat"), 1);
    expect_same_numbers(*r.original, *r.optimized, 23);
  }
}

// ONNX's RotaryEmbedding (opset 23) becomes Rotary over whole-width tables built once per cache.
TEST(FuseRotary, StandardRotaryEmbeddingBecomesRotaryWithSharedTables) {
  constexpr int64_t P = 9, R = 4;  // positions in the caches; a partial rotation of 4 of D = 8
  GraphBuilder b(23);
  Value* q = b.input("q", DType::Float32, Shape{B, S, E});
  Value* k = b.input("k", DType::Float32, Shape{B, S, E});
  Value* v4 = b.input("v4", DType::Float32, Shape{B, H, S, D});
  Value* cos = b.initializer("cos_cache", table({P, D / 2}, 1));
  Value* sin = b.initializer("sin_cache", table({P, D / 2}, 2));
  Value* pos = b.initializer("position_ids", int64s({0, 1, 2, 3, -1, 8, 7, 6, 5, -9}, {B, S}));  // -1: the last
  const std::vector<NamedAttribute> heads = {attr("num_heads", H)};
  b.output(b.node("RotaryEmbedding", {q, cos, sin, pos}, heads, "rope_q"));
  b.output(b.node("RotaryEmbedding", {k, cos, sin, pos}, heads, "rope_k"));
  // 4-D, interleaved, the first R values of each head; its own tables (another width).
  Value* cos_r = b.initializer("cos_r", table({P, R / 2}, 3));
  Value* sin_r = b.initializer("sin_r", table({P, R / 2}, 4));
  b.output(b.node("RotaryEmbedding", {v4, cos_r, sin_r, pos},
                  {attr("interleaved", int64_t{1}), attr("rotary_embedding_dim", R)}, "rope_v"));
  Outcome o = run_pass(b.build());
  EXPECT_TRUE(o.changed);
  expect_same_numbers(*o.original, *o.optimized, 7, {1e-6, 1e-6});
  int rotary = 0, gathers = 0;
  for (const auto& n : o.optimized->nodes()) {
    EXPECT_NE(n->op_type, "RotaryEmbedding");
    rotary += n->op_type == "Rotary";
    gathers += n->op_type == "Gather";
  }
  EXPECT_EQ(rotary, 3);
  EXPECT_EQ(gathers, 4);  // cos and sin for the two 3-D rotations together, and for the 4-D one
  const Node* rv = nullptr;
  for (const auto& n : o.optimized->nodes())
    if (n->name == "rope_v") rv = n.get();
  ASSERT_TRUE(rv);
  EXPECT_EQ(rv->attr_int("interleaved", 0), 1);
  EXPECT_EQ(rv->attr_int("rotary_dim", 0), R);
}

TEST(FuseRotary, StandardRotaryEmbeddingWithoutPositionsAndPortableKept) {
  GraphBuilder b(23);
  Value* q = b.input("q", DType::Float32, Shape{B, S, E});
  Value* cos = b.input("cos", DType::Float32, Shape{B, S, D / 2});
  Value* sin = b.input("sin", DType::Float32, Shape{B, S, D / 2});
  b.output(b.node("RotaryEmbedding", {q, cos, sin}, {attr("num_heads", H), attr("interleaved", int64_t{1})}, "rope"));
  auto g = b.build();
  auto g2 = g->clone();
  Outcome o = run_pass(std::move(g));
  EXPECT_TRUE(o.changed);
  expect_same_numbers(*o.original, *o.optimized, 8, {1e-6, 1e-6});
  PassOptions portable;
  portable.portable = true;
  EXPECT_FALSE(run_pass(std::move(g2), portable).changed);
}
