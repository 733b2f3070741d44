// channels_last_tokens: tokens turned into an image for a conv and back (SegFormer's Mix-FFN, its
// overlapping patch embeddings) become 4-D channels-last permutations around the conv, with the
// same numbers, an open batch left open, and nothing rewritten away from a conv or where the 3-D
// intermediate has another reader.
#include "passes/channels_last_tokens.h"

#include "pass_test_util.h"
#include "test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

Outcome run_pass(std::unique_ptr<Graph> g) { return run_one_pass<ChannelsLastTokensPass>(std::move(g)); }

constexpr int64_t kH = 3, kW = 4, kC = 8;

Value* shape(GraphBuilder& b, const std::string& name, std::vector<int64_t> d) {
  const auto n = static_cast<int64_t>(d.size());
  return b.initializer(name, Tensor::from_int64(std::move(d), {n}));
}

/// tokens [N, kH·kW, kC] -> Linear -> Transpose(0,2,1) -> Reshape [N,C,H,W] -> conv -> Reshape
/// [N,C',S'] -> Transpose(0,2,1) -> Relu. `stride` 1: SegFormer's depthwise 3x3 (groups = C); 2: an
/// overlapping patch embedding to 2·kC channels on a quarter of the tokens.
struct Tokens {
  GraphBuilder b;
  Value *tokens, *image, *flat, *transposed;
  Tokens(bool open, int64_t stride) {
    tokens = b.input("tokens", DType::Float32, {open ? Dim::sym("N") : Dim(2), Dim(kH * kW), Dim(kC)});
    Value* h = b.node("MatMul", {tokens, b.initializer("fc.weight", uniform_floats({kC, kC}, 1))}, {}, "fc");
    Value* t = b.node("Transpose", {h}, {attr("perm", std::vector<int64_t>{0, 2, 1})}, "to_channels");
    image = b.node("Reshape", {t, shape(b, "image_shape", {0, kC, kH, kW})}, {}, "to_image");
    const int64_t out_c = stride == 1 ? kC : 2 * kC, group = stride == 1 ? kC : 1;
    Value* w = b.initializer("conv.weight", uniform_floats({out_c, kC / group, 3, 3}, 2));
    Value* conv = b.node("Conv", {image, w, b.initializer("conv.bias", uniform_floats({out_c}, 3))},
                         {attr("pads", std::vector<int64_t>{1, 1, 1, 1}), attr("group", group),
                          attr("strides", std::vector<int64_t>{stride, stride})},
                         "conv");
    const int64_t oh = (kH - 1) / stride + 1, ow = (kW - 1) / stride + 1;
    flat = b.node("Reshape", {conv, shape(b, "flat_shape", {0, out_c, oh * ow})}, {}, "flatten");
    transposed = b.node("Transpose", {flat}, {attr("perm", std::vector<int64_t>{0, 2, 1})}, "to_tokens");
    b.output(b.node("Relu", {transposed}, {}, "act"));
  }
};

std::vector<std::vector<int64_t>> perms(const Graph& g) {
  std::vector<std::vector<int64_t>> p;
  for (const auto& n : g.nodes())
    if (n->op_type == "Transpose") p.push_back(n->attr_ints("perm"));
  return p;
}

}  // namespace

TEST(ChannelsLastTokens, AMixFfnsDepthwiseConvReadsAndWritesTokensThroughChannelsLastPermutations) {
  for (bool open : {false, true}) {
    SCOPED_TRACE(open ? "open batch" : "batch 2");
    Tokens t(open, 1);
    Outcome o = run_pass(t.b.build());
    ASSERT_TRUE(o.changed);
    EXPECT_EQ(perms(*o.optimized), (std::vector<std::vector<int64_t>>{{0, 3, 1, 2}, {0, 2, 3, 1}}));
    EXPECT_EQ(count(*o.optimized, "Reshape"), 2);
    EXPECT_EQ(o.ctx.rewrites.size(), 2u);
    // The new nodes keep the names of the ones they stand in for.
    ASSERT_NE(node_named(*o.optimized, "to_image"), nullptr);
    EXPECT_EQ(node_named(*o.optimized, "to_image")->outputs[0]->type.shape->size(), 4u);
    ASSERT_NE(node_named(*o.optimized, "to_tokens"), nullptr);
    EXPECT_EQ(node_named(*o.optimized, "to_tokens")->op_type, "Transpose");
    if (open) {
      const Graph& g = *o.optimized;
      EXPECT_FALSE((*node_named(g, "act")->outputs[0]->type.shape)[0].is_static()) << "the batch stays open";
      bind_open_dims(*o.original);
      auto bound = o.optimized->clone();
      bind_open_dims(*bound);
      infer_shapes(*o.original);
      infer_shapes(*bound);
      expect_same_numbers(*o.original, *bound, 5);
    } else {
      expect_same_numbers(*o.original, *o.optimized, 5);
    }
  }
}

TEST(ChannelsLastTokens, AStridedPatchEmbeddingWritesItsFewerTokensInPlace) {
  Tokens t(false, 2);
  Outcome o = run_pass(t.b.build());
  ASSERT_TRUE(o.changed);
  EXPECT_EQ(perms(*o.optimized), (std::vector<std::vector<int64_t>>{{0, 3, 1, 2}, {0, 2, 3, 1}}));
  EXPECT_EQ(*node_named(*o.optimized, "act")->outputs[0]->type.shape, (Shape{Dim(2), Dim(4), Dim(2 * kC)}));
  expect_same_numbers(*o.original, *o.optimized, 6);
}

TEST(ChannelsLastTokens, AThreeDimensionalIntermediateWithAnotherReaderIsLeftAlone) {
  Tokens t(false, 1);
  t.b.output(t.flat);  // [N, C, S] is a result of its own: the 3-D copy stays
  Outcome o = run_pass(t.b.build());
  ASSERT_TRUE(o.changed) << "the input side still rewrites";
  EXPECT_EQ(perms(*o.optimized), (std::vector<std::vector<int64_t>>{{0, 3, 1, 2}, {0, 2, 1}}));
  expect_same_numbers(*o.original, *o.optimized, 7);
}

TEST(ChannelsLastTokens, TokensViewedAsAnImageWithoutAConvAreLeftAlone) {
  GraphBuilder b;
  Value* x = b.input("x", DType::Float32, {Dim(2), Dim(kH * kW), Dim(kC)});
  Value* t = b.node("Transpose", {x}, {attr("perm", std::vector<int64_t>{0, 2, 1})});
  Value* img = b.node("Reshape", {t, shape(b, "s", {2, kC, kH, kW})});
  b.output(b.node("MaxPool", {img}, {attr("kernel_shape", std::vector<int64_t>{2, 2})}));
  Outcome o = run_pass(b.build());
  EXPECT_FALSE(o.changed);
  expect_unchanged(*o.original, *o.optimized);
}
