// The planner's layout choices on the GPU (layout_rule.h): global pools and reductions over H and W
// follow their input's layout, NCHW or channels-last, and never pull a relayout of the activation
// they read; both exporters' forms of a squeeze (GlobalAveragePool, ReduceMean over [-1, -2]) plan
// the same steps; every result equals the CPU reference, at odd sizes.
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "gpu_test_util.h"
#include "passes/infer_shapes.h"

using namespace fusec;
using namespace fusec::test;

namespace {

const Precision kAll[] = {Precision::FP32, Precision::TF32, Precision::FP16, Precision::BF16};

Value* weight(GraphBuilder& b, const std::string& name, std::vector<int64_t> d, uint64_t seed) {
  return b.initializer(name, random_tensor(DType::Float32, std::move(d), seed, -0.3, 0.3));
}

Value* fused_conv(GraphBuilder& b, const std::string& name, Value* x, int64_t cin, int64_t cout, int64_t k,
                  const char* act, uint64_t seed, std::vector<NamedAttribute> extra = {}) {
  std::vector<NamedAttribute> attrs = {attr("activation", std::string(act))};
  const int64_t pad = k / 2;
  if (pad) attrs.push_back(attr("pads", std::vector<int64_t>{pad, pad, pad, pad}));
  for (auto& a : extra) attrs.push_back(std::move(a));
  return b.node_n("FusedConv",
                  {x, weight(b, name + ".w", {cout, cin, k, k}, seed), weight(b, name + ".b", {cout}, seed + 1)}, 1,
                  attrs, name, "ai.fusec")[0];
}

/// The squeeze over H and W as either exporter writes it (opset 18: ReduceMean's axes are an input).
Value* squeeze(GraphBuilder& b, Value* a, const std::string& form) {
  if (form == "legacy") return b.node("GlobalAveragePool", {a}, {}, "squeeze");
  if (form == "max") return b.node("GlobalMaxPool", {a}, {}, "squeeze");
  Value* axes = b.initializer("squeeze.axes", Tensor::from_int64({-1, -2}, {2}));
  return b.node("ReduceMean", {a, axes}, {attr("keepdims", int64_t{1})}, "squeeze");
}

/// A MobileNetV3 squeeze-and-excite block at odd sizes: the expanded activation `act` feeds the
/// squeeze and the broadcast Mul, whose result `excited` feeds the projection. `scale_first`
/// writes the Mul as s * x; `affine` adds x * [C,1,1] + scalar after it (rank-3 and rank-0
/// broadcasts).
std::unique_ptr<Graph> se_block(const std::string& form, std::string* act, std::string* excited = nullptr,
                                bool scale_first = false, bool affine = false) {
  GraphBuilder b(18);
  b.graph().opsets["ai.fusec"] = 1;
  Value* x = b.input("x", DType::Float32, {Dim(2), Dim(24), Dim(13), Dim(11)});
  Value* a = fused_conv(b, "expand", x, 24, 40, 1, "HardSwish", 10);
  *act = a->name;
  Value* s = squeeze(b, a, form);
  Value* r = fused_conv(b, "fc1", s, 40, 16, 1, "Relu", 20);
  Value* e = fused_conv(b, "fc2", r, 16, 40, 1, "HardSigmoid", 30,
                        {attr("activation_params", std::vector<float>{1.0f / 6, 0.5f})});
  Value* m = b.node("Mul", scale_first ? std::vector<Value*>{e, a} : std::vector<Value*>{a, e}, {}, "excite");
  if (affine) {
    m = b.node("Mul", {m, weight(b, "gamma", {40, 1, 1}, 50)}, {}, "gamma");
    m = b.node("Add", {m, b.initializer("beta", Tensor::from_float({0.25f}, {}))}, {}, "beta");
  }
  if (excited) *excited = m->name;
  b.output(
      b.node("Conv", {m, weight(b, "project.w", {24, 40, 1, 1}, 40), weight(b, "project.b", {24}, 41)}, {}, "project"));
  auto g = b.build();
  infer_shapes(*g);
  return g;
}

/// A ResNet head at odd sizes: two convs (channels-last at tf32/fp16/bf16), a pool over H and W in
/// one of its forms, then the classifier.
std::unique_ptr<Graph> head(const std::string& form, std::string* act) {
  GraphBuilder b(18);
  b.graph().opsets["ai.fusec"] = 1;
  Value* x = b.input("x", DType::Float32, {Dim(3), Dim(8), Dim(15), Dim(13)});
  Value* c1 = fused_conv(b, "c1", x, 8, 32, 3, "Relu", 10);
  // The last conv of the body has no bias, as the dynamo exporter writes a BN-folded zero bias.
  Value* a = b.node_n("FusedConv", {c1, weight(b, "c2.w", {32, 32, 3, 3}, 20), nullptr, c1}, 1,
                      {attr("activation", std::string("Relu")), attr("pads", std::vector<int64_t>{1, 1, 1, 1})}, "c2",
                      "ai.fusec")[0];
  *act = a->name;
  Value* flat = nullptr;
  if (form == "reducemean_keepdims0") {
    flat = b.node("ReduceMean", {a, b.initializer("pool.axes", Tensor::from_int64({2, 3}, {2}))},
                  {attr("keepdims", int64_t{0})}, "pool");
  } else if (form == "reducemax") {
    Value* p = b.node("ReduceMax", {a, b.initializer("pool.axes", Tensor::from_int64({-2, -1}, {2}))},
                      {attr("keepdims", int64_t{1})}, "pool");
    flat = b.node("Flatten", {p});
  } else {
    Value* p = form == "reducemean"
                   ? b.node("ReduceMean", {a, b.initializer("pool.axes", Tensor::from_int64({-1, -2}, {2}))},
                            {attr("keepdims", int64_t{1})}, "pool")
                   : b.node(form, {a}, {}, "pool");
    flat = b.node("Flatten", {p});
  }
  b.output(b.node("Gemm", {flat, weight(b, "fc.w", {5, 32}, 30), weight(b, "fc.b", {5}, 31)},
                  {attr("transB", int64_t{1})}, "fc"));
  auto g = b.build();
  infer_shapes(*g);
  return g;
}

}  // namespace

TEST(GpuLayout, SqueezeExciteBlocksRunInOneLayoutWithoutARelayout) {
  FUSEC_REQUIRE_GPU();
  // The broadcast Mul x * s ([N,C,1,1]) follows x's layout like any elementwise op, so the block
  // stays channels-last where convs run channels-last (tf32, fp16, bf16) and NCHW at fp32.
  const Tensor x = random_tensor(DType::Float32, {2, 24, 13, 11}, 60);
  for (Precision p : kAll) {
    const bool nhwc = p != Precision::FP32;
    int steps_of_legacy = -1;
    for (const char* form : {"legacy", "dynamo", "max"})
      for (int variant = 0; variant < 3; ++variant) {
        SCOPED_TRACE(std::string(precision_name(p)) + ", " + form + ", variant " + std::to_string(variant));
        std::string act, excited;
        auto g = se_block(form, &act, &excited, /*scale_first=*/variant == 1, /*affine=*/variant == 2);
        expect_graph_gpu_matches_cpu(*g, {x}, p);
        const PlannedRun r = plan_and_run(*g, {x}, p);
        EXPECT_EQ(r.relayouts(act), 0) << "the squeezed activation is read where it is";
        EXPECT_EQ(r.relayouts(excited), 0) << "the excited activation is read where it is";
        EXPECT_EQ(r.kernel_of("squeeze").find("NHWC") != std::string::npos, nhwc) << r.kernel_of("squeeze");
        if (variant != 0) continue;
        if (std::string(form) == "legacy") steps_of_legacy = static_cast<int>(r.steps.size());
        if (std::string(form) == "dynamo")
          EXPECT_EQ(static_cast<int>(r.steps.size()), steps_of_legacy) << "both forms plan the same steps";
      }
  }
}

TEST(GpuLayout, PoolOfAChannelsLastActivationRunsChannelsLastWithoutARelayout) {
  FUSEC_REQUIRE_GPU();
  const Tensor x = random_tensor(DType::Float32, {3, 8, 15, 13}, 61);
  for (Precision p : kAll) {
    const bool nhwc = p != Precision::FP32;
    for (const char* form : {"GlobalAveragePool", "GlobalMaxPool", "reducemean", "reducemean_keepdims0", "reducemax"}) {
      SCOPED_TRACE(std::string(precision_name(p)) + ", " + form);
      std::string act;
      auto g = head(form, &act);
      expect_graph_gpu_matches_cpu(*g, {x}, p);
      const PlannedRun r = plan_and_run(*g, {x}, p);
      EXPECT_EQ(r.relayouts(act), 0) << "the pooled activation is read where it is";
      EXPECT_EQ(r.relayouts(), nhwc ? 1 : 0) << "only the graph input changes layout, for the first conv";
      EXPECT_EQ(r.kernel_of("pool").find("NHWC") != std::string::npos, nhwc) << r.kernel_of("pool");
      EXPECT_EQ(r.kernel_of("c2").find("NHWC") != std::string::npos, nhwc) << r.kernel_of("c2");
    }
  }
}

TEST(GpuLayout, ReductionsOfAChannelsLastInputMatchTheReference) {
  FUSEC_REQUIRE_GPU();
  // conv (channels-last at fp16) -> Reduce* over each axis set; a keepdims=0 result whose kept
  // dims would come out of NHWC memory in another order is read from an NCHW copy instead.
  struct Case {
    const char* op;
    std::vector<int64_t> axes;
    int64_t keepdims;
    bool relayout;
  };
  const Case cases[] = {{"ReduceMean", {2, 3}, 1, false}, {"ReduceMean", {1}, 1, false},
                        {"ReduceSum", {1}, 0, false},     {"ReduceMax", {0}, 1, false},
                        {"ReduceMean", {2, 3}, 0, false}, {"ReduceMin", {3}, 1, false},
                        {"ReduceSum", {2}, 0, true},      {"ReduceMean", {0, 1, 2, 3}, 0, false}};
  const Tensor x = random_tensor(DType::Float32, {3, 8, 7, 5}, 62);
  for (Precision p : {Precision::FP16, Precision::BF16, Precision::FP32}) {
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(precision_name(p)) + ", " + c.op + " keepdims " + std::to_string(c.keepdims) + " axes " +
                   std::to_string(c.axes.size()) + " from " + std::to_string(c.axes[0]));
      GraphBuilder b(18);
      Value* in = b.input("x", DType::Float32, {Dim(3), Dim(8), Dim(7), Dim(5)});
      Value* conv = b.node("Conv", {in, weight(b, "w", {16, 8, 3, 3}, 1), weight(b, "b", {16}, 2)},
                           {attr("pads", std::vector<int64_t>{1, 1, 1, 1})}, "conv");
      const std::string act = conv->name;
      Value* axes = b.initializer("axes", Tensor::from_int64(c.axes, {static_cast<int64_t>(c.axes.size())}));
      b.output(b.node(c.op, {conv, axes}, {attr("keepdims", c.keepdims)}, "reduce"));
      auto g = b.build();
      infer_shapes(*g);
      expect_graph_gpu_matches_cpu(*g, {x}, p);
      const PlannedRun r = plan_and_run(*g, {x}, p);
      EXPECT_EQ(r.relayouts(act) > 0, p != Precision::FP32 && c.relayout);
    }
  }
}

namespace {

/// A ConvNeXt block at odd sizes, as both exporters write it: depthwise 7x7 conv, permute to
/// N,H,W,C, LayerNorm over C, the MLP as MatMul + Add, permute back, the per-channel layer scale
/// ([C,1,1]) and the residual. `convs` stacks a second block so a permute back feeds a conv.
std::unique_ptr<Graph> convnext_block(int blocks) {
  GraphBuilder b(18);
  const int64_t C = 24;
  Value* x = b.input("x", DType::Float32, {Dim(2), Dim(C), Dim(9), Dim(7)});
  for (int k = 0; k < blocks; ++k) {
    const std::string p = "b" + std::to_string(k) + ".";
    Value* dw = b.node("Conv", {x, weight(b, p + "dw.w", {C, 1, 7, 7}, 70 + k), weight(b, p + "dw.b", {C}, 71 + k)},
                       {attr("group", C), attr("pads", std::vector<int64_t>{3, 3, 3, 3})}, p + "dwconv");
    Value* t = b.node("Transpose", {dw}, {attr("perm", std::vector<int64_t>{0, 2, 3, 1})}, p + "to_nhwc");
    Value* ln = b.node("LayerNormalization", {t, weight(b, p + "ln.s", {C}, 72 + k), weight(b, p + "ln.b", {C}, 73 + k)},
                       {attr("axis", int64_t{-1})}, p + "ln");
    Value* h = b.node("Add", {b.node("MatMul", {ln, weight(b, p + "fc1.w", {C, 4 * C}, 74 + k)}), weight(b, p + "fc1.b", {4 * C}, 75 + k)});
    h = b.node("Relu", {h});
    h = b.node("Add", {b.node("MatMul", {h, weight(b, p + "fc2.w", {4 * C, C}, 76 + k)}), weight(b, p + "fc2.b", {C}, 77 + k)});
    Value* back = b.node("Transpose", {h}, {attr("perm", std::vector<int64_t>{0, 3, 1, 2})}, p + "to_nchw");
    Value* scaled = b.node("Mul", {back, weight(b, p + "gamma", {C, 1, 1}, 78 + k)}, {}, p + "scale");
    x = b.node("Add", {scaled, x}, {}, p + "residual");
  }
  b.output(x);
  auto g = b.build();
  infer_shapes(*g);
  return g;
}

}  // namespace

TEST(GpuLayout, PermutesToAndFromChannelsLastAreViewsOfIt) {
  FUSEC_REQUIRE_GPU();
  const Tensor x = random_tensor(DType::Float32, {2, 24, 9, 7}, 63);
  for (Precision p : kAll) {
    const bool nhwc = p != Precision::FP32;
    for (int blocks : {1, 2}) {
      SCOPED_TRACE(std::string(precision_name(p)) + ", " + std::to_string(blocks) + " blocks");
      auto g = convnext_block(blocks);
      expect_graph_gpu_matches_cpu(*g, {x}, p);
      const PlannedRun r = plan_and_run(*g, {x}, p);
      for (int k = 0; k < blocks; ++k)
        for (const char* t : {"to_nhwc", "to_nchw"}) {
          const std::string node = "b" + std::to_string(k) + "." + t;
          EXPECT_EQ(r.kernel_of(node) == "view of channels-last memory", nhwc) << node << ": " << r.kernel_of(node);
        }
      // Channels-last: the input changes layout for the first conv and the result for the graph
      // output, nothing between.
      if (nhwc) EXPECT_EQ(r.relayouts(), 2);
    }
  }
}

namespace {

/// A DenseNet dense block at odd spatial sizes, as both exporters write torchvision's: each layer
/// concats every feature so far, pre-activates the concat (BatchNormalization, Relu), then a 1x1
/// conv with its ReLU and a 3x3 conv whose output joins the next concat. Channel counts are
/// multiples of 8, as DenseNet's are (a stem of 16, a growth of 8). `fused` writes each BN -> Relu
/// as the optimizer does (one FusedElementwise, BN as x·s + t); `bns` names the pre-activation nodes.
std::unique_ptr<Graph> dense_block(int layers, bool fused, std::vector<std::string>* bns) {
  GraphBuilder b(18);
  b.graph().opsets["ai.fusec"] = 1;
  Value* x = b.input("x", DType::Float32, {Dim(2), Dim(8), Dim(9), Dim(7)});
  std::vector<Value*> features = {fused_conv(b, "stem", x, 8, 16, 3, "Relu", 80)};
  int64_t c = 16;
  for (int k = 0; k <= layers; ++k) {
    const std::string p = "l" + std::to_string(k) + ".";
    Value* cat =
        features.size() == 1 ? features[0] : b.node("Concat", features, {attr("axis", int64_t{1})}, p + "concat");
    Value* act = nullptr;
    if (fused) {
      const std::string program = "r0 = mul i0 i1; r1 = add r0 i2; r2 = relu r1";
      act = b.node_n("FusedElementwise",
                     {cat, weight(b, p + "s", {c, 1, 1}, 81 + k), weight(b, p + "t", {c, 1, 1}, 82 + k)}, 1,
                     {attr("program", program)}, p + "norm", "ai.fusec")[0];
    } else {
      Value* bn = b.node("BatchNormalization",
                         {cat, b.initializer(p + "scale", random_tensor(DType::Float32, {c}, 83 + k, 0.5, 1.5)),
                          weight(b, p + "B", {c}, 84 + k), weight(b, p + "mean", {c}, 85 + k),
                          b.initializer(p + "var", random_tensor(DType::Float32, {c}, 86 + k, 0.2, 2))},
                         {}, p + "norm");
      act = b.node("Relu", {bn}, {}, p + "relu");
    }
    bns->push_back(p + "norm");
    if (k == layers) {
      b.output(act);
      break;
    }
    Value* bottleneck = fused_conv(b, p + "conv1", act, c, 16, 1, "Relu", 87 + k);
    features.push_back(b.node("Conv", {bottleneck, weight(b, p + "conv2.w", {8, 16, 3, 3}, 88 + k)},
                              {attr("pads", std::vector<int64_t>{1, 1, 1, 1})}, p + "conv2"));
    c += 8;
  }
  auto g = b.build();
  infer_shapes(*g);
  return g;
}

}  // namespace

TEST(GpuLayout, DenseBlocksConcatAndNormalizeChannelsLastWithoutARelayout) {
  FUSEC_REQUIRE_GPU();
  // The convs' outputs join a Concat, which follows them channels-last, as do the BN (or its
  // fused form) and the Relu after it: the only layout changes are the graph's input and output.
  const Tensor x = random_tensor(DType::Float32, {2, 8, 9, 7}, 64);
  for (Precision p : kAll) {
    const bool nhwc = p != Precision::FP32;
    for (bool fused : {false, true}) {
      SCOPED_TRACE(std::string(precision_name(p)) + (fused ? ", fused BN" : ", BatchNormalization"));
      std::vector<std::string> bns;
      auto g = dense_block(3, fused, &bns);
      expect_graph_gpu_matches_cpu(*g, {x}, p);
      const PlannedRun r = plan_and_run(*g, {x}, p);
      EXPECT_EQ(r.relayouts(), nhwc ? 2 : 0);
      for (const std::string& bn : bns) {
        EXPECT_NE(r.kernel_of(bn), "cpu reference") << bn;
        if (!fused) EXPECT_EQ(r.kernel_of(bn).find("channels-last") != std::string::npos, nhwc) << r.kernel_of(bn);
      }
      EXPECT_EQ(r.kernel_of("l2.conv2").find("NHWC") != std::string::npos, nhwc) << r.kernel_of("l2.conv2");
    }
  }
}

TEST(GpuLayout, ABatchNormBetweenConvsNormalizesChannelsLast) {
  FUSEC_REQUIRE_GPU();
  // conv -> BN -> Relu -> conv: the BN follows the first conv's layout. Its 12 channels take the
  // one-channel-per-thread path at fp16 and bf16, whole 16-byte vectors at tf32.
  GraphBuilder b(18);
  b.graph().opsets["ai.fusec"] = 1;
  Value* x = b.input("x", DType::Float32, {Dim(2), Dim(8), Dim(9), Dim(7)});
  Value* a =
      b.node("Conv", {x, weight(b, "c1.w", {12, 8, 3, 3}, 92)}, {attr("pads", std::vector<int64_t>{1, 1, 1, 1})}, "c1");
  Value* bn =
      b.node("BatchNormalization",
             {a, b.initializer("scale", random_tensor(DType::Float32, {12}, 93, 0.5, 1.5)), weight(b, "B", {12}, 94),
              weight(b, "mean", {12}, 95), b.initializer("var", random_tensor(DType::Float32, {12}, 96, 0.2, 2))},
             {}, "bn");
  b.output(b.node("Conv", {b.node("Relu", {bn}), weight(b, "c2.w", {8, 12, 1, 1}, 97)}, {}, "c2"));
  auto g = b.build();
  infer_shapes(*g);
  const Tensor in = random_tensor(DType::Float32, {2, 8, 9, 7}, 67);
  for (Precision p : kAll) {
    SCOPED_TRACE(precision_name(p));
    expect_graph_gpu_matches_cpu(*g, {in}, p);
    const PlannedRun r = plan_and_run(*g, {in}, p);
    EXPECT_EQ(r.kernel_of("bn").find("channels-last") != std::string::npos, p != Precision::FP32) << r.kernel_of("bn");
    EXPECT_EQ(r.relayouts(), p != Precision::FP32 ? 2 : 0);
  }
}

TEST(GpuLayout, AConcatOfMixedLayoutsFollowsMostOfItsBytes) {
  FUSEC_REQUIRE_GPU();
  // Concat(conv output channels-last, graph input NCHW): the smaller input changes layout. A 3x3
  // conv whose 12 channels cuDNN would pad channels-last runs NCHW instead, as nothing else needs
  // it channels-last: no layout change at all. A 1x1 conv of 12 channels runs unpadded on fusec's
  // narrow-channel kernel, so it stays channels-last like the 24-channel one.
  struct Case {
    int64_t conv_channels, side_channels;
    int conv_relayouts, side_relayouts;
    bool conv_nhwc;
    int64_t kernel = 3;
  };
  for (const Case& k :
       {Case{24, 8, 0, 1, true}, Case{8, 24, 1, 0, true}, Case{12, 8, 0, 0, false}, Case{12, 8, 0, 1, true, 1}}) {
    SCOPED_TRACE("conv " + std::to_string(k.conv_channels) + " channels, " + std::to_string(k.kernel) + "x" +
                 std::to_string(k.kernel) + ", side " + std::to_string(k.side_channels));
    const int64_t cc = k.conv_channels, ci = k.side_channels;
    GraphBuilder b(18);
    b.graph().opsets["ai.fusec"] = 1;
    Value* x = b.input("x", DType::Float32, {Dim(2), Dim(8), Dim(9), Dim(7)});
    Value* side = b.input("side", DType::Float32, {Dim(2), Dim(ci), Dim(9), Dim(7)});
    Value* conv = fused_conv(b, "conv", x, 8, cc, k.kernel, "Relu", 90);
    Value* cat = b.node("Concat", {conv, side}, {attr("axis", int64_t{1})}, "concat");
    b.output(b.node("Conv", {cat, weight(b, "head.w", {5, cc + ci, 1, 1}, 91)}, {}, "head"));
    auto g = b.build();
    infer_shapes(*g);
    const std::vector<Tensor> in = {random_tensor(DType::Float32, {2, 8, 9, 7}, 65),
                                    random_tensor(DType::Float32, {2, ci, 9, 7}, 66)};
    expect_graph_gpu_matches_cpu(*g, in, Precision::FP16);
    const PlannedRun r = plan_and_run(*g, in, Precision::FP16);
    EXPECT_EQ(r.relayouts("side"), k.side_relayouts);
    EXPECT_EQ(r.relayouts(conv->name), k.conv_relayouts);
    EXPECT_EQ(r.kernel_of("conv").find("NHWC") != std::string::npos, k.conv_nhwc) << r.kernel_of("conv");
  }
}
