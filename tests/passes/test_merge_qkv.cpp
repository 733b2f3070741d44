// merge_qkv: the Q, K and V projections of a 3-D attention -> one GEMM writing packed QKV that
// ai.fusec Attention reads with K and V omitted; GPT-2's Split of packed QKV -> gone; a 4-D
// attention over the head split of packed QKV (Swin's windows) -> packed. Positive
// cases (BERT-like, GQA, each projection form, ONNX Attention, the Split) check the graph and the
// numbers on the CPU reference; each guard leaves the graph alone with its reason.
#include "passes/merge_qkv.h"

#include "ir/derived_weight.h"

#include <array>

#include <algorithm>
#include <cstring>

#include "passes/pattern.h"
#include "passes/pipeline.h"
#include "passes/verify.h"
#include "pass_test_util.h"
#include "test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

/// x [B, S, E] -> three projections -> Attention (3-D) -> y, in the form chosen.
struct Spec {
  int64_t batch = 2, seq = 5, hidden = 16, hq = 4, hkv = 4, d = 4;
  int64_t dv = 0;  // V's head size; 0: d
  enum class Proj { Fused, MatMul, MatMulAdd } proj = Proj::Fused;
  bool k_bias = true;  // K's projection has a bias (when the form has one)
  bool mask = false, causal = false;
  int64_t opset = 17;  // >= 23 with `standard`: ONNX's own Attention
  bool standard = false;
  std::string k_activation;        // FusedMatMul 'k' applies it
  bool k_weight_computed = false;  // K's weight is a graph input
  bool v_reads_other = false;      // V's projection reads another tensor
  bool k_also_output = false;      // K's projection output is also a graph output
  float softcap = 0;               // standard only
  bool rotary = false;             // Q and K rotated per head (ai.fusec Rotary, [1, S, 1, D] tables)
  bool k_other_tables = false;     // K's rotation reads its own tables
};

Tensor constant(std::vector<int64_t> dims, unsigned seed) { return uniform_floats(std::move(dims), seed); }

std::unique_ptr<Graph> build(const Spec& s) {
  GraphBuilder b(s.opset);
  const int64_t dv = s.dv ? s.dv : s.d;
  Value* x = b.input("x", DType::Float32, {s.batch, s.seq, s.hidden});
  Value* x2 = s.v_reads_other ? b.input("x2", DType::Float32, {s.batch, s.seq, s.hidden}) : x;
  struct P {
    const char* name;
    int64_t n;
    Value* in;
    bool bias;
  };
  const P ps[] = {{"q", s.hq * s.d, x, true}, {"k", s.hkv * s.d, x, s.k_bias}, {"v", s.hkv * dv, x2, true}};
  std::vector<Value*> qkv;
  unsigned seed = 10;
  for (const P& p : ps) {
    const std::string n = p.name;
    Value* w = n == "k" && s.k_weight_computed ? b.input("wk", DType::Float32, {s.hidden, p.n})
                                               : b.initializer("w" + n, constant({s.hidden, p.n}, seed++));
    Value* bias = p.bias ? b.initializer("b" + n, constant({p.n}, seed++)) : nullptr;
    Value* out;
    if (s.proj == Spec::Proj::Fused) {
      std::vector<Value*> ins = {p.in, w};
      if (bias) ins.push_back(bias);
      std::vector<NamedAttribute> attrs;
      if (n == "k" && !s.k_activation.empty()) attrs.push_back(attr("activation", s.k_activation));
      out = b.node_n("FusedMatMul", ins, 1, attrs, n, "ai.fusec")[0];
    } else {
      out = b.node("MatMul", {p.in, w}, {}, n);
      if (s.proj == Spec::Proj::MatMulAdd && bias) out = b.node("Add", {out, bias}, {}, n + "_add");
    }
    if (n == "k" && s.k_also_output) b.output(out);
    if (s.rotary && n != "v") {
      const bool own = n == "k" && s.k_other_tables;
      const std::string t = own ? "_k" : "";
      auto table = [&](const std::string& name, unsigned sd) {
        if (Value* v = b.graph().find_value(name)) return v;
        return b.initializer(name, constant({1, s.seq, 1, s.d}, sd));
      };
      Value* cos = table("cos" + t, own ? 40 : 30);
      Value* sin = table("sin" + t, own ? 41 : 31);
      out = b.node_n("Rotary", {out, cos, sin}, 1, {attr("head_size", s.d)}, "rope_" + n, "ai.fusec")[0];
    }
    qkv.push_back(out);
  }
  if (s.mask) qkv.push_back(b.input("mask", DType::Float32, {s.batch, 1, 1, s.seq}));
  std::vector<NamedAttribute> attrs = {attr("q_num_heads", s.hq), attr("kv_num_heads", s.hkv), attr("scale", 0.4f)};
  if (s.causal) attrs.push_back(attr("is_causal", int64_t{1}));
  if (s.softcap != 0) attrs.push_back(attr("softcap", s.softcap));
  b.output(b.node_n("Attention", qkv, 1, attrs, "attn", s.standard ? "" : "ai.fusec")[0]);
  return b.build();
}

Outcome merge(const Spec& s, PassOptions opts = {}) { return run_one_pass<MergeQkvPass>(build(s), opts); }

void expect_same_numbers(const Outcome& o) {
  fusec::test::expect_same_numbers(*o.original, *o.optimized, 7, {1e-5, 1e-6});
}

const Node* find_named(const Graph& g, const std::string& name) {
  for (const auto& n : g.nodes())
    if (n->name == name) return n.get();
  return nullptr;
}

bool has_origin(const Node* n, const std::string& name) {
  return std::find(n->fused_from.begin(), n->fused_from.end(), name) != n->fused_from.end();
}

/// The packed Attention 'attn' reading the output of the merged product `product_op` 'q'; checks
/// the common facts and returns the product.
const Node* merged(const Outcome& o, const std::string& product_op, const std::string& product_domain) {
  EXPECT_TRUE(o.changed);
  EXPECT_TRUE(o.ctx.near_misses.empty()) << o.ctx.near_misses[0].reason;
  EXPECT_EQ(o.ctx.rewrites.size(), 1u);
  EXPECT_EQ(count(*o.optimized, "Attention", "ai.fusec"), 1);
  EXPECT_EQ(count(*o.optimized, product_op, product_domain), 1);
  EXPECT_EQ(o.optimized->nodes().size(), 2u);
  const Node* a = find_named(*o.optimized, "attn");
  if (!a) return nullptr;
  EXPECT_EQ(a->domain, "ai.fusec");
  EXPECT_FALSE(a->input(1));
  EXPECT_FALSE(a->input(2));
  EXPECT_FLOAT_EQ(a->attr_float("scale", 0), 0.4f);
  const Node* p = a->input(0)->producer;
  if (!p) return nullptr;
  EXPECT_EQ(p->name, "q");
  EXPECT_EQ(p->input(0)->name, "x");
  for (const char* n : {"q", "k", "v"}) EXPECT_TRUE(has_origin(p, n)) << n;
  return p;
}

void expect_near_miss(const Spec& s, const std::string& what, const std::string& reason, PassOptions opts = {}) {
  Outcome o = merge(s, opts);
  EXPECT_FALSE(o.changed);
  EXPECT_EQ(graph_difference(*o.original, *o.optimized), "");
  ASSERT_EQ(o.ctx.near_misses.size(), 1u);
  EXPECT_EQ(o.ctx.near_misses[0].pass, "merge_qkv");
  EXPECT_EQ(o.ctx.near_misses[0].what, what);
  EXPECT_EQ(o.ctx.near_misses[0].reason, reason);
}

const std::string kWhat = "FusedMatMul 'q' + FusedMatMul 'k' + FusedMatMul 'v' -> Attention 'attn' not merged";

/// The Rotary a packed Attention 'attn' reads, in a rewritten graph of `nodes` nodes, or nullptr.
const Node* packed_rotation(const Outcome& o, size_t nodes) {
  EXPECT_TRUE(o.changed);
  EXPECT_EQ(o.optimized->nodes().size(), nodes);
  const Node* a = find_named(*o.optimized, "attn");
  if (!a) return nullptr;
  EXPECT_FALSE(a->input(1));
  EXPECT_FALSE(a->input(2));
  const Node* rot = a->input(0)->producer;
  return rot && rot->op_type == "Rotary" && rot->domain == "ai.fusec" ? rot : nullptr;
}

}  // namespace

TEST(MergeQkv, BertLikeBecomesOneGemmAndPackedAttention) {
  // BERT: three [E, E] projections with biases, a padding mask; one FusedMatMul with
  // W = [Wq | Wk | Wv] [16, 48] and b = [bq | bk | bv] [48] feeds Attention(QKV, "", "", mask).
  Spec s;
  s.mask = true;
  Outcome o = merge(s);
  const Node* p = merged(o, "FusedMatMul", "ai.fusec");
  ASSERT_TRUE(p);
  const Tensor* w = constant_of(p->input(1));
  const Tensor* b = constant_of(p->input(2));
  ASSERT_TRUE(w && b);
  EXPECT_EQ(w->dims(), (std::vector<int64_t>{16, 48}));
  EXPECT_EQ(b->dims(), (std::vector<int64_t>{48}));
  // Column blocks: row r of W is [Wq[r] | Wk[r] | Wv[r]].
  const Tensor *wq = constant_of(o.original->find_value("wq")), *wk = constant_of(o.original->find_value("wk")),
               *wv = constant_of(o.original->find_value("wv"));
  for (int64_t r = 0; r < 16; ++r)
    for (int64_t c = 0; c < 16; ++c) {
      EXPECT_EQ(w->data<float>()[r * 48 + c], wq->data<float>()[r * 16 + c]);
      EXPECT_EQ(w->data<float>()[r * 48 + 16 + c], wk->data<float>()[r * 16 + c]);
      EXPECT_EQ(w->data<float>()[r * 48 + 32 + c], wv->data<float>()[r * 16 + c]);
    }
  const Node* a = find_named(*o.optimized, "attn");
  EXPECT_EQ(a->input(3)->name, "mask");
  EXPECT_EQ(a->attr_int("q_num_heads", 0), 4);
  EXPECT_EQ(a->attr_int("kv_num_heads", 0), 4);
  EXPECT_EQ(a->input(0)->type.shape, (Shape{2, 5, 48}));
  EXPECT_EQ(o.optimized->find_value("wq"), nullptr);  // the separate weights are gone
  EXPECT_EQ(o.ctx.rewrites[0].replaced, (std::vector<std::string>{"q", "k", "v"}));
  EXPECT_EQ(o.ctx.rewrites[0].result, "q");
  expect_same_numbers(o);
}

TEST(MergeQkv, ConcatenatedWeightsAreDerivedThroughTheStore) {
  // The packed weight and bias go through ir/derived_weight.h, so a command's scratch-file store
  // (importer/scratch_weights.h) keeps them out of memory: here a store that counts its calls.
  struct Counting : DerivedWeightStore {
    std::vector<size_t> bytes;
    Tensor make(DType, const std::vector<int64_t>&, const std::vector<ByteRun>& runs) override {
      size_t n = 0;
      for (const ByteRun& r : runs) n += r.bytes;
      bytes.push_back(n);
      return {};  // built in memory all the same
    }
  };
  auto store = std::make_shared<Counting>();
  set_derived_weight_store(store);
  Spec s;
  s.k_bias = false;
  Outcome o = merge(s);
  set_derived_weight_store(nullptr);
  ASSERT_TRUE(merged(o, "FusedMatMul", "ai.fusec"));
  EXPECT_EQ(store->bytes, (std::vector<size_t>{16 * 48 * 4, 48 * 4}));  // W, then b with K's zeros
  expect_same_numbers(o);
}

TEST(MergeQkv, GroupedQueryHeadsAndCausal) {
  // 4 query heads over 2 kv heads of 4: W [16, 16 + 8 + 8].
  Spec s;
  s.hkv = 2;
  s.causal = true;
  Outcome o = merge(s);
  const Node* p = merged(o, "FusedMatMul", "ai.fusec");
  ASSERT_TRUE(p);
  EXPECT_EQ(constant_of(p->input(1))->dims(), (std::vector<int64_t>{16, 32}));
  const Node* a = find_named(*o.optimized, "attn");
  EXPECT_EQ(a->attr_int("kv_num_heads", 0), 2);
  EXPECT_EQ(a->attr_int("is_causal", 0), 1);
  EXPECT_EQ(a->inputs.size(), 3u);
  expect_same_numbers(o);
}

TEST(MergeQkv, ProjectionWithoutABiasGetsZeros) {
  // Whisper's k_proj has no bias: its block of the merged bias is zeros.
  Spec s;
  s.k_bias = false;
  Outcome o = merge(s);
  const Node* p = merged(o, "FusedMatMul", "ai.fusec");
  ASSERT_TRUE(p);
  const Tensor* b = constant_of(p->input(2));
  for (int64_t i = 16; i < 32; ++i) EXPECT_EQ(b->data<float>()[i], 0.0f);
  expect_same_numbers(o);
}

TEST(MergeQkv, BareMatMulsMergeIntoOneMatMul) {
  // Bias-free projections (Llama-style) stay MatMul after fuse_matmul_bias: one standard MatMul.
  Spec s;
  s.proj = Spec::Proj::MatMul;
  Outcome o = merge(s);
  const Node* p = merged(o, "MatMul", "");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->inputs.size(), 2u);
  expect_same_numbers(o);
}

TEST(MergeQkv, MatMulAddProjectionsMerge) {
  // With fuse_matmul_bias skipped the projections are MatMul -> Add: the Adds join the merge.
  Spec s;
  s.proj = Spec::Proj::MatMulAdd;
  Outcome o = merge(s);
  const Node* p = merged(o, "FusedMatMul", "ai.fusec");
  ASSERT_TRUE(p);
  EXPECT_EQ(count(*o.optimized, "Add"), 0);
  for (const char* n : {"q_add", "k_add", "v_add"}) EXPECT_TRUE(has_origin(p, n)) << n;
  expect_same_numbers(o);
}

TEST(MergeQkv, RotatedQueriesAndKeysMergeWithOneRotationOfThePackedRows) {
  // Llama after fuse_rotary: bias-free projections, Q and K rotated per head, GQA, causal.
  Spec s;
  s.proj = Spec::Proj::MatMul;
  s.hkv = 2;
  s.causal = true;
  s.rotary = true;
  Outcome o = merge(s);
  EXPECT_TRUE(o.ctx.near_misses.empty());
  const Node* rot = packed_rotation(o, 3);
  ASSERT_TRUE(rot);
  EXPECT_EQ(rot->attr_int("head_size", 0), 4);
  EXPECT_EQ(rot->attr_int("rotated", 0), (4 + 2) * 4);  // Q's and K's heads; V's are copied
  EXPECT_EQ(rot->input(1)->name, "cos");
  const Node* mm = rot->input(0)->producer;
  ASSERT_TRUE(mm);
  EXPECT_EQ(mm->op_type, "MatMul");
  EXPECT_EQ(constant_of(mm->input(1))->dims(), (std::vector<int64_t>{16, 32}));
  EXPECT_EQ(o.ctx.rewrites[0].replaced, (std::vector<std::string>{"q", "k", "v", "rope_q", "rope_k"}));
  expect_same_numbers(o);
}

TEST(MergeQkv, NearMissRotationsReadDifferentTables) {
  Spec s;
  s.proj = Spec::Proj::MatMul;
  s.rotary = true;
  s.k_other_tables = true;
  expect_near_miss(s, "MatMul 'q' + MatMul 'k' + MatMul 'v' -> Attention 'attn' not merged",
                   "Rotary 'rope_q' and Rotary 'rope_k' read different cos/sin tables");
}

TEST(MergeQkv, OnnxAttentionBecomesFusecAttention) {
  // Opset 23's own Attention in ai.fusec's subset: written as ai.fusec Attention (the one with a
  // packed form), the ai.fusec domain declared.
  Spec s;
  s.opset = 23;
  s.standard = true;
  s.mask = true;
  Outcome o = merge(s);
  ASSERT_TRUE(merged(o, "FusedMatMul", "ai.fusec"));
  EXPECT_EQ(count(*o.optimized, "Attention"), 0);
  EXPECT_EQ(o.optimized->opset("ai.fusec"), 1);
  EXPECT_NE(o.ctx.rewrites[0].what.find("was ONNX Attention"), std::string::npos) << o.ctx.rewrites[0].what;
  expect_same_numbers(o);
}

TEST(MergeQkv, Gpt2SplitOfPackedQkvGoes) {
  // GPT-2: c_attn writes [B, S, 3·E], Split(axis 2) hands Q, K, V to the Attention; the Attention
  // reads the Split's input packed and the Split goes (its name joins the Attention's origins).
  GraphBuilder b(17);
  Value* t = b.input("c_attn", DType::Float32, {2, 5, 48});
  auto qkv = b.node_n("Split", {t, b.initializer("sizes", int64s({16, 16, 16}, {3}))}, 3, {attr("axis", int64_t{-1})},
                      "split");
  b.output(b.node_n("Attention", qkv, 1,
                    {attr("q_num_heads", int64_t{4}), attr("kv_num_heads", int64_t{4}), attr("is_causal", int64_t{1})},
                    "attn", "ai.fusec")[0]);
  Outcome o = run_one_pass<MergeQkvPass>(b.build());
  EXPECT_TRUE(o.changed);
  EXPECT_TRUE(o.ctx.near_misses.empty());
  ASSERT_EQ(o.optimized->nodes().size(), 1u);
  const Node* a = o.optimized->nodes()[0].get();
  EXPECT_EQ(a->name, "attn");
  EXPECT_EQ(a->input(0)->name, "c_attn");
  EXPECT_FALSE(a->input(1));
  EXPECT_FALSE(a->input(2));
  EXPECT_TRUE(has_origin(a, "attn") && has_origin(a, "split"));
  EXPECT_EQ(o.ctx.rewrites[0].replaced, (std::vector<std::string>{"split"}));
  expect_same_numbers(o);
}

TEST(MergeQkv, SlicesOfPackedQkvGo) {
  // nn.MultiheadAttention once compose_movement has composed its head split: Q, K and V are Slices
  // [0,16), [16,32), [32,48) of the in-projection's last axis; the Attention reads it packed. Slices
  // that stop short of the end (a wider tensor), or are not in Q, K, V order, are not packed QKV.
  for (int form = 0; form < 3; ++form) {
    SCOPED_TRACE("form " + std::to_string(form));
    GraphBuilder b(17);
    Value* t = b.input("in_proj", DType::Float32, {2, 5, form == 1 ? 52 : 48});
    const std::vector<std::array<int64_t, 2>> ranges =
        form == 2 ? std::vector<std::array<int64_t, 2>>{{16, 32}, {0, 16}, {32, 48}}
                  : std::vector<std::array<int64_t, 2>>{{0, 16}, {16, 32}, {32, 48}};
    std::vector<Value*> qkv;
    for (int i = 0; i < 3; ++i) {
      const std::string n = std::to_string(i);
      qkv.push_back(b.node("Slice",
                           {t, b.initializer("st" + n, int64s({ranges[i][0]}, {1})),
                            b.initializer("en" + n, int64s({ranges[i][1]}, {1})),
                            b.initializer("ax" + n, int64s({-1}, {1}))},
                           {}, "slice" + n));
    }
    b.output(b.node_n("Attention", qkv, 1, {attr("q_num_heads", int64_t{4}), attr("kv_num_heads", int64_t{4})},
                      "attn", "ai.fusec")[0]);
    Outcome o = run_one_pass<MergeQkvPass>(b.build());
    EXPECT_EQ(o.changed, form == 0);
    if (form != 0) {
      expect_unchanged(*o.original, *o.optimized);
      continue;
    }
    ASSERT_EQ(o.optimized->nodes().size(), 1u);
    const Node* a = o.optimized->nodes()[0].get();
    EXPECT_EQ(a->input(0)->name, "in_proj");
    EXPECT_FALSE(a->input(1));
    EXPECT_FALSE(a->input(2));
    EXPECT_EQ(o.ctx.rewrites[0].replaced, (std::vector<std::string>{"slice0", "slice1", "slice2"}));
    expect_same_numbers(o);
  }
}

namespace {

/// The head split timm-style blocks write (Swin's windows): T [2, 5, 48] -> Reshape [B, 5, 3, 4, 4]
/// (B as -1 or 2) -> Transpose(2, 0, 3, 1, 4) -> Gather(i, axis 0) with `order` as Q's, K's and V's
/// i -> Attention (4-D, a constant per-head bias of `mask_dims`) -> its head merge,
/// Transpose(0, 2, 1, 3) -> Reshape [2, 5, 16]; or with `output_4d`, the 4-D output itself.
std::unique_ptr<Graph> head_split(bool minus_one, std::array<int64_t, 3> order = {0, 1, 2},
                                  std::vector<int64_t> mask_dims = {1, 4, 5, 5}, bool output_4d = false) {
  GraphBuilder b(17);
  Value* t = b.input("t", DType::Float32, {2, 5, 48});
  Value* r = b.node("Reshape", {t, b.initializer("split_shape", int64s({minus_one ? -1 : 2, 5, 3, 4, 4}, {5}))}, {},
                    "split_heads");
  Value* tr = b.node("Transpose", {r}, {attr("perm", std::vector<int64_t>{2, 0, 3, 1, 4})}, "permute");
  std::vector<Value*> qkv;
  for (int i = 0; i < 3; ++i)
    qkv.push_back(b.node("Gather", {tr, b.initializer("i" + std::to_string(i), int64s({order[i]}, {}))},
                         {attr("axis", int64_t{0})}, "select" + std::to_string(i)));
  qkv.push_back(b.initializer("bias", uniform_floats(mask_dims, 5)));
  Value* y = b.node_n("Attention", qkv, 1, {attr("scale", 0.4f)}, "attn", "ai.fusec")[0];
  if (output_4d) {
    b.output(y);
  } else {
    Value* m = b.node("Transpose", {y}, {attr("perm", std::vector<int64_t>{0, 2, 1, 3})}, "merge");
    b.output(b.node("Reshape", {m, b.initializer("merged_shape", int64s({-1, 5, 16}, {3}))}, {}, "merged"));
  }
  auto g = b.build();
  infer_shapes(*g);
  return g;
}

}  // namespace

TEST(MergeQkv, HeadSplitOfPackedQkvBecomesPackedAttention) {
  // Q, K and V are Gathers 0, 1, 2 of the head-split Transpose of T: the Attention reads T packed
  // with 4 heads, the Gathers, the Transpose and the Reshape go, and its 4-D output is the packed
  // output viewed [B, S, H, D] and transposed back. Whether the split's batch is -1 or given, and
  // whether the 4-D output is a graph output or read by a head merge.
  for (bool minus_one : {true, false})
    for (bool output_4d : {false, true}) {
      SCOPED_TRACE(std::string(minus_one ? "B -1" : "B 2") + (output_4d ? ", 4-D output" : ", head merge"));
      Outcome o = run_one_pass<MergeQkvPass>(head_split(minus_one, {0, 1, 2}, {1, 4, 5, 5}, output_4d));
      EXPECT_TRUE(o.changed);
      EXPECT_TRUE(o.ctx.near_misses.empty());
      EXPECT_EQ(count(*o.optimized, "Gather", ""), 0);
      const Node* a = find_named(*o.optimized, "attn");
      ASSERT_TRUE(a);
      EXPECT_EQ(a->input(0)->name, "t");
      EXPECT_FALSE(a->input(1));
      EXPECT_FALSE(a->input(2));
      EXPECT_EQ(a->input(3)->name, "bias");
      EXPECT_EQ(a->attr_int("q_num_heads", 0), 4);
      EXPECT_EQ(a->attr_int("kv_num_heads", 0), 4);
      EXPECT_FLOAT_EQ(a->attr_float("scale", 0), 0.4f);
      EXPECT_EQ(o.ctx.rewrites[0].replaced,
                (std::vector<std::string>{"select0", "select1", "select2", "permute", "split_heads"}));
      // The attention, its view and transpose back, and the head merge's two when there is one.
      EXPECT_EQ(o.optimized->nodes().size(), output_4d ? 3u : 5u);
      expect_same_numbers(o);
    }
}

TEST(MergeQkv, HeadSplitMergeComposesAwayInThePipeline) {
  // In the pipeline the view and transpose back meet the block's own head merge and compose away:
  // the packed attention's output is the block's [B, S, H·D].
  auto g = head_split(true);
  auto original = g->clone();
  optimize_graph(*g, PipelineOptions{});
  ASSERT_EQ(g->nodes().size(), 1u) << g->nodes().size();
  EXPECT_EQ(g->nodes()[0]->op_type, "Attention");
  VerifyResult v = verify_equivalence(*original, *g, 2, 7, {1e-5, 1e-6});
  EXPECT_TRUE(v.ok);
}

TEST(MergeQkv, HeadSplitOutOfOrderOrMaskNarrowerThanTheKeys) {
  // Gathers in another order are not Q, K and V of packed QKV: silent. A mask narrower than the
  // keys (broadcast along them) is a near-miss.
  Outcome swapped = run_one_pass<MergeQkvPass>(head_split(true, {1, 0, 2}));
  EXPECT_FALSE(swapped.changed);
  EXPECT_TRUE(swapped.ctx.near_misses.empty());
  Outcome narrow = run_one_pass<MergeQkvPass>(head_split(true, {0, 1, 2}, {1, 4, 5, 1}));
  EXPECT_FALSE(narrow.changed);
  ASSERT_EQ(narrow.ctx.near_misses.size(), 1u);
  EXPECT_EQ(narrow.ctx.near_misses[0].what,
            "Gather 'select0' + Gather 'select1' + Gather 'select2' of Transpose 'permute' -> Attention 'attn' not "
            "packed");
  EXPECT_EQ(narrow.ctx.near_misses[0].reason, "its attn_mask 'bias' is not known to be exactly as wide as the keys");
}

TEST(MergeQkv, RotatedSlicesOfAFusedProjectionGoToo) {
  // Phi-3: qkv_proj writes [Q 4 heads | K 2 | V 2] of 4 per token; Q and K are rotated per head
  // after their Slices. One Rotary over the whole projection (rotated = 24) stands for both.
  GraphBuilder b(17);
  b.graph().opsets["ai.fusec"] = 1;
  Value* t = b.input("qkv_proj", DType::Float32, {2, 5, 32});
  Value* cos = b.initializer("cos", constant({1, 5, 1, 4}, 50));
  Value* sin = b.initializer("sin", constant({1, 5, 1, 4}, 51));
  const int64_t ranges[3][2] = {{0, 16}, {16, 24}, {24, 32}};
  std::vector<Value*> qkv;
  for (int i = 0; i < 3; ++i) {
    const std::string n = std::to_string(i);
    Value* sl = b.node("Slice",
                       {t, b.initializer("st" + n, int64s({ranges[i][0]}, {1})),
                        b.initializer("en" + n, int64s({ranges[i][1]}, {1})), b.initializer("ax" + n, int64s({2}, {1}))},
                       {}, "slice" + n);
    if (i < 2) sl = b.node_n("Rotary", {sl, cos, sin}, 1, {attr("head_size", int64_t{4})}, "rope" + n, "ai.fusec")[0];
    qkv.push_back(sl);
  }
  b.output(b.node_n("Attention", qkv, 1, {attr("q_num_heads", int64_t{4}), attr("kv_num_heads", int64_t{2})},
                    "attn", "ai.fusec")[0]);
  Outcome o = run_one_pass<MergeQkvPass>(b.build());
  const Node* rot = packed_rotation(o, 2);
  ASSERT_TRUE(rot);
  EXPECT_EQ(rot->input(0)->name, "qkv_proj");
  EXPECT_EQ(rot->attr_int("rotated", 0), 24);
  EXPECT_EQ(o.ctx.rewrites[0].replaced,
            (std::vector<std::string>{"slice0", "slice1", "slice2", "rope0", "rope1"}));
  expect_same_numbers(o);
}

TEST(MergeQkv, PipelineMergesAfterFusingTheBiases) {
  // In the pipeline the projections are MatMul -> Add; fuse_matmul_bias makes them FusedMatMul,
  // then merge_qkv packs them.
  Spec s;
  s.proj = Spec::Proj::MatMulAdd;
  s.mask = true;
  auto g = build(s);
  infer_shapes(*g);
  auto original = g->clone();
  OptimizeResult r = optimize_graph(*g, PipelineOptions{});
  EXPECT_EQ(count(*g, "FusedMatMul", "ai.fusec"), 1);
  EXPECT_EQ(count(*g, "Attention", "ai.fusec"), 1);
  EXPECT_EQ(g->nodes().size(), 2u);
  bool seen = false;
  for (const auto& rw : r.rewrites) seen |= rw.pass == "merge_qkv";
  EXPECT_TRUE(seen);
  VerifyResult v = verify_equivalence(*original, *g, 2, 7, {1e-5, 1e-6});
  EXPECT_TRUE(v.ok);
}

TEST(MergeQkv, NearMissPortable) {
  Spec s;
  s.opset = 23;
  s.standard = true;
  s.proj = Spec::Proj::MatMulAdd;  // what --portable leaves of 3-D projections
  expect_near_miss(s, "MatMul 'q' + MatMul 'k' + MatMul 'v' -> Attention 'attn' not merged",
                   "packing Q, K and V needs ai.fusec Attention (--portable writes standard ops only)",
                   PassOptions{true});
}

TEST(MergeQkv, NearMissProjectionsReadDifferentInputs) {
  Spec s;
  s.v_reads_other = true;  // cross-attention: K and V from the encoder
  expect_near_miss(s, kWhat, "the projections read different inputs ('x', 'x', 'x2')");
}

TEST(MergeQkv, NearMissWeightNotConstant) {
  Spec s;
  s.k_weight_computed = true;
  expect_near_miss(s, kWhat, "the weight 'wk' of FusedMatMul 'k' is not a constant");
}

TEST(MergeQkv, NearMissActivationOnAProjection) {
  Spec s;
  s.k_activation = "Relu";
  expect_near_miss(s, kWhat, "FusedMatMul 'k' applies the activation Relu (only plain products merge)");
}

TEST(MergeQkv, NearMissProjectionOutputReadElsewhere) {
  Spec s;
  s.k_also_output = true;
  expect_near_miss(s, kWhat, "the output 'k_out' of FusedMatMul 'k' is a graph output");
}

TEST(MergeQkv, NearMissHeadSizesDiffer) {
  Spec s;
  s.dv = 8;  // V's heads are 8 wide, K's 4
  expect_near_miss(s, kWhat, "K's head size 4 differs from V's 8 (packed QKV has one head size)");
}

TEST(MergeQkv, NearMissOnnxAttentionBeyondTheSubset) {
  // A softcap (Gemma 2) goes across: ai.fusec Attention has one.
  {
    Spec s;
    s.opset = 23;
    s.standard = true;
    s.softcap = 3;
    Outcome o = merge(s);
    ASSERT_TRUE(merged(o, "FusedMatMul", "ai.fusec"));
    EXPECT_FLOAT_EQ(find_named(*o.optimized, "attn")->attr_float("softcap", 0), 3.0f);
    expect_same_numbers(o);
  }
  GraphBuilder b(23);
  Value* x = b.input("x", DType::Float32, {2, 5, 16});
  std::vector<Value*> qkv;
  unsigned seed = 50;
  for (const char* n : {"q", "k", "v"})
    qkv.push_back(b.node("MatMul", {x, b.initializer(std::string("w") + n, constant({16, 16}, seed++))}, {}, n));
  auto outs =
      b.node_n("Attention", qkv, 4, {attr("q_num_heads", int64_t{4}), attr("kv_num_heads", int64_t{4})}, "attn");
  b.output(outs[0]);
  b.output(outs[3]);
  expect_near_miss(run_one_pass<MergeQkvPass>(b.build()), "merge_qkv", "which ai.fusec Attention does not have");
}

TEST(MergeQkv, NearMissFourDAttention) {
  // Llama: RoPE between the head split and the attention makes it 4-D; the projections are
  // found behind the head split, and the near-miss says why they stay apart.
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {2, 5, 16});
  std::vector<Value*> ins;
  unsigned seed = 30;
  for (const char* n : {"q", "k", "v"}) {
    const std::string s = n;
    Value* p = b.node("MatMul", {x, b.initializer("w" + s, constant({16, 16}, seed++))}, {}, s);
    Value* r = b.node("Reshape", {p, b.initializer(s + "_shape", int64s({2, 5, 4, 4}, {4}))}, {}, s + "_split");
    Value* t = b.node("Transpose", {r}, {attr("perm", std::vector<int64_t>{0, 2, 1, 3})}, s + "_bhsd");
    if (s != "v") t = b.node("Mul", {t, b.initializer(s + "_rope", constant({1, 1, 5, 4}, seed++))}, {}, s + "_rope");
    ins.push_back(t);
  }
  b.output(b.node_n("Attention", ins, 1, {}, "attn", "ai.fusec")[0]);
  Outcome o = run_one_pass<MergeQkvPass>(b.build());
  EXPECT_FALSE(o.changed);
  ASSERT_EQ(o.ctx.near_misses.size(), 1u);
  EXPECT_EQ(o.ctx.near_misses[0].what, "MatMul 'q' + MatMul 'k' + MatMul 'v' -> Attention 'attn' not merged");
  EXPECT_EQ(
      o.ctx.near_misses[0].reason,
      "Attention 'attn' is 4-D (Q, K and V are [B, heads, S, D], e.g. after RoPE): packed QKV is a form of the 3-D "
      "attention, which reads the projections' outputs directly");
}

TEST(MergeQkv, NearMissSplitOutputReadElsewhere) {
  // GPT-2 with use_cache: K and V also become present key/value.
  GraphBuilder b(17);
  Value* t = b.input("c_attn", DType::Float32, {2, 5, 48});
  auto qkv =
      b.node_n("Split", {t, b.initializer("sizes", int64s({16, 16, 16}, {3}))}, 3, {attr("axis", int64_t{2})}, "split");
  b.output(qkv[1]);
  b.output(b.node_n("Attention", qkv, 1, {attr("q_num_heads", int64_t{4}), attr("kv_num_heads", int64_t{4})}, "attn",
                    "ai.fusec")[0]);
  Outcome o = run_one_pass<MergeQkvPass>(b.build());
  EXPECT_FALSE(o.changed);
  ASSERT_EQ(o.ctx.near_misses.size(), 1u);
  EXPECT_EQ(o.ctx.near_misses[0].what, "Split 'split' -> Attention 'attn' not packed");
  EXPECT_EQ(o.ctx.near_misses[0].reason, "K: the output 'split_out1' of Split 'split' is a graph output");
}

TEST(MergeQkv, NotProjectionsIsSilent) {
  // Q, K, V straight from graph inputs: not this pattern, nothing said.
  GraphBuilder b(17);
  std::vector<Value*> ins;
  for (const char* n : {"q", "k", "v"}) ins.push_back(b.input(n, DType::Float32, {2, 5, 16}));
  b.output(b.node_n("Attention", ins, 1, {attr("q_num_heads", int64_t{4}), attr("kv_num_heads", int64_t{4})}, "attn",
                    "ai.fusec")[0]);
  Outcome o = run_one_pass<MergeQkvPass>(b.build());
  EXPECT_FALSE(o.changed);
  EXPECT_TRUE(o.ctx.near_misses.empty());
}

namespace {

/// ModernBERT's attention block: T [2, 5, 3·4·4] viewed [2, 5, 3, 4, 4] and unbound along axis 2
/// (Slices [i, i + 1) and Squeezes, or one Split and Squeezes); Q and K rotated over whole heads
/// (4-D ai.fusec Rotary, [1, 5, 1, 4] tables) where `rotated`, only Q where `q_only`; each viewed
/// back [2, 5, 16] for a 3-D ai.fusec Attention of `heads` heads.
std::unique_ptr<Graph> unbound_qkv(bool split, bool rotated, bool q_only = false, int64_t heads = 4) {
  GraphBuilder b(18);
  b.graph().opsets["ai.fusec"] = 1;
  Value* t = b.input("t", DType::Float32, {2, 5, 48});
  Value* view = b.node("Reshape", {t, b.initializer("shape5", int64s({2, 5, 3, 4, 4}, {5}))}, {}, "view");
  Value* axis = b.initializer("axis2", int64s({2}, {1}));
  Value* cos = b.initializer("cos", constant({1, 5, 1, 4}, 60));
  Value* sin = b.initializer("sin", constant({1, 5, 1, 4}, 61));
  std::vector<Value*> parts;
  if (split) {
    parts = b.node_n("Split", {view}, 3, {attr("axis", int64_t{2}), attr("num_outputs", int64_t{3})}, "unbind");
  } else {
    for (int i = 0; i < 3; ++i) {
      const std::string n = std::to_string(i);
      parts.push_back(
          b.node("Slice",
                 {view, b.initializer("st" + n, int64s({i}, {1})), b.initializer("en" + n, int64s({i + 1}, {1})), axis},
                 {}, "slice" + n));
    }
  }
  std::vector<Value*> qkv;
  for (int i = 0; i < 3; ++i) {
    const std::string n = std::to_string(i);
    Value* x = b.node("Squeeze", {parts[i], axis}, {}, "squeeze" + n);
    if (rotated && (i == 0 || (i == 1 && !q_only)))
      x = b.node_n("Rotary", {x, cos, sin}, 1, {}, "rope" + n, "ai.fusec")[0];
    qkv.push_back(b.node("Reshape", {x, b.initializer("shape3_" + n, int64s({2, 5, 16}, {3}))}, {}, "merge" + n));
  }
  b.output(
      b.node_n("Attention", qkv, 1, {attr("q_num_heads", heads), attr("kv_num_heads", heads)}, "attn", "ai.fusec")[0]);
  return b.build();
}

}  // namespace

TEST(MergeQkv, QkvUnboundFromAViewOfTheProductGoes) {
  // The fourth form, cut by Slices or by one Split, with the rotations or without: the Attention
  // reads T packed, one Rotary over it (Q's and K's heads, rotated = 32) stands for both, and the
  // view, the cuts, the Squeezes and the Reshapes back all go.
  for (bool split : {false, true})
    for (bool rotated : {true, false}) {
      SCOPED_TRACE(std::string(split ? "Split" : "Slices") + (rotated ? ", rotated" : ""));
      Outcome o = run_one_pass<MergeQkvPass>(unbound_qkv(split, rotated));
      EXPECT_TRUE(o.ctx.near_misses.empty());
      const Node* rot = packed_rotation(o, rotated ? 2 : 1);
      const Node* a = find_named(*o.optimized, "attn");
      ASSERT_TRUE(a);
      if (rotated) {
        ASSERT_TRUE(rot);
        EXPECT_EQ(rot->input(0)->name, "t");
        EXPECT_EQ(rot->attr_int("head_size", 0), 4);
        EXPECT_EQ(rot->attr_int("rotated", 0), 32);
      } else {
        EXPECT_EQ(a->input(0)->name, "t");
      }
      for (const char* gone : {"Slice", "Split", "Squeeze", "Reshape"}) EXPECT_EQ(count(*o.optimized, gone), 0) << gone;
      expect_same_numbers(o);
    }
}

TEST(MergeQkv, QkvUnboundButRotatedOnceOrOtherHeadsStays) {
  // Only Q rotated: not the form (silent). Heads the view does not hold: a near-miss naming them.
  Outcome once = run_one_pass<MergeQkvPass>(unbound_qkv(false, true, /*q_only=*/true));
  EXPECT_FALSE(once.changed);
  EXPECT_TRUE(once.ctx.near_misses.empty());
  Outcome other = run_one_pass<MergeQkvPass>(unbound_qkv(true, false, false, /*heads=*/2));
  EXPECT_FALSE(other.changed);
  ASSERT_EQ(other.ctx.near_misses.size(), 1u);
  EXPECT_EQ(other.ctx.near_misses[0].reason,
            "Attention 'attn''s heads are not the 4 of 4 values its view of 't' holds");
}
