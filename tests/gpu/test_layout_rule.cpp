// The CUDA planner's layout rule (backend/cuda/executor/layout_rule.h) and how the op families register
// their channels-last forms: no GPU needed.
#include <gtest/gtest.h>

#include "backend/cuda/core/cuda_op.h"
#include "backend/cuda/executor/layout_rule.h"

using namespace fusec::cuda;

namespace {

LayoutFacts facts(ChannelsLast kind, std::vector<int64_t> in, bool in_nhwc, std::vector<int64_t> out,
                  bool consumers = true) {
  LayoutFacts f;
  f.kind = kind;
  f.in_dims = std::move(in);
  f.in_nhwc = in_nhwc;
  f.nhwc_dtype = true;
  f.out_dims = {std::move(out)};
  f.consumers_take_nhwc = consumers;
  return f;
}

}  // namespace

TEST(CudaLayoutRule, LayoutFreeValues) {
  EXPECT_TRUE(layout_free({16, 72, 1, 1}));
  EXPECT_TRUE(layout_free({16, 1, 28, 28}));
  EXPECT_TRUE(layout_free({16, 72}));
  EXPECT_TRUE(layout_free({2, 3, 4, 5, 6, 7})) << "rank 6 is never stored channels-last";
  EXPECT_FALSE(layout_free({16, 72, 28, 28}));
  EXPECT_FALSE(layout_free({16, 72, 1, 28}));
  // N,C,D,H,W: a video model's activations, stored N,D,H,W,C.
  EXPECT_FALSE(layout_free({2, 3, 4, 5, 6}));
  EXPECT_FALSE(layout_free({16, 64, 8, 1, 1})) << "frames are a spatial dim too";
  EXPECT_TRUE(layout_free({16, 512, 1, 1, 1}));
  EXPECT_TRUE(layout_free({16, 1, 8, 56, 56}));
}

TEST(CudaLayoutRule, ConvRegionsStartWhereEveryConsumerTakesChannelsLast) {
  const LayoutFacts conv = facts(ChannelsLast::Region, {16, 64, 56, 56}, false, {16, 64, 56, 56});
  EXPECT_TRUE(plan_channels_last(conv));
  LayoutFacts f = conv;
  f.consumers_take_nhwc = false;
  EXPECT_FALSE(plan_channels_last(f)) << "a consumer that needs NCHW keeps the conv NCHW";
  f = conv;
  f.nhwc_dtype = false;
  EXPECT_FALSE(plan_channels_last(f)) << "strict fp32 stays NCHW";
  f = conv;
  f.in_dims = {16, 64, 56};
  f.out_dims = {{16, 64, 56}};
  EXPECT_FALSE(plan_channels_last(f)) << "1-D convs stay NCHW";
  EXPECT_TRUE(plan_channels_last(facts(ChannelsLast::Region, {16, 64, 8, 56, 56}, false, {16, 64, 8, 56, 56})))
      << "3-D convs run N,D,H,W,C";
  EXPECT_FALSE(plan_channels_last(facts(ChannelsLast::None, {16, 64, 56, 56}, true, {16, 64, 56, 56})));
}

// MobileNetV3/EfficientNet SE blocks: the activation stays NCHW (it also feeds a broadcast Mul),
// and the squeeze must read it there rather than change the layout of the whole activation.
TEST(CudaLayoutRule, ALayoutFreeResultFollowsItsInput) {
  for (ChannelsLast kind : {ChannelsLast::Region, ChannelsLast::FollowInput}) {
    EXPECT_FALSE(plan_channels_last(facts(kind, {16, 72, 28, 28}, false, {16, 72, 1, 1})));
    EXPECT_TRUE(plan_channels_last(facts(kind, {16, 72, 28, 28}, true, {16, 72, 1, 1})));
    EXPECT_FALSE(plan_channels_last(facts(kind, {16, 72, 28, 28}, false, {16, 72})));         // keepdims=0
    EXPECT_FALSE(plan_channels_last(facts(kind, {16, 72, 28, 28}, false, {16, 1, 28, 28})));  // mean over C
  }
  // Several outputs: only when every one is layout-free.
  LayoutFacts f = facts(ChannelsLast::Region, {16, 72, 28, 28}, false, {16, 72, 1, 1});
  f.out_dims.push_back({16, 72, 28, 28});
  EXPECT_TRUE(plan_channels_last(f));
}

TEST(CudaLayoutRule, FollowersNeverAskForALayoutChange) {
  // A reduction over the batch keeps a full-size activation: it still follows its input.
  EXPECT_FALSE(plan_channels_last(facts(ChannelsLast::FollowInput, {16, 72, 28, 28}, false, {1, 72, 28, 28})));
  EXPECT_TRUE(plan_channels_last(facts(ChannelsLast::FollowInput, {16, 72, 28, 28}, true, {1, 72, 28, 28}, false)));
}

TEST(CudaLayoutRule, LayoutFreeInputAndOutputKeepTheRegionRule) {
  // The SE block's 1x1 convs on [N,C,1,1]: either layout is the same memory; the rule is unchanged.
  EXPECT_TRUE(plan_channels_last(facts(ChannelsLast::Region, {16, 72, 1, 1}, false, {16, 18, 1, 1})));
  EXPECT_FALSE(plan_channels_last(facts(ChannelsLast::Region, {16, 72, 1, 1}, false, {16, 18, 1, 1}, false)));
}

TEST(CudaLayoutRule, GlobalPoolsAndReductionsFollowTheirInputConvsStartRegions) {
  const CudaOpRegistry& r = CudaOpRegistry::global();
  for (const char* op : {"GlobalAveragePool", "GlobalMaxPool", "ReduceMean", "ReduceMax", "ReduceSum"}) {
    EXPECT_EQ(r.channels_last_kind("", op), ChannelsLast::FollowInput) << op;
    EXPECT_NE(r.find_channels_last("", op), nullptr) << op;
  }
  // DenseNet's concat of conv outputs and the BatchNormalization after it follow too.
  for (const char* op : {"Concat", "BatchNormalization"}) {
    EXPECT_EQ(r.channels_last_kind("", op), ChannelsLast::FollowInput) << op;
    EXPECT_NE(r.find_channels_last("", op), nullptr) << op;
  }
  EXPECT_EQ(r.channels_last_kind("", "Conv"), ChannelsLast::Region);
  EXPECT_EQ(r.channels_last_kind("ai.fusec", "FusedConv"), ChannelsLast::Region);
  EXPECT_EQ(r.channels_last_kind("", "MaxPool"), ChannelsLast::Region);
  EXPECT_EQ(r.channels_last_kind("", "GlobalLpPool"), ChannelsLast::None);
  EXPECT_EQ(r.channels_last_kind("", "Softmax"), ChannelsLast::None);
}

TEST(CudaLayoutRule, ElementwiseOpsFollowWhereEveryInputIsTheOutputOrLayoutFree) {
  const std::vector<int64_t> out = {16, 72, 28, 28};
  EXPECT_TRUE(elementwise_follows({out, out}, out));
  EXPECT_TRUE(elementwise_follows({out, {16, 72, 1, 1}}, out)) << "the SE block's x * s";
  EXPECT_TRUE(elementwise_follows({{1, 72, 1, 1}, out}, out)) << "the scale first";
  EXPECT_TRUE(elementwise_follows({out, {72, 1, 1}}, out)) << "a rank-3 per-channel constant";
  EXPECT_TRUE(elementwise_follows({out, {}}, out)) << "a scalar";
  EXPECT_TRUE(elementwise_follows({out, {28}}, out)) << "[1,1,1,W] is stored alike in both layouts";
  EXPECT_TRUE(elementwise_follows({out, {28, 28}}, out)) << "an H x W plane: [1,1,H,W] is stored alike too";
  EXPECT_FALSE(elementwise_follows({out, {16, 72, 28, 1}}, out));
  EXPECT_FALSE(elementwise_follows({{16, 72, 28}}, {16, 72, 28})) << "not 4-D";
  EXPECT_FALSE(elementwise_follows({{1, 16, 72, 28, 28}}, out));
  const std::vector<int64_t> video = {16, 64, 8, 28, 28};
  EXPECT_TRUE(elementwise_follows({video, {64, 1, 1, 1}}, video)) << "a per-channel constant of a 3-D conv";
  EXPECT_TRUE(elementwise_follows({video, video}, video)) << "the residual add";
  EXPECT_FALSE(elementwise_follows({video, {64, 8, 1, 1}}, video)) << "per channel and frame";
}

TEST(CudaLayoutRule, ChannelsLastElementwiseDimsAreInMemoryOrder) {
  EXPECT_EQ(nhwc_order({16, 72, 28, 14}), (std::vector<int64_t>{16, 28, 14, 72}));
  EXPECT_EQ(nhwc_order({16, 72, 1, 1}), (std::vector<int64_t>{16, 1, 1, 72}));
  EXPECT_EQ(nhwc_order({72, 1, 1}), (std::vector<int64_t>{1, 1, 1, 72}));
  EXPECT_EQ(nhwc_order({}), (std::vector<int64_t>{1, 1, 1, 1}));
  EXPECT_EQ(pad_to_rank({5}, 4), (std::vector<int64_t>{1, 1, 1, 5}));
  EXPECT_EQ(nhwc_order({16, 64, 8, 28, 14}, 5), (std::vector<int64_t>{16, 8, 28, 14, 64}));
  EXPECT_EQ(nhwc_order({64, 1, 1, 1}, 5), (std::vector<int64_t>{1, 1, 1, 1, 64}));
}

TEST(CudaLayoutRule, TransposesToAndFromChannelsLastAreViewsAtRanks4And5) {
  EXPECT_EQ(channels_last_perm(4), (std::vector<int64_t>{0, 2, 3, 1}));
  EXPECT_EQ(channels_first_perm(4), (std::vector<int64_t>{0, 3, 1, 2}));
  EXPECT_EQ(channels_last_perm(5), (std::vector<int64_t>{0, 2, 3, 4, 1}));
  EXPECT_EQ(channels_first_perm(5), (std::vector<int64_t>{0, 4, 1, 2, 3}));
  EXPECT_EQ(transpose_view({0, 2, 3, 1}, true, true), TransposeView::FromChannelsLast);
  EXPECT_EQ(transpose_view({0, 3, 1, 2}, false, true), TransposeView::ToChannelsLast);
  EXPECT_EQ(transpose_view({0, 2, 3, 4, 1}, true, true), TransposeView::FromChannelsLast);
  EXPECT_EQ(transpose_view({0, 4, 1, 2, 3}, false, true), TransposeView::ToChannelsLast);
  EXPECT_EQ(transpose_view({0, 2, 3, 4, 1}, false, true), TransposeView::None) << "an NCDHW input is not a view";
  EXPECT_EQ(transpose_view({0, 4, 1, 2, 3}, false, false), TransposeView::None) << "strict fp32";
  EXPECT_EQ(transpose_view({0, 2, 1}, true, true), TransposeView::None);
  EXPECT_EQ(transpose_view({0, 3, 4, 2, 1}, true, true), TransposeView::None);
}

// A follower of several activations (Concat) takes the layout most of their bytes are in.
TEST(CudaLayoutRule, AFollowerOfSeveralActivationsTakesTheMajorityLayout) {
  EXPECT_TRUE(majority_channels_last({{100, true}, {60, false}, {30, false}}));
  EXPECT_FALSE(majority_channels_last({{100, true}, {60, false}, {50, false}}));
  EXPECT_TRUE(majority_channels_last({{64, true}, {64, false}})) << "a tie: the first input's";
  EXPECT_FALSE(majority_channels_last({{64, false}, {64, true}})) << "a tie: the first input's";
  EXPECT_FALSE(majority_channels_last({}));
}
